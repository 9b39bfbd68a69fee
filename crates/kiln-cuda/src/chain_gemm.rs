//! Launchers of the decode GEMM in the prefill GEMM's order (kernels/chain_gemm.cu): each output
//! one tensor-core chain over k in ascending 16-wide groups, the order of the split-K-free
//! cuBLASLt algorithms the prefill pins, so a row's bits here are the bits a prefill step's GEMM
//! gives it (contract_chain checks both against each other). Which entry a launch takes never
//! changes a bit; it is chosen by the row count, or named by `KILN_CHAIN_ENTRY` for A/B runs.
//! A chain waits on each product before the next (about 125 cycles a 16-wide group on the H200),
//! so a weight of k columns takes at least k / 16 of those waits at any row count; a wgmma form
//! of the chain waited longer (about 170 cycles; docs/BENCH.md, 2026-12-04 17:56Z) and was
//! dropped. Which steps take the kernel: gemm_chain_rows.rs.

use std::sync::OnceLock;

use anyhow::{bail, Result};

use crate::device::{i32_of, Arg, DevPtr, Gpu};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::macro_entries;

/// The most rows one launch of the widest entry takes: the most a decode-only step may have to
/// take the chain kernel (gemm_chain_rows.rs times each weight's limit up to it).
pub const CHAIN_MAX_ROWS: usize = 32;

/// Weight rows a warp owns, and k a shared-memory stage holds.
const WARP_ROWS: usize = 16;
const STAGE_K: usize = 64;

/// One `CG_ENTRY(NAME, NT, WARPS, STAGES)` of chain_gemm.cu.
#[derive(Debug, Clone)]
pub struct ChainEntry {
    pub name: String,
    /// 8-row groups of x a launch takes (at most 8 * nt rows).
    pub nt: usize,
    pub warps: usize,
    pub stages: usize,
}

impl ChainEntry {
    fn from_source(p: &EntryPoint) -> Result<ChainEntry> {
        Ok(ChainEntry {
            name: p.name.clone(),
            nt: p.num("NT")?,
            warps: p.num("WARPS")?,
            stages: p.num("STAGES")?,
        })
    }

    /// The rings: each warp's stages hold its 16 weight rows and its own copy of x's 8 * nt
    /// rows, 64 k of bf16 each.
    pub fn smem_bytes(&self) -> usize {
        let rows = self.warps * (WARP_ROWS + 8 * self.nt);
        self.stages * rows * STAGE_K * 2
    }

    pub fn max_rows(&self) -> usize {
        8 * self.nt
    }
}

/// Every entry of chain_gemm.cu, in source order.
pub fn entries() -> &'static [ChainEntry] {
    static ENTRIES: OnceLock<Vec<ChainEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("chain_gemm", ChainEntry::from_source))
}

pub fn find_entry(name: &str) -> Option<&'static ChainEntry> {
    entries().iter().find(|e| e.name == name)
}

/// Dynamic shared memory each entry asks for (kernels.rs raises the limit of those above 48 KB).
pub fn smem_needs() -> impl Iterator<Item = (String, usize)> {
    entries().iter().map(|e| (e.name.clone(), e.smem_bytes()))
}

/// The entry for `rows` rows (at most 32 a launch): the fewest 8-row groups that hold them, with
/// two warps a CTA for up to 8 rows, four above (the H200's timings of 2026-12-04: with two,
/// more 8-row groups left the multiprocessors too few warps).
fn entry_for(rows: usize) -> &'static ChainEntry {
    static FORCED: OnceLock<Option<&'static ChainEntry>> = OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        std::env::var("KILN_CHAIN_ENTRY")
            .ok()
            .and_then(|n| find_entry(&n))
    });
    if let Some(e) = forced.filter(|e| rows <= e.max_rows()) {
        return e;
    }
    let name = match rows {
        0..=8 => "chain_gemm_1x2",
        9..=16 => "chain_gemm_2x4",
        _ => "chain_gemm_4x4",
    };
    find_entry(name).expect("chain_gemm.cu defines the entries entry_for names")
}

impl Gpu {
    /// y[m, n] = x[m, :] . w[n, :] for m < rows (f32 y, bf16 x and w), each output in the
    /// pinned prefill GEMM's order, in launches of at most 32 rows. Needs k % 8 == 0 and
    /// 16-byte aligned x and w.
    #[allow(clippy::too_many_arguments)]
    pub fn chain_gemm(
        &self,
        pdl: bool,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let mut done = 0;
        while done < rows {
            let e = entry_for(rows - done);
            let m = (rows - done).min(e.max_rows());
            let yd = DevPtr::<f32>::new(y).row(done, n).addr();
            let xd = DevPtr::<u16>::new(x).row(done, k).addr();
            self.chain_entry_launch(e, pdl, yd, xd, w, m, n, k)?;
            done += m;
        }
        Ok(())
    }

    /// One launch of entry `e` (at most `e.max_rows()` rows): for tests and benchmarks that
    /// compare the entries.
    #[allow(clippy::too_many_arguments)]
    pub fn chain_entry_launch(
        &self,
        e: &ChainEntry,
        pdl: bool,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if rows == 0 || rows > e.max_rows() || !k.is_multiple_of(8) {
            bail!(
                "{} takes 1..={} rows and k % 8 == 0, got {rows} rows, k = {k}",
                e.name,
                e.max_rows()
            );
        }
        let args = [
            Arg::Ptr(y),
            Arg::Ptr(x),
            Arg::Ptr(w),
            Arg::I32(rows as i32),
            Arg::I32(i32_of(n, "n")?),
            Arg::I32(i32_of(k, "k")?),
        ];
        let grid = (n.div_ceil(WARP_ROWS * e.warps) as u32, 1, 1);
        let threads = 32 * e.warps as u32;
        self.launch_with(&e.name, grid, threads, e.smem_bytes() as u32, &args, pdl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_count_has_an_entry_that_holds_it() {
        for rows in 1..=CHAIN_MAX_ROWS {
            let e = entry_for(rows);
            assert!(rows <= e.max_rows(), "{} for {rows} rows", e.name);
        }
        for e in entries() {
            assert!(e.stages >= 2, "{}: the ring needs two stages", e.name);
            assert!(e.smem_bytes() <= 227 * 1024, "{}", e.name);
        }
    }
}
