//! Chat completions end to end over the real engine: the answer equals a direct engine run of
//! the templated prompt, streamed chunks add up to the whole answer, usage and logprobs are in
//! OpenAI's shape.

use crate::support;

use kiln_server::prompt::encode_prompt;
use kiln_tokenizer::ChatMessage;
use serde_json::{json, Value};
use support::*;

const CHAT: &str = "/v1/chat/completions";

fn messages() -> Value {
    json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}])
}

fn templated_prompt(s: &TestServer) -> Vec<u32> {
    let msgs = vec![
        ChatMessage {
            role: "system".into(),
            content: "Be brief.".into(),
        },
        ChatMessage {
            role: "user".into(),
            content: "Hello there".into(),
        },
    ];
    let text = s
        .tokenizer()
        .chat_template()
        .expect("dummy models have a template")
        .render(&msgs, true)
        .unwrap();
    encode_prompt(s.tokenizer(), &text, "messages", MAX_CONTEXT, &[]).unwrap()
}

#[tokio::test]
async fn greedy_chat_equals_direct_engine_run() {
    let s = server();
    let body = json!({"model": MODEL, "messages": messages(), "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    let (st, v) = send_json(&s.app, post(CHAT, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    let prompt = templated_prompt(&s);
    let (want, _) = direct_text(s.engine(), prompt.clone(), 12).await;
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], want.as_str());
    assert_eq!(choice["finish_reason"], "length");
    assert!(choice["logprobs"].is_null());
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(v["usage"]["total_tokens"], prompt.len() + 12);
}

#[tokio::test]
async fn stream_chunks_add_up_to_the_whole_answer() {
    let s = server();
    let base =
        json!({"messages": messages(), "max_tokens": 10, "temperature": 0, "ignore_eos": true});
    let (_, whole) = send_json(&s.app, post(CHAT, base.to_string())).await;
    let mut streamed = base.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (st, body) = send(&s.app, post(CHAT, streamed.to_string())).await;
    assert!(st.is_success());
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"]
                .get(0)
                .and_then(|ch| ch["delta"]["content"].as_str())
        })
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|ch| &ch["finish_reason"]))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, vec![&json!("length")]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(last["usage"][field], whole["usage"][field], "{field}");
    }
    // The same prompt a second time: its full blocks of 16 came from the prefix cache, all
    // but the last two tokens' worth (50 tokens: 3 blocks).
    assert_eq!(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], 48);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null() && c.get("usage").is_some()));
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]));
}

#[tokio::test]
async fn stream_without_usage_has_no_usage_field() {
    let s = server();
    let body = json!({"messages": messages(), "max_tokens": 3, "stream": true, "temperature": 0});
    let (_, text) = send(&s.app, post(CHAT, body.to_string())).await;
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    for d in &data[..data.len() - 1] {
        let v: Value = serde_json::from_str(d).unwrap();
        assert!(v.get("usage").is_none(), "{v}");
    }
}

#[tokio::test]
async fn logprobs_are_in_chat_shape_and_greedy_picks_the_top() {
    let s = server();
    let body = json!({"messages": messages(), "max_tokens": 5, "temperature": 0, "ignore_eos": true,
                      "logprobs": true, "top_logprobs": 4});
    let (st, v) = send_json(&s.app, post(CHAT, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 5);
    for entry in content {
        let lp = entry["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let tops = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(tops.len(), 4);
        assert_eq!(tops[0]["token"], entry["token"]);
        assert!((tops[0]["logprob"].as_f64().unwrap() - lp).abs() < 1e-6);
        let lps: Vec<f64> = tops
            .iter()
            .map(|t| t["logprob"].as_f64().unwrap())
            .collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{lps:?}");
        assert!(entry["bytes"].is_array());
    }
}

#[tokio::test]
async fn n_seeded_choices_differ_and_reproduce() {
    let s = server();
    let body = json!({"messages": messages(), "max_tokens": 8, "temperature": 1.0, "seed": 5, "n": 3, "ignore_eos": true});
    let (st, a) = send_json(&s.app, post(CHAT, body.to_string())).await;
    assert!(st.is_success(), "{a}");
    let (_, b) = send_json(&s.app, post(CHAT, body.to_string())).await;
    let texts = |v: &Value| -> Vec<String> {
        v["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["message"]["content"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(texts(&a), texts(&b));
    let t = texts(&a);
    assert!(t[0] != t[1] || t[1] != t[2], "{t:?}");
    assert_eq!(a["usage"]["completion_tokens"], 24);
    let idx: Vec<u64> = a["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, vec![0, 1, 2]);
}

#[tokio::test]
async fn stop_string_ends_the_answer_before_it() {
    let s = server();
    let base =
        json!({"messages": messages(), "max_tokens": 24, "temperature": 0, "ignore_eos": true});
    let (_, v) = send_json(&s.app, post(CHAT, base.to_string())).await;
    let full = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let mut with_stop = base.clone();
    with_stop["stop"] = json!(stop);
    let (_, v) = send_json(&s.app, post(CHAT, with_stop.to_string())).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["choices"][0]["message"]["content"].as_str().unwrap(),
        &full[..full.find(&stop).unwrap()]
    );
}

#[tokio::test]
async fn stop_token_id_ends_with_stop() {
    let s = server();
    let base =
        json!({"messages": messages(), "max_tokens": 10, "temperature": 0, "ignore_eos": true});
    let (_, ids) = direct_text(s.engine(), templated_prompt(&s), 10).await;
    let mut body = base.clone();
    body["stop_token_ids"] = json!([ids[3]]);
    let (_, v) = send_json(&s.app, post(CHAT, body.to_string())).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let first_stop = ids.iter().position(|&t| t == ids[3]).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], first_stop + 1);
}
