//! The storage behind packed weight panels: f32, 16 bits a value when every value of the
//! matrix is exactly a bf16 or an f16 (weights that came from bf16 or f16 files), or the
//! file's own block quantisation (see `quant_panels`).
//!
//! A compact store holds exactly the same numbers as the f32 one, so a matmul gives the same
//! bits either way; it only cuts the memory a decode step streams. `KILN_CPU_WEIGHTS=f32`
//! keeps every weight in f32 (for A/B runs).

use rayon::prelude::*;

use super::microkernel::NR;
use super::quant_panels::{QuantFormat, QuantPanels};
use super::simd::Isa;

/// How a packed matrix stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    F32,
    Bf16,
    F16,
    /// Kept in the file's block quantisation; only built from the blocks themselves.
    Quant(QuantFormat),
}

impl WeightFormat {
    /// Whether `v` survives a round trip through this format bit for bit (never for a
    /// quantised format: those are built from their blocks, not from values).
    pub fn holds_exactly(self, v: f32) -> bool {
        match self {
            WeightFormat::F32 => true,
            WeightFormat::Bf16 => v.to_bits() & 0xFFFF == 0,
            WeightFormat::F16 => F16::narrow(v).widen().to_bits() == v.to_bits(),
            WeightFormat::Quant(_) => false,
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

/// Whether weights may be stored in anything but f32 (`KILN_CPU_WEIGHTS=f32` says no).
pub(crate) fn compact_allowed() -> bool {
    crate::switches::Switches::get().compact_weights
}

/// A stored weight value; widening to f32 is exact.
pub(crate) trait PanelElem: Copy + Default + Send + Sync + 'static {
    const IS_F32: bool;
    /// Only called with values the format holds exactly.
    fn narrow(v: f32) -> Self;
    fn widen(self) -> f32;
    /// The 16 values at `p`, widened, as two 8-lane vectors.
    ///
    /// # Safety
    /// `p` must be valid for 16 reads; the CPU must have AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256);
}

/// The high half of an f32.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Bf16(u16);

/// IEEE half precision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct F16(u16);

impl PanelElem for f32 {
    const IS_F32: bool = true;
    fn narrow(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load16(p: *const f32) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
    }
}

impl PanelElem for Bf16 {
    const IS_F32: bool = false;
    fn narrow(v: f32) -> Self {
        Bf16((v.to_bits() >> 16) as u16)
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load16(p: *const Bf16) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        let lo = _mm_loadu_si128(p as *const __m128i);
        let hi = _mm_loadu_si128(p.add(8) as *const __m128i);
        let widen = |h| _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        (widen(lo), widen(hi))
    }
}

impl PanelElem for F16 {
    const IS_F32: bool = false;
    fn narrow(v: f32) -> Self {
        F16(half::f16::from_f32(v).to_bits())
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load16(p: *const F16) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        let lo = _mm_loadu_si128(p as *const __m128i);
        let hi = _mm_loadu_si128(p.add(8) as *const __m128i);
        (_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi))
    }
}

#[derive(Debug, Clone)]
pub(crate) enum PanelStore {
    F32(Vec<f32>),
    Bf16(Vec<Bf16>),
    F16(Vec<F16>),
    Quant(QuantPanels),
}

/// Fills `len` 16-bit values, `chunk` at a time in parallel, narrowing what `fill` writes.
fn build<T: PanelElem>(
    len: usize,
    chunk: usize,
    fill: &(impl Fn(usize, &mut [f32]) + Sync),
) -> Vec<T> {
    let mut out = vec![T::default(); len];
    out.par_chunks_mut(chunk).enumerate().for_each_init(
        Vec::new,
        |wide: &mut Vec<f32>, (i, dst)| {
            wide.clear();
            wide.resize(dst.len(), 0.0);
            fill(i, wide);
            for (d, &v) in dst.iter_mut().zip(wide.iter()) {
                *d = T::narrow(v);
            }
        },
    );
    out
}

impl PanelStore {
    /// A store of `len` values in `format`, `fill(i, chunk)` writing chunk `i` (of `chunk`
    /// values) as f32. The values must be exact in `format`.
    pub fn build(
        format: WeightFormat,
        len: usize,
        chunk: usize,
        fill: impl Fn(usize, &mut [f32]) + Sync,
    ) -> PanelStore {
        match format {
            WeightFormat::F32 => {
                let mut out = vec![0.0f32; len];
                out.par_chunks_mut(chunk)
                    .enumerate()
                    .for_each(|(i, dst)| fill(i, dst));
                PanelStore::F32(out)
            }
            WeightFormat::Bf16 => PanelStore::Bf16(build(len, chunk, &fill)),
            WeightFormat::F16 => PanelStore::F16(build(len, chunk, &fill)),
            WeightFormat::Quant(_) => unreachable!("quantised panels are built from blocks"),
        }
    }

    pub fn format(&self) -> WeightFormat {
        match self {
            PanelStore::F32(_) => WeightFormat::F32,
            PanelStore::Bf16(_) => WeightFormat::Bf16,
            PanelStore::F16(_) => WeightFormat::F16,
            PanelStore::Quant(q) => WeightFormat::Quant(q.format()),
        }
    }

    /// Row `r`'s value at column `k` of a `cols`-column matrix.
    pub fn get(&self, r: usize, k: usize, cols: usize) -> f32 {
        let i = (r / NR) * NR * cols + k * NR + r % NR;
        match self {
            PanelStore::F32(d) => d[i],
            PanelStore::Bf16(d) => d[i].widen(),
            PanelStore::F16(d) => d[i].widen(),
            PanelStore::Quant(q) => q.get(r, k),
        }
    }
}

/// Widens `src` (a multiple of 16 values) into `dst`.
pub(crate) fn widen_block<B: PanelElem>(isa: Isa, src: &[B], dst: &mut [f32]) {
    assert!(
        src.len() == dst.len() && src.len().is_multiple_of(16),
        "widen_block lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma {
        // SAFETY: the CPU has AVX2 and F16C (detected with the ISA); lengths were checked.
        return unsafe { widen_block_avx2(src, dst) };
    }
    let _ = isa;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.widen();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen_block_avx2<B: PanelElem>(src: &[B], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    for i in (0..src.len()).step_by(16) {
        let (lo, hi) = B::load16(src.as_ptr().add(i));
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), lo);
        _mm256_storeu_ps(dst.as_mut_ptr().add(i + 8), hi);
    }
}
