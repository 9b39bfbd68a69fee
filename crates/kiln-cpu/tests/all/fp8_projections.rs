//! `--quantize fp8` on the CPU (CpuOptions::fp8, kiln_formats::fp8): each layer's projections
//! and their input rows rounded to fp8 rows. The logits move from the f32 reference by about
//! fp8's precision and no more, and the run keeps the reference's contracts: chunked prefill
//! and a sequence batched with another give the bits of a whole prompt run alone.

use crate::support;

use kiln_cpu::{CpuBackend, CpuOptions, Narrow, Rounding};
use kiln_step::{Backend, ChunkInput};
use support::{configs, prefill_then_decode, random_tokens, same_bits, RandomSource};

const PROMPT: usize = 40;

fn backend(src: &RandomSource, fp8: bool) -> CpuBackend {
    let opts = CpuOptions {
        kv_blocks: 64,
        block_size: 16,
        threads: None,
        host_blocks: 0,
        fp8,
    };
    CpuBackend::new(src, opts, None).unwrap()
}

fn run(fp8: bool, cfg: &kiln_model::ModelConfig, chunks: &[usize]) -> Vec<Vec<f32>> {
    run_rounded(fp8, None, cfg, chunks)
}

/// [`run`] with the CPU emulating `rounding`.
fn run_rounded(
    fp8: bool,
    rounding: Option<Rounding>,
    cfg: &kiln_model::ModelConfig,
    chunks: &[usize],
) -> Vec<Vec<f32>> {
    let src = RandomSource::new(cfg.clone(), 5);
    let tokens = random_tokens(PROMPT + 4, cfg.vocab_size, 6);
    let table: Vec<u32> = (0..8).collect();
    let mut b = backend(&src, fp8);
    b.set_rounding(rounding);
    prefill_then_decode(&mut b, &tokens, &table, chunks)
}

/// The largest error of `got`'s logits against `want`'s, relative to each row's largest.
fn max_rel(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    want.iter()
        .zip(got)
        .map(|(a, b)| rel(b, a))
        .fold(0f32, f32::max)
}

fn rel(a: &[f32], b: &[f32]) -> f32 {
    let m = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0f32, |e, (x, y)| e.max((x - y).abs())) / m
}

/// The largest logit error of the f32 reference with its projection inputs rounded to bf16.
fn bf16_inputs_error(cfg: &kiln_model::ModelConfig, plain: &[Vec<f32>]) -> f32 {
    let mut r = Rounding::none(Narrow::Bf16);
    r.gemm_inputs = true;
    max_rel(&run_rounded(false, Some(r), cfg, &[PROMPT]), plain)
}

#[test]
fn fp8_moves_the_logits_by_its_precision() {
    for (name, cfg) in configs::all_with_gemma4() {
        let plain = run(false, &cfg, &[PROMPT]);
        let fp8 = run(true, &cfg, &[PROMPT]);
        let e = max_rel(&fp8, &plain);
        // fp8 keeps 4 significant bits to bf16's 8, and rounds the weights as well as the
        // inputs: about 16 x sqrt(2) the error of bf16 inputs alone (16-28 on these models).
        let ratio = e / bf16_inputs_error(&cfg, &plain);
        assert!(
            (12.0..40.0).contains(&ratio),
            "{name}: fp8 vs f32 rel err {e:e}, {ratio:.1} x that of bf16 inputs"
        );
    }
}

#[test]
fn fp8_is_chunk_invariant() {
    for (name, cfg) in configs::all_with_gemma4() {
        let whole = run(true, &cfg, &[PROMPT]);
        let chunked = run(true, &cfg, &[3, 17, 1, 19]);
        for (step, (a, b)) in whole.iter().zip(&chunked[3..]).enumerate() {
            assert!(same_bits(a, b), "{name}: step {step}");
        }
    }
}

#[test]
fn fp8_rows_of_one_sequence_do_not_depend_on_another() {
    let cfg = configs::all_with_gemma4().remove(0).1;
    let src = RandomSource::new(cfg.clone(), 7);
    let (a, b) = (
        random_tokens(24, cfg.vocab_size, 1),
        random_tokens(9, cfg.vocab_size, 2),
    );
    let chunk = |tokens: &'static [u32], table: &'static [u32]| ChunkInput {
        tokens,
        start_pos: 0,
        block_table: table,
        want_logits: true,
    };
    let (a, b): (&'static [u32], &'static [u32]) = (a.leak(), b.leak());
    let alone = backend(&src, true).forward(&[chunk(a, &[0, 1])]).unwrap();
    let together = backend(&src, true)
        .forward(&[chunk(b, &[2]), chunk(a, &[0, 1])])
        .unwrap();
    let v = cfg.vocab_size;
    assert!(
        same_bits(&alone, &together[v..2 * v]),
        "a's logits beside b"
    );
}
