//! SwiGLU against a float64 reference, over the whole range where silu bends and saturates.

use crate::support;

use kiln_cpu::kernels::swiglu;
use support::Rng;

#[test]
fn swiglu_matches_f64_reference() {
    let mut rng = Rng::new(3);
    for (rows, width, scale) in [(1, 1, 1.0), (3, 37, 4.0), (17, 100, 30.0), (2, 513, 100.0)] {
        let gate_up = rng.vec(rows * 2 * width, scale);
        let mut out = vec![f32::NAN; rows * width];
        swiglu(&gate_up, width, &mut out);
        for r in 0..rows {
            let (gate, up) = gate_up[r * 2 * width..][..2 * width].split_at(width);
            for j in 0..width {
                let (g, u) = (gate[j] as f64, up[j] as f64);
                let want = g / (1.0 + (-g).exp()) * u;
                let got = out[r * width + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "[{r},{j}] g={g} u={u}: {got} vs {want}"
                );
            }
        }
    }
}
