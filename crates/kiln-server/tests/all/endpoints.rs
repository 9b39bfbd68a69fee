//! `/tokenize` and `/detokenize` in llama-server's and vLLM's dialects, and `--api-key`.

use crate::support;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use kiln_server::{Access, AppState, Limits};
use serde_json::json;
use support::*;

#[tokio::test]
async fn tokenize_and_detokenize_speak_both_dialects() {
    let s = server();
    let tok = s.tokenizer().clone();
    let text = "Hello <|im_end|>";
    // llama-server: no BOS unless asked, control tokens parsed.
    let (st, v) = send_json(
        &s.app,
        post("/tokenize", json!({"content": text}).to_string()),
    )
    .await;
    assert!(st.is_success(), "{v}");
    assert_eq!(v["tokens"], json!(tok.encode(text, false).unwrap()));
    assert!(v.get("count").is_none());
    let (_, v) = send_json(
        &s.app,
        post(
            "/tokenize",
            json!({"content": "hi", "add_special": true, "with_pieces": true}).to_string(),
        ),
    )
    .await;
    assert_eq!(v["tokens"][0]["id"], tok.bos_id().unwrap());
    assert_eq!(v["tokens"][1]["piece"], "h");
    // vLLM: BOS by default, the count and the context.
    let (_, v) = send_json(
        &s.app,
        post("/tokenize", json!({"prompt": text}).to_string()),
    )
    .await;
    let ids = tok.encode(text, true).unwrap();
    assert_eq!(v["tokens"], json!(ids));
    assert_eq!(v["count"], ids.len());
    assert_eq!(v["max_model_len"], MAX_CONTEXT);
    // Back again, in both shapes at once.
    let (st, v) = send_json(
        &s.app,
        post("/detokenize", json!({"tokens": ids}).to_string()),
    )
    .await;
    assert!(st.is_success(), "{v}");
    assert_eq!(v["content"], tok.decode(&ids, false));
    assert_eq!(v["prompt"], v["content"]);
}

#[tokio::test]
async fn tokenize_refuses_what_it_cannot_do() {
    let s = server();
    for (body, param) in [
        (json!({"content": "a", "prompt": "b"}), None),
        (json!({}), None),
        (json!({"prompt": "x".repeat(100_000)}), Some("prompt")),
        (
            json!({"content": "x", "lowercase": true}),
            Some("lowercase"),
        ),
    ] {
        let (st, v) = send_json(&s.app, post("/tokenize", body.to_string())).await;
        let e = expect_error(st, &v, 400);
        if let Some(p) = param {
            assert_eq!(e["param"], p, "{v}");
        }
    }
    let (st, v) = send_json(
        &s.app,
        post("/detokenize", json!({"tokens": [1, -4]}).to_string()),
    )
    .await;
    assert_eq!(expect_error(st, &v, 400)["param"], "tokens");
}

fn keyed_app(metrics_need_key: bool) -> axum::Router {
    let (engine, tokenizer) = start_engine(engine_config());
    let access = Access {
        api_key: Some("sk-test".into()),
        metrics_need_key,
    };
    let state =
        AppState::new(engine, tokenizer, MODEL.to_string(), Limits::default()).with_access(access);
    kiln_server::app::router(Arc::new(state))
}

fn with_key(mut req: Request<Body>, key: &str) -> Request<Body> {
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    req
}

#[tokio::test]
async fn an_api_key_guards_everything_but_health() {
    let app = keyed_app(false);
    let completion = || post("/v1/completions", r#"{"prompt": "hi", "max_tokens": 2}"#);
    let (st, v) = send_json(&app, completion()).await;
    assert_eq!(expect_error(st, &v, 401)["code"], "invalid_api_key");
    let (st, v) = send_json(&app, with_key(completion(), "sk-wrong")).await;
    expect_error(st, &v, 401);
    let (st, v) = send_json(&app, with_key(completion(), "sk-test")).await;
    assert!(st.is_success(), "{v}");
    let (st, _) = send_json(&app, get("/v1/models")).await;
    assert_eq!(st.as_u16(), 401);
    let (st, _) = send_json(&app, get("/health")).await;
    assert!(st.is_success());
    let (st, _) = send(&app, get("/metrics")).await;
    assert!(st.is_success());
    // With the flag, /metrics needs the key too.
    let app = keyed_app(true);
    let (st, _) = send(&app, get("/metrics")).await;
    assert_eq!(st.as_u16(), 401);
    let (st, text) = send(&app, with_key(get("/metrics"), "sk-test")).await;
    assert!(
        st.is_success() && text.contains("kiln_requests_total"),
        "{text}"
    );
}
