//! The whole forward pass against the float64 reference, for every architecture switch.

use crate::support;

use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};
use support::reference::reference_logits;
use support::{backend, configs, max_rel_diff, random_tokens, shuffled_blocks, RandomSource};

// Measured errors are near 1e-6; the issue asks 1e-4 of the transformers reference.
const TOLERANCE: f64 = 1e-5;

#[test]
fn prefill_and_decode_match_the_f64_reference_for_every_architecture() {
    // The last case has bf16 weights, which the backend stores in 16 bits.
    let cases = configs::all()
        .into_iter()
        .map(|(name, cfg)| (name, RandomSource::new(cfg, 11)));
    for (name, src) in cases.chain([("llama-bf16", RandomSource::bf16(configs::llama(), 11))]) {
        let cfg = src.config().clone();
        let tokens = random_tokens(23, cfg.vocab_size, 5);
        let reference = reference_logits(&src, &tokens);
        // Logits must spread well beyond float noise for the comparison to mean anything.
        let spread = reference[22].iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(spread > 1.0, "{name}: reference logits are flat ({spread})");

        let mut b = backend(&src, 16, 4);
        let table = &shuffled_blocks(16, 3)[..6];
        let prefill = ChunkInput {
            tokens: &tokens[..9],
            start_pos: 0,
            block_table: table,
            want_logits: true,
        };
        let mut rows = vec![(8, b.forward(&[prefill]).unwrap())];
        for pos in 9..tokens.len() {
            let step = ChunkInput {
                tokens: &tokens[pos..pos + 1],
                start_pos: pos,
                block_table: table,
                want_logits: true,
            };
            rows.push((pos, b.forward(&[step]).unwrap()));
        }
        for (pos, row) in rows {
            let err = max_rel_diff(&row, &reference[pos]);
            assert!(
                err < TOLERANCE,
                "{name}: position {pos} differs from the reference by {err:e}"
            );
        }
    }
}

#[test]
fn sliding_window_changes_the_result_once_the_sequence_outgrows_it() {
    // Guards the reference comparison itself: with the window removed the logits move far
    // outside the tolerance, so a backend that ignored the window could not pass.
    let windowed = RandomSource::new(configs::mistral(), 11);
    let full = RandomSource::new(
        kiln_model::ModelConfig {
            sliding_window: None,
            layer_types: None,
            ..configs::mistral()
        },
        11,
    );
    let tokens = random_tokens(12, 101, 5);
    let a = reference_logits(&windowed, &tokens);
    let b = reference_logits(&full, &tokens);
    let as_f32: Vec<f32> = a[11].iter().map(|&v| v as f32).collect();
    assert!(max_rel_diff(&as_f32, &b[11]) > 100.0 * TOLERANCE);
    // Within the window both agree.
    let early: Vec<f32> = a[3].iter().map(|&v| v as f32).collect();
    assert!(max_rel_diff(&early, &b[3]) < TOLERANCE);
}

#[test]
fn portable_kernels_pass_the_same_test() {
    support::rerun_with_portable_kernels(
        module_path!(),
        "prefill_and_decode_match_the_f64_reference_for_every_architecture",
    );
}
