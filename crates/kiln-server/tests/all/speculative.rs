//! Speculative decoding through the API: a server that drafts answers what a plain one answers,
//! a request can opt out with `"draft": false`, and /metrics counts the drafts.

use crate::support;

use std::sync::Arc;

use kiln_engine::{DraftConfig, NgramDrafter};
use kiln_server::Limits;
use serde_json::{json, Value};
use support::*;

fn app(drafting: bool) -> (axum::Router, Arc<kiln_server::AppState>) {
    let model = kiln_load::load(MODEL).unwrap();
    let opts = kiln_cpu::CpuOptions {
        kv_blocks: KV_BLOCKS,
        block_size: 16,
        threads: Some(1),
        host_blocks: 0,
        fp8: false,
    };
    let backend = kiln_cpu::CpuBackend::new(model.weights.as_ref(), opts, None).unwrap();
    let drafter = drafting.then(|| {
        let d: Box<dyn kiln_engine::Drafter> = Box::new(NgramDrafter::default());
        (d, DraftConfig::default())
    });
    let engine = kiln_engine::start_with_drafter(
        Box::new(backend),
        model.tokenizer.clone(),
        engine_config(),
        drafter,
    );
    let state = Arc::new(kiln_server::AppState::new(
        engine,
        model.tokenizer,
        MODEL.to_string(),
        Limits::default(),
    ));
    (kiln_server::app::router(state.clone()), state)
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[tokio::test]
async fn a_drafting_server_answers_as_a_plain_one() {
    let body = |draft: Option<bool>| {
        let mut b = json!({
            "prompt": "the cat sat on the mat and the cat sat on the mat and the cat",
            "max_tokens": 24, "temperature": 0, "logprobs": 2, "ignore_eos": true
        });
        if let Some(d) = draft {
            b["draft"] = json!(d);
        }
        b.to_string()
    };
    let (plain, plain_state) = app(false);
    let (_, want) = send(&plain, post("/v1/completions", body(None))).await;
    let want: Value = serde_json::from_str(&want).unwrap();
    plain_state.engine.shutdown();

    let (drafted, state) = app(true);
    let (st, got) = send(&drafted, post("/v1/completions", body(None))).await;
    assert_eq!(st, 200, "{got}");
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["choices"], want["choices"]);
    let (_, m) = send(&drafted, get("/metrics")).await;
    let proposed = metric(&m, "kiln_draft_proposed_tokens_total");
    assert!(proposed > 0.0, "{m}");
    assert!(metric(&m, "kiln_draft_accepted_tokens_total") > 0.0);
    assert!(metric(&m, "kiln_draft_mean_accepted_length") > 0.0);
    // Opted out: the same answer, no new drafts.
    let (_, opted) = send(&drafted, post("/v1/completions", body(Some(false)))).await;
    let opted: Value = serde_json::from_str(&opted).unwrap();
    assert_eq!(opted["choices"], want["choices"]);
    let (_, m) = send(&drafted, get("/metrics")).await;
    assert_eq!(metric(&m, "kiln_draft_proposed_tokens_total"), proposed);
    state.engine.shutdown();
}
