//! Constrained output over HTTP: `response_format` (json_object, json_schema) and vLLM's
//! `guided_*` fields on chat and completions, streamed and whole alike; `logit_bias`; and the
//! errors for what cannot be honoured.

use crate::json_schema;
use crate::support;

use serde_json::{json, Value};
use support::*;

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "rooms": {"type": "integer", "minimum": 1, "maximum": 9},
            "kind": {"enum": ["flat", "house"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3}
        },
        "required": ["city", "rooms", "kind", "tags"],
        "additionalProperties": false
    })
}

fn chat(extra: Value) -> String {
    let mut body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Describe a home as JSON."}],
        "max_tokens": 300,
        "temperature": 1.0,
        "seed": 3,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body.to_string()
}

#[tokio::test]
async fn json_schema_replies_validate_and_streams_equal_whole_answers() {
    let s = server();
    let format = json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "home", "schema": schema(), "strict": true}}, "n": 4});
    let (st, v) = send_json(&s.app, post(CHAT, chat(format.clone()))).await;
    assert!(st.is_success(), "{v}");
    let mut whole = Vec::new();
    for c in v["choices"].as_array().unwrap() {
        assert_eq!(c["finish_reason"], "stop", "{c}");
        let text = c["message"]["content"].as_str().unwrap();
        let reply: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        if let Err(e) = json_schema::check(&schema(), &reply) {
            panic!("{text}: {e}");
        }
        whole.push(text.to_string());
    }
    let mut streamed_body = format;
    streamed_body["stream"] = json!(true);
    let (st, body) = send(&s.app, post(CHAT, chat(streamed_body))).await;
    assert!(st.is_success(), "{body}");
    let mut streamed = vec![String::new(); 4];
    for data in sse_data(&body) {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(&data).unwrap();
        for c in chunk["choices"].as_array().unwrap() {
            if let Some(t) = c["delta"]["content"].as_str() {
                streamed[c["index"].as_u64().unwrap() as usize].push_str(t);
            }
        }
    }
    assert_eq!(streamed, whole);
}

#[tokio::test]
async fn json_object_guided_fields_and_completions() {
    let s = server();
    let (st, v) = send_json(
        &s.app,
        post(
            CHAT,
            chat(json!({"response_format": {"type": "json_object"}})),
        ),
    )
    .await;
    assert!(st.is_success(), "{v}");
    let c = &v["choices"][0];
    if c["finish_reason"] == "stop" {
        let text = c["message"]["content"].as_str().unwrap();
        let reply: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(reply.is_object(), "{text}");
    }
    let choices = ["north", "south", "east by east"];
    let (st, v) = send_json(
        &s.app,
        post(CHAT, chat(json!({"guided_choice": choices, "n": 6}))),
    )
    .await;
    assert!(st.is_success(), "{v}");
    for c in v["choices"].as_array().unwrap() {
        let text = c["message"]["content"].as_str().unwrap();
        assert!(choices.contains(&text), "{text}");
    }
    let body = json!({"model": MODEL, "prompt": "id:", "max_tokens": 40, "temperature": 1.0,
        "seed": 9, "guided_regex": "[0-9]{3}-[a-z]{2}"});
    let (st, v) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    let (digits, letters) = text.split_once('-').unwrap_or_else(|| panic!("{text}"));
    assert!(
        digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()),
        "{text}"
    );
    assert!(
        letters.len() == 2 && letters.bytes().all(|b| b.is_ascii_lowercase()),
        "{text}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let lark = "start: \"<\" word (\",\" word)* \">\"\nword: /[a-c]{1,3}/";
    let body = json!({"model": MODEL, "prompt": "list:", "max_tokens": 60, "temperature": 1.0,
        "seed": 2, "guided_grammar": lark});
    let (st, v) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    let inner = text
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        inner
            .split(',')
            .all(|w| (1..=3).contains(&w.len()) && w.bytes().all(|b| b"abc".contains(&b))),
        "{text}"
    );
}

#[tokio::test]
async fn logit_bias_is_honoured() {
    let s = server();
    // dummy:tiny's tokens are bytes: +100 on `q` makes every greedy token a `q`.
    let body = json!({"model": MODEL, "prompt": "hello", "max_tokens": 8, "temperature": 0,
        "ignore_eos": true, "logit_bias": {"113": 100}});
    let (st, v) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    assert_eq!(v["choices"][0]["text"], "qqqqqqqq");
    let body = chat(
        json!({"logit_bias": {"113": 100}, "max_tokens": 5, "temperature": 0.7, "ignore_eos": true}),
    );
    let (st, v) = send_json(&s.app, post(CHAT, body)).await;
    assert!(st.is_success(), "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "qqqqq");
}

#[tokio::test]
async fn constraints_that_cannot_be_honoured_are_400s_naming_the_field() {
    let s = server();
    for (extra, param) in [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            Some("response_format.json_schema.schema"),
        ),
        (
            json!({"response_format": {"type": "xml"}}),
            Some("response_format.type"),
        ),
        (
            json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}),
            Some("guided_regex"),
        ),
        (json!({"guided_json": 7}), Some("guided_json")),
        (json!({"guided_choice": []}), Some("guided_choice")),
        (json!({"logit_bias": {"99999": 1}}), Some("logit_bias")),
        (json!({"logit_bias": {"5": 500}}), Some("logit_bias")),
        (json!({"guided_regex": "(unclosed"}), None),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "object", "properties": {"a": {"type": "frobnicate"}}}}}}),
            None,
        ),
    ] {
        let (st, v) = send_json(&s.app, post(CHAT, chat(extra.clone()))).await;
        let e = expect_error(st, &v, 400);
        if let Some(p) = param {
            assert_eq!(e["param"], p, "{extra}: {v}");
        } else {
            let m = e["message"].as_str().unwrap();
            assert!(m.contains("grammar does not compile"), "{extra}: {m}");
        }
    }
}
