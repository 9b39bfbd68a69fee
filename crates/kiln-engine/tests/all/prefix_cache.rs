//! The prefix cache on the CPU backend: a request served partly from cached blocks gives the
//! tokens and log-probabilities (the logits, to f32) of the same request with the cache off,
//! however the hit splits its prompt; concurrent requests sharing a prefix equal each alone; a
//! small pool under many prefixes evicts without corrupting a running sequence; one different
//! token is a miss from there on.

use crate::common;

use common::*;
use kiln_engine::{EngineConfig, EngineHandle, GenerateRequest};
use kiln_model::{DummySource, WeightSource};

fn cfg(prefix_cache: bool) -> EngineConfig {
    EngineConfig {
        prefix_cache,
        ..config()
    }
}

fn engine_on(source: &DummySource, kv_blocks: usize, cfg: EngineConfig) -> EngineHandle {
    let backend = Box::new(backend(source, kv_blocks));
    kiln_engine::start(backend, tokenizer(source), cfg)
}

/// Greedy with the top 5 log-probabilities of every step: equal outcomes mean equal logits.
fn probed(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        logprobs: Some(5),
        ..greedy(prompt, max_tokens)
    }
}

/// What `req` gives on a fresh engine with the cache off.
fn fresh(source: &DummySource, req: &GenerateRequest) -> Outcome {
    let e = engine_on(source, 256, cfg(false));
    let out = run(&e, req.clone());
    e.shutdown();
    out
}

/// The outcome without the cache's own report, for comparing with a cold run.
fn same_as(got: &Outcome, want: &Outcome, what: &str) {
    assert_eq!(got.ids, want.ids, "{what}: tokens");
    assert_eq!(got.logprobs, want.logprobs, "{what}: log-probabilities");
    assert_eq!(
        got.top_logprobs, want.top_logprobs,
        "{what}: top log-probabilities"
    );
    assert_eq!(got.text, want.text, "{what}: text");
}

#[test]
fn resumed_equals_fresh_however_the_hit_splits_the_prompt() {
    let source = tiny();
    // The warm-up prompt: 200 tokens (12 full blocks of 16, more than three prefill chunks).
    let base = prompt(200, 1);
    // (what, prompt of the second request, tokens it should find cached)
    let mut cases: Vec<(&str, Vec<u32>, usize)> = Vec::new();
    let diverge = |at: usize, len: usize| -> Vec<u32> {
        let mut p = base[..len.min(base.len())].to_vec();
        p.resize(len, 0);
        for (i, t) in p.iter_mut().enumerate().skip(at) {
            *t = (i as u32 * 7 + 3) % 256;
        }
        p
    };
    cases.push(("no shared block", diverge(5, 120), 0));
    cases.push(("one block", diverge(20, 120), 16));
    cases.push(("part of the blocks", diverge(100, 180), 96));
    cases.push(("the same prompt", base.clone(), 192));
    // Everything cached: the last block runs again so that two tokens are prefilled.
    cases.push(("all blocks, nothing left", base[..192].to_vec(), 176));
    cases.push(("one token past the blocks", base[..193].to_vec(), 176));
    cases.push(("less than a block left", base[..150].to_vec(), 144));
    let mut longer = base.clone();
    longer.extend(prompt(230, 9));
    cases.push(("several chunks left", longer, 192));
    for (what, p, cached) in cases {
        let e = engine_on(&source, 256, cfg(true));
        let warm = run(&e, probed(base.clone(), 4));
        assert_eq!(warm.finish.cached_tokens, 0, "{what}: a cold start");
        let req = probed(p, 12);
        let got = run(&e, req.clone());
        assert_eq!(got.finish.cached_tokens, cached, "{what}: cached tokens");
        same_as(&got, &fresh(&source, &req), what);
        e.shutdown();
    }
}

#[test]
fn resumed_equals_fresh_with_seeded_sampling_and_on_the_fixtures() {
    let source = tiny();
    let e = engine_on(&source, 256, cfg(true));
    let p = prompt(100, 4);
    let req = GenerateRequest {
        logprobs: Some(3),
        ..seeded(p, 24, 77)
    };
    let cold = run(&e, req.clone());
    let warm = run(&e, req.clone());
    assert_eq!(warm.finish.cached_tokens, 96);
    same_as(&warm, &cold, "seeded");
    same_as(&warm, &fresh(&source, &req), "seeded");
    e.shutdown();
    // Every architecture's fixture, through its HF folder, as it is and with fp8 projections
    // (`--quantize fp8`).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    for name in ["llama", "mistral", "qwen2", "qwen3", "qwen2_window"] {
        let src = kiln_model::HfSource::open(&dir.join(name).join("hf")).unwrap();
        let tok = kiln_tokenizer::Tokenizer::byte_level(src.config().vocab_size);
        for fp8 in [false, true] {
            let what = format!("{name}, fp8 {fp8}");
            let make = |cache: bool| {
                let b = kiln_cpu::CpuBackend::new(
                    &src,
                    kiln_cpu::CpuOptions {
                        kv_blocks: 64,
                        block_size: BLOCK_SIZE,
                        threads: None,
                        host_blocks: 0,
                        fp8,
                    },
                    None,
                )
                .unwrap();
                kiln_engine::start(Box::new(b), tok.clone(), cfg(cache))
            };
            let p: Vec<u32> = (0..70).map(|i| (i * 13 + 5) % 500).collect();
            let req = probed(p.clone(), 10);
            let off = make(false);
            let want = run(&off, req.clone());
            off.shutdown();
            let on = make(true);
            run(&on, probed(p[..60].to_vec(), 2));
            let got = run(&on, req);
            assert_eq!(got.finish.cached_tokens, 48, "{what}");
            same_as(&got, &want, &what);
            on.shutdown();
        }
    }
}

#[test]
fn concurrent_requests_sharing_a_prefix_equal_each_alone() {
    let source = tiny();
    let system = prompt(64, 2);
    let reqs: Vec<GenerateRequest> = (0..6u32)
        .map(|i| {
            let mut p = system.clone();
            p.extend(prompt(10 + 7 * i as usize, 20 + i));
            probed(p, 16)
        })
        .collect();
    let alone: Vec<Outcome> = reqs.iter().map(|r| fresh(&source, r)).collect();
    let e = engine_on(&source, 256, cfg(true));
    // Once one by one (the later ones hit the system prompt), then all at once, twice.
    for (r, want) in reqs.iter().zip(&alone) {
        same_as(&run(&e, r.clone()), want, "one by one");
    }
    for round in 0..2 {
        let streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
        let outs: Vec<Outcome> = streams
            .into_iter()
            .map(|s| std::thread::spawn(move || collect(s)))
            .map(|t| t.join().unwrap())
            .collect();
        for (got, want) in outs.iter().zip(&alone) {
            same_as(got, want, &format!("together, round {round}"));
            assert!(
                got.finish.cached_tokens >= 64,
                "the system prompt is cached"
            );
        }
    }
    assert!(e.stats().prefix_hit_tokens >= 64 * 17);
    e.shutdown();
}

#[test]
fn a_small_pool_under_many_prefixes_evicts_without_corrupting_anything() {
    let source = tiny();
    // 24 blocks of 16 tokens; requests of up to 150 tokens, eight at once, from four prefixes.
    let reqs: Vec<GenerateRequest> = (0..24u32)
        .map(|i| {
            let mut p = prompt(32 + 16 * (i as usize % 3), i % 4);
            p.extend(prompt(5 + i as usize, 100 + i));
            probed(p, 8 + i as usize % 5)
        })
        .collect();
    let alone: Vec<Outcome> = reqs.iter().map(|r| fresh(&source, r)).collect();
    let e = engine_on(&source, 24, cfg(true));
    for batch in reqs.chunks(8).zip(alone.chunks(8)) {
        let streams: Vec<_> = batch
            .0
            .iter()
            .map(|r| e.submit(r.clone()).unwrap())
            .collect();
        for (s, want) in streams.into_iter().zip(batch.1) {
            same_as(&collect(s), want, "under eviction");
        }
    }
    // The gauges are published after the step that finished the last request.
    let st = wait_for(&e, |s| s.kv_blocks_used == 0);
    assert!(
        st.prefix_evictions > 0,
        "the pool was small enough to evict"
    );
    assert!(st.prefix_hit_tokens > 0, "and still hit");
    assert_eq!(
        st.kv_blocks_used, 0,
        "every block is free (or idle in the cache) at the end"
    );
    e.shutdown();
}

#[test]
fn one_different_token_is_a_miss_from_its_block_on() {
    let source = tiny();
    let e = engine_on(&source, 256, cfg(true));
    let p = prompt(100, 5);
    run(&e, probed(p.clone(), 2));
    for (at, cached) in [(0, 0), (15, 0), (16, 16), (70, 64)] {
        let mut q = p.clone();
        q[at] = (q[at] + 1) % 256;
        let req = probed(q, 6);
        let got = run(&e, req.clone());
        assert_eq!(got.finish.cached_tokens, cached, "a change at token {at}");
        same_as(&got, &fresh(&source, &req), "after a change");
    }
    // Off: nothing is cached and nothing is looked up.
    let off = engine_on(&source, 256, cfg(false));
    run(&off, probed(p.clone(), 2));
    assert_eq!(run(&off, probed(p, 2)).finish.cached_tokens, 0);
    assert_eq!(off.stats().prefix_queried_tokens, 0);
    off.shutdown();
    e.shutdown();
}

#[test]
fn blocks_evicted_to_the_host_tier_come_back_with_the_same_results() {
    let source = tiny();
    // A pool of 12 blocks with 32 host slots: one long prompt fills most of the pool, others
    // push it out to the host tier, and it comes back from there.
    let with_host = |host_blocks: usize| {
        let b = kiln_cpu::CpuBackend::new(
            &source,
            kiln_cpu::CpuOptions {
                kv_blocks: 12,
                block_size: BLOCK_SIZE,
                threads: None,
                host_blocks,
                fp8: false,
            },
            None,
        )
        .unwrap();
        kiln_engine::start(Box::new(b), tokenizer(&source), cfg(true))
    };
    let long = prompt(150, 6);
    let others: Vec<Vec<u32>> = (0..3).map(|i| prompt(140, 30 + i)).collect();
    let e = with_host(32);
    run(&e, probed(long.clone(), 4));
    for p in &others {
        run(&e, probed(p.clone(), 4));
    }
    let st = wait_for(&e, |s| s.kv_blocks_used == 0);
    assert!(
        st.prefix_host_saves > 0,
        "the pool evicted to the host tier"
    );
    assert!(st.host_blocks_cached > 0);
    let req = probed(long.clone(), 12);
    let got = run(&e, req.clone());
    assert_eq!(
        got.finish.cached_tokens, 144,
        "every full block found, from either tier"
    );
    let st = wait_for(&e, |s| s.prefix_host_hit_tokens > 0);
    assert!(
        st.prefix_host_hit_tokens > 0,
        "some came back from the host tier"
    );
    same_as(&got, &fresh(&source, &req), "back from the host tier");
    // And the others, which the long one pushed out in turn.
    for p in &others {
        let req = probed(p.clone(), 6);
        same_as(&run(&e, req.clone()), &fresh(&source, &req), "the others");
    }
    e.shutdown();
    // Without a host tier the same sequence of requests recomputes instead.
    let e = with_host(0);
    run(&e, probed(long.clone(), 4));
    for p in &others {
        run(&e, probed(p.clone(), 4));
    }
    assert_eq!(run(&e, probed(long, 12)).finish.cached_tokens, 0);
    assert_eq!(e.stats().prefix_host_saves, 0);
    e.shutdown();
}
