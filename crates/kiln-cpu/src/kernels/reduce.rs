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

/// `sum(a[i] * b[i])`. Panics if the lengths differ (a caller bug, never bad input).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    let mut acc = [0.0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() / LANES * LANES);
    let (b_body, b_tail) = b.split_at(a_body.len());
    for (ca, cb) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for j in 0..LANES {
            acc[j] += ca[j] * cb[j];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in a_tail.iter().zip(b_tail) {
        tail += x * y;
    }
    combine(acc, tail)
}

/// `sum(x[i]^2)`.
#[inline]
pub fn sum_squares(x: &[f32]) -> f32 {
    dot(x, x)
}
