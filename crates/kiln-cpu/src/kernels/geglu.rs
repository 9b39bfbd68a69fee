//! GeGLU activation: `gelu_tanh(gate) * up`, with gate and up side by side in each input row
//! (Gemma's `gelu_pytorch_tanh`), and the same product for gate and multiplier rows apart.

use rayon::prelude::*;

const MIN_ROWS_PER_TASK: usize = 16;

/// sqrt(2 / pi), rounded to f32.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU with the tanh approximation, as PyTorch's `gelu(x, approximate="tanh")` writes it:
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    let inner = SQRT_2_OVER_PI * (x + 0.044_715 * (x * x * x));
    0.5 * x * (1.0 + inner.tanh())
}

/// For each row of `gate_up` (`[gate | up]`, `2 * width` elements), writes
/// `gelu_tanh(gate) * up` into the matching `width`-element row of `out`.
pub fn geglu(gate_up: &[f32], width: usize, out: &mut [f32]) {
    assert!(
        width > 0 && gate_up.len().is_multiple_of(2 * width),
        "geglu input is not whole rows"
    );
    assert_eq!(
        gate_up.len() / 2,
        out.len(),
        "geglu output has the wrong length"
    );
    gate_up
        .par_chunks(2 * width)
        .zip(out.par_chunks_mut(width))
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(row, dst)| {
            let (gate, up) = row.split_at(width);
            for ((d, &g), &u) in dst.iter_mut().zip(gate).zip(up) {
                *d = gelu_tanh(g) * u;
            }
        });
}
