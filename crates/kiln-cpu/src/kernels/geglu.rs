//! GeGLU activation: `gelu_tanh(gate) * up`, with gate and up side by side in each input row
//! (Gemma's `gelu_pytorch_tanh`).

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
    super::swiglu::gated_rows(gate_up, width, out, gelu_tanh, "geglu");
}
