//! The Q/K row permutation llama.cpp's converter applies to llama and mistral weights.
//!
//! Hugging Face rotates the halves of each head (`rotate_half`, NeoX style); GGML's llama
//! kernel rotates adjacent pairs. `convert_hf_to_gguf.py` bridges the two by reordering the
//! rows of each head of `q_proj` and `k_proj`:
//!
//! ```text
//! w.reshape(n_head, 2, head_dim / 2, cols).swapaxes(1, 2).reshape(rows, cols)
//! ```
//!
//! so HF row `h*d + t*d/2 + j` (head h, half t, pair j) becomes GGUF row `h*d + 2j + t`.
//! kiln undoes it at load time so that every source is NeoX-ordered and an HF folder and the
//! GGUF converted from it produce identical logits.

use anyhow::ensure;
use rayon::prelude::*;

/// Maps row `r` of the GGUF layout to its row in the Hugging Face layout.
fn hf_row(r: usize, head_dim: usize) -> usize {
    let (h, within) = (r / head_dim, r % head_dim);
    let (j, t) = (within / 2, within % 2);
    h * head_dim + t * (head_dim / 2) + j
}

/// Reorders the rows of a `[rows, cols]` tensor from GGUF's llama order to Hugging Face's
/// (values, or the bytes of quantised rows with `cols` bytes a row).
pub fn unpermute_rows<T: Copy + Default + Send + Sync>(
    data: &[T],
    rows: usize,
    cols: usize,
    n_head: usize,
) -> anyhow::Result<Vec<T>> {
    reorder(data, rows, cols, n_head, |dst_row, head_dim| {
        // Inverse of hf_row: which GGUF row lands in Hugging Face row `dst_row`.
        let (h, within) = (dst_row / head_dim, dst_row % head_dim);
        let (t, j) = (within / (head_dim / 2), within % (head_dim / 2));
        h * head_dim + 2 * j + t
    })
}

/// The converter's permutation (Hugging Face order to GGUF llama order), for writing files
/// and for tests.
pub fn permute_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_head: usize,
) -> anyhow::Result<Vec<f32>> {
    reorder(data, rows, cols, n_head, hf_row)
}

/// Builds `out[row] = data[src(row)]` for every row.
fn reorder<T: Copy + Default + Send + Sync>(
    data: &[T],
    rows: usize,
    cols: usize,
    n_head: usize,
    src: impl Fn(usize, usize) -> usize + Sync,
) -> anyhow::Result<Vec<T>> {
    ensure!(
        rows.checked_mul(cols) == Some(data.len()),
        "Q/K permutation: {} values do not form {rows} rows of {cols}",
        data.len()
    );
    ensure!(
        n_head > 0 && rows.is_multiple_of(n_head) && (rows / n_head).is_multiple_of(2),
        "Q/K permutation: {rows} rows do not split into {n_head} heads of even size"
    );
    let head_dim = rows / n_head;
    let mut out = vec![T::default(); data.len()];
    if cols == 0 {
        return Ok(out);
    }
    out.par_chunks_mut(cols).enumerate().for_each(|(row, dst)| {
        let s = src(row, head_dim);
        dst.copy_from_slice(&data[s * cols..(s + 1) * cols]);
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_converters_reshape() {
        // Two heads of four rows, one column: numpy's
        // arange(8).reshape(2, 2, 2, 1).swapaxes(1, 2).reshape(8) is [0, 2, 1, 3, 4, 6, 5, 7].
        let hf: Vec<f32> = (0..8).map(|x| x as f32).collect();
        let gguf = permute_rows(&hf, 8, 1, 2).unwrap();
        assert_eq!(gguf, vec![0., 2., 1., 3., 4., 6., 5., 7.]);
        assert_eq!(unpermute_rows(&gguf, 8, 1, 2).unwrap(), hf);
    }

    #[test]
    fn round_trips_with_columns_and_odd_head_counts() {
        let (rows, cols, heads) = (3 * 16, 5, 3);
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32 * 0.5).collect();
        let gguf = permute_rows(&hf, rows, cols, heads).unwrap();
        assert_ne!(gguf, hf);
        assert_eq!(unpermute_rows(&gguf, rows, cols, heads).unwrap(), hf);
        // Whole rows move: each row keeps its columns together.
        for r in 0..rows {
            let s = hf_row(r, 16);
            assert_eq!(gguf[r * cols..(r + 1) * cols], hf[s * cols..(s + 1) * cols]);
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(unpermute_rows(&[0.0; 12], 4, 2, 2).is_err());
        assert!(unpermute_rows(&[0.0; 12], 6, 2, 2).is_err());
        assert!(unpermute_rows(&[0.0; 12], 6, 2, 0).is_err());
    }
}
