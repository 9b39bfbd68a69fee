//! The sliding-window layers' KV kept as a ring of blocks per sequence (kiln_step::KvRing,
//! `CudaOptions::kv_ring`): on the Gemma 4 dummies (64-token window; sliding heads of 256 and
//! full heads of 256 or 512) every logits row and greedy token equals the whole cache's, bit
//! for bit, for prompts several rings long prefilled in chunks of 48, 17 and 5 tokens and
//! decoded past more wraps, alone and beside other sequences in mixed steps, with CUDA graphs
//! on and off. Also prints what the ring saves: the KV bytes of a load with and without it.

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, Checks};
use kiln_cuda::kv_cache::{KvCache, RingAsk};
use kiln_cuda::{CudaBackend, CudaOptions, StoreType};
use kiln_model::dummy::DummySource;
use kiln_model::{ModelSpec, WeightSource};
use kiln_step::{Backend, ChunkInput, KvRing};
use models::{argmax, dummy_gemma_wide};

const SEQS: usize = 4;
/// Step capacity: with the 64-token window and 16-token blocks, rings of 7 blocks.
const STEP: usize = 48;
const CONTEXT: usize = 1024;
const GEN: usize = 150;

fn backend(src: &dyn WeightSource, ring: bool) -> CudaBackend {
    let opts = CudaOptions {
        kv_cache_bytes: Some(64 << 20),
        prefill_chunk: STEP,
        max_seqs: SEQS,
        max_batch_tokens: Some(STEP),
        max_context: Some(CONTEXT),
        kv_ring: Some(ring),
        ..CudaOptions::default()
    };
    CudaBackend::new(src, opts, None).expect("CUDA backend")
}

fn prompt(len: usize, salt: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|i| ((i * 7919 + salt * 104_729 + 11) % vocab) as u32)
        .collect()
}

/// Sequence `s`'s table of `n` blocks: with a ring its first `ring.blocks` ring-capable
/// (sequence s's own), the rest past the capable ids; without, blocks of its own. Each
/// sequence owns a stretch of `stride` ids (the most a sequence of CONTEXT tokens takes), so
/// no two sequences share a block whatever their lengths.
fn table(ring: Option<KvRing>, s: usize, n: usize, stride: usize) -> Vec<u32> {
    assert!(
        n <= stride,
        "a table of {n} blocks in a stretch of {stride}"
    );
    (0..n)
        .map(|i| match ring {
            Some(r) if i < r.blocks => s * r.blocks + i,
            Some(r) => r.capable + s * stride + i,
            None => s * stride + i,
        } as u32)
        .collect()
}

struct Run {
    tokens: Vec<u32>,
    prompt: usize,
    done: usize,
    table: Vec<u32>,
    /// Bits of every logits row, then the greedy tokens.
    rows: Vec<u32>,
    out: Vec<u32>,
}

/// Runs the sequences together: each step gives every sequence still going its next chunk
/// (up to `chunk` prompt tokens, or its last token while decoding), within the step capacity,
/// until each has `gen` tokens.
fn run(b: &mut CudaBackend, prompts: &[Vec<u32>], chunk: usize, gen: usize) -> Vec<Run> {
    let bs = b.kv_geometry().block_size;
    let ring = b.kv_ring();
    let mut runs: Vec<Run> = prompts
        .iter()
        .enumerate()
        .map(|(s, p)| Run {
            tokens: p.clone(),
            prompt: p.len(),
            done: 0,
            table: table(
                ring,
                s,
                (p.len() + gen + 1).div_ceil(bs),
                CONTEXT.div_ceil(bs),
            ),
            rows: Vec::new(),
            out: Vec::new(),
        })
        .collect();
    let vocab = b.config().vocab_size;
    while runs.iter().any(|r| r.out.len() < gen) {
        let mut room = STEP;
        let mut picked = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            if r.out.len() >= gen || room == 0 {
                continue;
            }
            let n = (r.tokens.len() - r.done).min(chunk).min(room);
            room -= n;
            picked.push((i, n));
        }
        let chunks: Vec<ChunkInput<'_>> = picked
            .iter()
            .map(|&(i, n)| {
                let r = &runs[i];
                ChunkInput {
                    tokens: &r.tokens[r.done..r.done + n],
                    start_pos: r.done,
                    block_table: &r.table,
                    want_logits: r.done + n >= r.prompt,
                }
            })
            .collect();
        let logits = b.forward(&chunks).expect("forward");
        let wanted: Vec<bool> = chunks.iter().map(|c| c.want_logits).collect();
        drop(chunks);
        let mut rows = logits.chunks(vocab);
        for (&(i, n), want) in picked.iter().zip(wanted) {
            let r = &mut runs[i];
            r.done += n;
            if want {
                let row = rows.next().expect("a logits row per chunk that wants one");
                r.rows.extend(row.iter().map(|v| v.to_bits()));
                let next = argmax(row);
                r.out.push(next);
                r.tokens.push(next);
            }
        }
    }
    runs
}

fn compare(c: &mut Checks, name: &str, src: &dyn WeightSource) {
    let vocab = src.config().vocab_size;
    let mut whole = backend(src, false);
    let mut ringed = backend(src, true);
    assert_eq!(whole.kv_ring(), None, "{name}: a ring without asking");
    let ring = ringed
        .kv_ring()
        .expect("the Gemma 4 dummies have sliding layers");
    c.check(
        ring.blocks == KvRing::blocks_for(ring.window, STEP, 16) && ring.capable >= SEQS * ring.blocks,
        format!(
            "{name}: a ring of {} blocks ({} positions) per sequence for a {}-token window, {} ring-capable blocks; engine blocks {} with the ring, {} without, for the same budget; pool {} vs {} bytes",
            ring.blocks,
            ring.blocks * 16,
            ring.window,
            ring.capable,
            ringed.kv_geometry().num_blocks,
            whole.kv_geometry().num_blocks,
            ringed.kv_cache_bytes(),
            whole.kv_cache_bytes()
        ),
    );
    // Several rings long; the decode wraps each ring again.
    let lens = [5 * ring.window + 13, 3 * ring.window + 1, ring.window - 9];
    let prompts: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| prompt(n, i + 1, vocab))
        .collect();
    for graphs in [false, true] {
        whole.set_graphs(graphs).expect("graphs");
        ringed.set_graphs(graphs).expect("graphs");
        for chunk in [STEP, 17, 5] {
            // Alone: each sequence by itself; then all of them in shared steps.
            let sets: Vec<(String, Vec<Vec<u32>>)> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("sequence {i} alone"), vec![p.clone()]))
                .chain(std::iter::once(("together".to_string(), prompts.clone())))
                .collect();
            for (what, set) in &sets {
                let want = run(&mut whole, set, chunk, GEN);
                let got = run(&mut ringed, set, chunk, GEN);
                for (s, (w, g)) in want.iter().zip(&got).enumerate() {
                    let case = format!(
                        "{name}: {what}, seq {s} (prompt {}), chunks of {chunk}, graphs {}",
                        w.prompt, graphs as u8
                    );
                    c.identical(&format!("{case}: {GEN} greedy tokens"), &g.out, &w.out);
                    c.identical(&format!("{case}: logits bits"), &g.rows, &w.rows);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_a_kv_ring_gives_the_bits_of_the_whole_cache() {
    let test = "kv_ring";
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut c = Checks::new(test);
    let gemma = DummySource::preset("gemma4-tiny").expect("dummy:gemma4-tiny");
    compare(&mut c, "dummy:gemma4-tiny", &gemma);
    compare(&mut c, "dummy gemma4-tiny, hd 512", &dummy_gemma_wide());
    c.finish();
}

/// KV bytes `seqs` sequences of `context` tokens take, without and with a ring sized for steps
/// of `step` tokens.
fn load_bytes(spec: &ModelSpec, seqs: usize, context: usize, step: usize) -> (usize, usize) {
    let bs = 16;
    let ask = RingAsk::for_model(spec, true, bs, step, seqs, context).expect("sliding layers");
    let (on, off) = KvCache::ring_block_bytes(spec, bs, StoreType::Bf16, &spec.ring_caches());
    let blocks = context.div_ceil(bs);
    let whole = seqs * blocks * (on + off);
    let ringed = seqs * (blocks * off + ask.blocks.min(blocks) * on);
    (whole, ringed)
}

#[test]
fn the_ring_footprint() {
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    for (preset, seqs, context, step) in [
        ("gemma4-tiny", SEQS, CONTEXT, STEP),
        ("gemma4-e4b", 16, 32_768, 2048 + 16),
        ("gemma4-e4b", 1, 131_072, 2048 + 1),
    ] {
        let spec = kiln_model::presets::preset(preset).unwrap().spec();
        let (whole, ringed) = load_bytes(&spec, seqs, context, step);
        println!(
            "{preset}: {seqs} sequences of {context} tokens, steps of {step}: KV {:.3} GiB whole, {:.3} GiB with the ring ({:.1}x less)",
            gib(whole),
            gib(ringed),
            whole as f64 / ringed as f64
        );
        assert!(ringed < whole, "{preset}: the ring saves nothing");
    }
}
