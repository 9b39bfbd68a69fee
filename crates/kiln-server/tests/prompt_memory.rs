//! An oversized prompt costs memory in proportion to its body, not to its token count (issue
//! 19, item 2: one 8.1 MB prompt used to peak at 1.18 GB, four at once at 2.35 GB). The heap is
//! measured by a counting allocator around the real router and engine on the shipped model.

#[path = "all/support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use kiln_engine::EngineConfig;
use kiln_server::{AppState, Limits};
use serde_json::json;
use support::*;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_oversized_prompts_at_once_stay_within_a_few_bodies_of_memory() {
    let cfg = EngineConfig {
        max_context: 1024,
        ..engine_config()
    };
    let (engine, tokenizer) = start_engine_on(SHIPPED_MODEL, cfg, 128);
    let state = AppState::new(engine, tokenizer, MODEL.to_string(), Limits::default());
    let app = kiln_server::app::router(std::sync::Arc::new(state));
    let words = "the quick brown fox jumps over the lazy dog ".repeat(190_000);
    let bodies: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| {
            let (path, body) = if i % 2 == 0 {
                ("/v1/completions", json!({"prompt": words, "max_tokens": 4}))
            } else {
                (
                    "/v1/chat/completions",
                    json!({"messages": [{"role": "user", "content": words}]}),
                )
            };
            (path.to_string(), body.to_string().into_bytes())
        })
        .collect();
    let body_bytes = bodies[0].1.len();
    drop(words);
    // The bodies are the client's; what the server allocates is measured from here.
    let baseline = LIVE.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|(path, body)| {
            let app = app.clone();
            tokio::spawn(async move { send_json(&app, post(&path, Body::from(body))).await })
        })
        .collect();
    for t in tasks {
        let (status, v) = t.await.unwrap();
        assert_eq!(status.as_u16(), 400, "{v}");
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    }
    let peak = PEAK.load(Ordering::Relaxed) - baseline;
    let after = LIVE.load(Ordering::Relaxed).saturating_sub(baseline);
    eprintln!(
        "peak heap growth {} MB for four {} MB prompts",
        peak >> 20,
        body_bytes >> 20
    );
    // The bound: each body read once (the request's copy is the client's) plus, for the one
    // prompt being parsed at a time, its parsed text and a working copy: 8 bodies in all.
    assert!(
        peak < 8 * body_bytes,
        "peak {} MB for four {} MB prompts",
        peak >> 20,
        body_bytes >> 20
    );
    // Nothing of them is kept.
    assert!(after < body_bytes / 4, "{} MB still held", after >> 20);
}
