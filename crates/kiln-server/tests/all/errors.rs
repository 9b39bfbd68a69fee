//! Every kind of bad request gets an OpenAI-style JSON error with the right 4xx status, from
//! the real router over the real engine.

use crate::support;

use kiln_engine::EngineConfig;
use kiln_server::Limits;
use serde_json::json;
use support::*;

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";

fn chat_body(extra: serde_json::Value) -> String {
    let mut body =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body.to_string()
}

#[tokio::test]
async fn malformed_json_and_wrong_types() {
    let s = server();
    let (st, body) = send_json(&s.app, post(CHAT, "{\"messages\": [")).await;
    let e = expect_error(st, &body, 400);
    assert!(
        e["message"].as_str().unwrap().contains("not valid JSON"),
        "{e}"
    );

    let (st, body) = send_json(&s.app, post(CHAT, chat_body(json!({"temperature": "hot"})))).await;
    assert_eq!(expect_error(st, &body, 400)["param"], "temperature");

    let (st, body) = send_json(
        &s.app,
        post(CHAT, r#"{"messages": [{"role": "user", "content": 7}]}"#),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "messages[0].content");

    let (st, body) = send_json(&s.app, post(CHAT, r#"{"model": "x"}"#)).await;
    assert!(expect_error(st, &body, 400)["message"]
        .as_str()
        .unwrap()
        .contains("messages"));

    let (st, body) = send_json(&s.app, post(CHAT, "")).await;
    expect_error(st, &body, 400);

    let (st, body) = send_json(&s.app, post(COMPLETIONS, r#"{"prompt": {"a": 1}}"#)).await;
    expect_error(st, &body, 400);

    // The sampling fields are shared with chat; a type error still names its field.
    let (st, body) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"prompt": "x", "temperature": "hot"}"#),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "temperature");
}

#[tokio::test]
async fn unknown_model_is_404() {
    let s = server();
    let (st, body) = send_json(&s.app, post(CHAT, chat_body(json!({"model": "gpt-9"})))).await;
    let e = expect_error(st, &body, 404);
    assert_eq!(e["code"], "model_not_found");
    let (st, body) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"model": "gpt-9", "prompt": "x"}"#),
    )
    .await;
    expect_error(st, &body, 404);
    let (st, body) = send_json(&s.app, get("/v1/models/gpt-9")).await;
    expect_error(st, &body, 404);
}

#[tokio::test]
async fn empty_and_invalid_messages() {
    let s = server();
    let (st, body) = send_json(&s.app, post(CHAT, chat_body(json!({"messages": []})))).await;
    assert_eq!(expect_error(st, &body, 400)["param"], "messages");
    let bad_role = json!({"messages": [{"role": "narrator", "content": "x"}]});
    let (st, body) = send_json(&s.app, post(CHAT, chat_body(bad_role))).await;
    assert_eq!(expect_error(st, &body, 400)["param"], "messages[0].role");
}

#[tokio::test]
async fn prompt_longer_than_context() {
    let s = server();
    let long = "a".repeat(MAX_CONTEXT + 10);
    let (st, body) = send_json(
        &s.app,
        post(
            CHAT,
            chat_body(json!({"messages": [{"role": "user", "content": long}], "max_tokens": null})),
        ),
    )
    .await;
    assert_eq!(
        expect_error(st, &body, 400)["code"],
        "context_length_exceeded"
    );

    let ids: Vec<u32> = vec![65; MAX_CONTEXT];
    let (st, body) = send_json(
        &s.app,
        post(
            COMPLETIONS,
            json!({"prompt": ids, "max_tokens": 1}).to_string(),
        ),
    )
    .await;
    assert_eq!(
        expect_error(st, &body, 400)["code"],
        "context_length_exceeded"
    );
}

#[tokio::test]
async fn max_tokens_past_context() {
    let s = server();
    let (st, body) = send_json(
        &s.app,
        post(CHAT, chat_body(json!({"max_tokens": MAX_CONTEXT}))),
    )
    .await;
    let e = expect_error(st, &body, 400);
    assert_eq!(
        (e["code"].as_str(), e["param"].as_str()),
        (Some("context_length_exceeded"), Some("max_tokens"))
    );
    let (st, body) = send_json(
        &s.app,
        post(
            CHAT,
            chat_body(json!({"max_completion_tokens": MAX_CONTEXT * 10})),
        ),
    )
    .await;
    assert_eq!(
        expect_error(st, &body, 400)["param"],
        "max_completion_tokens"
    );
}

#[tokio::test]
async fn absurd_values_name_their_field() {
    let s = server();
    let cases = [
        ("temperature", json!(1e6)),
        ("top_p", json!(-1)),
        ("top_k", json!(-5)),
        ("min_p", json!(2)),
        ("n", json!(0)),
        ("n", json!(1_000_000)),
        ("max_tokens", json!(-3)),
        ("presence_penalty", json!(99)),
        ("frequency_penalty", json!(-99)),
        ("seed", json!(1e30)),
        ("stop", json!(["ok", ""])),
        ("stop_token_ids", json!([1_000_000])),
    ];
    for (field, value) in cases {
        let (st, body) = send_json(&s.app, post(CHAT, chat_body(json!({ field: value })))).await;
        assert_eq!(
            expect_error(st, &body, 400)["param"],
            field,
            "{field}={value}"
        );
    }
    let (st, body) = send_json(&s.app, post(CHAT, chat_body(json!({"top_logprobs": 3})))).await;
    assert_eq!(expect_error(st, &body, 400)["param"], "top_logprobs");
    let (st, body) = send_json(
        &s.app,
        post(
            CHAT,
            chat_body(json!({"logprobs": true, "top_logprobs": 500})),
        ),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "top_logprobs");
    let (st, body) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"prompt": [1, 2, 99999], "max_tokens": 1}"#),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "prompt");
    let (st, body) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"prompt": "x", "logprobs": 50}"#),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "logprobs");
    let (st, body) = send_json(
        &s.app,
        post(
            CHAT,
            chat_body(json!({"stream_options": {"include_usage": true}})),
        ),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "stream_options");
}

#[tokio::test]
async fn unsupported_features_are_refused() {
    let s = server();
    let (st, body) = send_json(
        &s.app,
        post(CHAT, chat_body(json!({"tools": [{"type": "function"}]}))),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "tools[0].function");
    let (st, body) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"prompt": "x", "suffix": "y"}"#),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "suffix");
}

#[tokio::test]
async fn body_over_limit_is_413() {
    let s = server_with(
        engine_config(),
        Limits {
            max_body_bytes: 1024,
            ..Limits::default()
        },
    );
    let (st, body) = send_json(
        &s.app,
        post(
            CHAT,
            chat_body(json!({"messages": [{"role": "user", "content": "x".repeat(2000)}]})),
        ),
    )
    .await;
    assert_eq!(expect_error(st, &body, 413)["code"], "payload_too_large");
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let s = server();
    let (st, body) = send_json(&s.app, get("/v1/engines")).await;
    expect_error(st, &body, 404);
    let (st, body) = send_json(&s.app, get(CHAT)).await;
    expect_error(st, &body, 405);
}

#[tokio::test]
async fn full_queue_is_429_and_leaves_the_server_usable() {
    let cfg = EngineConfig {
        max_num_seqs: 1,
        max_queue: 0,
        ..engine_config()
    };
    let s = server_with(cfg, Limits::default());
    // Occupy the only slot with a long generation, then ask for more.
    let hold = s.engine().submit(kiln_engine::GenerateRequest {
        prompt: vec![1, 2, 3],
        max_tokens: 400,
        ignore_eos: true,
        ..Default::default()
    });
    let hold = hold.expect("first request admitted");
    let resp = tower::ServiceExt::oneshot(s.app.clone(), post(CHAT, chat_body(json!({}))))
        .await
        .unwrap();
    assert_eq!(resp.headers()["retry-after"], "1");
    let (st, body) = send_json(&s.app, post(CHAT, chat_body(json!({})))).await;
    assert_eq!(expect_error(st, &body, 429)["code"], "queue_full");
    drop(hold);
    // Cancellation frees the slot within a step or two.
    for _ in 0..200 {
        let (st, _) = send(&s.app, post(CHAT, chat_body(json!({})))).await;
        if st.is_success() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the server did not accept requests after the held one was cancelled");
}

#[tokio::test]
async fn errors_are_counted_in_metrics() {
    let s = server();
    send(&s.app, post(CHAT, "{")).await;
    send(&s.app, post(CHAT, chat_body(json!({})))).await;
    let (st, text) = send(&s.app, get("/metrics")).await;
    assert!(st.is_success());
    assert!(
        text.contains("kiln_requests_total{endpoint=\"chat_completions\",status=\"400\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kiln_requests_total{endpoint=\"chat_completions\",status=\"200\"} 1"),
        "{text}"
    );
}
