//! One matmul task: the output columns of a range of panels of one stored part, for every row.
//!
//! For each output the k blocks run in increasing order, continuing the sums in `out`, so the
//! chain is the same whatever the loop order around it. Weights that are not f32 are decoded
//! to f32 before the tiles read them, with the values (and so the results) of decoding at load:
//!
//! - 16-bit weights with one tile of rows (decode) are widened inside the tile, where the
//!   widening hides in the multiply-add latency; with more rows each block is widened once
//!   into an L1 scratch that all tiles share.
//! - Quantised weights are decoded a block at a time into an L1 scratch.

use std::ops::Range;

use super::matmul_input::Input;
use super::microkernel::{run_row_panels, run_tile, Tile, MR_MAX, NR, ROW_PANELS};
use super::panel_store::{widen_block, PanelElem, PanelStore};
use super::quant_panels::{QuantPanels, GROUP};
use super::simd::Isa;

/// Block of k per pass: a 16-column panel block of 16 KiB stays in L1 while every row uses it.
const KC: usize = 256;
/// Tiles of rows per block: 32 tiles of 6 rows by KC is 192 KiB of input, kept in L2 while a
/// task's panels pass over it.
const TILES_PER_BLOCK: usize = 32;
/// Block of k a single row decodes per pass over `ROW_PANELS` quantised panels: 16 KiB of
/// f32, in L1.
const ROW_KC: usize = 64;

/// What every panel of a task shares.
pub(crate) struct Job<'a> {
    pub isa: Isa,
    pub input: &'a Input<'a>,
    /// Rows of the input.
    pub m: usize,
    /// Output columns of this part (the rows of the weight part).
    pub n: usize,
    /// Output row stride.
    pub ldc: usize,
    pub k: usize,
    /// The part's first output column of row 0.
    pub out: *mut f32,
}

/// Computes the output columns of `panels` (indices within the part).
///
/// # Safety
/// No other thread may write these columns meanwhile; `job.out` must be valid for `job.m`
/// rows of `job.ldc` with the part's columns inside.
pub(crate) unsafe fn run_part(job: &Job<'_>, store: &PanelStore, panels: Range<usize>) {
    match store {
        PanelStore::F32(d) => run_elements(job, d, panels),
        PanelStore::Bf16(d) => run_elements(job, d, panels),
        PanelStore::F16(d) => run_elements(job, d, panels),
        PanelStore::Quant(q) => run_quantized(job, q, panels),
    }
}

/// Panels stored a value per element (f32 or 16 bits).
unsafe fn run_elements<B: PanelElem>(job: &Job<'_>, data: &[B], panels: Range<usize>) {
    let (k, tiles) = (job.k, job.input.tiles());
    if job.m == 1 {
        // One row: full panels in groups, each group one pass over the row.
        let mut p = panels.start;
        while p + ROW_PANELS <= panels.end && (p + ROW_PANELS) * NR <= job.n {
            for kb in (0..k).step_by(KC) {
                let b = data[p * NR * k + kb * NR..].as_ptr();
                row_panels(job, p, kb, KC.min(k - kb), b, NR * k);
            }
            p += ROW_PANELS;
        }
        for p in p..panels.end {
            for kb in (0..k).step_by(KC) {
                let b = data[p * NR * k + kb * NR..].as_ptr();
                run_tiles(job, 0..1, p, kb, KC.min(k - kb), b);
            }
        }
        return;
    }
    let widen_first = !B::IS_F32 && tiles > 1;
    let mut widened = vec![0.0f32; if widen_first { KC * NR } else { 0 }];
    for block in (0..tiles).step_by(TILES_PER_BLOCK) {
        let block_tiles = block..(block + TILES_PER_BLOCK).min(tiles);
        for kb in (0..k).step_by(KC) {
            let kc = KC.min(k - kb);
            for p in panels.clone() {
                let b = &data[p * NR * k + kb * NR..][..kc * NR];
                if widen_first {
                    widen_block(job.isa, b, &mut widened[..kc * NR]);
                    run_tiles(job, block_tiles.clone(), p, kb, kc, widened.as_ptr());
                } else {
                    run_tiles(job, block_tiles.clone(), p, kb, kc, b.as_ptr());
                }
            }
        }
    }
}

/// Quantised panels: decoded a block of k at a time, then the f32 tiles.
unsafe fn run_quantized(job: &Job<'_>, q: &QuantPanels, panels: Range<usize>) {
    let (k, tiles, isa) = (job.k, job.input.tiles(), job.isa);
    debug_assert!(k.is_multiple_of(GROUP));
    if job.m == 1 {
        let mut scratch = vec![0.0f32; ROW_PANELS * ROW_KC * NR];
        let mut p = panels.start;
        while p + ROW_PANELS <= panels.end && (p + ROW_PANELS) * NR <= job.n {
            for kb in (0..k).step_by(ROW_KC) {
                let kc = ROW_KC.min(k - kb);
                // A short last block (k not a multiple of ROW_KC) uses only the front of the
                // scratch: exactly ROW_PANELS panels, never the ones past this pass.
                let used = &mut scratch[..ROW_PANELS * kc * NR];
                for (j, dst) in used.chunks_exact_mut(kc * NR).enumerate() {
                    q.decode(isa, p + j, kb, kc, dst);
                }
                row_panels(job, p, kb, kc, scratch.as_ptr(), kc * NR);
            }
            p += ROW_PANELS;
        }
        for p in p..panels.end {
            for kb in (0..k).step_by(ROW_KC) {
                let kc = ROW_KC.min(k - kb);
                q.decode(isa, p, kb, kc, &mut scratch);
                run_tiles(job, 0..1, p, kb, kc, scratch.as_ptr());
            }
        }
        return;
    }
    let mut decoded = vec![0.0f32; KC * NR];
    for block in (0..tiles).step_by(TILES_PER_BLOCK) {
        let block_tiles = block..(block + TILES_PER_BLOCK).min(tiles);
        for kb in (0..k).step_by(KC) {
            let kc = KC.min(k - kb);
            for p in panels.clone() {
                q.decode(isa, p, kb, kc, &mut decoded);
                run_tiles(job, block_tiles.clone(), p, kb, kc, decoded.as_ptr());
            }
        }
    }
}

/// The single row against `ROW_PANELS` full panels from `p`, `b` pointing at the first
/// panel's block at `kb`, the next panels `b_stride` further each.
unsafe fn row_panels<B: PanelElem>(
    job: &Job<'_>,
    p: usize,
    kb: usize,
    kc: usize,
    b: *const B,
    b_stride: usize,
) {
    let (a, a_row, a_k) = job.input.at(0, kb, job.k);
    let tile = Tile {
        a,
        a_row,
        a_k,
        b,
        kc,
        c: job.out.add(p * NR),
        ldc: job.ldc,
        first: kb == 0,
    };
    run_row_panels(job.isa, &tile, b_stride);
}

/// Tiles `tiles` against panel `p`'s block of `kc` values of k from `kb` at `b`.
unsafe fn run_tiles<B: PanelElem>(
    job: &Job<'_>,
    tiles: Range<usize>,
    p: usize,
    kb: usize,
    kc: usize,
    b: *const B,
) {
    let cols = NR.min(job.n - p * NR);
    let first = kb == 0;
    let mut edge = [0.0f32; MR_MAX * NR];
    for t in tiles.clone() {
        let (row0, rows) = job.input.tile(t);
        if t + 1 < tiles.end {
            let (next0, next_rows) = job.input.tile(t + 1);
            prefetch_rows(
                job.out.wrapping_add(next0 * job.ldc + p * NR),
                next_rows,
                job.ldc,
            );
        }
        let (a, a_row, a_k) = job.input.at(t, kb, job.k);
        let c = job.out.add(row0 * job.ldc + p * NR);
        // The last panel is partial: go through a full-width scratch tile.
        let (c_tile, ldc) = if cols == NR {
            (c, job.ldc)
        } else {
            (edge.as_mut_ptr(), NR)
        };
        if cols < NR && !first {
            for i in 0..rows {
                std::ptr::copy_nonoverlapping(c.add(i * job.ldc), c_tile.add(i * NR), cols);
            }
        }
        let tile = Tile {
            a,
            a_row,
            a_k,
            b,
            kc,
            c: c_tile,
            ldc,
            first,
        };
        run_tile(job.isa, rows, &tile);
        if cols < NR {
            for i in 0..rows {
                std::ptr::copy_nonoverlapping(c_tile.add(i * NR), c.add(i * job.ldc), cols);
            }
        }
    }
}

/// Asks for the 16 outputs of `rows` rows from `c` (row stride `ldc`) to be brought into L1:
/// the next tile's sums, loaded while this tile computes.
#[inline(always)]
fn prefetch_rows(c: *const f32, rows: usize, ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..rows {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let row = c.wrapping_add(i * ldc);
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(row as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR - 1) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (c, rows, ldc);
}
