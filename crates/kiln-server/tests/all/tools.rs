//! Tool calling over HTTP on dummy:tiny, whose ChatML template knows no tools (kiln's fallback:
//! tools described in a system block, calls in the `<tool_call>` form): forced calls always
//! parse and their arguments validate; a named function is the one called; one call when
//! parallel calls are off; streamed calls equal whole ones; tool results go back through the
//! template; bad tool fields are 400s.

use crate::json_schema;
use crate::support;

use serde_json::{json, Value};
use support::*;

const CHAT: &str = "/v1/chat/completions";

/// Byte tokens make the tool descriptions long: a context and a KV pool to hold them.
fn server() -> TestServer {
    let cfg = kiln_engine::EngineConfig {
        max_context: 4096,
        ..engine_config()
    };
    let (engine, tokenizer) = start_engine_with_kv(cfg, 1024);
    let state = std::sync::Arc::new(kiln_server::AppState::new(
        engine,
        tokenizer,
        MODEL.to_string(),
        kiln_server::Limits::default(),
    ));
    TestServer {
        app: kiln_server::router(state.clone()),
        state,
    }
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 99},
                "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"], "additionalProperties": false}}}
    ])
}

fn body(extra: Value) -> Value {
    let mut b = json!({"model": MODEL, "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": tools(), "max_tokens": 200, "temperature": 1.0, "seed": 5});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// Every call names a tool and its arguments validate against that tool's schema.
fn check_calls(calls: &Value) -> Vec<String> {
    let schemas: Vec<(String, Value)> = tools()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["function"]["name"].as_str().unwrap().to_string(),
                t["function"]["parameters"].clone(),
            )
        })
        .collect();
    let mut names = Vec::new();
    for c in calls.as_array().expect("tool_calls") {
        assert_eq!(c["type"], "function");
        assert!(
            c["id"].as_str().is_some_and(|id| id.starts_with("call_")),
            "{c}"
        );
        let name = c["function"]["name"].as_str().unwrap();
        let schema = &schemas
            .iter()
            .find(|s| s.0 == name)
            .unwrap_or_else(|| panic!("unknown {name}"))
            .1;
        let args: Value =
            serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(json_schema::is_valid(schema, &args), "{name}: {args}");
        names.push(name.to_string());
    }
    names
}

#[tokio::test]
async fn required_and_named_calls_always_parse() {
    let s = server();
    // Parallel calls: after each one the model may stop or call again; room for several.
    let required = json!({"tool_choice": "required", "n": 4, "max_tokens": 2000});
    let (st, v) = send_json(&s.app, post(CHAT, body(required).to_string())).await;
    assert!(st.is_success(), "{v}");
    for c in v["choices"].as_array().unwrap() {
        assert_eq!(c["finish_reason"], "tool_calls", "{c}");
        assert!(c["message"]["content"].is_null(), "{c}");
        assert!(!check_calls(&c["message"]["tool_calls"]).is_empty());
    }
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "add"}}, "n": 3});
    let (st, v) = send_json(&s.app, post(CHAT, body(named).to_string())).await;
    assert!(st.is_success(), "{v}");
    for c in v["choices"].as_array().unwrap() {
        assert_eq!(check_calls(&c["message"]["tool_calls"]), vec!["add"], "{c}");
    }
    let single =
        json!({"tool_choice": "required", "parallel_tool_calls": false, "n": 3, "seed": 8});
    let (st, v) = send_json(&s.app, post(CHAT, body(single).to_string())).await;
    assert!(st.is_success(), "{v}");
    for c in v["choices"].as_array().unwrap() {
        assert_eq!(check_calls(&c["message"]["tool_calls"]).len(), 1, "{c}");
    }
}

#[tokio::test]
async fn streamed_calls_equal_whole_ones() {
    let s = server();
    let b = body(json!({"tool_choice": "required", "n": 2}));
    let (st, whole) = send_json(&s.app, post(CHAT, b.to_string())).await;
    assert!(st.is_success(), "{whole}");
    let mut sb = b.clone();
    sb["stream"] = json!(true);
    let (st, text) = send(&s.app, post(CHAT, sb.to_string())).await;
    assert!(st.is_success(), "{text}");
    let mut calls: Vec<Vec<Value>> = vec![Vec::new(); 2];
    let mut finish = vec![Value::Null; 2];
    let mut content = vec![String::new(); 2];
    for data in sse_data(&text) {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(&data).unwrap();
        for c in chunk["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            if let Some(tc) = c["delta"]["tool_calls"].as_array() {
                calls[i].extend(tc.iter().cloned());
            }
            if let Some(t) = c["delta"]["content"].as_str() {
                content[i].push_str(t);
            }
            if !c["finish_reason"].is_null() {
                finish[i] = c["finish_reason"].clone();
            }
        }
    }
    for (i, c) in whole["choices"].as_array().unwrap().iter().enumerate() {
        let strip = |v: &Value| json!([v["function"]["name"], v["function"]["arguments"]]);
        let want: Vec<Value> = c["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(strip)
            .collect();
        let got: Vec<Value> = calls[i].iter().map(strip).collect();
        assert_eq!(got, want);
        assert_eq!(finish[i], "tool_calls");
        assert_eq!(content[i], "");
        for (k, d) in calls[i].iter().enumerate() {
            assert_eq!(d["index"], k);
        }
    }
}

#[tokio::test]
async fn tool_results_go_back_through_the_template() {
    let s = server();
    let messages = json!([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 4}"}
    ]);
    let b = body(json!({"messages": messages, "max_tokens": 5}));
    let (st, v) = send_json(&s.app, post(CHAT, b.to_string())).await;
    assert!(st.is_success(), "{v}");
    let with_results = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let plain = body(json!({"max_tokens": 5}));
    let (_, v) = send_json(&s.app, post(CHAT, plain.to_string())).await;
    let first_turn = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let bytes = |s: &str| s.len() as u64;
    // Byte tokens: the second prompt holds the call and its result on top of the first.
    assert!(
        with_results >= first_turn + bytes("<tool_call>") + bytes("<tool_response>"),
        "{with_results} vs {first_turn}"
    );
    let mut no_tools = body(json!({"max_tokens": 5}));
    no_tools.as_object_mut().unwrap().remove("tools");
    let (_, v) = send_json(&s.app, post(CHAT, no_tools.to_string())).await;
    assert!(
        v["usage"]["prompt_tokens"].as_u64().unwrap() + 200 < first_turn,
        "the tools are described"
    );
}

#[tokio::test]
async fn bad_tool_fields_are_400s() {
    let s = server();
    let mut no_tools = body(json!({"tool_choice": "required"}));
    no_tools.as_object_mut().unwrap().remove("tools");
    for (b, param) in [
        (no_tools, "tool_choice"),
        (
            body(json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "tool_choice",
        ),
        (
            body(json!({"tools": [{"type": "code_interpreter"}]})),
            "tools[0].type",
        ),
        (
            body(json!({"tool_choice": "required", "response_format": {"type": "json_object"}})),
            "tool_choice",
        ),
        (
            body(json!({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})),
            "messages[0].tool_calls",
        ),
    ] {
        let (st, v) = send_json(&s.app, post(CHAT, b.to_string())).await;
        let e = expect_error(st, &v, 400);
        assert_eq!(e["param"], param, "{v}");
    }
}
