//! The property speculative decoding rests on, on the GPU: a verify step (a sequence's last
//! token and k drafted ones as k + 1 single-token rows of one step) gives each row the logits
//! that plain decoding gives that token at that position, bit for bit, alone and beside other
//! sequences' prefill chunks and decode rows in the same step; with bf16 and with
//! block-quantised weights.

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, Checks};
use kiln_cuda::CudaBackend;
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};
use models::{cuda_backend, dummy_mid, fixture_sources, Blocks};

fn prefill(b: &mut CudaBackend, tokens: &[u32], table: &[u32]) {
    b.forward(&[ChunkInput {
        tokens,
        start_pos: 0,
        block_table: table,
        want_logits: true,
    }])
    .expect("prefill");
}

fn verify_rows(c: &mut Checks, name: &str, src: &dyn WeightSource) {
    let mut b = cuda_backend(src, 2048);
    let vocab = src.config().vocab_size;
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(&b);
    let prompt: Vec<u32> = (0..77).map(|i| ((i * 7919 + 3) % vocab) as u32).collect();
    let next: Vec<u32> = (0..9).map(|i| ((i * 131 + 17) % vocab) as u32).collect();
    for k in [1, 4, 8] {
        // Plain: one decode step per token.
        let table = blocks.take(prompt.len() + k + 2, bs);
        prefill(&mut b, &prompt, &table);
        let mut plain = Vec::new();
        for j in 0..=k {
            let row = b
                .forward(&[ChunkInput {
                    tokens: &next[j..j + 1],
                    start_pos: prompt.len() + j,
                    block_table: &table,
                    want_logits: true,
                }])
                .expect("decode");
            plain.push(row);
        }
        for company in [false, true] {
            let table = blocks.take(prompt.len() + k + 2, bs);
            prefill(&mut b, &prompt, &table);
            let mut chunks: Vec<ChunkInput<'_>> = (0..=k)
                .map(|j| ChunkInput {
                    tokens: &next[j..j + 1],
                    start_pos: prompt.len() + j,
                    block_table: &table,
                    want_logits: true,
                })
                .collect();
            // Beside a prefill chunk and a decode row of other sequences.
            let other_table = blocks.take(200, bs);
            let decode_table = blocks.take(prompt.len() + 2, bs);
            if company {
                prefill(&mut b, &prompt, &decode_table);
                chunks.insert(
                    0,
                    ChunkInput {
                        tokens: &prompt[..60],
                        start_pos: 0,
                        block_table: &other_table,
                        want_logits: true,
                    },
                );
                chunks.push(ChunkInput {
                    tokens: &next[..1],
                    start_pos: prompt.len(),
                    block_table: &decode_table,
                    want_logits: true,
                });
            }
            let logits = b.forward(&chunks).expect("verify step");
            let skip = usize::from(company);
            for (j, want) in plain.iter().enumerate() {
                let at = (skip + j) * vocab;
                let alone = if company { "with company" } else { "alone" };
                c.identical(
                    &format!("{name}: k={k} row {j} {alone}"),
                    &logits[at..at + vocab],
                    want,
                );
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn verify_rows_equal_plain_decode_steps() {
    let Some(_gpu) = gpu_or_skip("verify_rows_equal_plain_decode_steps") else {
        return;
    };
    let mut c = Checks::new("verify_rows");
    verify_rows(&mut c, "dummy mid", &dummy_mid());
    verify_rows(
        &mut c,
        "dummy:tiny",
        &DummySource::preset("tiny").expect("tiny"),
    );
    for (name, src) in fixture_sources() {
        verify_rows(&mut c, &name, src.as_ref());
    }
    c.finish();
}

/// Block-quantised weights (held quantised with KILN_GPU_QUANT=1).
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn verify_rows_equal_plain_decode_steps_quantised() {
    let Some(_gpu) = gpu_or_skip("verify_rows_equal_plain_decode_steps_quantised") else {
        return;
    };
    let mut c = Checks::new("verify_rows_quantised");
    for preset in ["tiny:q4_k_m", "tiny:q8_0"] {
        let src = DummySource::preset(preset).expect("a quantised preset");
        verify_rows(&mut c, &format!("dummy:{preset}"), &src);
    }
    let mid = dummy_mid().quantized(kiln_model::dummy_quant::DummyQuant::Q4KM);
    verify_rows(&mut c, "dummy mid q4_k_m", &mid);
    c.finish();
}
