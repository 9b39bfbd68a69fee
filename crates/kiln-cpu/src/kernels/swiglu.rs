//! SwiGLU activation: `silu(gate) * up`, with gate and up side by side in each input row.

use rayon::prelude::*;

const MIN_ROWS_PER_TASK: usize = 16;

/// `silu(g) = g * sigmoid(g)`.
#[inline]
pub fn silu(g: f32) -> f32 {
    g / (1.0 + (-g).exp())
}

/// For each row of `gate_up` (`[gate | up]`, `2 * width` elements), writes
/// `silu(gate) * up` into the matching `width`-element row of `out`.
pub fn swiglu(gate_up: &[f32], width: usize, out: &mut [f32]) {
    gated_rows(gate_up, width, out, silu, "swiglu");
}

/// `act(gate) * up` for each `[gate | up]` row of `gate_up`, one row per task group; `what`
/// names the activation in the panics.
pub(crate) fn gated_rows(
    gate_up: &[f32],
    width: usize,
    out: &mut [f32],
    act: fn(f32) -> f32,
    what: &str,
) {
    assert!(
        width > 0 && gate_up.len().is_multiple_of(2 * width),
        "{what} input is not whole rows"
    );
    assert_eq!(
        gate_up.len() / 2,
        out.len(),
        "{what} output has the wrong length"
    );
    gate_up
        .par_chunks(2 * width)
        .zip(out.par_chunks_mut(width))
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(row, dst)| {
            let (gate, up) = row.split_at(width);
            for ((d, &g), &u) in dst.iter_mut().zip(gate).zip(up) {
                *d = act(g) * u;
            }
        });
}
