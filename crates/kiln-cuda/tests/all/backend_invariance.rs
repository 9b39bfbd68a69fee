//! Batch invariance on the GPU: one sequence's logits are bit-identical whether it runs alone
//! or in steps with 1, 6 or 31 other sequences (other lengths, prefill and decode mixed), and
//! whether its prompt is prefilled whole or in chunks of 512 or 2048; in bf16 and in f32, where
//! a prompt whose last chunk is one token (a decode row) gives the whole prompt's bits too. On
//! the Gemma 4 dummies the 3,000-token prompt is far past the 64-token window, so chunks and
//! decode steps cross it. In bf16 also with block-quantised weights (a test of their own).

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, Checks};
use kiln_cuda::{CudaBackend, StoreType};
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};
use models::{cuda_backend_in, dummy_gemma_wide, dummy_mid, Blocks, Seq};

const PROMPT: usize = 3000;
const DECODE_STEPS: usize = 4;

/// Logits of the sequence under test: one row per step (last prompt chunk, then each decode).
fn run_target(
    b: &mut CudaBackend,
    prompt: &[u32],
    chunk: usize,
    neighbours: usize,
    vocab: usize,
) -> Vec<Vec<f32>> {
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(b);
    // Neighbours come first in the pool so the target's blocks differ between runs.
    let mut others: Vec<Seq> = (0..neighbours)
        .map(|i| {
            let len = 1 + (i * 397 + 61) % 700;
            let toks: Vec<u32> = (0..len)
                .map(|j| ((i * 131 + j * 17) % vocab) as u32)
                .collect();
            Seq::new(toks, &mut blocks, len + DECODE_STEPS + 8, bs)
        })
        .collect();
    let mut target = Seq::new(
        prompt.to_vec(),
        &mut blocks,
        prompt.len() + DECODE_STEPS + 1,
        bs,
    );
    let mut rows = Vec::new();
    let mut step = 0;
    // Prefill the target chunk by chunk, then decode one token per step; neighbours run their
    // own prefill chunks of varied sizes and then decode, all in the same steps.
    while rows.len() < 1 + DECODE_STEPS {
        let t_len = target
            .chunk(if target.done < PROMPT { chunk } else { 1 })
            .tokens
            .len();
        let budget = 4096 - t_len;
        let mut used = 0;
        let lens: Vec<usize> = others
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let n = (o.tokens.len() - o.done)
                    .min(1 + (i + step) % 300)
                    .min(budget - used);
                used += n;
                n
            })
            .collect();
        let mut chunks: Vec<ChunkInput<'_>> = others
            .iter()
            .zip(&lens)
            .filter(|(_, &n)| n > 0)
            .map(|(o, &n)| o.chunk(n))
            .collect();
        // The target sits at a different place in the step each time.
        let at = step % (chunks.len() + 1);
        chunks.insert(at, target.chunk(t_len));
        let logits = b.forward(&chunks).expect("forward");
        drop(chunks);
        target.done += t_len;
        if target.done == target.tokens.len() {
            rows.push(logits[at * vocab..(at + 1) * vocab].to_vec());
            // The next token is fixed, not sampled, so every run feeds the same ones.
            target.tokens.push(((rows.len() * 101 + 7) % vocab) as u32);
        }
        for (i, o) in others.iter_mut().enumerate() {
            o.done += lens[i];
            if o.done == o.tokens.len() {
                o.tokens.push(((i * 7 + step) % vocab) as u32);
            }
        }
        step += 1;
    }
    rows
}

fn invariance(c: &mut Checks, name: &str, src: &dyn WeightSource, dtype: StoreType) {
    let mut b = cuda_backend_in(src, 4096, dtype);
    let vocab = src.config().vocab_size;
    let prompt: Vec<u32> = (0..PROMPT)
        .map(|i| ((i * 7919 + 3) % vocab) as u32)
        .collect();
    let alone = run_target(&mut b, &prompt, 0, 0, vocab);
    let mut cases = vec![(512, 0), (2048, 0), (0, 1), (2048, 6), (512, 31)];
    // Every row takes the same GEMM and attention kernels: a one-token tail is no exception.
    // Not in bf16, nor with fp8 projections whose decode rows (a one-token tail is one) take
    // kernels of their own, as bf16's do: KILN_FP8_SKINNY's, or the wgmma row order's (on by
    // default where the GPU builds it; the backend's switches say whether it does).
    let sw = b.switches();
    if dtype != StoreType::Bf16 && !(sw.fp8 && (sw.fp8_skinny || sw.fp8_wg)) {
        cases.extend([(PROMPT - 1, 0), (PROMPT - 1, 6)]);
    }
    for (chunk, neighbours) in cases {
        let got = run_target(&mut b, &prompt, chunk, neighbours, vocab);
        for (i, (g, a)) in got.iter().zip(&alone).enumerate() {
            let what = if i == 0 {
                "prompt logits".to_string()
            } else {
                format!("decode step {i} logits")
            };
            c.identical(
                &format!(
                    "{name} {dtype}: chunk {} with {neighbours} other sequences, {what}",
                    if chunk == 0 {
                        "whole".into()
                    } else {
                        chunk.to_string()
                    }
                ),
                g,
                a,
            );
        }
    }
}

fn models(test: &str, dtype: StoreType) {
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut c = Checks::new(test);
    let tiny = DummySource::preset("tiny").expect("tiny");
    invariance(&mut c, "dummy:tiny", &tiny, dtype);
    invariance(&mut c, "dummy mid", &dummy_mid(), dtype);
    let gemma = DummySource::preset("gemma4-tiny").expect("gemma4-tiny");
    invariance(&mut c, "dummy:gemma4-tiny", &gemma, dtype);
    invariance(
        &mut c,
        "dummy gemma4-tiny, hd 512",
        &dummy_gemma_wide(),
        dtype,
    );
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_logits_are_batch_and_chunk_invariant() {
    models("invariance", StoreType::Bf16);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_f32_logits_are_batch_and_chunk_invariant() {
    models("invariance_f32", StoreType::F32);
}

/// Block-quantised weights (held quantised with KILN_GPU_QUANT=1): decode rows through the
/// quantised skinny kernels, prefill rows through their bf16 expansion (or the skinny kernels
/// too, KILN_QUANT_PREFILL=skinny).
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_logits_are_batch_and_chunk_invariant_quantised() {
    let test = "invariance_quantised";
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut c = Checks::new(test);
    let quant = dummy_mid().quantized(kiln_model::dummy_quant::DummyQuant::Q4KM);
    invariance(&mut c, "dummy mid q4_k_m", &quant, StoreType::Bf16);
    c.finish();
}
