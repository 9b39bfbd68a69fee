//! Resumed equals fresh on the GPU, as the engine's prefix cache uses the backend: a sequence
//! whose block table starts with blocks another sequence computed (the same leading tokens)
//! and which prefills only the rest gives bit for bit the logits of the same prompt prefilled
//! from nothing, for hits of no block, one, part and all but the last, with the part left to
//! run two tokens, less than a block, or several chunks. Chunks are split as the scheduler
//! splits them: never one token, never leaving one.

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, Checks};
use kiln_cuda::CudaBackend;
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};
use models::{cuda_backend, dummy_mid, fixture_sources, Blocks};

const DECODE_STEPS: usize = 3;

/// Chunk lengths for `pending` tokens in chunks of at most `chunk`, as the scheduler cuts them.
fn split(mut pending: usize, chunk: usize) -> Vec<usize> {
    let mut out = Vec::new();
    while pending > 0 {
        let mut len = pending.min(chunk);
        if pending - len == 1 {
            len -= 1;
        }
        out.push(len);
        pending -= len;
    }
    out
}

/// Prefills `tokens[from..]` on `table` (positions before `from` already in the cache), then
/// decodes fixed tokens; one logits row per step that ends the prompt or decodes.
fn run(
    b: &mut CudaBackend,
    tokens: &[u32],
    from: usize,
    table: &[u32],
    chunk: usize,
) -> Vec<Vec<f32>> {
    let vocab = b.config().vocab_size;
    let mut seq = tokens.to_vec();
    let mut at = from;
    let mut rows = Vec::new();
    for len in split(tokens.len() - from, chunk) {
        let logits = b
            .forward(&[ChunkInput {
                tokens: &seq[at..at + len],
                start_pos: at,
                block_table: table,
                want_logits: at + len == tokens.len(),
            }])
            .expect("prefill");
        at += len;
        if at == tokens.len() {
            rows.push(logits);
        }
    }
    for step in 0..DECODE_STEPS {
        seq.push(((step * 131 + 17) % vocab) as u32);
        rows.push(
            b.forward(&[ChunkInput {
                tokens: &seq[at..at + 1],
                start_pos: at,
                block_table: table,
                want_logits: true,
            }])
            .expect("decode"),
        );
        at += 1;
    }
    rows
}

fn reuse(c: &mut Checks, name: &str, src: &dyn WeightSource, long: usize) {
    let mut b = cuda_backend(src, 2048 + 40);
    let vocab = src.config().vocab_size;
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(&b);
    let base: Vec<u32> = (0..long)
        .map(|i| ((i * 7919 + 11) % vocab) as u32)
        .collect();
    let full = long / bs;
    // (case, blocks shared, prompt length of the resumed sequence, chunk)
    let cases = [
        ("no block shared", 0, long, 512),
        ("one block, two tokens left", 1, bs + 2, 512),
        (
            "part, less than a block left",
            full / 2,
            (full / 2) * bs + bs / 2,
            512,
        ),
        ("all but the last block", full - 1, long, 512),
        ("part, several chunks left", 2, long, 256),
    ];
    for (case, shared, len, chunk) in cases {
        let prompt = &base[..len];
        let cap = len + DECODE_STEPS + 1;
        let fresh_table = blocks.take(cap, bs);
        let fresh = run(&mut b, prompt, 0, &fresh_table, chunk);
        // The first sequence computes the whole base prompt; the second reuses its first
        // `shared` blocks and computes the rest on blocks of its own.
        let first = blocks.take(long + 1, bs);
        run(&mut b, &base, 0, &first, 2048);
        let own = blocks.take(cap, bs);
        let mut table = first[..shared].to_vec();
        table.extend(&own[shared..]);
        let resumed = run(&mut b, prompt, shared * bs, &table, chunk);
        for (i, (r, f)) in resumed.iter().zip(&fresh).enumerate() {
            let row = if i == 0 {
                "prompt".into()
            } else {
                format!("decode {i}")
            };
            c.identical(&format!("{name}: {case}, {row} logits"), r, f);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn a_resumed_prompt_gives_the_logits_of_a_fresh_one() {
    let Some(_gpu) = gpu_or_skip("a_resumed_prompt_gives_the_logits_of_a_fresh_one") else {
        return;
    };
    let mut c = Checks::new("prefix_reuse");
    assert_eq!(split(7, 4), [4, 3]);
    assert_eq!(split(9, 4), [4, 3, 2]);
    assert_eq!(split(2, 4), [2]);
    reuse(&mut c, "dummy mid", &dummy_mid(), 1300);
    reuse(
        &mut c,
        "dummy:tiny",
        &DummySource::preset("tiny").expect("tiny"),
        700,
    );
    for (name, src) in fixture_sources() {
        reuse(&mut c, &name, src.as_ref(), 90);
    }
    c.finish();
}

/// Blocks copied to the host tier, overwritten in the pool by another prompt, and copied back
/// into other blocks give the resumed sequence the logits of a fresh one.
fn host_round_trip(c: &mut Checks, name: &str, src: &dyn WeightSource, long: usize) {
    let opts = kiln_cuda::CudaOptions {
        kv_cache_bytes: Some(1 << 30),
        host_cache_bytes: 256 << 20,
        max_seqs: 8,
        max_batch_tokens: Some(2048 + 40),
        max_context: Some(src.config().max_position.min(8192)),
        ..kiln_cuda::CudaOptions::default()
    };
    let mut b = CudaBackend::new(src, opts, None).expect("CUDA backend");
    let vocab = src.config().vocab_size;
    let bs = b.kv_geometry().block_size;
    assert!(
        b.host_blocks() > long / bs,
        "{name}: host tier of {}",
        b.host_blocks()
    );
    let mut blocks = Blocks::new(&b);
    let base: Vec<u32> = (0..long).map(|i| ((i * 7919 + 5) % vocab) as u32).collect();
    let full = long / bs;
    let fresh_table = blocks.take(long + DECODE_STEPS + 1, bs);
    let fresh = run(&mut b, &base, 0, &fresh_table, 512);
    // Compute the prompt, save its full blocks, then overwrite them with another prompt.
    let first = blocks.take(long + 1, bs);
    run(&mut b, &base, 0, &first, 2048);
    let save: Vec<kiln_step::BlockCopy> = (0..full)
        .map(|i| kiln_step::BlockCopy::ToHost {
            block: first[i],
            slot: i,
        })
        .collect();
    b.copy_blocks(&save).expect("to host");
    let other: Vec<u32> = (0..long).map(|i| ((i * 31 + 9) % vocab) as u32).collect();
    run(&mut b, &other, 0, &first, 2048);
    // Back into blocks of a new table; the tail runs there too.
    let table = blocks.take(long + DECODE_STEPS + 1, bs);
    let restore: Vec<kiln_step::BlockCopy> = (0..full)
        .map(|i| kiln_step::BlockCopy::ToDevice {
            slot: i,
            block: table[i],
        })
        .collect();
    b.copy_blocks(&restore).expect("to device");
    let shared = full.min((long - 2) / bs);
    let resumed = run(&mut b, &base, shared * bs, &table, 512);
    for (i, (r, f)) in resumed.iter().zip(&fresh).enumerate() {
        let row = if i == 0 {
            "prompt".into()
        } else {
            format!("decode {i}")
        };
        c.identical(
            &format!("{name}: back from the host tier, {row} logits"),
            r,
            f,
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn blocks_back_from_the_host_tier_give_the_logits_of_a_fresh_prompt() {
    let Some(_gpu) =
        gpu_or_skip("blocks_back_from_the_host_tier_give_the_logits_of_a_fresh_prompt")
    else {
        return;
    };
    let mut c = Checks::new("host_tier");
    host_round_trip(&mut c, "dummy mid", &dummy_mid(), 1300);
    for (name, src) in fixture_sources() {
        host_round_trip(&mut c, &name, src.as_ref(), 90);
    }
    c.finish();
}
