//! `out = x * W^T` for a weight packed once at load, batch invariant by construction.
//!
//! The weight `[n, k]` is stored as panels of 16 rows, each panel k-major (`k x 16`), so a
//! tile streams it contiguously. With several rows the input is repacked per call into tiles
//! of up to 6 rows, k-major, so that a tile reads it contiguously too. Work is split over
//! panels (threads), blocks of rows and of k (cache) and tiles (registers), but every output
//! is one sequential chain over k (see `microkernel`), so its bits do not depend on how many
//! rows run or where a row sits. The weight is read once per call whatever the number of
//! rows, which is what decode needs.
//!
//! A matrix can be stacked from parts stored differently (Q, K and V rows quantised in
//! different formats): each part covers whole panels and keeps its own store.

use rayon::prelude::*;

use super::matmul_input::pack_input;
use super::matmul_panels::{run_part, Job};
use super::microkernel::NR;
use super::panel_store::{PanelStore, WeightFormat};
use super::quant_panels::{QuantFormat, QuantPanels};
use super::simd::{isa, Isa};

/// Multiply-adds below which a parallel task is not worth its scheduling cost.
const MIN_TASK_WORK: usize = 1 << 16;

/// A `[rows, cols]` weight (Hugging Face orientation) in panel layout.
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    rows: usize,
    cols: usize,
    /// Row ranges in order; every part but the last has a multiple of `NR` rows.
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
struct Part {
    first_row: usize,
    rows: usize,
    store: PanelStore,
}

/// One block of rows to stack into a matrix: values, or a file's quantised blocks.
pub enum RowBlock<'a> {
    F32(&'a [f32]),
    Quant {
        format: QuantFormat,
        rows: usize,
        bytes: &'a [u8],
    },
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
        let store = pack_values(rows, cols, data, format)?;
        Ok(PackedMatrix::single(rows, cols, store))
    }

    /// Keeps `rows` rows of `format` blocks (GGML layout, `cols` values a row) quantised.
    pub fn from_quantized(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> anyhow::Result<PackedMatrix> {
        let store = PanelStore::Quant(QuantPanels::from_blocks(format, rows, cols, bytes)?);
        Ok(PackedMatrix::single(rows, cols, store))
    }

    /// Stacks blocks of rows (`cols` values each) into one matrix, each block in its own
    /// format: f32 values as compact as exact, quantised blocks kept. Blocks can keep their
    /// own format only when every block but the last covers whole panels; otherwise the
    /// matrix is expanded to f32 with `expand`, which must decode a quantised block exactly.
    pub fn stack(
        cols: usize,
        blocks: &[RowBlock<'_>],
        expand: impl Fn(&RowBlock<'_>) -> anyhow::Result<Vec<f32>>,
    ) -> anyhow::Result<PackedMatrix> {
        let block_rows = |b: &RowBlock<'_>| match b {
            RowBlock::F32(d) => d.len() / cols.max(1),
            RowBlock::Quant { rows, .. } => *rows,
        };
        let whole_panels = blocks
            .iter()
            .take(blocks.len().saturating_sub(1))
            .all(|b| block_rows(b).is_multiple_of(NR));
        if !whole_panels {
            let mut all = Vec::new();
            for b in blocks {
                all.extend(expand(b)?);
            }
            return PackedMatrix::pack(all.len() / cols.max(1), cols, &all);
        }
        let mut parts = Vec::with_capacity(blocks.len());
        let mut first_row = 0;
        for b in blocks {
            let rows = block_rows(b);
            let store = match b {
                RowBlock::F32(d) => {
                    pack_values(rows, cols, d, WeightFormat::most_compact_exact(d))?
                }
                RowBlock::Quant { format, bytes, .. } => {
                    PanelStore::Quant(QuantPanels::from_blocks(*format, rows, cols, bytes)?)
                }
            };
            parts.push(Part {
                first_row,
                rows,
                store,
            });
            first_row += rows;
        }
        Ok(PackedMatrix {
            rows: first_row,
            cols,
            parts,
        })
    }

    fn single(rows: usize, cols: usize, store: PanelStore) -> PackedMatrix {
        PackedMatrix {
            rows,
            cols,
            parts: vec![Part {
                first_row: 0,
                rows,
                store,
            }],
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The format of the first part (the whole matrix unless it was stacked from several).
    pub fn format(&self) -> WeightFormat {
        self.parts
            .first()
            .map_or(WeightFormat::F32, |p| p.store.format())
    }

    /// The format of each part, with its number of rows.
    pub fn formats(&self) -> Vec<(WeightFormat, usize)> {
        self.parts
            .iter()
            .map(|p| (p.store.format(), p.rows))
            .collect()
    }

    /// Copies row `r` (a token's embedding) into `out`.
    pub fn copy_row(&self, r: usize, out: &mut [f32]) {
        assert!(
            r < self.rows && out.len() == self.cols,
            "row {r} out of range or wrong output length"
        );
        let part = self
            .parts
            .iter()
            .rfind(|p| p.first_row <= r)
            .expect("the first part starts at row 0");
        for (k, o) in out.iter_mut().enumerate() {
            *o = part.store.get(r - part.first_row, k, self.cols);
        }
    }
}

/// Values into panels of `format`.
fn pack_values(
    rows: usize,
    cols: usize,
    data: &[f32],
    format: WeightFormat,
) -> anyhow::Result<PanelStore> {
    let expected = rows
        .checked_mul(cols)
        .ok_or_else(|| anyhow::anyhow!("matrix {rows}x{cols} is too large"))?;
    anyhow::ensure!(
        data.len() == expected,
        "matrix {rows}x{cols} needs {expected} values, got {}",
        data.len()
    );
    if let WeightFormat::Quant(q) = format {
        anyhow::bail!("matrix {rows}x{cols}: {q:?} panels are built from the file's blocks");
    }
    if format != WeightFormat::F32 {
        if let Some(v) = data.par_iter().find_any(|v| !format.holds_exactly(**v)) {
            anyhow::bail!(
                "matrix {rows}x{cols} holds {v}, which {format:?} cannot represent exactly"
            );
        }
    }
    let panel_len = NR * cols.max(1);
    Ok(PanelStore::build(
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
    ))
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
            let first = task * panels_per_task;
            let last = (first + panels_per_task).min(panels);
            for part in &w.parts {
                let part_first = part.first_row / NR;
                let part_end = part_first + part.rows.div_ceil(NR);
                let (lo, hi) = (first.max(part_first), last.min(part_end));
                if lo >= hi {
                    continue;
                }
                let job = Job {
                    isa,
                    input: &input,
                    m,
                    n: part.rows,
                    ldc: n,
                    k,
                    // SAFETY: the part's first output column is inside every output row.
                    out: unsafe { out_ptr.get().add(part.first_row) },
                };
                // SAFETY: this task alone writes the columns of global panels first..last;
                // the input, weight and output outlive the call.
                unsafe { run_part(&job, &part.store, lo - part_first..hi - part_first) };
            }
        });
    input.recycle();
}
