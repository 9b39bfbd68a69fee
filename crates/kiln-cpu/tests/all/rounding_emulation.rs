//! The CPU emulating a narrower GPU's roundings (kiln_cpu::Rounding): no point on is the f32
//! reference bit for bit; each point moves the logits by about its format's precision and no
//! more; every emulation stays chunk-invariant where its rows keep their kind (prefill rows
//! remain prefill rows), so it is a reference with the same contracts as the f32 one.

use crate::support;

use kiln_cpu::{Narrow, Rounding};
use support::{backend, configs, prefill_then_decode, random_tokens, same_bits, RandomSource};

const PROMPT: usize = 40;

fn run(r: Option<Rounding>, cfg: &kiln_model::ModelConfig, chunks: &[usize]) -> Vec<Vec<f32>> {
    let src = RandomSource::new(cfg.clone(), 5);
    let tokens = random_tokens(PROMPT + 4, cfg.vocab_size, 6);
    let mut b = backend(&src, 64, 16);
    b.set_rounding(r);
    let table: Vec<u32> = (0..8).collect();
    prefill_then_decode(&mut b, &tokens, &table, chunks)
}

fn rel(a: &[f32], b: &[f32]) -> f32 {
    let m = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0f32, |e, (x, y)| e.max((x - y).abs())) / m
}

#[test]
fn no_rounding_point_is_the_f32_reference() {
    for (name, cfg) in configs::all_with_gemma4() {
        let plain = run(None, &cfg, &[PROMPT]);
        let none = run(Some(Rounding::none(Narrow::Bf16)), &cfg, &[PROMPT]);
        for (a, b) in plain.iter().zip(&none) {
            assert!(same_bits(a, b), "{name}");
        }
    }
}

#[test]
fn each_point_moves_the_logits_by_its_precision() {
    let none = Rounding::none(Narrow::Bf16);
    type Set = fn(&mut Rounding);
    let points: [(&str, Set); 5] = [
        ("projection inputs", |r| r.gemm_inputs = true),
        ("Q", |r| r.q = true),
        ("K and V", |r| r.kv = true),
        ("prefill probabilities", |r| r.prefill_probs = true),
        ("decode probabilities", |r| r.decode_probs_max_hd = 512),
    ];
    for (name, cfg) in configs::all_with_gemma4() {
        let plain = run(None, &cfg, &[PROMPT]);
        for format in [Narrow::Bf16, Narrow::F16] {
            // bf16 keeps 8 bits, f16 11: an error of a few units of the last place at most.
            let most = match format {
                Narrow::Bf16 => 5e-2,
                Narrow::F16 => 1e-2,
            };
            for (point, set) in points {
                let mut r = Rounding { format, ..none };
                set(&mut r);
                let got = run(Some(r), &cfg, &[PROMPT]);
                let e = plain
                    .iter()
                    .zip(&got)
                    .map(|(a, b)| rel(b, a))
                    .fold(0f32, f32::max);
                assert!(
                    e > 0.0 && e < most,
                    "{name} {format:?} {point}: rel err {e:e}"
                );
            }
        }
    }
}

#[test]
fn the_emulation_is_chunk_invariant() {
    let mut r = Rounding::of_gpu(Narrow::Bf16);
    r.decode_probs_max_hd = 64;
    for (name, cfg) in configs::all_with_gemma4() {
        let whole = run(Some(r), &cfg, &[PROMPT]);
        // Chunks of two tokens or more: every prompt row stays a prefill row.
        let chunked = run(Some(r), &cfg, &[3, 17, 2, 18]);
        for (step, (a, b)) in whole.iter().zip(&chunked[3..]).enumerate() {
            assert!(same_bits(a, b), "{name}: step {step}");
        }
    }
}
