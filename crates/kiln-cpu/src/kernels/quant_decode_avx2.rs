//! AVX2 decoding of one quantised group record (see `quant_panels`): 16 lanes (rows) at a
//! time, the same multiply (and, for Q4_K and Q5_K, subtract) per value as the portable decoder, never
//! fused, so the values are the same bits.

use std::arch::x86_64::*;

use super::microkernel::NR;
use super::quant_panels::{layout, QuantFormat, GROUP};

/// Decodes `record` into `out` (`[GROUP][NR]` f32).
///
/// # Safety
/// The CPU must have AVX2 and F16C; `record` must be one whole record of `format` and `out`
/// hold at least `GROUP * NR` values.
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn decode_group(format: QuantFormat, record: &[u8], out: &mut [f32]) {
    let (scale_bytes, quant_bytes) = layout(format);
    assert!(record.len() >= scale_bytes + quant_bytes && out.len() >= GROUP * NR);
    let s = record.as_ptr();
    let q = s.add(scale_bytes);
    let o = out.as_mut_ptr();
    // Scales of lanes 0..8 and 8..16.
    let f16_scales = |at: usize| {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(s.add(at) as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(s.add(at + 16) as *const __m128i)),
        )
    };
    let f32_scales = |at: usize| {
        (
            _mm256_loadu_ps(s.add(at) as *const f32),
            _mm256_loadu_ps(s.add(at + 32) as *const f32),
        )
    };
    // 16 signed bytes as two vectors of f32.
    let i8_to_f32 = |v: __m128i| {
        (
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(v))),
        )
    };
    let store = |k: usize, (lo, hi): (__m256, __m256)| {
        _mm256_storeu_ps(o.add(k * NR), lo);
        _mm256_storeu_ps(o.add(k * NR + 8), hi);
    };
    let nibbles = _mm_set1_epi8(0x0F);
    match format {
        QuantFormat::Q8_0 | QuantFormat::Q6K => {
            let first = if format == QuantFormat::Q8_0 {
                f16_scales(0)
            } else {
                f32_scales(0)
            };
            let second = if format == QuantFormat::Q8_0 {
                first
            } else {
                f32_scales(4 * NR)
            };
            for k in 0..GROUP {
                let (d_lo, d_hi) = if k < 16 { first } else { second };
                let (lo, hi) = i8_to_f32(_mm_loadu_si128(q.add(k * NR) as *const __m128i));
                store(k, (_mm256_mul_ps(lo, d_lo), _mm256_mul_ps(hi, d_hi)));
            }
        }
        QuantFormat::Q4_0 => {
            let (d_lo, d_hi) = f16_scales(0);
            let eight = _mm_set1_epi8(8);
            for pair in 0..GROUP / 2 {
                let v = _mm_loadu_si128(q.add(pair * NR) as *const __m128i);
                let even = _mm_sub_epi8(_mm_and_si128(v, nibbles), eight);
                let odd = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16::<4>(v), nibbles), eight);
                for (k, x) in [(2 * pair, even), (2 * pair + 1, odd)] {
                    let (lo, hi) = i8_to_f32(x);
                    store(k, (_mm256_mul_ps(lo, d_lo), _mm256_mul_ps(hi, d_hi)));
                }
            }
        }
        QuantFormat::Q5K => {
            let (d_lo, d_hi) = f32_scales(0);
            let (m_lo, m_hi) = f32_scales(4 * NR);
            for k in 0..GROUP {
                let (lo, hi) = i8_to_f32(_mm_loadu_si128(q.add(k * NR) as *const __m128i));
                let lo = _mm256_sub_ps(_mm256_mul_ps(d_lo, lo), m_lo);
                let hi = _mm256_sub_ps(_mm256_mul_ps(d_hi, hi), m_hi);
                store(k, (lo, hi));
            }
        }
        QuantFormat::Q4K => {
            let (d_lo, d_hi) = f32_scales(0);
            let (m_lo, m_hi) = f32_scales(4 * NR);
            for pair in 0..GROUP / 2 {
                let v = _mm_loadu_si128(q.add(pair * NR) as *const __m128i);
                let even = _mm_and_si128(v, nibbles);
                let odd = _mm_and_si128(_mm_srli_epi16::<4>(v), nibbles);
                for (k, x) in [(2 * pair, even), (2 * pair + 1, odd)] {
                    let (lo, hi) = i8_to_f32(x);
                    let lo = _mm256_sub_ps(_mm256_mul_ps(d_lo, lo), m_lo);
                    let hi = _mm256_sub_ps(_mm256_mul_ps(d_hi, hi), m_hi);
                    store(k, (lo, hi));
                }
            }
        }
    }
}
