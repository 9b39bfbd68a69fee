//! The innermost loop of the matmul: a tile of up to `MR_MAX` rows by `NR` columns.
//!
//! Each output is one scalar chain `c = c + a[k] * b[k]` taken in increasing k. The tile shape,
//! the number of rows in the batch and a row's place in it never change that chain; this is
//! what makes the matmul batch invariant.

use super::panel_store::PanelElem;
use super::simd::Isa;

/// Columns per tile: one packed panel of the weight.
pub(crate) const NR: usize = 16;
/// Most rows per tile: 6 x 16 outputs fill 12 of the 16 AVX2 registers.
pub(crate) const MR_MAX: usize = 6;

/// One tile's operands.
///
/// `a` points at `rows x kc` inputs, element `(i, k)` at `i * a_row + k * a_k`; `b` at `kc x NR`
/// packed weights (f32, or 16-bit values widened as they are loaded);
/// `c` at `rows x NR` outputs with row stride `ldc`. When `first` is set the tile starts from
/// zero, otherwise it continues the sums already in `c` (the next block of k).
#[derive(Clone, Copy)]
pub(crate) struct Tile<B> {
    pub a: *const f32,
    pub a_row: usize,
    pub a_k: usize,
    pub b: *const B,
    pub kc: usize,
    pub c: *mut f32,
    pub ldc: usize,
    pub first: bool,
}

/// Runs one tile of `rows` rows (1..=MR_MAX).
///
/// # Safety
/// The pointers in `tile` must be valid for the extents described on [`Tile`], and no other
/// thread may touch the tile's outputs meanwhile. `isa` must be supported by this CPU.
pub(crate) unsafe fn run_tile<B: PanelElem>(isa: Isa, rows: usize, tile: &Tile<B>) {
    match isa {
        Isa::Portable => match rows {
            1 => portable::<1, B>(tile),
            2 => portable::<2, B>(tile),
            3 => portable::<3, B>(tile),
            4 => portable::<4, B>(tile),
            5 => portable::<5, B>(tile),
            _ => portable::<6, B>(tile),
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => match rows {
            1 => avx2::<1, B>(tile),
            2 => avx2::<2, B>(tile),
            3 => avx2::<3, B>(tile),
            4 => avx2::<4, B>(tile),
            5 => avx2::<5, B>(tile),
            _ => avx2::<6, B>(tile),
        },
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2Fma => unreachable!("AVX2 is never selected off x86_64"),
    }
}

/// Plain loops; LLVM turns the 16 columns into SSE2 multiplies and adds (never fused).
unsafe fn portable<const MR: usize, B: PanelElem>(t: &Tile<B>) {
    let mut acc = [[0.0f32; NR]; MR];
    if !t.first {
        for (i, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(std::slice::from_raw_parts(t.c.add(i * t.ldc), NR));
        }
    }
    for k in 0..t.kc {
        let b: [f32; NR] = std::array::from_fn(|j| (*t.b.add(k * NR + j)).widen());
        for (i, row) in acc.iter_mut().enumerate() {
            let a = *t.a.add(i * t.a_row + k * t.a_k);
            for j in 0..NR {
                row[j] += a * b[j];
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        std::slice::from_raw_parts_mut(t.c.add(i * t.ldc), NR).copy_from_slice(row);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2<const MR: usize, B: PanelElem>(t: &Tile<B>) {
    use std::arch::x86_64::*;
    let mut lo = [_mm256_setzero_ps(); MR];
    let mut hi = [_mm256_setzero_ps(); MR];
    if !t.first {
        for i in 0..MR {
            lo[i] = _mm256_loadu_ps(t.c.add(i * t.ldc));
            hi[i] = _mm256_loadu_ps(t.c.add(i * t.ldc + 8));
        }
    }
    for k in 0..t.kc {
        let (b0, b1) = B::load16(t.b.add(k * NR));
        for i in 0..MR {
            let a = _mm256_broadcast_ss(&*t.a.add(i * t.a_row + k * t.a_k));
            lo[i] = _mm256_fmadd_ps(a, b0, lo[i]);
            hi[i] = _mm256_fmadd_ps(a, b1, hi[i]);
        }
    }
    for i in 0..MR {
        _mm256_storeu_ps(t.c.add(i * t.ldc), lo[i]);
        _mm256_storeu_ps(t.c.add(i * t.ldc + 8), hi[i]);
    }
}

/// Panels a single-row tile covers at once: 8 independent chains keep the multiply-add units
/// busy where one panel's 2 chains would wait on their latency.
pub(crate) const ROW_PANELS: usize = 4;

/// One input row against `ROW_PANELS` adjacent full panels (`b` then `b + b_stride`, ...),
/// writing `ROW_PANELS * NR` consecutive outputs at `c`. Same chains as [`run_tile`].
///
/// # Safety
/// As for [`run_tile`], for each of the panels.
pub(crate) unsafe fn run_row_panels<B: PanelElem>(isa: Isa, tile: &Tile<B>, b_stride: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => avx2_row_panels(tile, b_stride),
        _ => {
            for j in 0..ROW_PANELS {
                let panel = Tile {
                    b: tile.b.add(j * b_stride),
                    c: tile.c.add(j * NR),
                    ..*tile
                };
                run_tile(isa, 1, &panel);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2_row_panels<B: PanelElem>(t: &Tile<B>, b_stride: usize) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 2 * ROW_PANELS];
    if !t.first {
        for (j, v) in acc.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(t.c.add(j * 8));
        }
    }
    for k in 0..t.kc {
        let a = _mm256_broadcast_ss(&*t.a.add(k * t.a_k));
        for j in 0..ROW_PANELS {
            let (b0, b1) = B::load16(t.b.add(j * b_stride + k * NR));
            acc[2 * j] = _mm256_fmadd_ps(a, b0, acc[2 * j]);
            acc[2 * j + 1] = _mm256_fmadd_ps(a, b1, acc[2 * j + 1]);
        }
    }
    for (j, v) in acc.iter().enumerate() {
        _mm256_storeu_ps(t.c.add(j * 8), *v);
    }
}
