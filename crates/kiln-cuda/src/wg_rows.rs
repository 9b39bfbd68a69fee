//! Decode rows on Hopper's wgmma in one order that K alone fixes (kernels/wg_rows.cuh, whose
//! comment gives it): 64 weight rows by 8 to 64 tokens a warpgroup, weights and x through a
//! cp.async ring in wgmma's swizzle, so a row's bits do not depend on the other rows of a step
//! or on their count, the property the skinny kernels give bf16 and fp8 decode rows.
//! - fp8 projections (kernels/fp8_wg.cu, KILN_FP8_WG): wgmma's own E4M3, where fp8.cu's skinny
//!   kernels run f16 MMAs after unpacking. Other bits than KILN_FP8_SKINNY's (both within the
//!   fp8 GEMM's contract), the same for every row count.
//! - bf16 rows (kernels/bf16_wg.cu, [`Gpu::bf16_wg_in`]): the same order with bf16 wgmmas,
//!   timed against the skinny kernels' order (`cuda_bench gemm`); steps take it with KILN_BF16_WG.
//!
//! A launch of a narrow weight at few rows (or deep rows) is split along the order's chains
//! (wg_rows_choice.rs says when): each CTA sums one chain into a reserved workspace and the last
//! of a block's CTAs adds them in chain order, the same adds as the whole kernel's.

use std::sync::OnceLock;

use anyhow::{ensure, Result};

use crate::device::{i32_of, Arg, DevBuf, Gpu};
use crate::fp8_rows::{Fp8Matrix, Fp8Rows};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::macro_entries;
use crate::skinny_fused::Epilogue;
pub use crate::wg_rows_choice::{bf16_wg_launch, splittable, wg_launch, WgLaunch};

/// The order's chains (wg_rows.cuh's `WR_CHAINS`): a split launch has this many CTAs a block.
pub const CHAINS: usize = 4;

/// The widest weight (rows) a launch may split: the QKV, o and down of 8B- to 70B-class models
/// (gate/up and LM heads have CTAs enough, and their partials would be large).
pub const SPLIT_MAX_N: usize = 16_384;

/// The most rows a split launch takes (the workspace holds this many).
pub const SPLIT_MAX_ROWS: usize = 128;

/// One `FP8_WG_ENTRY` of fp8_wg.cu or `BF16_WG_ENTRY` of bf16_wg.cu: (NAME, WR, WT, BN, S,
/// MINB, OV).
#[derive(Debug, Clone)]
pub struct WgEntry {
    pub name: String,
    /// 64-row weight groups a CTA.
    pub wr: usize,
    /// Token groups a CTA.
    pub wt: usize,
    /// Tokens a group (wgmma's N).
    pub bn: usize,
    /// Stages of the copy ring.
    pub stages: usize,
    /// CTAs a multiprocessor the launch bounds promise.
    pub minb: usize,
    /// A tile's adds beside the next tile's wgmmas (the `_o` entries).
    pub overlap: bool,
}

impl WgEntry {
    fn from_source(p: &EntryPoint) -> Result<WgEntry> {
        Ok(WgEntry {
            name: p.name.clone(),
            wr: p.num("WR")?,
            wt: p.num("WT")?,
            bn: p.num("BN")?,
            stages: p.num("S")?,
            minb: p.num("MINB")?,
            overlap: p.arg("OV").map(str::trim) == Some("true"),
        })
    }

    /// Weight rows of one CTA.
    pub fn rows(&self) -> usize {
        64 * self.wr
    }

    /// Tokens of one CTA.
    pub fn tokens(&self) -> usize {
        self.bn * self.wt
    }

    pub fn threads(&self) -> usize {
        128 * self.wr * self.wt
    }

    /// The ring: each stage 128 bytes of every weight row and token.
    pub fn smem_bytes(&self) -> usize {
        self.stages * (self.rows() + self.tokens()) * 128
    }

    /// (token blocks, weight blocks) of a launch of `m` rows of an `n`-row weight.
    pub fn blocks(&self, n: usize, m: usize) -> (usize, usize) {
        (m.div_ceil(self.tokens()), n.div_ceil(self.rows()))
    }

    pub(crate) fn ctas(&self, n: usize, m: usize) -> usize {
        let (mb, nb) = self.blocks(n, m);
        mb * nb
    }
}

/// The fp8 entries, in the source's order.
pub fn wg_entries() -> &'static [WgEntry] {
    static ENTRIES: OnceLock<Vec<WgEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("fp8_wg", WgEntry::from_source))
}

/// The bf16 entries (the fp8 ones' shapes), in the source's order.
pub fn bf16_wg_entries() -> &'static [WgEntry] {
    static ENTRIES: OnceLock<Vec<WgEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("bf16_wg", WgEntry::from_source))
}

/// What the entries ask of shared memory (kernels.rs allows it at start).
pub fn smem_needs() -> impl Iterator<Item = (String, usize)> {
    wg_entries()
        .iter()
        .chain(bf16_wg_entries())
        .map(|e| (e.name.clone(), e.smem_bytes()))
}

/// (partial floats, arrival counters) of the split launches' workspace for steps of up to
/// `max_seqs` decode rows: every chain of the widest split weight at the most rows, and a
/// counter a block of the finest tiling.
pub fn workspace_len(max_seqs: usize) -> (usize, usize) {
    let rows = max_seqs.clamp(1, SPLIT_MAX_ROWS);
    let narrowest = wg_entries().iter().map(WgEntry::tokens).min().unwrap_or(8);
    let blocks = rows.div_ceil(narrowest) * SPLIT_MAX_N.div_ceil(64);
    (CHAINS * rows * SPLIT_MAX_N, blocks)
}

/// Whether a backend with switches `sw`, fp8 projections or not and storing `store` takes the
/// row order anywhere (KILN_FP8_WG with fp8 projections, KILN_BF16_WG with bf16 storage), and
/// so reserves the split launches' workspace (backend_open.rs; footprint.rs counts it).
pub fn wg_rows_on(
    sw: &crate::switches::Switches,
    fp8: bool,
    store: crate::store::StoreType,
) -> bool {
    (fp8 && sw.fp8_wg) || (sw.bf16_wg && store == crate::store::StoreType::Bf16)
}

/// Bytes [`Gpu::reserve_wg_rows`] takes for `max_seqs` decode rows when the path is on
/// (footprint.rs counts them).
pub fn reserve_bytes(on: bool, max_seqs: usize) -> usize {
    if !on {
        return 0;
    }
    let (floats, counters) = workspace_len(max_seqs);
    floats * 4 + counters * 4
}

/// The split launches' workspace: chain partials and zeroed arrival counters (each launch's
/// last CTA of a block zeroes its counter again).
pub struct SplitSpace {
    part: DevBuf<f32>,
    count: DevBuf<i32>,
}

impl Gpu {
    /// Whether this GPU builds fp8_wg.cu and bf16_wg.cu (kernel_sources.rs: sm_90a only).
    pub fn has_wg_rows(&self) -> bool {
        crate::kernel_sources::source("fp8_wg").is_some_and(|s| s.target(self.arch).is_some())
    }

    /// Reserves the split launches' workspace for steps of up to `max_seqs` decode rows, when
    /// `on` (fp8 projections with KILN_FP8_WG, or KILN_BF16_WG; once per device, later calls
    /// keep the first).
    pub fn reserve_wg_rows(&self, on: bool, max_seqs: usize) -> Result<()> {
        if on && self.wg_rows_space.get().is_none() {
            let (floats, counters) = workspace_len(max_seqs);
            let space = SplitSpace {
                part: self.alloc(floats)?,
                count: self.alloc(counters)?,
            };
            let _ = self.wg_rows_space.set(space);
        }
        Ok(())
    }

    /// y[r, :] = (x_r . w^T) * (x's scale r * w's row scales) for rows 0..rows of `x` into y
    /// (`rows x w.rows` f32) in the fp8 wgmma order, in the launch [`wg_launch`] chooses, split
    /// where it says so and the workspace is reserved.
    pub fn fp8_wg(&self, y: u64, x: Fp8Rows, w: &Fp8Matrix, rows: usize) -> Result<()> {
        let l = wg_launch(w.rows, w.cols, rows, self.sm_count as usize);
        let split = l.split && self.split_fits(l.entry, rows, w.rows);
        self.fp8_wg_in(l.entry, split, y, x, w, rows)
    }

    /// `rows` bf16 rows of x times the `n x k` bf16 weight w in the wgmma row order into the
    /// epilogue `epi`, in the launch [`bf16_wg_launch`] chooses for the weight's places, split
    /// where it says so and the workspace is reserved (KILN_BF16_WG's decode GEMM).
    #[allow(clippy::too_many_arguments)]
    pub fn bf16_wg_epi(
        &self,
        epi: &Epilogue,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let places = epi.tiles(n)? * 16;
        let l = bf16_wg_launch(places, 2 * k, rows, self.sm_count as usize);
        let split = l.split && self.split_fits(l.entry, rows, places);
        self.bf16_wg_in(l.entry, split, epi, x, w, rows, n, k)
    }

    /// y (`rows x n` f32) = x . w^T in the wgmma row order ([`Gpu::bf16_wg_epi`], stored).
    pub fn bf16_wg(&self, y: u64, x: u64, w: u64, rows: usize, n: usize, k: usize) -> Result<()> {
        self.bf16_wg_epi(&Epilogue::Store { y }, x, w, rows, n, k)
    }

    /// [`Gpu::fp8_wg`] in entry `e`, split along the chains or not (an sm_90 device's: the
    /// module is built for no other).
    pub fn fp8_wg_in(
        &self,
        e: &WgEntry,
        split: bool,
        y: u64,
        x: Fp8Rows,
        w: &Fp8Matrix,
        rows: usize,
    ) -> Result<()> {
        let (n, k) = (w.rows, w.cols);
        ensure!(
            k.is_multiple_of(16),
            "fp8 rows of {k} bytes: fp8_wg copies 16 at a time"
        );
        let (m, nn, kk) = dims(rows, n, k)?;
        self.wg_rows_launch(e, split, rows, n, |part, count| {
            let mut args = [y, x.q, x.scale, w.q.ptr(), w.scale.ptr()]
                .map(Arg::Ptr)
                .to_vec();
            args.extend([m, nn, kk].map(Arg::I32));
            args.extend([part, count].map(Arg::Ptr));
            Ok(args)
        })
    }

    /// `rows` bf16 rows of x times the `n x k` bf16 weight w in the wgmma row order, through
    /// entry `e` of bf16_wg.cu (split along the chains or not) into the epilogue `epi` (its
    /// weight rows in the mode's order, as the skinny kernels take them); sm_90 only.
    #[allow(clippy::too_many_arguments)]
    pub fn bf16_wg_in(
        &self,
        e: &WgEntry,
        split: bool,
        epi: &Epilogue,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        ensure!(
            k.is_multiple_of(8),
            "bf16 rows of {k} values: bf16_wg copies 8 at a time"
        );
        let places = epi.tiles(n)? * 16;
        let (m, _, kk) = dims(rows, n, k)?;
        let np = i32_of(places, "places of the weight")?;
        self.wg_rows_launch(e, split, rows, places, |part, count| {
            let mut args = vec![Arg::Ptr(x), Arg::Ptr(w), Arg::I32(m), Arg::I32(kk)];
            args.extend([Arg::Ptr(part), Arg::Ptr(count), Arg::I32(np)]);
            args.extend(epi.args(n)?);
            Ok(args)
        })
    }

    /// Whether the reserved workspace holds a split launch of `rows` rows over `places` in `e`
    /// (a step's verify rows may outnumber the sequences it was reserved for: those launches
    /// run whole, in the same order).
    fn split_fits(&self, e: &WgEntry, rows: usize, places: usize) -> bool {
        self.wg_rows_space
            .get()
            .is_some_and(|s| s.holds(e, rows, places))
    }

    /// One launch of entry `e` over `places` weight rows, its arguments from `args(part,
    /// count)`: the split launches' workspace when `split`, nulls otherwise.
    fn wg_rows_launch(
        &self,
        e: &WgEntry,
        split: bool,
        rows: usize,
        places: usize,
        args: impl FnOnce(u64, u64) -> Result<Vec<Arg>>,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let (mb, nb) = e.blocks(places, rows);
        ensure!(
            nb <= 65_535,
            "{} rows of a weight: too many CTAs for {}",
            places,
            e.name
        );
        let (part, count, z) = if split {
            let space = self.wg_rows_space.get().ok_or_else(|| {
                anyhow::anyhow!("a split {} launch without its workspace", e.name)
            })?;
            ensure!(
                space.holds(e, rows, places),
                "a split {} launch of {rows} x {places} past its workspace",
                e.name
            );
            (space.part.ptr(), space.count.ptr(), CHAINS as u32)
        } else {
            (0, 0, 1)
        };
        self.launch(
            &e.name,
            (mb as u32, nb as u32, z),
            e.threads() as u32,
            e.smem_bytes() as u32,
            &args(part, count)?,
        )
    }
}

/// (rows, n, k) as kernel arguments.
fn dims(rows: usize, n: usize, k: usize) -> Result<(i32, i32, i32)> {
    Ok((
        i32_of(rows, "rows of x")?,
        i32_of(n, "rows of the weight")?,
        i32_of(k, "columns of the weight")?,
    ))
}

impl SplitSpace {
    pub fn bytes(&self) -> usize {
        self.part.bytes() + self.count.bytes()
    }

    /// Whether the chains' partials and the blocks' counters of a split launch of `rows` rows
    /// over `places` in `e` fit.
    fn holds(&self, e: &WgEntry, rows: usize, places: usize) -> bool {
        let (mb, nb) = e.blocks(places, rows);
        CHAINS * rows * places <= self.part.len() && mb * nb <= self.count.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_are_read_from_their_source() {
        let shapes: Vec<(usize, usize, usize)> = wg_entries()
            .iter()
            .map(|e| (e.rows(), e.tokens(), e.smem_bytes()))
            .collect();
        assert_eq!(
            shapes,
            [
                (64, 8, 73_728),
                (128, 8, 104_448),
                (64, 16, 71_680),
                (64, 32, 73_728),
                (64, 64, 98_304),
                (128, 64, 98_304),
                (64, 128, 98_304),
                (128, 128, 131_072),
                (64, 64, 98_304),
                (64, 32, 73_728),
            ],
            "fp8_wg.cu's FP8_WG_ENTRY lines"
        );
        let src = crate::kernel_sources::source("fp8_wg").unwrap().body;
        assert!(
            src.contains(&format!("#define WR_CHAINS {CHAINS}\n")),
            "the launcher's chains are the kernel's"
        );
        // bf16_wg.cu's entries: the same shapes, each named as its fp8 twin.
        let twins: Vec<_> = bf16_wg_entries()
            .iter()
            .map(|e| {
                (
                    e.name.replacen("bf16", "fp8", 1),
                    e.rows(),
                    e.tokens(),
                    e.stages,
                )
            })
            .collect();
        let fp8: Vec<_> = wg_entries()
            .iter()
            .map(|e| (e.name.clone(), e.rows(), e.tokens(), e.stages))
            .collect();
        assert_eq!(twins, fp8, "bf16_wg.cu's entries are fp8_wg.cu's shapes");
    }

    #[test]
    fn every_entry_leaves_room_for_the_ctas_its_launch_bounds_promise() {
        // 227 KiB of shared memory a multiprocessor on sm_90, 1 KiB of it the runtime's a CTA.
        for module in ["fp8_wg", "bf16_wg"] {
            let src = crate::kernel_sources::source(module).unwrap();
            for p in src.entry_points().unwrap() {
                let e = wg_entries()
                    .iter()
                    .chain(bf16_wg_entries())
                    .find(|e| e.name == p.name)
                    .unwrap();
                let minb = p.num("MINB").unwrap();
                assert!(
                    minb * (e.smem_bytes() + 1024) <= 227 * 1024,
                    "{}: {minb} CTAs of {} bytes",
                    e.name,
                    e.smem_bytes()
                );
            }
        }
    }

    #[test]
    fn the_workspace_holds_every_split_launch() {
        for max_seqs in [1, 8, 64, 128, 256] {
            let (floats, counters) = workspace_len(max_seqs);
            for m in 1..=max_seqs.min(SPLIT_MAX_ROWS) {
                for n in [64, 1_000, 4_096, 6_144, SPLIT_MAX_N] {
                    for e in wg_entries().iter().chain(bf16_wg_entries()) {
                        let (mb, nb) = e.blocks(n, m);
                        assert!(CHAINS * m * n <= floats && mb * nb <= counters);
                    }
                }
            }
        }
        assert_eq!(reserve_bytes(false, 128), 0);
    }
}
