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
