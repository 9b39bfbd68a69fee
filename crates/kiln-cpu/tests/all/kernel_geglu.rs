//! GeGLU (`gelu_pytorch_tanh(gate) * up`) and the unweighted per-head RMSNorm of Gemma 4's V,
//! against float64 references, over the range where the tanh bends and saturates.

use crate::support;

use kiln_cpu::kernels::{geglu, gelu_tanh, rmsnorm_heads_unweighted_in_place};
use support::Rng;

/// transformers' gelu_pytorch_tanh in float64.
fn gelu_tanh_f64(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn geglu_matches_f64_reference() {
    let mut rng = Rng::new(5);
    for (rows, width, scale) in [(1, 1, 1.0), (3, 37, 4.0), (17, 100, 12.0), (2, 513, 60.0)] {
        let gate_up = rng.vec(rows * 2 * width, scale);
        let mut out = vec![f32::NAN; rows * width];
        geglu(&gate_up, width, &mut out);
        for r in 0..rows {
            let (gate, up) = gate_up[r * 2 * width..][..2 * width].split_at(width);
            for j in 0..width {
                let (g, u) = (gate[j] as f64, up[j] as f64);
                let want = gelu_tanh_f64(g) * u;
                let got = out[r * width + j] as f64;
                // Left of zero 1 + tanh cancels (as in PyTorch's float32): its rounding is
                // relative to |g u|, not to the small result.
                let tolerance = 2e-7 * (g * u).abs() + 1e-6 * (1.0 + want.abs());
                assert!(
                    (got - want).abs() <= tolerance,
                    "[{r},{j}] g={g} u={u}: {got} vs {want}"
                );
            }
        }
    }
    // Far out it is the identity on the right and zero on the left, without NaN.
    assert_eq!(gelu_tanh(1e4), 1e4);
    assert_eq!(gelu_tanh(-1e4), 0.0);
}

#[test]
fn unweighted_head_norm_matches_f64_reference() {
    let mut rng = Rng::new(6);
    for (heads, head_dim, eps) in [(1, 2, 1e-6f32), (3, 20, 1e-5), (2, 512, 1e-6)] {
        let x = rng.vec(heads * head_dim, 3.0);
        let mut got = x.clone();
        rmsnorm_heads_unweighted_in_place(&mut got, head_dim, eps);
        for (h, (xs, gs)) in x.chunks(head_dim).zip(got.chunks(head_dim)).enumerate() {
            let ms = xs.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / head_dim as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for (j, (xv, gv)) in xs.iter().zip(gs).enumerate() {
                let want = *xv as f64 * inv;
                assert!(
                    (*gv as f64 - want).abs() <= 2e-6 * (1.0 + want.abs()),
                    "head {h}[{j}]: {gv} vs {want}"
                );
            }
        }
    }
}
