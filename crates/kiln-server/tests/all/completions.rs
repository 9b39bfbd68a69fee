//! The completions endpoint end to end: text and token prompts, batches, echo, streaming and
//! logprobs, checked against direct engine runs.

use crate::support;

use kiln_server::prompt::encode_prompt;
use serde_json::{json, Value};
use support::*;

const COMPLETIONS: &str = "/v1/completions";

#[tokio::test]
async fn text_prompt_equals_direct_engine_run() {
    let s = server();
    let body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 9, "temperature": 0, "ignore_eos": true});
    let (st, v) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    let prompt = encode_prompt(
        s.tokenizer(),
        "Once upon a time",
        "prompt",
        MAX_CONTEXT,
        &[],
    )
    .unwrap();
    let (want, _) = direct_text(s.engine(), prompt.clone(), 9).await;
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], want.as_str());
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(v["usage"]["completion_tokens"], 9);
}

#[tokio::test]
async fn missing_max_tokens_means_16() {
    let s = server();
    let (_, v) = send_json(
        &s.app,
        post(COMPLETIONS, r#"{"prompt": "x", "ignore_eos": true}"#),
    )
    .await;
    assert_eq!(v["usage"]["completion_tokens"], 16);
}

#[tokio::test]
async fn batched_token_prompts_match_their_solo_runs() {
    let s = server();
    let prompts = vec![vec![10u32, 20, 30], vec![40, 50], vec![60, 70, 80, 90]];
    let body =
        json!({"prompt": prompts, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "n": 2});
    let (st, v) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    assert!(st.is_success(), "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 6);
    for (p, prompt) in prompts.iter().enumerate() {
        let (want, _) = direct_text(s.engine(), prompt.clone(), 6).await;
        for i in 0..2 {
            assert_eq!(choices[p * 2 + i]["index"], p * 2 + i);
            assert_eq!(
                choices[p * 2 + i]["text"],
                want.as_str(),
                "prompt {p} choice {i}"
            );
        }
    }
    // Each prompt counts once, each choice's tokens count.
    assert_eq!(v["usage"]["prompt_tokens"], 9);
    assert_eq!(v["usage"]["completion_tokens"], 36);
}

#[tokio::test]
async fn echo_prepends_the_prompt() {
    let s = server();
    let body = json!({"prompt": "abc", "max_tokens": 4, "temperature": 0, "ignore_eos": true});
    let (_, plain) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    let mut echo = body.clone();
    echo["echo"] = json!(true);
    let (_, v) = send_json(&s.app, post(COMPLETIONS, echo.to_string())).await;
    assert_eq!(
        v["choices"][0]["text"].as_str().unwrap(),
        format!("abc{}", plain["choices"][0]["text"].as_str().unwrap())
    );
    echo["stream"] = json!(true);
    let (_, text) = send(&s.app, post(COMPLETIONS, echo.to_string())).await;
    let streamed: String = sse_data(&text)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(streamed, v["choices"][0]["text"].as_str().unwrap());
}

#[tokio::test]
async fn streamed_completion_with_logprobs_matches_whole() {
    let s = server();
    let body = json!({"prompt": "The sky is", "max_tokens": 7, "temperature": 0, "ignore_eos": true, "logprobs": 3});
    let (_, whole) = send_json(&s.app, post(COMPLETIONS, body.to_string())).await;
    let lp = &whole["choices"][0]["logprobs"];
    let n = lp["tokens"].as_array().unwrap().len();
    assert_eq!(n, 7);
    for key in ["token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(lp[key].as_array().unwrap().len(), 7, "{key}");
    }
    assert!(lp["top_logprobs"][0].as_object().unwrap().len() <= 3);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (_, text) = send(&s.app, post(COMPLETIONS, streamed.to_string())).await;
    let chunks: Vec<Value> = sse_data(&text)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let tokens: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter(|ch| !ch["logprobs"].is_null())
        .flat_map(|ch| ch["logprobs"]["tokens"].as_array().unwrap().clone())
        .collect();
    assert_eq!(&Value::Array(tokens), &lp["tokens"]);
    let joined: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter_map(|ch| ch["text"].as_str())
        .collect();
    assert_eq!(joined, whole["choices"][0]["text"].as_str().unwrap());
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 7);
}

#[tokio::test]
async fn seeded_sampling_reproduces_and_seeds_differ() {
    let s = server();
    let run = |seed: u64| {
        let body = json!({"prompt": "Pick a word:", "max_tokens": 12, "temperature": 1.0, "top_k": 50,
                          "seed": seed, "ignore_eos": true});
        let app = s.app.clone();
        async move {
            send_json(&app, post(COMPLETIONS, body.to_string())).await.1["choices"][0]["text"]
                .clone()
        }
    };
    assert_eq!(run(3).await, run(3).await);
    assert_ne!(run(3).await, run(4).await);
}
