//! RoPE frequencies: the single place where scaling settings become numbers, so that every
//! backend rotates by exactly the same angles.
//!
//! The formulas follow Hugging Face's `modeling_rope_utils` (default, linear, llama3, yarn) and
//! llama.cpp's `rope_freqs` factors. They are evaluated in f64 and rounded once to f32.

use crate::{ModelConfig, RopeScaling};

impl ModelConfig {
    /// Inverse frequencies of the model's RoPE, one per rotated pair (`head_dim / 2` of them):
    /// the angle of pair `i` at position `p` is `p * inv_freq[i]`.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        inv_freq(self.head_dim, self.rope_theta, &self.rope_scaling)
    }

    /// Llama 3.1 scaling as one divisor per frequency, rounded to f32 exactly as llama.cpp's
    /// converter stores them in `rope_freqs.weight`, so a config.json and the GGUF made from it
    /// rotate by the same f32 angles. (Mathematically the same as Hugging Face's formula:
    /// frequencies with short wavelengths are kept, long ones divided by `factor`, and the band
    /// between is interpolated.) None unless the scaling is [`RopeScaling::Llama3`].
    pub fn llama3_factors(&self) -> Option<Vec<f32>> {
        llama3_factors(self.head_dim, self.rope_theta, &self.rope_scaling)
    }

    /// The factor applied to cos and sin (so attention scores scale by its square): YaRN's
    /// mscale, 1.0 for every other scaling.
    pub fn rope_attention_factor(&self) -> f32 {
        attention_factor(&self.rope_scaling)
    }
}

/// Inverse frequencies of a RoPE with base `theta` and `scaling` over heads `head_dim` wide.
pub fn inv_freq(head_dim: usize, theta: f32, scaling: &RopeScaling) -> Vec<f32> {
    let dim = head_dim;
    let base = theta as f64;
    // theta^(2i/d): the wavelength growth of pair i before any scaling.
    let pos_freq: Vec<f64> = (0..dim / 2)
        .map(|i| base.powf((2 * i) as f64 / dim as f64))
        .collect();
    let inv: Vec<f64> = match scaling {
        RopeScaling::None => pos_freq.iter().map(|p| 1.0 / p).collect(),
        RopeScaling::Linear { factor } => {
            pos_freq.iter().map(|p| 1.0 / p / *factor as f64).collect()
        }
        RopeScaling::FreqFactors(factors) => pos_freq
            .iter()
            .zip(factors.iter().chain(std::iter::repeat(&1.0)))
            .map(|(p, f)| 1.0 / p / *f as f64)
            .collect(),
        // Pairs past the rotated ones keep frequency 0: cos 1, sin 0, the identity.
        RopeScaling::Proportional {
            rotated_pairs,
            factor,
        } => pos_freq
            .iter()
            .enumerate()
            .map(|(i, p)| match i < *rotated_pairs {
                true => 1.0 / p / *factor as f64,
                false => 0.0,
            })
            .collect(),
        RopeScaling::Llama3 { .. } => {
            let factors = llama3_factors(head_dim, theta, scaling).unwrap_or_default();
            pos_freq
                .iter()
                .zip(&factors)
                .map(|(p, f)| 1.0 / p / *f as f64)
                .collect()
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            truncate,
            ..
        } => {
            let factor = *factor as f64;
            let (low, high) = yarn_correction_range(
                *beta_fast as f64,
                *beta_slow as f64,
                dim,
                base,
                *original_max_position as f64,
                *truncate,
            );
            let high = if low == high { high + 0.001 } else { high };
            pos_freq
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let extrapolation = 1.0 - ramp;
                    (1.0 / (factor * p)) * (1.0 - extrapolation) + (1.0 / p) * extrapolation
                })
                .collect()
        }
    };
    inv.into_iter().map(|x| x as f32).collect()
}

/// Llama 3.1 scaling of a RoPE as one divisor per frequency (see
/// [`ModelConfig::llama3_factors`]).
pub fn llama3_factors(head_dim: usize, theta: f32, scaling: &RopeScaling) -> Option<Vec<f32>> {
    let RopeScaling::Llama3 {
        factor,
        low_freq_factor,
        high_freq_factor,
        original_max_position,
    } = scaling
    else {
        return None;
    };
    let (factor, low, high) = (
        *factor as f64,
        *low_freq_factor as f64,
        *high_freq_factor as f64,
    );
    let old_ctx = *original_max_position as f64;
    let dim = head_dim;
    let base = theta as f64;
    let factors = (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf((2 * i) as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < old_ctx / high {
                1.0
            } else if wavelen > old_ctx / low {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect();
    Some(factors)
}

/// The factor a scaling applies to cos and sin: YaRN's mscale, 1.0 for every other.
pub fn attention_factor(scaling: &RopeScaling) -> f32 {
    match scaling {
        RopeScaling::Yarn { attn_factor, .. } => *attn_factor,
        _ => 1.0,
    }
}

/// YaRN's default attention factor for a scaling factor (`0.1 ln(s) + 1`, 1 for s <= 1),
/// optionally the ratio of two such terms (DeepSeek's `mscale` / `mscale_all_dim`).
pub fn yarn_mscale(factor: f32, mscale: f32) -> f32 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

/// The pair indices between which YaRN blends interpolated and extrapolated frequencies.
fn yarn_correction_range(
    beta_fast: f64,
    beta_slow: f64,
    dim: usize,
    base: f64,
    original_max_position: f64,
    truncate: bool,
) -> (f64, f64) {
    let correction_dim = |rotations: f64| {
        dim as f64 * (original_max_position / (rotations * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
    if truncate {
        low = low.floor();
        high = high.ceil();
    }
    (low.max(0.0), high.min(dim as f64 - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;

    fn with_scaling(s: RopeScaling) -> ModelConfig {
        let mut c = presets::preset("tiny").unwrap();
        c.head_dim = 128;
        c.rope_theta = 500_000.0;
        c.rope_scaling = s;
        c
    }

    #[test]
    fn default_frequencies_are_theta_powers() {
        let c = with_scaling(RopeScaling::None);
        let f = c.rope_inv_freq();
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        let expect = 1.0 / 500_000f64.powf(2.0 * 10.0 / 128.0);
        assert!((f[10] as f64 - expect).abs() < 1e-7 * expect);
        assert_eq!(c.rope_attention_factor(), 1.0);
    }

    #[test]
    fn linear_divides_every_frequency() {
        let plain = with_scaling(RopeScaling::None).rope_inv_freq();
        let lin = with_scaling(RopeScaling::Linear { factor: 4.0 }).rope_inv_freq();
        for (a, b) in plain.iter().zip(&lin) {
            assert!((a / 4.0 - b).abs() <= 1e-7 * a);
        }
    }

    #[test]
    fn llama3_keeps_high_and_divides_low_frequencies() {
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192,
        };
        let plain = with_scaling(RopeScaling::None).rope_inv_freq();
        let l3 = with_scaling(s).rope_inv_freq();
        // Short wavelengths (< 2048) are untouched, long ones (> 8192) divided by 8.
        assert_eq!(plain[0], l3[0]);
        assert!((plain[63] / 8.0 - l3[63]).abs() <= 1e-7 * plain[63]);
        // In between, the factor lies strictly between 1 and 8 and grows monotonically.
        let ratios: Vec<f32> = plain.iter().zip(&l3).map(|(a, b)| a / b).collect();
        assert!(ratios.windows(2).all(|w| w[1] >= w[0] - 1e-6));
        assert!(ratios.iter().any(|r| *r > 1.01 && *r < 7.99));
    }

    #[test]
    fn llama3_matches_the_factors_llama_cpp_writes() {
        // The same scaling expressed as GGUF rope_freqs factors gives the same f32 frequencies.
        let s = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192,
        };
        let l3 = with_scaling(s);
        let factors = l3.llama3_factors().unwrap();
        assert_eq!(factors.len(), 64);
        assert_eq!((factors[0], factors[63]), (1.0, 32.0));
        let ff = with_scaling(RopeScaling::FreqFactors(factors));
        assert_eq!(l3.rope_inv_freq(), ff.rope_inv_freq());
        assert_eq!(with_scaling(RopeScaling::None).llama3_factors(), None);
    }

    #[test]
    fn proportional_turns_the_first_pairs_at_whole_head_frequencies() {
        let s = RopeScaling::Proportional {
            rotated_pairs: 16,
            factor: 1.0,
        };
        let f = inv_freq(128, 1_000_000.0, &s);
        let plain = inv_freq(128, 1_000_000.0, &RopeScaling::None);
        assert_eq!(f.len(), 64);
        assert_eq!(f[..16], plain[..16]);
        assert!(f[16..].iter().all(|x| *x == 0.0));
    }

    #[test]
    fn yarn_blends_between_extrapolation_and_interpolation() {
        let s = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 32768,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attn_factor: yarn_mscale(4.0, 1.0),
            truncate: true,
        };
        let c = with_scaling(s);
        let plain = with_scaling(RopeScaling::None).rope_inv_freq();
        let y = c.rope_inv_freq();
        assert_eq!(plain[0], y[0]);
        assert!((plain[63] / 4.0 - y[63]).abs() <= 1e-7 * plain[63]);
        assert!((c.rope_attention_factor() - (0.1 * 4f32.ln() + 1.0)).abs() < 1e-7);
        assert_eq!(yarn_mscale(1.0, 1.0), 1.0);
    }
}
