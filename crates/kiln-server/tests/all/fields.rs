//! Every request field is honoured or refused by name (issue 19, item 5), and errors name the
//! field they are about (item 7).

use crate::support;

use serde_json::{json, Value};
use support::*;

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";

fn chat(extra: Value) -> String {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body.to_string()
}

#[tokio::test]
async fn fields_that_change_the_answer_are_refused_by_name() {
    let s = server();
    let cases = [
        (json!({"tool_choice": "auto"}), "tool_choice"),
        (
            json!({"functions": [{"name": "f", "parameters": {}}]}),
            "functions",
        ),
        (json!({"function_call": "auto"}), "function_call"),
        (json!({"modalities": ["text", "audio"]}), "modalities"),
        (
            json!({"audio": {"voice": "alloy", "format": "wav"}}),
            "audio",
        ),
        (json!({"skip_special_tokens": false}), "skip_special_tokens"),
        (
            json!({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}),
            "messages[0].tool_calls",
        ),
        (
            json!({"stream": true, "stream_options": {"include_usage": true, "chunked": 1}}),
            "stream_options.chunked",
        ),
    ];
    for (extra, param) in cases {
        let (st, body) = send_json(&s.app, post(CHAT, chat(extra.clone()))).await;
        let e = expect_error(st, &body, 400);
        assert_eq!(e["param"], param, "{extra} -> {body}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(param.rsplit('.').next().unwrap())
                || e["message"].as_str().unwrap().contains("legacy"),
            "{body}"
        );
    }
    let (st, body) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"prompt": "x", "min_tokens": 3}"#),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "min_tokens");
}

#[tokio::test]
async fn fields_that_change_nothing_are_accepted() {
    let s = server();
    let inert = json!({"user": "u1", "metadata": {"k": "v"}, "store": false,
        "modalities": ["text"], "messages": [{"role": "user", "content": "hi", "name": "ann"}]});
    let (st, body) = send_json(&s.app, post(CHAT, chat(inert))).await;
    assert!(st.is_success(), "{body}");
    let (st, body) = send_json(
        &s.app,
        post(
            COMPLETIONS,
            r#"{"prompt": "x", "max_tokens": 2, "user": "u1"}"#,
        ),
    )
    .await;
    assert!(st.is_success(), "{body}");
}

#[tokio::test]
async fn context_errors_name_the_field_the_prompt_came_from() {
    let s = server();
    let long = "a".repeat(MAX_CONTEXT + 10);
    let (st, body) = send_json(
        &s.app,
        post(
            COMPLETIONS,
            json!({"prompt": long, "max_tokens": 1}).to_string(),
        ),
    )
    .await;
    let e = expect_error(st, &body, 400);
    assert_eq!(
        (e["code"].as_str(), e["param"].as_str()),
        (Some("context_length_exceeded"), Some("prompt"))
    );
    let ids = vec![65; MAX_CONTEXT];
    let (st, body) = send_json(
        &s.app,
        post(
            COMPLETIONS,
            json!({"prompt": ids, "max_tokens": 1}).to_string(),
        ),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "prompt");
    let (st, body) = send_json(
        &s.app,
        post(
            CHAT,
            chat(json!({"messages": [{"role": "user", "content": long}], "max_tokens": null})),
        ),
    )
    .await;
    assert_eq!(expect_error(st, &body, 400)["param"], "messages");
}
