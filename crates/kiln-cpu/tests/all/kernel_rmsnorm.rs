//! RMSNorm (whole rows and per head) against a float64 reference.

use crate::support;

use kiln_cpu::kernels::{rmsnorm, rmsnorm_heads_in_place};
use support::Rng;

fn reference(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, g)| *v as f64 * inv * *g as f64)
        .collect()
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn rows_match_f64_reference() {
    let mut rng = Rng::new(1);
    for (rows, width, scale) in [(1, 1, 1.0), (5, 37, 3.0), (40, 256, 0.01), (3, 1000, 100.0)] {
        let x = rng.vec(rows * width, scale);
        let w: Vec<f32> = (0..width).map(|_| 1.0 + rng.uniform(0.5)).collect();
        let mut out = vec![f32::NAN; x.len()];
        rmsnorm(&x, &w, 1e-5, &mut out);
        for r in 0..rows {
            let want = reference(&x[r * width..][..width], &w, 1e-5);
            assert_close(
                &out[r * width..][..width],
                &want,
                &format!("{rows}x{width} row {r}"),
            );
        }
    }
}

#[test]
fn epsilon_keeps_a_zero_row_finite() {
    let mut out = vec![f32::NAN; 8];
    rmsnorm(&[0.0; 8], &[1.0; 8], 1e-6, &mut out);
    assert_eq!(out, vec![0.0; 8]);
}

#[test]
fn heads_are_normalised_separately() {
    let mut rng = Rng::new(2);
    let (heads, dim) = (6, 20);
    let x = rng.vec(heads * dim, 2.0);
    let w: Vec<f32> = (0..dim).map(|_| 1.0 + rng.uniform(0.5)).collect();
    let mut got = x.clone();
    rmsnorm_heads_in_place(&mut got, &w, 1e-6);
    for h in 0..heads {
        let want = reference(&x[h * dim..][..dim], &w, 1e-6);
        assert_close(&got[h * dim..][..dim], &want, &format!("head {h}"));
    }
}
