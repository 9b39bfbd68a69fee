//! No client can hurt another: a maximal prompt does not stall the server for others, and a
//! request that can never be admitted takes nothing from anyone (issue 19, items 1 and 3).

use crate::support;

use std::time::{Duration, Instant};

use kiln_engine::EngineConfig;
use kiln_server::ServeOptions;
use serde_json::{json, Value};
use support::*;

/// A body just under the 8 MiB default limit: a prompt of about 2.7M tokens for a model of
/// 1,024.
fn maximal_prompt(field: &str) -> Vec<u8> {
    let words = "the quick brown fox jumps over the lazy dog ".repeat(190_000);
    let body = match field {
        "prompt" => json!({"prompt": words, "max_tokens": 4}),
        _ => json!({"messages": [{"role": "user", "content": words}], "max_tokens": 4}),
    };
    let bytes = body.to_string().into_bytes();
    assert!(bytes.len() > 8_000_000 && bytes.len() < 8 * 1024 * 1024);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_at_once_while_two_maximal_prompts_are_refused() {
    let (engine, tokenizer) = start_engine_on(SHIPPED_MODEL, engine_config_for(1024), 128);
    let server = live(engine, tokenizer, ServeOptions::default()).await;
    let addr = server.addr;
    let big = [
        tokio::spawn(async move {
            http(addr, "POST", "/v1/completions", &maximal_prompt("prompt")).await
        }),
        tokio::spawn(async move {
            http(
                addr,
                "POST",
                "/v1/chat/completions",
                &maximal_prompt("messages"),
            )
            .await
        }),
    ];
    // /health, again and again while the two are in flight, and once after.
    let mut slowest = Duration::ZERO;
    let mut checks = 0;
    while checks == 0 || big.iter().any(|t| !t.is_finished()) {
        let t0 = Instant::now();
        let (status, _) = http(addr, "GET", "/health", b"").await;
        assert_eq!(status, 200);
        slowest = slowest.max(t0.elapsed());
        checks += 1;
    }
    for task in big {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 400, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("maximum context length is 1024"),
            "{v}"
        );
    }
    assert!(
        slowest < Duration::from_millis(500),
        "/health took {slowest:?} ({checks} checks)"
    );
}

fn engine_config_for(max_context: usize) -> EngineConfig {
    EngineConfig {
        max_context,
        ..engine_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_can_never_fit_is_400_and_takes_nothing_from_others() {
    // 2 running + 6 waiting: at most 8 choices in flight.
    let cfg = EngineConfig {
        max_num_seqs: 2,
        max_queue: 6,
        ..engine_config()
    };
    let (engine, tokenizer) = start_engine(cfg);
    let server = live(engine, tokenizer, ServeOptions::default()).await;
    let addr = server.addr;
    // 3 prompts x n=3 = 9 choices: never admissible, even on an idle server.
    let impossible = json!({"prompt": ["a", "b", "c"], "n": 3, "max_tokens": 2}).to_string();
    let (status, body) = http(addr, "POST", "/v1/completions", impossible.as_bytes()).await;
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["param"], "n", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("(8)"),
        "{v}"
    );
    // One client loops on it while another sends ordinary requests: every one succeeds.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looping = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut refused = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, _) =
                    http(addr, "POST", "/v1/completions", impossible.as_bytes()).await;
                assert_eq!(status, 400);
                refused += 1;
            }
            refused
        }
    });
    let ordinary = json!({"prompt": "hello", "n": 4, "max_tokens": 8, "ignore_eos": true});
    for _ in 0..30 {
        let (status, body) = http(
            addr,
            "POST",
            "/v1/completions",
            ordinary.to_string().as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(looping.await.unwrap() > 0);
}
