//! The arithmetic the sampler draws with, written so that a GPU kernel can reproduce it bit for
//! bit (kiln-cuda's `kernels/sample.cu` performs the same operations in the same order).
//!
//! - Weights are fixed-point integers: the most likely token weighs [`WEIGHT_ONE`], every other
//!   token `round(exp((logit - max) / temperature) * WEIGHT_ONE)`. Integer sums are exact in
//!   any order, so a parallel reduction on the device equals this sequential one.
//! - The exponential is computed here from single IEEE-754 operations (add, multiply, exact
//!   conversions) with constants given by their bits: no fused multiply-add and no libm, whose
//!   last bit differs between the host and the device.
//! - Tokens are ordered by [`order_key`] of their logit, most likely first, the lower id first
//!   among equal keys. Equal keys mean equal logits, hence equal weights.

/// The weight of the most likely token: 2^44, so that up to 2^20 tokens of full weight still
/// sum within a u64.
pub const WEIGHT_ONE: u64 = 1 << 44;
const WEIGHT_ONE_LOG2: i64 = 44;

/// Below this exponent a weight rounds to zero (exp(-32) * 2^44 < 0.5): skip the polynomial.
const CUTOFF: f64 = -32.0;

/// ln 2 split in a high part with trailing zero bits (k * LN2_HI is exact) and the rest.
const LN2_HI: u64 = 0x3fe6_2e42_fee0_0000;
const LN2_LO: u64 = 0x3dea_39ef_3579_3c76;
const INV_LN2: u64 = 0x3ff7_1547_652b_82fe;

/// 1/n! for n = 0..=12: the Taylor polynomial of exp on |r| <= ln2/2 (error below 2e-16).
const INV_FACTORIAL: [u64; 13] = [
    0x3ff0_0000_0000_0000,
    0x3ff0_0000_0000_0000,
    0x3fe0_0000_0000_0000,
    0x3fc5_5555_5555_5555,
    0x3fa5_5555_5555_5555,
    0x3f81_1111_1111_1111,
    0x3f56_c16c_16c1_6c17,
    0x3f2a_01a0_1a01_a01a,
    0x3efa_01a0_1a01_a01a,
    0x3ec7_1de3_a556_c734,
    0x3e92_7e4f_b778_9f5c,
    0x3e5a_e645_67f5_44e4,
    0x3e21_eed8_eff8_d898,
];

/// `round(exp(x) * WEIGHT_ONE)` for `x <= 0`; 0 below the cut-off and for NaN.
pub fn fixed_weight(x: f64) -> u64 {
    if x.is_nan() || x < CUTOFF {
        return 0;
    }
    let f = f64::from_bits;
    let k = (x * f(INV_LN2)).round_ties_even();
    let r = (x - k * f(LN2_HI)) - k * f(LN2_LO);
    let mut p = f(INV_FACTORIAL[12]);
    for c in INV_FACTORIAL[..12].iter().rev() {
        p = p * r + f(*c);
    }
    // 2^(44 + k), k in [-47, 0]: a normal number, so the product is exact scaling.
    let scale = f(((1023 + WEIGHT_ONE_LOG2 + k as i64) as u64) << 52);
    (p * scale + 0.5).floor() as u64
}

/// The weight of `logit` in a row whose largest finite logit is `max`, at `1 / temperature`.
/// Non-finite logits weigh nothing (+inf rows never get here: they take the argmax).
pub fn token_weight(logit: f32, max: f32, inv_temperature: f64) -> u64 {
    if !logit.is_finite() {
        return 0;
    }
    fixed_weight((logit as f64 - max as f64) * inv_temperature)
}

/// A key whose unsigned order is the order of the logits (NaN ranks with -inf): most likely
/// tokens have the largest keys.
pub fn order_key(logit: f32) -> u32 {
    let l = if logit.is_nan() {
        f32::NEG_INFINITY
    } else {
        logit
    };
    let bits = l.to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// Total weight the top-p cut must reach: `ceil(top_p * total)`, at least 1.
pub fn top_p_need(top_p: f32, total: u64) -> u64 {
    ((top_p as f64 * total as f64).ceil() as u64).max(1)
}

/// Smallest weight min-p keeps: `ceil(min_p * WEIGHT_ONE)` (the best token weighs WEIGHT_ONE).
pub fn min_p_floor(min_p: f32) -> u64 {
    (min_p as f64 * WEIGHT_ONE as f64).ceil() as u64
}

/// The draw's target in `0..kept`: the chosen token is the first kept one, in id order, whose
/// running weight exceeds it.
pub fn draw_target(u: f64, kept: u64) -> u64 {
    ((u * kept as f64) as u64).min(kept.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_token_weighs_exactly_one() {
        assert_eq!(fixed_weight(0.0), WEIGHT_ONE);
        assert_eq!(fixed_weight(-0.0), WEIGHT_ONE);
        assert_eq!(token_weight(3.5, 3.5, 1.0 / 0.7), WEIGHT_ONE);
    }

    #[test]
    fn weights_follow_exp_to_the_last_fixed_point_unit() {
        let mut x = -31.9f64;
        while x <= 0.0 {
            let want = (x.exp() * WEIGHT_ONE as f64).round();
            let got = fixed_weight(x) as f64;
            assert!((got - want).abs() <= 1.0, "x {x}: {got} vs {want}");
            x += 0.0137;
        }
        assert_eq!(fixed_weight(-32.5), 0);
        assert_eq!(fixed_weight(f64::NEG_INFINITY), 0);
        assert_eq!(fixed_weight(f64::NAN), 0);
    }

    #[test]
    fn weights_never_decrease_as_the_logit_grows() {
        let mut prev = 0;
        for i in 0..200_000 {
            let w = fixed_weight(-32.0 + i as f64 * 1.6e-4);
            assert!(w >= prev, "step {i}");
            prev = w;
        }
    }

    #[test]
    fn keys_order_like_the_logits() {
        let ls = [
            f32::NEG_INFINITY,
            -1e30,
            -2.5,
            -1e-40,
            -0.0,
            0.0,
            1e-40,
            0.5,
            3.0,
            f32::MAX,
            f32::INFINITY,
        ];
        for w in ls.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} {}", w[0], w[1]);
        }
        assert_eq!(order_key(f32::NAN), order_key(f32::NEG_INFINITY));
    }

    #[test]
    fn cuts_and_targets_stay_in_range() {
        assert_eq!(top_p_need(1.0, 1000), 1000);
        assert_eq!(top_p_need(0.5, 1001), 501);
        assert_eq!(top_p_need(1e-9, 10), 1);
        assert_eq!(min_p_floor(0.0), 0);
        assert_eq!(min_p_floor(1.0), WEIGHT_ONE);
        assert_eq!(draw_target(0.0, 10), 0);
        assert_eq!(draw_target(0.999_999_999_999_999_9, 10), 9);
        assert_eq!(draw_target(0.5, u64::MAX), u64::MAX / 2 + 1);
    }
}
