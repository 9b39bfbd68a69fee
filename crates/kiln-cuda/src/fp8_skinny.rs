//! Decode rows of an fp8 product through kernels/fp8.cu's skinny kernels (KILN_FP8_SKINNY):
//! the weight's E4M3 rows streamed once per launch of up to 64 rows into fp8 tensor-core MMAs,
//! as the bf16 skinny kernels do for bf16 weights, instead of cuBLASLt's fp8 tiles, which leave
//! most multiprocessors idle at one row without a split of k (and a split would change a row's
//! bits with the row count). A row's result does not depend on the other rows of the launch or
//! on their count; it is the same product as the fp8 GEMM's (the E4M3 products summed in f32,
//! then both scales applied), summed in another order. On sm_90 the E4M3 MMA of mma.sync runs as
//! f16 MMAs after an exact unpacking of each E4M3 pair (F2FP.F16.E4M3 in the SASS; Hopper's fp8
//! tensor cores are wgmma's), a few instructions a 16-byte load, under the bandwidth's budget.
//!
//! From `KILN_FP8_WIDE` rows on, a launch takes kernels/fp8_wide.cu instead: the same
//! instructions in the same order (so the same bits for every row), with x staged once per CTA of
//! 64 to 256 weight rows, where the skinny kernels read all of x again for every 16.

use std::sync::OnceLock;

use anyhow::{ensure, Result};

use crate::device::{i32_of, Arg, Gpu};
use crate::fp8_rows::{Fp8Matrix, Fp8Rows};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::{entry_from_env, macro_entries};

/// One `FP8_WIDE_ENTRY(NAME, WARPS, TILES, U, S, TOK)` of fp8_wide.cu.
#[derive(Debug, Clone)]
pub struct WideEntry {
    pub name: String,
    pub warps: usize,
    /// 16-row weight tiles a warp.
    pub tiles: usize,
    /// Chunks (64 k) a step.
    pub u: usize,
    /// Steps in the copy ring.
    pub stages: usize,
    /// Tokens (rows of x) a CTA.
    pub tokens: usize,
}

impl WideEntry {
    fn from_source(p: &EntryPoint) -> Result<WideEntry> {
        Ok(WideEntry {
            name: p.name.clone(),
            warps: p.num("WARPS")?,
            tiles: p.num("TILES")?,
            u: p.num("U")?,
            stages: p.num("S")?,
            tokens: p.num("TOK")?,
        })
    }

    /// Weight rows of one CTA.
    pub fn rows(&self) -> usize {
        self.warps * self.tiles * 16
    }

    /// The ring (each stage U chunks of 64 bytes for every weight row and token), then x's U
    /// chunks as f16 pairs (128 bytes a token).
    pub fn smem_bytes(&self) -> usize {
        self.u * (self.stages * 64 * (self.rows() + self.tokens) + self.tokens * 128)
    }

    fn ctas(&self, n: usize, m: usize) -> usize {
        n.div_ceil(self.rows()) * m.div_ceil(self.tokens)
    }
}

/// The wide entries, in the source's order.
pub fn wide_entries() -> &'static [WideEntry] {
    static ENTRIES: OnceLock<Vec<WideEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("fp8_wide", WideEntry::from_source))
}

/// What the wide entries ask of shared memory (kernels.rs allows it at start).
pub fn smem_needs() -> impl Iterator<Item = (String, usize)> {
    wide_entries()
        .iter()
        .map(|e| (e.name.clone(), e.smem_bytes()))
}

/// `KILN_FP8_WIDE_TILE=WxT[_uU][_tTOK]` (e.g. `4x1_u8`): the entry every wide launch takes, for A/B
/// runs; None when unset or naming no entry.
fn forced_entry() -> Option<&'static WideEntry> {
    static FORCED: OnceLock<Option<&'static WideEntry>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        entry_from_env(
            wide_entries(),
            "KILN_FP8_WIDE_TILE",
            "skinny_fp8_wide_",
            |e| &e.name,
        )
    })
}

/// Whether the wide kernels give the skinny kernels' bits on a device of compute capability
/// `arch`. On sm_90 ptxas builds the skinny kernels' E4M3 MMA from the f16 MMAs the wide
/// kernels write themselves; sm_89 has E4M3 MMAs of its own (QMMA), with other bits
/// (sass_order checks both). The fp8_wide module is built for sm_90 alone (kernel_sources.rs);
/// elsewhere [`Gpu::fp8_wide`] runs the skinny kernels.
pub fn wide_matches_skinny(arch: u32) -> bool {
    arch == 90
}

/// Chunks a step of the entries the launcher chooses from: the one-chunk steps, whose contract
/// and speed the H200 has run (2026-12-05 05:49Z); the others wait for theirs
/// (scripts/gpu-plans/2026-12-23-fp8-wide-steps*.txt) and run only when forced.
const CHOSEN_STEPS: &[usize] = &[1];

/// The wide entry for `m` rows of an `n`-row weight on `sms` multiprocessors (unless
/// KILN_FP8_WIDE_TILE forces one): of those chosen from, the one with the most weight rows a
/// CTA (x read the fewest times) that still gives every multiprocessor a CTA, else the one with
/// the most CTAs; among equals, the most chunks a step.
pub fn wide_entry(n: usize, m: usize, sms: usize) -> &'static WideEntry {
    if let Some(e) = forced_entry() {
        return e;
    }
    let chosen = || {
        wide_entries()
            .iter()
            .filter(|e| CHOSEN_STEPS.contains(&e.u))
    };
    chosen()
        .filter(|e| e.ctas(n, m) >= sms)
        .max_by_key(|e| (e.rows(), e.u))
        .or_else(|| chosen().max_by_key(|e| (e.ctas(n, m), e.u)))
        .expect("a one-chunk wide entry")
}

/// Rows of one launch: the widest entry's.
pub const FP8_SKINNY_MAX_ROWS: usize = 64;

/// The entry for a launch of `rows` rows (1..=64): the fewest 8-row groups that hold them.
fn entry(rows: usize) -> &'static str {
    match rows {
        0..=8 => "skinny_fp8_8",
        9..=16 => "skinny_fp8_16",
        17..=32 => "skinny_fp8_32",
        _ => "skinny_fp8_64",
    }
}

impl Gpu {
    /// y[r, :] = (x_r . w^T) * (x's scale r * w's row scales) for rows 0..rows of `x` (fp8 rows
    /// of w.cols bytes and their scales), into y (`rows x w.rows` f32), in launches of up to
    /// [`FP8_SKINNY_MAX_ROWS`] rows.
    pub fn fp8_skinny(&self, y: u64, x: Fp8Rows, w: &Fp8Matrix, rows: usize) -> Result<()> {
        let (n, k) = (w.rows, w.cols);
        self.fp8_rows_ok(w)?;
        for r0 in (0..rows).step_by(FP8_SKINNY_MAX_ROWS) {
            let m = (rows - r0).min(FP8_SKINNY_MAX_ROWS);
            self.launch(
                entry(m),
                (n.div_ceil(16) as u32, 1, 1),
                256,
                0,
                &[
                    Arg::Ptr(y + (r0 * n * 4) as u64),
                    Arg::Ptr(x.q + (r0 * k) as u64),
                    Arg::Ptr(x.scale + (r0 * 4) as u64),
                    Arg::Ptr(w.q.ptr()),
                    Arg::Ptr(w.scale.ptr()),
                    Arg::I32(m as i32),
                    Arg::I32(i32_of(n, "rows of the weight")?),
                    Arg::I32(i32_of(k, "columns of the weight")?),
                ],
            )?;
        }
        Ok(())
    }

    /// [`Gpu::fp8_skinny`]'s product and bits for any number of rows in one launch of the wide
    /// kernels (fp8_wide.cu), in the entry [`wide_entry`] chooses; the skinny kernels where
    /// the two would differ ([`wide_matches_skinny`]).
    pub fn fp8_wide(&self, y: u64, x: Fp8Rows, w: &Fp8Matrix, rows: usize) -> Result<()> {
        if !wide_matches_skinny(self.arch) {
            return self.fp8_skinny(y, x, w, rows);
        }
        let e = wide_entry(w.rows, rows, self.sm_count as usize);
        self.fp8_wide_in(e, y, x, w, rows)
    }

    /// [`Gpu::fp8_wide`] in entry `e` (an sm_90 device's: the module is built for no other).
    pub fn fp8_wide_in(
        &self,
        e: &WideEntry,
        y: u64,
        x: Fp8Rows,
        w: &Fp8Matrix,
        rows: usize,
    ) -> Result<()> {
        let (n, k) = (w.rows, w.cols);
        self.fp8_rows_ok(w)?;
        if rows == 0 {
            return Ok(());
        }
        let (mb, nb) = (rows.div_ceil(e.tokens), n.div_ceil(e.rows()));
        ensure!(nb <= 65_535, "an fp8 weight of {n} rows: too many CTAs");
        self.launch(
            &e.name,
            (mb as u32, nb as u32, 1),
            (e.warps * 32) as u32,
            e.smem_bytes() as u32,
            &[
                Arg::Ptr(y),
                Arg::Ptr(x.q),
                Arg::Ptr(x.scale),
                Arg::Ptr(w.q.ptr()),
                Arg::Ptr(w.scale.ptr()),
                Arg::I32(i32_of(rows, "rows of x")?),
                Arg::I32(i32_of(n, "rows of the weight")?),
                Arg::I32(i32_of(k, "columns of the weight")?),
            ],
        )
    }

    fn fp8_rows_ok(&self, w: &Fp8Matrix) -> Result<()> {
        let k = w.cols;
        ensure!(
            k.is_multiple_of(16),
            "fp8 rows of {k} bytes: the skinny kernel reads 16 at a time"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{entry, wide_entries, wide_entry, CHOSEN_STEPS};

    #[test]
    fn the_wide_entries_are_read_from_their_source() {
        let shapes: Vec<(usize, usize, usize)> = wide_entries()
            .iter()
            .map(|e| (e.rows(), e.u, e.smem_bytes()))
            .collect();
        assert_eq!(
            shapes,
            [
                (256, 1, 90_112),
                (128, 1, 57_344),
                (64, 1, 40_960),
                (256, 2, 139_264),
                (128, 4, 180_224),
                (64, 4, 131_072),
                (64, 8, 196_608),
                (32, 8, 163_840),
                (64, 8, 131_072),
                (32, 8, 131_072),
            ],
            "fp8_wide.cu's FP8_WIDE_ENTRY lines"
        );
    }

    #[test]
    fn a_wide_launch_takes_the_most_weight_rows_that_fill_the_multiprocessors() {
        // Llama-3-8B's gate/up (28,672 rows), QKV (6,144) and o (4,096) on an H200 (132
        // multiprocessors).
        let pick = |n, m| wide_entry(n, m, 132).name.as_str();
        assert_eq!(pick(28_672, 128), "skinny_fp8_wide_8x2");
        assert_eq!(pick(6_144, 128), "skinny_fp8_wide_4x1");
        assert_eq!(pick(4_096, 512), "skinny_fp8_wide_8x1");
        assert_eq!(pick(4_096, 32), "skinny_fp8_wide_4x1");
        // Only the one-chunk steps are chosen until the others have run on a GPU.
        assert!(wide_entries().iter().any(|e| e.u > 1));
        assert!(!CHOSEN_STEPS.iter().any(|&u| u > 1));
    }

    #[test]
    fn a_launch_takes_the_fewest_row_groups_that_hold_its_rows() {
        assert_eq!(entry(1), "skinny_fp8_8");
        assert_eq!(entry(8), "skinny_fp8_8");
        assert_eq!(entry(9), "skinny_fp8_16");
        assert_eq!(entry(32), "skinny_fp8_32");
        assert_eq!(entry(33), "skinny_fp8_64");
        assert_eq!(entry(64), "skinny_fp8_64");
    }
}
