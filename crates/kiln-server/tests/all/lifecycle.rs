//! The server's life around requests: health, models, metrics, a client that goes away, and a
//! graceful shutdown over a real loopback socket.

use crate::support;

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use kiln_server::ServeOptions;
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

#[tokio::test]
async fn health_models_and_metrics() {
    let s = server();
    let (st, v) = send_json(&s.app, get("/health")).await;
    assert!(st.is_success());
    assert_eq!(v["status"], "ok");
    let (_, v) = send_json(&s.app, get("/v1/models")).await;
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], MODEL);
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(v["data"][0]["max_model_len"], MAX_CONTEXT);
    let (st, v) = send_json(&s.app, get(&format!("/v1/models/{MODEL}"))).await;
    assert!(st.is_success() && v["id"] == MODEL);

    let body = json!({"prompt": "hello", "max_tokens": 5, "ignore_eos": true});
    send(&s.app, post("/v1/completions", body.to_string())).await;
    // The response ends when its last token is sent; the engine frees the sequence just after.
    wait_idle(&s).await;
    let (st, text) = send(&s.app, get("/metrics")).await;
    assert!(st.is_success());
    let value = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        value("kiln_requests_total{endpoint=\"completions\",status=\"200\"}"),
        1.0
    );
    assert_eq!(value("kiln_generation_tokens_total"), 5.0);
    assert!(value("kiln_prompt_tokens_total") >= 5.0);
    assert_eq!(value("kiln_time_to_first_token_seconds_count"), 1.0);
    assert_eq!(value("kiln_inter_token_latency_seconds_count"), 4.0);
    assert_eq!(
        value("kiln_request_finished_total{finish_reason=\"length\"}"),
        1.0
    );
    assert_eq!(value("kiln_requests_running"), 0.0);
    // Prefill and four decode steps at least; the forward passes are part of the steps' time.
    assert!(value("kiln_engine_steps_total") >= 5.0);
    let (forward, step) = (
        value("kiln_engine_forward_seconds_total"),
        value("kiln_engine_step_seconds_total"),
    );
    assert!(forward > 0.0 && forward <= step, "{forward} {step}");
    assert_eq!(value("kiln_kv_blocks_used"), 0.0);
    assert_eq!(value("kiln_kv_blocks_free"), KV_BLOCKS as f64);
}

/// Waits until the engine runs nothing and holds no KV block.
async fn wait_idle(s: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = s.engine().stats();
        if st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "engine still busy: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_client_that_goes_away_frees_its_sequence() {
    let s = server();
    let body =
        json!({"prompt": "a long story", "max_tokens": 480, "ignore_eos": true, "stream": true});
    let resp = s
        .app
        .clone()
        .oneshot(post("/v1/completions", body.to_string()))
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let mut body = resp.into_body();
    // Read until the first token arrives, so the sequence is running and holds KV blocks.
    let mut seen = String::new();
    while !seen.contains("\"text\"") {
        let frame = body.frame().await.expect("stream open").expect("frame");
        if let Some(data) = frame.data_ref() {
            seen.push_str(std::str::from_utf8(data).unwrap());
        }
    }
    assert!(s.engine().stats().kv_blocks_used > 0);
    // What hyper does when the connection closes: the body is dropped.
    drop(body);
    wait_idle(&s).await;
    assert!(s.engine().stats().generated_tokens < 480);
    // The choice that never finished is counted, as `abort`.
    let (_, text) = send(&s.app, get("/metrics")).await;
    assert!(
        text.contains("kiln_request_finished_total{finish_reason=\"abort\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_dropped_connection_cancels_a_whole_request() {
    let s = server();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = s.app.clone();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let body = json!({"prompt": "a long story", "max_tokens": 480, "ignore_eos": true});
    let sock = raw_request(addr, "/v1/completions", &body).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.engine().stats().running == 0 {
        assert!(Instant::now() < deadline, "the request never started");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    drop(sock);
    wait_idle(&s).await;
    assert!(s.engine().stats().generated_tokens < 480);
}

/// Sends a raw HTTP/1.1 request and returns the stream positioned at the response.
async fn raw_request(addr: std::net::SocketAddr, path: &str, body: &Value) -> BufReader<TcpStream> {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(body.as_bytes()).await.unwrap();
    BufReader::new(sock)
}

#[tokio::test]
async fn shutdown_finishes_short_requests_and_cancels_long_streams() {
    // A context long enough that the long stream is still generating when the grace period ends.
    let cfg = kiln_engine::EngineConfig {
        max_context: 4096,
        ..engine_config()
    };
    let (engine, tokenizer) = start_engine_with_kv(cfg, 256);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let opts = ServeOptions {
        shutdown_grace: Duration::from_millis(300),
        ..ServeOptions::default()
    };
    let server = tokio::spawn(kiln_server::serve_on(
        listener,
        engine.clone(),
        tokenizer,
        MODEL.to_string(),
        opts,
        async move {
            let _ = stop_rx.await;
        },
    ));

    // A long stream, read until its first token.
    let long = json!({"prompt": "go on", "max_tokens": 4000, "ignore_eos": true, "stream": true});
    let mut stream = raw_request(addr, "/v1/completions", &long).await;
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stream.read_line(&mut line).await.unwrap() > 0,
            "stream ended early"
        );
        if line.starts_with("data: {") {
            break;
        }
    }
    // A short whole request in flight when the signal comes: 20 tokens, a few tens of
    // milliseconds on dummy:tiny, long enough to be seen running between two polls (3 tokens
    // could start and finish between them) and well inside the grace period.
    let short = json!({"prompt": "hi", "max_tokens": 20, "ignore_eos": true});
    let mut whole = raw_request(addr, "/v1/completions", &short).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.stats().running + engine.stats().waiting < 2 {
        assert!(
            Instant::now() < deadline,
            "the short request never reached the engine"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop_tx.send(()).unwrap();

    let mut reply = String::new();
    whole.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"finish_reason\":\"length\""), "{reply}");

    // The long stream is cancelled after the grace period: an error event, then DONE.
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut rest))
        .await
        .expect("the stream ends after the grace period")
        .unwrap();
    assert!(rest.contains("shutting down"), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");

    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("serve_on returns after shutdown")
        .unwrap()
        .expect("clean shutdown");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
    assert!(matches!(
        engine.submit(kiln_engine::GenerateRequest {
            prompt: vec![1],
            max_tokens: 1,
            ..Default::default()
        }),
        Err(kiln_engine::SubmitError::ShuttingDown)
    ));
}
