//! The storage behind packed weight panels: f32, or 16 bits a value when every value of the
//! matrix is exactly a bf16 or an f16 (weights that came from bf16 or f16 files).
//!
//! A 16-bit store holds exactly the same numbers as the f32 one, so a matmul gives the same
//! bits either way; it only halves the memory a decode step streams. Blocks are widened to
//! f32 in an L1-sized scratch just before the tiles use them. `KILN_CPU_WEIGHTS=f32` keeps
//! every weight in f32 (for A/B runs).

use std::sync::OnceLock;

use rayon::prelude::*;

use super::simd::Isa;

/// How a packed matrix stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    F32,
    Bf16,
    F16,
}

impl WeightFormat {
    /// Whether `v` survives a round trip through this format bit for bit.
    pub fn holds_exactly(self, v: f32) -> bool {
        match self {
            WeightFormat::F32 => true,
            WeightFormat::Bf16 => v.to_bits() & 0xFFFF == 0,
            WeightFormat::F16 => half::f16::from_f32(v).to_f32().to_bits() == v.to_bits(),
        }
    }

    /// The most compact format that holds every value exactly (f32 when the switch is off).
    pub fn most_compact_exact(values: &[f32]) -> WeightFormat {
        if !compact_allowed() {
            return WeightFormat::F32;
        }
        for format in [WeightFormat::Bf16, WeightFormat::F16] {
            if values.par_iter().all(|&v| format.holds_exactly(v)) {
                return format;
            }
        }
        WeightFormat::F32
    }
}

fn compact_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| {
        std::env::var("KILN_CPU_WEIGHTS")
            .map(|v| v != "f32")
            .unwrap_or(true)
    })
}

#[derive(Debug, Clone)]
pub(crate) enum PanelStore {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
    F16(Vec<u16>),
}

fn to_bf16(v: f32) -> u16 {
    (v.to_bits() >> 16) as u16
}

fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn to_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

fn from_f16(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

impl PanelStore {
    /// Builds a store of `len` values in `format`, `fill` writing them as f32 chunk by chunk
    /// (`chunk` values at a time, in parallel). Values must be exact in `format`.
    pub fn build(
        format: WeightFormat,
        len: usize,
        chunk: usize,
        fill: impl Fn(usize, &mut [f32]) + Sync,
    ) -> PanelStore {
        fn narrow<T: Copy + Default + Send>(
            len: usize,
            chunk: usize,
            fill: &(impl Fn(usize, &mut [f32]) + Sync),
            conv: fn(f32) -> T,
        ) -> Vec<T> {
            let mut out = vec![T::default(); len];
            out.par_chunks_mut(chunk).enumerate().for_each_init(
                Vec::new,
                |wide: &mut Vec<f32>, (i, dst)| {
                    wide.clear();
                    wide.resize(dst.len(), 0.0);
                    fill(i, wide);
                    for (d, &v) in dst.iter_mut().zip(wide.iter()) {
                        *d = conv(v);
                    }
                },
            );
            out
        }
        match format {
            WeightFormat::F32 => {
                let mut out = vec![0.0f32; len];
                out.par_chunks_mut(chunk)
                    .enumerate()
                    .for_each(|(i, dst)| fill(i, dst));
                PanelStore::F32(out)
            }
            WeightFormat::Bf16 => PanelStore::Bf16(narrow(len, chunk, &fill, to_bf16)),
            WeightFormat::F16 => PanelStore::F16(narrow(len, chunk, &fill, to_f16)),
        }
    }

    pub fn format(&self) -> WeightFormat {
        match self {
            PanelStore::F32(_) => WeightFormat::F32,
            PanelStore::Bf16(_) => WeightFormat::Bf16,
            PanelStore::F16(_) => WeightFormat::F16,
        }
    }

    pub fn get(&self, i: usize) -> f32 {
        match self {
            PanelStore::F32(d) => d[i],
            PanelStore::Bf16(d) => from_bf16(d[i]),
            PanelStore::F16(d) => from_f16(d[i]),
        }
    }

    /// The `len` values at `offset` as f32: in place for an f32 store, otherwise widened into
    /// `scratch`.
    pub fn block<'a>(
        &'a self,
        isa: Isa,
        offset: usize,
        len: usize,
        scratch: &'a mut [f32],
    ) -> &'a [f32] {
        let scratch = &mut scratch[..len];
        match self {
            PanelStore::F32(d) => return &d[offset..offset + len],
            PanelStore::Bf16(d) => widen_bf16(isa, &d[offset..offset + len], scratch),
            PanelStore::F16(d) => widen_f16(isa, &d[offset..offset + len], scratch),
        }
        scratch
    }
}

fn widen_bf16(isa: Isa, src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma {
        // SAFETY: the CPU has AVX2 (the ISA was detected); lengths are equal.
        return unsafe { x86::widen_bf16(src, dst) };
    }
    let _ = isa;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = from_bf16(s);
    }
}

fn widen_f16(isa: Isa, src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma {
        // SAFETY: the CPU has AVX2 and F16C (detected with the ISA); lengths are equal.
        return unsafe { x86::widen_f16(src, dst) };
    }
    let _ = isa;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = from_f16(s);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn widen_bf16(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let body = n / 8 * 8;
        for i in (0..body).step_by(8) {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            let w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_castsi256_ps(w));
        }
        for i in body..n {
            dst[i] = f32::from_bits((src[i] as u32) << 16);
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen_f16(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let body = n / 8 * 8;
        for i in (0..body).step_by(8) {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        for i in body..n {
            dst[i] = half::f16::from_bits(src[i]).to_f32();
        }
    }
}
