//! RMSNorm: `y = x / sqrt(mean(x^2) + eps) * weight`, one row at a time.

use rayon::prelude::*;

use super::reduce::sum_squares;

/// Rows per parallel task: a norm is cheap, so small batches stay on one thread.
const MIN_ROWS_PER_TASK: usize = 16;

/// Normalises one row in place.
#[inline]
pub fn rmsnorm_row_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    assert_eq!(
        x.len(),
        weight.len(),
        "rmsnorm row and weight differ in length"
    );
    let inv = 1.0 / (sum_squares(x) / x.len() as f32 + eps).sqrt();
    for (v, w) in x.iter_mut().zip(weight) {
        *v = (*v * inv) * w;
    }
}

/// Normalises each row of `x` (rows of `weight.len()` elements) into `out`.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let width = weight.len();
    assert!(
        width > 0 && x.len().is_multiple_of(width),
        "rmsnorm input is not whole rows"
    );
    assert_eq!(
        x.len(),
        out.len(),
        "rmsnorm input and output differ in length"
    );
    x.par_chunks(width)
        .zip(out.par_chunks_mut(width))
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(row, dst)| {
            dst.copy_from_slice(row);
            rmsnorm_row_in_place(dst, weight, eps);
        });
}

/// Normalises each `weight.len()`-element head of a row in place (Qwen3's Q/K norm).
pub fn rmsnorm_heads_in_place(row: &mut [f32], weight: &[f32], eps: f32) {
    for head in row.chunks_exact_mut(weight.len()) {
        rmsnorm_row_in_place(head, weight, eps);
    }
}

/// Normalises each `head_dim`-element head of a row in place without a weight (Gemma 4's V
/// norm): `x / sqrt(mean(x^2) + eps)`.
pub fn rmsnorm_heads_unweighted_in_place(row: &mut [f32], head_dim: usize, eps: f32) {
    assert!(
        head_dim > 0 && row.len().is_multiple_of(head_dim),
        "rmsnorm row is not whole heads"
    );
    for head in row.chunks_exact_mut(head_dim) {
        let inv = 1.0 / (sum_squares(head) / head_dim as f32 + eps).sqrt();
        for v in head.iter_mut() {
            *v *= inv;
        }
    }
}
