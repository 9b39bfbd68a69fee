//! A real engine on the CPU backend with the dummy:tiny model, and helpers to talk to the
//! router in-process (tower's `oneshot`) or over a loopback socket.

#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_engine::{EngineConfig, EngineHandle};
use kiln_server::{AppState, Limits};
use kiln_tokenizer::Tokenizer;
use serde_json::Value;
use tower::ServiceExt;

pub const MODEL: &str = "dummy:tiny";
/// Small enough that the context-limit tests stay cheap.
pub const MAX_CONTEXT: usize = 512;

pub struct TestServer {
    pub app: Router,
    pub state: Arc<AppState>,
}

impl TestServer {
    pub fn engine(&self) -> &EngineHandle {
        &self.state.engine
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.state.tokenizer
    }
}

pub fn engine_config() -> EngineConfig {
    EngineConfig {
        max_num_seqs: 16,
        max_batched_tokens: 256,
        prefill_chunk: 64,
        prefill_alone: false,
        max_queue: 64,
        max_context: MAX_CONTEXT,
        prefix_cache: true,
        overlap: true,
        output_thread: true,
    }
}

/// KV pool of the test engines: 64 blocks of 16 tokens.
pub const KV_BLOCKS: usize = 64;

/// Loads dummy:tiny and starts an engine with `cfg` on the CPU backend.
pub fn start_engine(cfg: EngineConfig) -> (EngineHandle, Tokenizer) {
    start_engine_with_kv(cfg, KV_BLOCKS)
}

pub fn start_engine_with_kv(cfg: EngineConfig, kv_blocks: usize) -> (EngineHandle, Tokenizer) {
    start_engine_on(MODEL, cfg, kv_blocks)
}

/// The small model kiln ships: a real byte-level BPE tokenizer, a context of 1,024 tokens.
pub const SHIPPED_MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../models/kiln-4m/kiln-4m-f16.gguf"
);

/// Loads `spec` (dummy:PRESET or a file) and starts an engine on the CPU backend.
pub fn start_engine_on(
    spec: &str,
    cfg: EngineConfig,
    kv_blocks: usize,
) -> (EngineHandle, Tokenizer) {
    let model = kiln_load::load(spec).unwrap_or_else(|e| panic!("{spec} loads: {e:#}"));
    let opts = CpuOptions {
        kv_blocks,
        block_size: 16,
        threads: Some(1),
        host_blocks: 0,
        fp8: false,
    };
    let backend = CpuBackend::new(model.weights.as_ref(), opts, None).expect("CPU backend starts");
    let handle = kiln_engine::start(Box::new(backend), model.tokenizer.clone(), cfg);
    (handle, model.tokenizer)
}

pub fn server_with(cfg: EngineConfig, limits: Limits) -> TestServer {
    let (engine, tokenizer) = start_engine(cfg);
    let state = Arc::new(AppState::new(engine, tokenizer, MODEL.to_string(), limits));
    TestServer {
        app: kiln_server::app::router(state.clone()),
        state,
    }
}

/// A real server on a loopback port, stopped when the returned sender is dropped or sent to.
pub struct Live {
    pub addr: std::net::SocketAddr,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

pub async fn live(
    engine: EngineHandle,
    tokenizer: Tokenizer,
    opts: kiln_server::ServeOptions,
) -> Live {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(kiln_server::serve_on(
        listener,
        engine,
        tokenizer,
        MODEL.to_string(),
        opts,
        async move {
            let _ = rx.await;
        },
    ));
    Live {
        addr,
        stop: Some(tx),
        task,
    }
}

/// One HTTP/1.1 request over its own connection (`Connection: close`): status and body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.expect("write head");
    sock.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).await.expect("read reply");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

pub fn server() -> TestServer {
    server_with(engine_config(), Limits::default())
}

pub fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

pub fn get(path: &str) -> Request<Body> {
    Request::builder().uri(path).body(Body::empty()).unwrap()
}

/// Sends one request and reads the whole body.
pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .expect("the router is infallible");
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("body reads")
        .to_bytes();
    (
        status,
        String::from_utf8(bytes.to_vec()).expect("UTF-8 body"),
    )
}

pub async fn send_json(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let (status, text) = send(app, req).await;
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(str::to_string)
        .collect()
}

/// Asserts an OpenAI-style error with this status; returns the error object.
pub fn expect_error(status: StatusCode, body: &Value, want: u16) -> Value {
    assert_eq!(status.as_u16(), want, "{body}");
    let e = body["error"].clone();
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    e
}

/// What the engine generates for these prompt ids, run directly (no HTTP).
pub async fn direct_text(
    engine: &EngineHandle,
    prompt: Vec<u32>,
    max_tokens: usize,
) -> (String, Vec<u32>) {
    let req = kiln_engine::GenerateRequest {
        prompt,
        max_tokens,
        ignore_eos: true,
        ..Default::default()
    };
    let mut stream = engine.submit(req).expect("submit");
    let (mut text, mut ids) = (String::new(), Vec::new());
    while let Some(ev) = stream.next().await {
        match ev {
            kiln_engine::GenEvent::Token(t) => {
                text.push_str(&t.text);
                ids.push(t.id);
            }
            kiln_engine::GenEvent::Done(f) => text.push_str(&f.trailing_text),
            kiln_engine::GenEvent::Error(e) => panic!("engine error: {e}"),
        }
    }
    (text, ids)
}
