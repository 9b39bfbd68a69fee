//! Launchers of the decode GEMM in the prefill GEMM's order (kernels/chain_gemm.cu with
//! mma.sync, kernels/chain_wg.cu with wgmma): each output one tensor-core chain over k in
//! ascending 16-wide groups, the order of the split-K-free cuBLASLt algorithms the prefill pins,
//! so a row's bits here are the bits a prefill step's GEMM gives it (contract_chain checks both
//! against each other). Which entry a launch takes never changes a bit; it is chosen by the row
//! count (the wgmma entries with `KILN_CHAIN_WG=1` on sm_90), or named by `KILN_CHAIN_ENTRY`
//! for A/B runs.

use std::sync::OnceLock;

use anyhow::{bail, Result};

use crate::device::{i32_of, Arg, DevPtr, Gpu};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::macro_entries;

/// The most rows of a decode-only step that take the chain kernel with KILN_CHAIN_GEMM (one
/// launch of the widest entry); steps with more take the pinned cuBLASLt GEMM, faster there
/// (H200, 2026-12-04: at 32 rows the chain kernel is ahead on every Llama-3-8B weight).
pub const CHAIN_MAX_ROWS: usize = 32;

/// Weight rows a warp owns, and k a shared-memory stage holds.
const WARP_ROWS: usize = 16;
const STAGE_K: usize = 64;

/// One `CG_ENTRY(NAME, NT, WARPS, STAGES)` of chain_gemm.cu or `CW_ENTRY(NAME, NT, STAGES)`
/// of chain_wg.cu (one warpgroup).
#[derive(Debug, Clone)]
pub struct ChainEntry {
    pub name: String,
    /// 8-row groups of x a launch takes (at most 8 * nt rows).
    pub nt: usize,
    pub warps: usize,
    pub stages: usize,
    /// A chain_wg.cu entry: the warpgroup shares each stage's rows of x.
    pub wg: bool,
}

impl ChainEntry {
    fn from_source(p: &EntryPoint) -> Result<ChainEntry> {
        Ok(ChainEntry {
            name: p.name.clone(),
            nt: p.num("NT")?,
            warps: p.num("WARPS")?,
            stages: p.num("STAGES")?,
            wg: false,
        })
    }

    fn from_wg_source(p: &EntryPoint) -> Result<ChainEntry> {
        Ok(ChainEntry {
            name: p.name.clone(),
            nt: p.num("NT")?,
            warps: 4,
            stages: p.num("STAGES")?,
            wg: true,
        })
    }

    /// The ring: each stage holds 16 weight rows a warp and 8 * nt rows of x (one copy of x a
    /// warp, or one a warpgroup), 64 k of bf16 each.
    pub fn smem_bytes(&self) -> usize {
        let x_copies = if self.wg { 1 } else { self.warps };
        let rows = self.warps * WARP_ROWS + x_copies * 8 * self.nt;
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

/// Every entry of chain_wg.cu (sm_90 devices only).
pub fn wg_entries() -> &'static [ChainEntry] {
    static ENTRIES: OnceLock<Vec<ChainEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("chain_wg", ChainEntry::from_wg_source))
}

/// The entries a device can run: chain_gemm.cu's, and chain_wg.cu's where there is wgmma.
pub fn device_entries(gpu: &Gpu) -> Vec<&'static ChainEntry> {
    let wg = gpu.has_wgmma().then(wg_entries).unwrap_or(&[]);
    entries().iter().chain(wg).collect()
}

pub fn find_entry(name: &str) -> Option<&'static ChainEntry> {
    entries()
        .iter()
        .chain(wg_entries())
        .find(|e| e.name == name)
}

/// Dynamic shared memory each entry asks for (kernels.rs raises the limit of those above 48 KB).
pub fn smem_needs() -> impl Iterator<Item = (String, usize)> {
    entries()
        .iter()
        .chain(wg_entries())
        .map(|e| (e.name.clone(), e.smem_bytes()))
}

/// The entry for `rows` rows (at most 32 a launch): the fewest 8-row groups that hold them; with
/// `wg` (KILN_CHAIN_WG=1 on an sm_90 device) chain_wg.cu's, else chain_gemm.cu's with two warps a
/// CTA for up to 8 rows, four above (the H200's timings of 2026-12-04: with two, more 8-row
/// groups left the multiprocessors too few warps).
fn entry_for(rows: usize, wg: bool) -> &'static ChainEntry {
    static FORCED: OnceLock<Option<&'static ChainEntry>> = OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        std::env::var("KILN_CHAIN_ENTRY")
            .ok()
            .and_then(|n| find_entry(&n))
    });
    if let Some(e) = forced.filter(|e| rows <= e.max_rows() && (wg || !e.wg)) {
        return e;
    }
    let name = match (wg, rows) {
        (true, 0..=8) => "chain_wg_1",
        (true, 9..=16) => "chain_wg_2",
        (true, _) => "chain_wg_4",
        (false, 0..=8) => "chain_gemm_1x2",
        (false, 9..=16) => "chain_gemm_2x4",
        (false, _) => "chain_gemm_4x4",
    };
    find_entry(name).expect("the chain modules define the entries entry_for names")
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
        let wg = crate::switches::Switches::from_env().chain_wg && self.has_wgmma();
        let mut done = 0;
        while done < rows {
            let e = entry_for(rows - done, wg);
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
        for (rows, wg) in (1..=32).flat_map(|r| [(r, false), (r, true)]) {
            let e = entry_for(rows, wg);
            assert!(
                rows <= e.max_rows() && e.wg == wg,
                "{} for {rows} rows",
                e.name
            );
        }
        for e in entries().iter().chain(wg_entries()) {
            assert!(e.stages >= 2, "{}: the ring needs two stages", e.name);
            assert!(e.smem_bytes() <= 227 * 1024, "{}", e.name);
        }
    }
}
