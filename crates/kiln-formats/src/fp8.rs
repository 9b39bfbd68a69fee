//! fp8 E4M3 with one f32 scale per row: the format `--quantize fp8` keeps a model's projection
//! weights in and rounds their input rows to, defined once here for every backend. A row's scale
//! is its largest magnitude over 448 (E4M3's largest finite value), so the row's extreme lands on
//! 448 and the rest keep E4M3's three mantissa bits relative to it. Rounding is to nearest even,
//! saturating at 448, the same as the GPU's `cvt.rn.satfinite.e4m3x2.f32`.

use float8::F8E4M3;

/// E4M3's largest finite magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// `x` rounded to E4M3 (to nearest even, saturating to +-448; NaN stays NaN), as its byte.
#[inline]
pub fn e4m3_from_f32(x: f32) -> u8 {
    F8E4M3::from_f32(x).to_bits()
}

/// The value of an E4M3 byte (exact in f32).
#[inline]
pub fn e4m3_to_f32(b: u8) -> f32 {
    F8E4M3::from_bits(b).to_f32()
}

/// The scale of a row whose largest magnitude is `amax`: `amax / 448`, or 1 for a row of zeros
/// (any scale gives zeros then; 1 keeps the division defined). A non-finite `amax` gives a
/// non-finite scale, and the row's products follow it as the unquantised ones would.
#[inline]
pub fn row_scale(amax: f32) -> f32 {
    if amax == 0.0 {
        1.0
    } else {
        amax / E4M3_MAX
    }
}

/// The largest magnitude of `row` (NaN if it holds one).
pub fn row_amax(row: &[f32]) -> f32 {
    row.iter().fold(0f32, |m, &x| {
        let a = x.abs();
        if a.is_nan() || m.is_nan() {
            f32::NAN
        } else {
            m.max(a)
        }
    })
}

/// Quantises `row` into `out` (one byte a value) and returns its scale: value i is then
/// `e4m3_to_f32(out[i]) * scale`. Each value is divided by the scale (one IEEE division) and
/// rounded once.
pub fn quantize_row(row: &[f32], out: &mut [u8]) -> f32 {
    assert_eq!(
        row.len(),
        out.len(),
        "an fp8 row and its bytes differ in length"
    );
    let s = row_scale(row_amax(row));
    for (q, &x) in out.iter_mut().zip(row) {
        *q = e4m3_from_f32(x / s);
    }
    s
}

/// `row` replaced by its E4M3 values (as f32, exact: each is also a bf16) and its scale
/// returned: [`quantize_row`] without the bytes. A product of two such rows is the sum of their
/// values' products times both scales.
pub fn quantize_values(row: &mut [f32]) -> f32 {
    let s = row_scale(row_amax(row));
    for x in row.iter_mut() {
        *x = e4m3_to_f32(e4m3_from_f32(*x / s));
    }
    s
}

/// [`quantize_values`] on each `cols`-wide row of `m`, the rows shared among the current rayon
/// pool's threads; the scales in row order.
pub fn quantize_values_par(m: &mut [f32], cols: usize) -> Vec<f32> {
    use rayon::prelude::*;
    assert!(
        cols > 0 && m.len().is_multiple_of(cols),
        "a matrix of {} values in rows of {cols}",
        m.len()
    );
    m.par_chunks_exact_mut(cols).map(quantize_values).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite E4M3 value, by brute force from the format's definition (bias 7, three
    /// mantissa bits, 0x7f and 0xff NaN).
    fn finite_values() -> Vec<(u8, f64)> {
        (0u8..=255)
            .filter(|b| b & 0x7f != 0x7f)
            .map(|b| {
                let (e, m) = (((b >> 3) & 0xf) as i32, (b & 7) as f64);
                let mag = if e == 0 {
                    m / 8.0 * 2f64.powi(-6)
                } else {
                    (1.0 + m / 8.0) * 2f64.powi(e - 7)
                };
                (b, if b & 0x80 != 0 { -mag } else { mag })
            })
            .collect()
    }

    /// The nearest finite value to x (ties to the even mantissa), saturating: the definition
    /// the conversion must meet.
    fn nearest(x: f64, table: &[(u8, f64)]) -> u8 {
        let x = x.clamp(-448.0, 448.0);
        let mut best: Option<(u8, f64)> = None;
        for &(b, v) in table {
            // -0 and +0 are the same value; the sign of x picks the byte.
            if b == 0x80 && !x.is_sign_negative() || b == 0 && x.is_sign_negative() {
                continue;
            }
            let d = (x - v).abs();
            best = match best {
                None => Some((b, d)),
                Some((bb, bd)) if d < bd || d == bd && b & 1 == 0 && bb & 1 == 1 => Some((b, d)),
                keep => keep,
            };
        }
        best.expect("a table of finite values").0
    }

    #[test]
    fn values_decode_as_the_format_defines() {
        for (b, v) in finite_values() {
            assert_eq!(e4m3_to_f32(b) as f64, v, "byte {b:#04x}");
        }
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn conversion_rounds_to_nearest_even_and_saturates() {
        let table = finite_values();
        let mut xs: Vec<f64> = Vec::new();
        let mut mags: Vec<f64> = table.iter().map(|&(_, v)| v.abs()).collect();
        mags.sort_by(f64::total_cmp);
        mags.dedup();
        // Each value, each midpoint between neighbours, and points just either side of them.
        for w in mags.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            for x in [w[0], mid, w[1]] {
                let f = x as f32;
                xs.extend(
                    [
                        f,
                        f32::from_bits(f.to_bits() + 1),
                        f32::from_bits(f.to_bits().max(1) - 1),
                    ]
                    .map(f64::from),
                );
            }
        }
        xs.extend([
            448.5,
            463.9,
            464.0,
            464.1,
            500.0,
            1e30,
            f32::MAX as f64,
            1e-30,
            0.0,
        ]);
        for x in xs {
            for x in [x, -x] {
                let want = nearest(x, &table);
                assert_eq!(e4m3_from_f32(x as f32), want, "x = {x:e}");
            }
        }
        assert_eq!(e4m3_from_f32(f32::INFINITY), 0x7e);
        assert!(e4m3_to_f32(e4m3_from_f32(f32::NAN)).is_nan());
    }

    #[test]
    fn a_rows_extreme_lands_on_448_and_the_rest_within_half_a_step() {
        let row: Vec<f32> = (0..300)
            .map(|i| ((i as f32) * 0.37).sin() * 3.1 - 0.2)
            .collect();
        let mut q = vec![0u8; row.len()];
        let s = quantize_row(&row, &mut q);
        let amax = row_amax(&row);
        assert_eq!(s, amax / 448.0);
        let mut values = row.clone();
        assert_eq!(quantize_values(&mut values).to_bits(), s.to_bits());
        for ((&x, &b), &r) in row.iter().zip(&q).zip(&values) {
            assert_eq!(
                e4m3_to_f32(b),
                r,
                "quantize_values gives quantize_row's values"
            );
            assert_eq!(
                half::bf16::from_f32(r).to_f32(),
                r,
                "an E4M3 value is a bf16"
            );
            let v = r * s;
            // Three mantissa bits: within 1/16 relative, or half the subnormal step.
            let tol = (x.abs() / 16.0).max(s * 2f32.powi(-10));
            assert!((v - x).abs() <= tol * 1.0001, "x {x} -> {v}");
        }
        let top = row.iter().position(|&x| x.abs() == amax).unwrap();
        assert_eq!(e4m3_to_f32(q[top]).abs(), 448.0);
        // A row of zeros keeps zeros and a defined scale.
        let mut z = [0u8; 4];
        assert_eq!(quantize_row(&[0.0; 4], &mut z), 1.0);
        assert_eq!(z, [0; 4]);
    }
}
