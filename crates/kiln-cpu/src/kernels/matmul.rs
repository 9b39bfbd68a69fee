//! `out = x * W^T` for a weight packed once at load, batch invariant by construction.
//!
//! The weight `[n, k]` is stored as panels of 16 rows, each panel k-major (`k x 16`), so a
//! tile streams it contiguously. With several rows the input is repacked per call into tiles
//! of 6 rows, k-major, so that a tile reads it contiguously too. Work is split over panels
//! (threads), blocks of rows and of k (cache) and tiles (registers), but every output is one
//! sequential chain over k (see `microkernel`), so its bits do not depend on how many rows run
//! or where a row sits. The weight is read once per call whatever the number of rows, which
//! is what decode needs.

use rayon::prelude::*;

use super::microkernel::{run_row_panels, run_tile, Tile, MR_MAX, NR, ROW_PANELS};
use super::panel_store::{widen_block, PanelElem, PanelStore, WeightFormat};
use super::simd::{isa, Isa};

/// Block of k per pass: a 16-column panel block of 16 KiB stays in L1 while every row uses it.
const KC: usize = 256;
/// Tiles of rows per block: 32 tiles of 6 rows by KC is 192 KiB of input, kept in L2 while a
/// task's panels pass over it.
const TILES_PER_BLOCK: usize = 32;
/// Multiply-adds below which a parallel task is not worth its scheduling cost.
const MIN_TASK_WORK: usize = 1 << 16;

/// A `[rows, cols]` weight (Hugging Face orientation) in panel layout.
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    rows: usize,
    cols: usize,
    data: PanelStore,
}

impl PackedMatrix {
    /// Packs a row-major `[rows, cols]` matrix in the most compact format that holds every
    /// value exactly (see [`WeightFormat`]).
    pub fn pack(rows: usize, cols: usize, data: &[f32]) -> anyhow::Result<PackedMatrix> {
        Self::pack_as(rows, cols, data, WeightFormat::most_compact_exact(data))
    }

    /// Packs in the given format; an error if a value is not exactly representable in it.
    pub fn pack_as(
        rows: usize,
        cols: usize,
        data: &[f32],
        format: WeightFormat,
    ) -> anyhow::Result<PackedMatrix> {
        let expected = rows
            .checked_mul(cols)
            .ok_or_else(|| anyhow::anyhow!("matrix {rows}x{cols} is too large"))?;
        anyhow::ensure!(
            data.len() == expected,
            "matrix {rows}x{cols} needs {expected} values, got {}",
            data.len()
        );
        if format != WeightFormat::F32 {
            if let Some(v) = data.par_iter().find_any(|v| !format.holds_exactly(**v)) {
                anyhow::bail!(
                    "matrix {rows}x{cols} holds {v}, which {format:?} cannot represent exactly"
                );
            }
        }
        let panel_len = NR * cols.max(1);
        let store = PanelStore::build(
            format,
            rows.div_ceil(NR) * panel_len,
            panel_len,
            |p, panel| {
                panel.fill(0.0);
                for j in 0..NR.min(rows - p * NR) {
                    let src = &data[(p * NR + j) * cols..][..cols];
                    for (k, &v) in src.iter().enumerate() {
                        panel[k * NR + j] = v;
                    }
                }
            },
        );
        Ok(PackedMatrix {
            rows,
            cols,
            data: store,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn format(&self) -> WeightFormat {
        self.data.format()
    }

    /// Copies row `r` (a token's embedding) into `out`.
    pub fn copy_row(&self, r: usize, out: &mut [f32]) {
        assert!(
            r < self.rows && out.len() == self.cols,
            "row {r} out of range or wrong output length"
        );
        let base = (r / NR) * NR * self.cols + r % NR;
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.data.get(base + k * NR);
        }
    }
}

/// `out[m, n] = sum_k x[m, k] * w[n, k]` with the process's instruction set.
pub fn matmul(x: &[f32], w: &PackedMatrix, out: &mut [f32]) {
    matmul_with(isa(), x, w, out)
}

/// Raw output pointer shared by tasks that write disjoint column panels.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint column ranges of the output (one panel group each).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}
impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// The input as the tiles read it.
enum Input<'a> {
    /// One row, read in place.
    Row(&'a [f32]),
    /// `[tile][k][MR_MAX]`, rows past the end zero.
    Tiles(Vec<f32>),
}

impl Input<'_> {
    /// Pointer to tile `t`'s element at `k`, and the row and k strides from there.
    fn at(&self, t: usize, k: usize, cols: usize) -> (*const f32, usize, usize) {
        match self {
            Input::Row(x) => (x[k..].as_ptr(), 0, 1),
            Input::Tiles(p) => (p[(t * cols + k) * MR_MAX..].as_ptr(), 1, MR_MAX),
        }
    }
}

fn pack_input(x: &[f32], m: usize, k: usize) -> Input<'_> {
    if m == 1 {
        return Input::Row(x);
    }
    let mut tiles = vec![0.0f32; m.div_ceil(MR_MAX) * k * MR_MAX];
    tiles
        .par_chunks_mut(k * MR_MAX)
        .enumerate()
        .for_each(|(t, tile)| {
            for i in 0..MR_MAX.min(m - t * MR_MAX) {
                let row = &x[(t * MR_MAX + i) * k..][..k];
                for (kk, &v) in row.iter().enumerate() {
                    tile[kk * MR_MAX + i] = v;
                }
            }
        });
    Input::Tiles(tiles)
}

/// [`matmul`] with an explicit instruction set (tests compare them).
pub fn matmul_with(isa: Isa, x: &[f32], w: &PackedMatrix, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    assert!(
        k > 0 && x.len().is_multiple_of(k),
        "matmul input is not whole rows of {k}"
    );
    let m = x.len() / k;
    assert_eq!(out.len(), m * n, "matmul output has the wrong length");
    assert!(isa.is_supported(), "{isa:?} is not supported by this CPU");
    if m == 0 || n == 0 {
        return;
    }
    let input = pack_input(x, m, k);
    let panels = n.div_ceil(NR);
    let per_panel_work = m * k * NR;
    let tasks = (rayon::current_num_threads() * 4)
        .min(panels)
        .min((panels * per_panel_work / MIN_TASK_WORK).max(1));
    let panels_per_task = panels.div_ceil(tasks);
    let out_ptr = OutPtr(out.as_mut_ptr());
    (0..panels.div_ceil(panels_per_task))
        .into_par_iter()
        .for_each(|task| {
            let first_panel = task * panels_per_task;
            let last_panel = (first_panel + panels_per_task).min(panels);
            // SAFETY: this task alone writes columns of panels first_panel..last_panel; the input,
            // weight and output outlive the call, and every pointer stays inside their extents.
            unsafe { run_panels(isa, &input, m, w, out_ptr.get(), first_panel..last_panel) };
        });
}

/// Computes the output columns of a range of panels, for whichever format the weight has.
unsafe fn run_panels(
    isa: Isa,
    input: &Input<'_>,
    m: usize,
    w: &PackedMatrix,
    out: *mut f32,
    panels: std::ops::Range<usize>,
) {
    let shape = Shape {
        m,
        n: w.rows,
        k: w.cols,
    };
    match &w.data {
        PanelStore::F32(d) => run_panels_of(isa, input, shape, d, out, panels),
        PanelStore::Bf16(d) => run_panels_of(isa, input, shape, d, out, panels),
        PanelStore::F16(d) => run_panels_of(isa, input, shape, d, out, panels),
    }
}

#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
}

/// For each output the k blocks run in increasing order, continuing the sums in `out`.
///
/// A 16-bit weight is widened inside the tile when one tile covers every row (decode: the
/// widening hides in the multiply-add latency); with more rows each block is widened once
/// into an L1 scratch that all tiles share. The values, hence the results, are the same.
unsafe fn run_panels_of<B: PanelElem>(
    isa: Isa,
    input: &Input<'_>,
    Shape { m, n, k }: Shape,
    data: &[B],
    out: *mut f32,
    panels: std::ops::Range<usize>,
) {
    let tiles = m.div_ceil(MR_MAX);
    let widen_first = !B::IS_F32 && tiles > 1;
    let mut edge = [0.0f32; MR_MAX * NR];
    let mut widened = vec![0.0f32; if widen_first { KC * NR } else { 0 }];
    for block in (0..tiles).step_by(TILES_PER_BLOCK) {
        let block_tiles = block..(block + TILES_PER_BLOCK).min(tiles);
        for kb in (0..k).step_by(KC) {
            let kc = KC.min(k - kb);
            let first = kb == 0;
            // One row: full panels in groups, each group one pass over the row.
            let mut grouped = panels.start;
            if m == 1 {
                while grouped + ROW_PANELS <= panels.end && (grouped + ROW_PANELS) * NR <= n {
                    let (a, a_row, a_k) = input.at(0, kb, k);
                    let b = data[grouped * NR * k + kb * NR..].as_ptr();
                    let c = out.add(grouped * NR);
                    run_row_panels(
                        isa,
                        &Tile {
                            a,
                            a_row,
                            a_k,
                            b,
                            kc,
                            c,
                            ldc: n,
                            first,
                        },
                        NR * k,
                    );
                    grouped += ROW_PANELS;
                }
            }
            for p in grouped..panels.end {
                let cols = NR.min(n - p * NR);
                let b = &data[p * NR * k + kb * NR..][..kc * NR];
                if widen_first {
                    widen_block(isa, b, &mut widened[..kc * NR]);
                }
                for t in block_tiles.clone() {
                    let rows = MR_MAX.min(m - t * MR_MAX);
                    let (a, a_row, a_k) = input.at(t, kb, k);
                    let c = out.add(t * MR_MAX * n + p * NR);
                    // The last panel is partial: go through a full-width scratch tile.
                    let (c_tile, ldc) = if cols == NR {
                        (c, n)
                    } else {
                        (edge.as_mut_ptr(), NR)
                    };
                    if cols < NR && !first {
                        for i in 0..rows {
                            std::ptr::copy_nonoverlapping(c.add(i * n), c_tile.add(i * NR), cols);
                        }
                    }
                    if widen_first {
                        let b = widened.as_ptr();
                        run_tile(
                            isa,
                            rows,
                            &Tile {
                                a,
                                a_row,
                                a_k,
                                b,
                                kc,
                                c: c_tile,
                                ldc,
                                first,
                            },
                        );
                    } else {
                        let b = b.as_ptr();
                        run_tile(
                            isa,
                            rows,
                            &Tile {
                                a,
                                a_row,
                                a_k,
                                b,
                                kc,
                                c: c_tile,
                                ldc,
                                first,
                            },
                        );
                    }
                    if cols < NR {
                        for i in 0..rows {
                            std::ptr::copy_nonoverlapping(c_tile.add(i * NR), c.add(i * n), cols);
                        }
                    }
                }
            }
        }
    }
}
