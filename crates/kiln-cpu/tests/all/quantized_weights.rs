//! Block-quantised weights (Q8_0, Q4_0, Q4_K, Q6_K) kept quantised and decoded inside the
//! matmul give the same bits as the same weights expanded to f32 at load: matrix by matrix,
//! stacked in mixed formats, and through the whole forward pass; and that forward pass agrees
//! with the float64 reference.

use crate::support;

use kiln_cpu::kernels::{matmul_with, Isa, PackedMatrix, QuantFormat, RowBlock, WeightFormat};
use kiln_formats::{dequantize_into, DType};
use kiln_model::{ModelConfig, WeightSource};
use support::quant_source::{random_blocks, QuantSource, FORMATS};
use support::reference::reference_logits;
use support::{
    backend, max_rel_diff, prefill_then_decode, random_tokens, same_bits, shuffled_blocks, Rng,
};

fn dequantized(dtype: DType, rows: usize, cols: usize, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; rows * cols];
    dequantize_into(dtype, bytes, &mut out).unwrap();
    out
}

fn products_equal(a: &PackedMatrix, b: &PackedMatrix, what: &str, rng: &mut Rng) {
    assert_eq!((a.rows(), a.cols()), (b.rows(), b.cols()), "{what}");
    let (n, k) = (a.rows(), a.cols());
    for isa in Isa::available() {
        for m in [1, 5, 40] {
            let x = rng.vec(m * k, 1.0);
            let (mut p, mut q) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            matmul_with(isa, &x, a, &mut p);
            matmul_with(isa, &x, b, &mut q);
            assert!(p.iter().all(|v| v.is_finite()), "{what} {isa:?} m={m}");
            assert!(same_bits(&p, &q), "{what} {isa:?} m={m}");
        }
    }
}

#[test]
fn each_format_gives_the_bits_of_its_f32_expansion() {
    let mut rng = Rng::new(21);
    // Rows: a partial last panel; columns: one and several K-quant super-blocks.
    for (rows, cols) in [(40, 256), (16, 512), (3, 256)] {
        for dtype in FORMATS {
            let bytes = random_blocks(dtype, rows, cols, 1.0, &mut rng);
            let format = QuantFormat::from_dtype(dtype).unwrap();
            let quant = PackedMatrix::from_quantized(format, rows, cols, &bytes).unwrap();
            assert_eq!(quant.format(), WeightFormat::Quant(format));
            let values = dequantized(dtype, rows, cols, &bytes);
            let wide = PackedMatrix::pack_as(rows, cols, &values, WeightFormat::F32).unwrap();
            products_equal(&quant, &wide, &format!("{dtype} {rows}x{cols}"), &mut rng);
            let mut row = vec![f32::NAN; cols];
            quant.copy_row(rows - 1, &mut row);
            assert_eq!(row, &values[(rows - 1) * cols..]);
        }
    }
}

#[test]
fn stacked_formats_give_the_bits_of_the_f32_stack() {
    let mut rng = Rng::new(22);
    let cols = 256;
    let expand = |b: &RowBlock<'_>| -> anyhow::Result<Vec<f32>> {
        Ok(match b {
            RowBlock::F32(d) => d.to_vec(),
            RowBlock::Quant {
                format,
                rows,
                bytes,
            } => dequantized(format.dtype(), *rows, cols, bytes),
        })
    };
    // Whole panels before the last block: each block keeps its format. A block of 24 rows
    // first: the stack is expanded to f32 instead.
    for first_rows in [32, 24] {
        let q4k = random_blocks(DType::Q4K, first_rows, cols, 1.0, &mut rng);
        let q8 = random_blocks(DType::Q8_0, 48, cols, 1.0, &mut rng);
        let f = rng.vec(20 * cols, 0.1);
        let blocks = [
            RowBlock::Quant {
                format: QuantFormat::Q4K,
                rows: first_rows,
                bytes: &q4k,
            },
            RowBlock::Quant {
                format: QuantFormat::Q8_0,
                rows: 48,
                bytes: &q8,
            },
            RowBlock::F32(&f),
        ];
        let stacked = PackedMatrix::stack(cols, &blocks, expand).unwrap();
        let mut all = Vec::new();
        for b in &blocks {
            all.extend(expand(b).unwrap());
        }
        let wide = PackedMatrix::pack_as(all.len() / cols, cols, &all, WeightFormat::F32).unwrap();
        products_equal(
            &stacked,
            &wide,
            &format!("stack from {first_rows}"),
            &mut rng,
        );
    }
}

/// A k that is not a whole number of the single-row decode block (64): the last block is
/// shorter, and only the panels of the row pass may be decoded (a 64 x 96 Q8_0 down projection
/// once read past its last panel).
#[test]
fn a_short_last_k_block_stays_inside_the_matrix() {
    let mut rng = Rng::new(23);
    for (rows, cols) in [(64, 96), (64, 160), (80, 32)] {
        for dtype in [DType::Q8_0, DType::Q4_0] {
            let bytes = random_blocks(dtype, rows, cols, 1.0, &mut rng);
            let format = QuantFormat::from_dtype(dtype).unwrap();
            let quant = PackedMatrix::from_quantized(format, rows, cols, &bytes).unwrap();
            let values = dequantized(dtype, rows, cols, &bytes);
            let wide = PackedMatrix::pack_as(rows, cols, &values, WeightFormat::F32).unwrap();
            products_equal(&quant, &wide, &format!("{dtype} {rows}x{cols}"), &mut rng);
        }
    }
}

#[test]
fn malformed_blocks_are_refused() {
    let bytes = vec![0u8; 34 * 8 - 1];
    let err = PackedMatrix::from_quantized(QuantFormat::Q8_0, 1, 256, &bytes).unwrap_err();
    assert!(err.to_string().contains("bytes"), "{err}");
    let err = PackedMatrix::from_quantized(QuantFormat::Q4K, 1, 200, &[0; 144]).unwrap_err();
    assert!(err.to_string().contains("whole number"), "{err}");
}

/// Hidden and FFN widths that are whole K-quant super-blocks (256); K and V of 64 rows.
fn quant_config() -> ModelConfig {
    ModelConfig {
        vocab_size: 101,
        hidden_size: 256,
        intermediate_size: 512,
        num_layers: 2,
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 32,
        ..support::configs::llama()
    }
}

/// Logits of a 17-token prefill (chunks of 12 and 5) and 6 decode steps.
fn run(src: &dyn WeightSource, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut b = backend(src, 16, 4);
    let table = &shuffled_blocks(16, 5)[..6];
    prefill_then_decode(&mut b, tokens, table, &[12, 5])
}

#[test]
fn forward_with_quantised_weights_equals_the_expanded_weights_and_the_reference() {
    let cfg = quant_config();
    let tokens = random_tokens(23, cfg.vocab_size, 9);
    let mut src = QuantSource::new(cfg, &FORMATS, 31);
    let kept = run(&src, &tokens);
    src.offer_blocks = false;
    let expanded = run(&src, &tokens);
    assert_eq!(kept.len(), expanded.len());
    for (i, (a, b)) in kept.iter().zip(&expanded).enumerate() {
        assert!(
            same_bits(a, b),
            "row {i}: quantised and expanded weights differ"
        );
    }
    // The reference reads the dequantised values.
    let reference = reference_logits(&src, &tokens);
    let spread = reference[22].iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(spread > 1.0, "reference logits are flat ({spread})");
    let positions = [11, 16, 17, 18, 19, 20, 21, 22];
    for (row, pos) in kept.iter().zip(positions) {
        let err = max_rel_diff(row, &reference[pos]);
        assert!(err < 1e-5, "position {pos}: {err:e} from the reference");
    }
}

#[test]
fn portable_kernels_pass_the_same_tests() {
    for name in [
        "each_format_gives_the_bits_of_its_f32_expansion",
        "forward_with_quantised_weights_equals_the_expanded_weights_and_the_reference",
    ] {
        support::rerun_with_portable_kernels(module_path!(), name);
    }
}
