//! RoPE, both pairings, against a float64 reference.

use crate::support;

use kiln_cpu::kernels::{apply_rope, RopeTable};
use kiln_model::RopeStyle;
use support::Rng;

fn reference(
    x: &[f32],
    head_dim: usize,
    inv_freq: &[f32],
    factor: f32,
    pos: usize,
    style: RopeStyle,
) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let half = head_dim / 2;
    for head in out.chunks_exact_mut(head_dim) {
        for (i, &f) in inv_freq.iter().enumerate() {
            let angle = (pos as f32 * f) as f64;
            let (c, s) = (angle.cos() * factor as f64, angle.sin() * factor as f64);
            let (a, b) = match style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Normal => (2 * i, 2 * i + 1),
            };
            let (xa, xb) = (head[a], head[b]);
            head[a] = xa * c - xb * s;
            head[b] = xb * c + xa * s;
        }
    }
    out
}

#[test]
fn rope_matches_f64_reference_in_both_styles() {
    let mut rng = Rng::new(5);
    for (heads, head_dim, factor) in [(1, 2, 1.0), (3, 12, 1.0), (8, 64, 1.2), (2, 128, 0.9)] {
        let inv_freq: Vec<f32> = (0..head_dim / 2)
            .map(|i| 10_000f32.powf(-2.0 * i as f32 / head_dim as f32))
            .collect();
        let positions = [0, 1, 7, 300, 4095, 100_000];
        let table = RopeTable::new(&inv_freq, factor, &positions);
        for style in [RopeStyle::Neox, RopeStyle::Normal] {
            for (t, &pos) in positions.iter().enumerate() {
                let x = rng.vec(heads * head_dim, 2.0);
                let mut got = x.clone();
                let (cos, sin) = table.row(t);
                apply_rope(&mut got, head_dim, cos, sin, style);
                let want = reference(&x, head_dim, &inv_freq, factor, pos, style);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() <= 1e-6 * 4.0,
                        "{style:?} hd {head_dim} pos {pos} [{i}]: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn position_zero_is_the_identity_scaled_by_the_factor() {
    let table = RopeTable::new(&[1.0, 0.5, 0.25], 1.0, &[0]);
    let x = vec![1.0, -2.0, 3.0, 0.5, 7.0, -1.0];
    let mut got = x.clone();
    let (cos, sin) = table.row(0);
    apply_rope(&mut got, 6, cos, sin, RopeStyle::Neox);
    assert_eq!(got, x);
}
