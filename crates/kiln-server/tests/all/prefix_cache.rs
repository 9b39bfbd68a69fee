//! The prefix cache through the API: the same 900-token chat sent twice is answered the same,
//! and the second reply reports (and the engine spends) the cached tokens.

use crate::support;

use kiln_engine::EngineConfig;
use kiln_server::Limits;
use serde_json::{json, Value};
use support::*;

fn chat_body() -> Value {
    let notes: String = (0..30)
        .map(|i| format!("Note {i}: keep answers short. "))
        .collect();
    json!({
        "messages": [
            {"role": "system", "content": notes},
            {"role": "user", "content": "What should the answer look like?"}
        ],
        "max_tokens": 12,
        "temperature": 0,
        "logprobs": true,
        "top_logprobs": 3
    })
}

#[tokio::test]
async fn a_repeated_chat_is_served_from_the_cache_with_the_same_reply() {
    let cfg = EngineConfig {
        max_context: 1024,
        ..engine_config()
    };
    let (engine, tokenizer) = start_engine_with_kv(cfg, 128);
    let state = std::sync::Arc::new(kiln_server::AppState::new(
        engine,
        tokenizer,
        MODEL.to_string(),
        Limits::default(),
    ));
    let app = kiln_server::app::router(state.clone());
    let body = chat_body().to_string();

    let (st, first) = send(&app, post("/v1/chat/completions", body.clone())).await;
    assert_eq!(st, 200, "{first}");
    let first: Value = serde_json::from_str(&first).unwrap();
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert!(
        prompt_tokens >= 900,
        "a 900-token chat, got {prompt_tokens}"
    );
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let processed_cold = state.engine.stats().tokens_processed;

    let (st, second) = send(&app, post("/v1/chat/completions", body)).await;
    assert_eq!(st, 200, "{second}");
    let second: Value = serde_json::from_str(&second).unwrap();
    // Every full block of 16 but what the last two tokens need comes from the cache.
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap() as usize;
    assert_eq!(cached, (prompt_tokens - 2) / 16 * 16);
    assert_eq!(
        second["choices"], first["choices"],
        "the same reply, logprobs included"
    );
    // What made the first token come sooner: the engine ran only the uncached tail.
    let processed_warm = state.engine.stats().tokens_processed - processed_cold;
    assert_eq!(processed_warm as usize, prompt_tokens - cached + 11);

    let (_, metrics) = send(&app, get("/metrics")).await;
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    assert_eq!(value("kiln_prefix_cache_hit_tokens_total") as usize, cached);
    assert!(value("kiln_kv_blocks_cached") >= (cached / 16) as f64);
    assert!(value("kiln_prefix_cache_queried_tokens_total") as usize >= 2 * cached);
    state.engine.shutdown();
}
