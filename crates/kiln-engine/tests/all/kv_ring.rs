//! An engine over a backend that keeps its sliding-window layers' KV in a ring of blocks per
//! sequence (kiln_step::KvRing; the CPU backend on dummy:gemma4-tiny, 64-token window): each
//! request gives the tokens and log-probabilities of the whole-cache backend, alone or with
//! others, in prefill chunks of any size, across the window's edge and past several wraps of
//! the ring; the prefix cache is off (a ring holds no prefix) and so reports no hit.

use crate::common;

use common::*;
use kiln_engine::{EngineConfig, EngineHandle, GenerateRequest};
use kiln_model::DummySource;

const SEQS: usize = 4;
const CHUNK: usize = 48;

fn gemma() -> DummySource {
    DummySource::preset("gemma4-tiny").expect("dummy:gemma4-tiny")
}

fn cfg(prefill_chunk: usize) -> EngineConfig {
    EngineConfig {
        max_num_seqs: SEQS,
        max_batched_tokens: CHUNK,
        prefill_chunk,
        ..config()
    }
}

/// An engine on dummy:gemma4-tiny, with the ring when `ring` (sized for SEQS sequences and
/// steps of CHUNK tokens) or the whole cache.
fn engine_on(source: &DummySource, ring: bool, cfg: EngineConfig) -> EngineHandle {
    let mut b = backend(source, 400);
    if ring {
        let r = b
            .enable_kv_ring(SEQS, CHUNK)
            .expect("gemma4-tiny has sliding layers");
        // 64-token window, 48-token steps, 16-token blocks: 7 blocks, 112 positions.
        assert_eq!((r.blocks, r.capable), (7, 28));
    }
    kiln_engine::start(Box::new(b), tokenizer(source), cfg)
}

fn probed(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        logprobs: Some(5),
        ..greedy(prompt, max_tokens)
    }
}

fn same(got: &Outcome, want: &Outcome, what: &str) {
    assert_eq!(got.ids, want.ids, "{what}: tokens");
    assert_eq!(got.logprobs, want.logprobs, "{what}: log-probabilities");
    assert_eq!(
        got.top_logprobs, want.top_logprobs,
        "{what}: top log-probabilities"
    );
}

#[test]
fn a_ring_gives_the_whole_caches_tokens_alone_and_together() {
    let source = gemma();
    // Prompts shorter than the window, across it, and several ring lengths long; decodes that
    // cross the window and wrap the ring again.
    let reqs: Vec<GenerateRequest> = [(30, 60), (70, 40), (250, 90), (333, 120)]
        .into_iter()
        .enumerate()
        .map(|(i, (len, max))| probed(prompt(len, i as u32 + 1), max))
        .collect();
    let whole = engine_on(&source, false, cfg(CHUNK));
    let want: Vec<Outcome> = reqs.iter().map(|r| run(&whole, r.clone())).collect();
    whole.shutdown();
    for chunk in [CHUNK, 5, 2] {
        let ringed = engine_on(&source, true, cfg(chunk));
        // Alone, one after another.
        for (i, r) in reqs.iter().enumerate() {
            let got = run(&ringed, r.clone());
            same(
                &got,
                &want[i],
                &format!("request {i} alone, chunks of {chunk}"),
            );
            assert_eq!(got.finish.cached_tokens, 0);
        }
        // Together: submitted at once, sharing steps.
        let streams: Vec<_> = reqs
            .iter()
            .map(|r| ringed.submit(r.clone()).expect("submit"))
            .collect();
        for (i, s) in streams.into_iter().enumerate() {
            same(
                &collect(s),
                &want[i],
                &format!("request {i} together, chunks of {chunk}"),
            );
        }
        // The same prompt again finds nothing cached: the ring kept no prefix.
        let again = run(&ringed, reqs[3].clone());
        same(&again, &want[3], "request 3 again");
        assert_eq!(again.finish.cached_tokens, 0);
        ringed.shutdown();
    }
}
