//! Fixed-order reductions shared by the kernels.
//!
//! Eight running sums take every eighth element, the leftover elements are summed one by one,
//! and the eight sums are combined in one fixed tree. The order depends only on the length, so
//! a row gives the same bits wherever and with whatever else it is computed.

const LANES: usize = 8;

#[inline]
fn combine(acc: [f32; LANES], tail: f32) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// How a kernel forms `a * b + c`: rounded after the multiply and after the add, or fused
/// into one rounding (FMA hardware). A kernel generic over this, inlined into a function
/// compiled for AVX2 and FMA, vectorises to fused multiply-adds.
pub trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// `a * b + c` with two roundings (any CPU).
pub struct Separate;

/// `a * b + c` with one rounding; only fast where the CPU has FMA.
pub struct Fused;

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// `sum(a[i] * b[i])`. Panics if the lengths differ (a caller bug, never bad input).
#[inline(always)]
pub fn dot_with<M: MulAdd>(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    let mut acc = [0.0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() / LANES * LANES);
    let (b_body, b_tail) = b.split_at(a_body.len());
    for (ca, cb) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for j in 0..LANES {
            acc[j] = M::mul_add(ca[j], cb[j], acc[j]);
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in a_tail.iter().zip(b_tail) {
        tail = M::mul_add(*x, *y, tail);
    }
    combine(acc, tail)
}

/// [`dot_with`] rounding twice, for kernels where it is not worth a second code path.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_with::<Separate>(a, b)
}

/// `sum(x[i]^2)`.
#[inline]
pub fn sum_squares(x: &[f32]) -> f32 {
    dot(x, x)
}

/// `exp(x)` for the softmax (x <= 0 there), within 3 ulp: a reduction by ln 2 and a degree-6
/// polynomial, branch-free so that a loop over it vectorises; every lane does the same IEEE
/// operations as the scalar code, so a score's bits do not depend on where it falls in the
/// loop. Underflows to about 1e-38 below -87 (a softmax weight of nothing); NaN stays NaN.
#[inline(always)]
pub fn exp_softmax<M: MulAdd>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts: k * LN2_HI is exact for the k that occur here.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = if x < -87.0 { -87.0 } else { x };
    let k = (x * LOG2E).round_ties_even();
    let r = M::mul_add(k, -LN2_LO, M::mul_add(k, -LN2_HI, x));
    // Taylor coefficients of exp on |r| <= ln2 / 2.
    let mut p = 1.0 / 720.0;
    p = M::mul_add(p, r, 1.0 / 120.0);
    p = M::mul_add(p, r, 1.0 / 24.0);
    p = M::mul_add(p, r, 1.0 / 6.0);
    p = M::mul_add(p, r, 0.5);
    p = M::mul_add(p, r, 1.0);
    p = M::mul_add(p, r, 1.0);
    // 2^k for k in [-126, 127]; NaN gives k = 0 and keeps p NaN.
    let scale = f32::from_bits(((k as i32 + 127) as u32) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_softmax_is_within_three_ulp_of_exp() {
        let mut x = -87.0f32;
        while x <= 0.0 {
            for got in [exp_softmax::<Separate>(x), exp_softmax::<Fused>(x)] {
                let want = (x as f64).exp();
                let ulp = (want as f32).abs() * f32::EPSILON;
                assert!(
                    (got as f64 - want).abs() <= 3.0 * ulp as f64,
                    "exp({x}) = {got}, want {want}"
                );
            }
            x += 0.0071;
        }
        assert_eq!(exp_softmax::<Fused>(0.0), 1.0);
        assert!(exp_softmax::<Fused>(f32::NAN).is_nan());
        assert!(exp_softmax::<Fused>(f32::NEG_INFINITY) < 1e-37);
    }
}
