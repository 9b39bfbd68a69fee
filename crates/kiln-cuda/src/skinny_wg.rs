//! Launchers of the wgmma decode GEMM (kernels/skinny_wg.cu, sm_90a): the 16-warp skinny
//! kernel's bits for many rows, as skinny_tc.cu gives them with mma.sync, from warpgroup
//! products. x is first rewritten into a workspace (`skinny_wg_x`: each chunk's words in the
//! order wgmma's shared-memory operand reads them), reserved at start for the widest
//! activation of a decode step. `KILN_SKINNY_WG=N` sends decode GEMM launches of at least N
//! rows to it (contract_decode_fused checks every entry against the skinny kernel).

use std::sync::OnceLock;

use anyhow::{bail, Result};

use crate::device::{i32_of, Arg, Gpu};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::macro_entries;
use crate::skinny::SkinnyKind;
use crate::skinny_fused::Epilogue;
use crate::skinny_tc::ring_bytes;
pub use crate::skinny_wg_measured::{
    measured_wg_entry, WgShape, MEASURED, MEASURED_CLUSTERED, MEASURED_MIN_ROWS,
};
use crate::store::StoreType;
use crate::switches::{KernelChoice, SkinnyTc, Switches, WgCluster, WgMode};

/// One `WG_ENTRY(NAME, WG, BM, S, MINB)` of skinny_wg.cu (or a split or clustered one).
#[derive(Debug, Clone)]
pub struct WgEntry {
    pub name: String,
    /// Warpgroups along the weight, 64 rows each.
    pub wg: usize,
    /// Tokens a CTA (the wgmma N).
    pub bm: usize,
    pub stages: usize,
    /// CTAs per multiprocessor the launch bounds promise.
    pub min_blocks: usize,
    /// `WG_SPLIT_ENTRY` (`skinny_wgs_*`): CTAs along the 16 chains, joined by skinny_tc_join.
    pub split: bool,
    /// CTAs a cluster (`WGC_*`, `CL`): they share each k-tile of x, copied from the tiled
    /// layout of `skinny_wg_xt`; 1 for the others.
    pub cluster: usize,
}

impl WgEntry {
    fn from_source(p: &EntryPoint) -> Result<WgEntry> {
        let num = |what: &str| p.num(what);
        Ok(WgEntry {
            name: p.name.clone(),
            wg: num("WG")?,
            bm: num("BM")?,
            stages: num("S")?,
            min_blocks: num("MINB")?,
            split: p.name.starts_with("skinny_wgs"),
            cluster: match p.arg("CL") {
                Some(_) => num("CL")?,
                None => 1,
            },
        })
    }

    pub fn threads(&self) -> usize {
        128 * self.wg
    }

    /// Weight rows and tokens of one CTA.
    pub fn tile(&self) -> (usize, usize) {
        (64 * self.wg, self.bm)
    }

    /// The ring: `stages` k-tiles of 128 bytes per weight row and token row; a clustered
    /// entry's two 8-byte barriers a stage after it.
    pub fn smem_bytes(&self) -> usize {
        ring_bytes(self.tile(), self.stages)
            + if self.cluster > 1 {
                16 * self.stages
            } else {
                0
            }
    }

    /// CTAs of a launch over `tiles` 16-row weight tiles and `rows` tokens (a clustered entry's
    /// CTAs along the weight rounded up to whole clusters).
    pub fn ctas(&self, tiles: usize, rows: usize) -> usize {
        let along = tiles.div_ceil(self.tile().0 / 16);
        along.next_multiple_of(self.cluster) * rows.div_ceil(self.bm)
    }

    /// The twin of this entry run in clusters of `cluster` CTAs (itself for 1), if there is one.
    pub fn clustered(&'static self, cluster: usize) -> &'static WgEntry {
        if cluster <= 1 || self.cluster > 1 {
            return self;
        }
        find_wg_entry(&format!("{}_c{cluster}", self.name)).unwrap_or(self)
    }
}

/// Every GEMM entry of skinny_wg.cu (`WG_ENTRY` and `WG_SPLIT_ENTRY`), read from its source
/// once.
pub fn all_wg_entries() -> &'static [WgEntry] {
    static ENTRIES: OnceLock<Vec<WgEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("skinny_wg", WgEntry::from_source))
}

/// The whole-K entries of one CTA a cluster (`WG_ENTRY`): one launch, the sums straight into
/// the epilogue. (Their clustered twins: [`WgEntry::clustered`].)
pub fn wg_entries() -> &'static [WgEntry] {
    static WHOLE: OnceLock<Vec<WgEntry>> = OnceLock::new();
    WHOLE.get_or_init(|| {
        all_wg_entries()
            .iter()
            .filter(|e| !e.split && e.cluster == 1)
            .cloned()
            .collect()
    })
}

/// The entries split along the chains (`WG_SPLIT_ENTRY`), one CTA a cluster.
pub fn wg_split_entries() -> &'static [WgEntry] {
    static SPLIT: OnceLock<Vec<WgEntry>> = OnceLock::new();
    SPLIT.get_or_init(|| {
        all_wg_entries()
            .iter()
            .filter(|e| e.split && e.cluster == 1)
            .cloned()
            .collect()
    })
}

pub fn find_wg_entry(name: &str) -> Option<&'static WgEntry> {
    all_wg_entries().iter().find(|e| e.name == name)
}

/// The split entry for `tiles` weight tiles and `rows` tokens: the largest tiling whose CTAs
/// (16 a tile) fill every resident slot, else the one with the most CTAs.
pub fn choose_wg_split_entry(tiles: usize, rows: usize, sms: usize) -> &'static WgEntry {
    let all = wg_split_entries();
    let area = |e: &&WgEntry| e.tile().0 * e.tile().1;
    all.iter()
        .filter(|e| 16 * e.ctas(tiles, rows) >= sms * e.min_blocks)
        .max_by_key(area)
        .unwrap_or_else(|| {
            all.iter()
                .max_by_key(|e| e.ctas(tiles, rows))
                .expect("skinny_wg.cu has split entries")
        })
}

/// The entry for `tiles` 16-row weight tiles and `rows` tokens on `sms` multiprocessors: of the
/// entries whose CTAs fill every resident slot, the largest tile (the least read through L2);
/// when none fills the GPU, the one with the most CTAs. `KILN_SKINNY_WG_TILE=WGxBM` forces one.
pub fn choose_wg_entry(tiles: usize, rows: usize, sms: usize) -> &'static WgEntry {
    if let Some(e) = forced_tile() {
        return e;
    }
    let all = wg_entries();
    let area = |e: &&WgEntry| {
        let (bn, bm) = e.tile();
        (bn * bm, bm)
    };
    all.iter()
        .filter(|e| e.ctas(tiles, rows) >= sms * e.min_blocks)
        .max_by_key(area)
        .unwrap_or_else(|| {
            let most = all.iter().map(|e| e.ctas(tiles, rows)).max().unwrap_or(0);
            all.iter()
                .filter(|e| e.ctas(tiles, rows) == most)
                .max_by_key(area)
                .expect("skinny_wg.cu has entries")
        })
}

fn forced_tile() -> Option<&'static WgEntry> {
    static FORCED: OnceLock<Option<&'static WgEntry>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        let v = std::env::var("KILN_SKINNY_WG_TILE").ok()?;
        find_wg_entry(&format!("skinny_wg_{v}"))
    })
}

/// The wgmma entries with the dynamic shared memory each needs.
pub fn smem_needs() -> Vec<(String, usize)> {
    all_wg_entries()
        .iter()
        .map(|e| (e.name.clone(), e.smem_bytes()))
        .collect()
}

/// A planned launch of the wgmma kernel: the entry, the rewritten-x workspace and, for a split
/// entry, the chain partials.
#[derive(Debug, Clone, Copy)]
pub struct WgLaunch {
    pub entry: &'static WgEntry,
    pub xw: u64,
    pub part: Option<u64>,
}

/// k-tiles of a pass of the 16 chains over `k` (skinny_wg.cu's `wg_tiles_a_pass`).
fn tiles_a_pass(k: usize) -> usize {
    k.div_ceil(32).div_ceil(16).div_ceil(2)
}

/// Elements of the rewritten x for `rows` tokens of width `k`: the larger of skinny_wg_x's
/// layout (rows of whole chunks) and skinny_wg_xt's (16 passes of k-tiles of 64 elements, the
/// rows rounded up to 128).
pub fn wg_x_elems(rows: usize, k: usize) -> usize {
    let tiled = 16 * tiles_a_pass(k) * rows.next_multiple_of(128) * 64;
    (rows * k.div_ceil(32) * 32).max(tiled)
}

/// The widest input of a decode GEMM of `spec`: the hidden size (QKV, gate/up, the LM head),
/// the attention output (o) or the intermediate size (down).
pub fn decode_max_k(spec: &kiln_model::ModelSpec) -> usize {
    let q_dim = spec.max_over_layers(|l| l.attn.q_dim());
    let inter = spec.max_over_layers(|l| l.ffn.intermediate());
    spec.hidden_size.max(q_dim).max(inter)
}

/// Bytes the wgmma path reserves at start for decode steps of up to `max_seqs` rows of `spec`
/// stored as `store`, when it can take any of them: a bf16 backend (the module is bf16 only)
/// whose row count reaches the switch's first (footprint.rs counts them).
pub fn wg_reserve_bytes(spec: &kiln_model::ModelSpec, store: StoreType, max_seqs: usize) -> usize {
    match Switches::from_env().wg.min_rows() {
        Some(from) if from <= max_seqs && store == StoreType::Bf16 => {
            wg_x_elems(max_seqs, decode_max_k(spec)) * 2
        }
        _ => 0,
    }
}

impl Gpu {
    /// Whether this GPU builds the wgmma module (kernel_sources.rs: sm_90a only).
    pub fn has_wgmma(&self) -> bool {
        crate::kernel_sources::source("skinny_wg").is_some_and(|s| s.target(self.arch).is_some())
    }

    /// Bytes of the workspaces reserved at start: the chain partials of the split path, the
    /// rewritten x of the wgmma path and the wgmma row order's split launches' workspace.
    pub fn reserved_scratch_bytes(&self) -> usize {
        self.tc_part.get().map_or(0, |b| b.len() * 4)
            + self.wg_x.get().map_or(0, |b| b.len() * 2)
            + self.wg_rows_space.get().map_or(0, |s| s.bytes())
    }

    /// Reserves the rewritten-x workspace of the wgmma path (once per device; later calls keep
    /// the first reservation).
    pub fn reserve_wg(&self, spec: &kiln_model::ModelSpec, max_seqs: usize) -> Result<()> {
        let bytes = wg_reserve_bytes(spec, self.store, max_seqs);
        // Reserved whatever the GPU, as footprint.rs predicts it; only sm_90 ones use it.
        if bytes > 0 && self.wg_x.get().is_none() {
            let _ = self.wg_x.set(self.alloc::<u16>(bytes / 2)?);
        }
        Ok(())
    }

    /// The entry and workspace for a decode launch of `rows` rows of an `n` x `k` weight in
    /// family `kind` through `epi`, when KILN_SKINNY_WG takes it (the tensor-core kernels not
    /// switched off under `c`, the 16-warp family whose order it keeps, rows enough, the
    /// workspace reserved and large enough); None otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn wg_for(
        &self,
        c: &KernelChoice,
        kind: SkinnyKind,
        epi: &Epilogue,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<Option<WgLaunch>> {
        let sw = Switches::from_env();
        let Some(from) = sw.wg.min_rows() else {
            return Ok(None);
        };
        if rows < from
            || c.skinny_tc == SkinnyTc::Off
            || kind != SkinnyKind::Wide
            || !self.has_wgmma()
        {
            return Ok(None);
        }
        let Some(xw) = self.wg_x.get() else {
            return Ok(None);
        };
        if wg_x_elems(rows, k) > xw.len() {
            return Ok(None);
        }
        let (tiles, sms) = (epi.tiles(n)?, self.sm_count as usize);
        if sw.wg == WgMode::Measured {
            let clustered = sw.wg_cluster == WgCluster::Measured;
            let Some(entry) = measured_wg_entry(n, k, rows, clustered) else {
                return Ok(None);
            };
            let entry = entry.clustered(sw.wg_cluster.twins());
            let part = match entry.split {
                false => None,
                true => match self.split_part(rows, tiles) {
                    Some(p) => Some(p),
                    None => return Ok(None),
                },
            };
            return Ok(Some(WgLaunch {
                entry,
                xw: xw.ptr(),
                part,
            }));
        }
        // Narrow weights at the token counts the chain split takes: split here too.
        let part = self.split_part_for(rows, tiles);
        let entry = match part {
            Some(_) => choose_wg_split_entry(tiles, rows, sms),
            None => choose_wg_entry(tiles, rows, sms),
        }
        .clustered(sw.wg_cluster.twins());
        Ok(Some(WgLaunch {
            entry,
            xw: xw.ptr(),
            part,
        }))
    }

    /// [`Gpu::skinny_wg_entry`] as [`Gpu::wg_for`] planned it.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_wg(
        &self,
        l: &WgLaunch,
        epi: &Epilogue,
        pdl: bool,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        self.skinny_wg_entry(l.entry, epi, pdl, x, w, l.xw, l.part, rows, n, k)
    }

    /// x . w^T for `rows` rows on the tensor cores through wgmma entry `e`, x rewritten into `xw`
    /// ([`wg_x_elems`] elements) first, the sums going where `epi` says: the bits of the 16-warp
    /// skinny kernel. A split entry writes its chains to `part`
    /// ([`crate::skinny_tc_split::split_part_floats`] floats), then skinny_tc_join adds them in
    /// chain order. Needs k % 8 == 0 and 16-byte aligned x and w.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_wg_entry(
        &self,
        e: &WgEntry,
        epi: &Epilogue,
        pdl: bool,
        x: u64,
        w: u64,
        xw: u64,
        part: Option<u64>,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        if !k.is_multiple_of(8) {
            bail!("wgmma decode GEMM needs k % 8 == 0, got {k}");
        }
        if e.split != part.is_some() {
            bail!("{}: split entries take partials, the others none", e.name);
        }
        let tiles = epi.tiles(n)?;
        let (m, kk) = (i32_of(rows, "rows")?, i32_of(k, "k")?);
        let mut args = vec![Arg::Ptr(x), Arg::Ptr(xw), Arg::I32(m), Arg::I32(kk)];
        let (rewrite, threads) = if e.cluster > 1 {
            // The tiled layout, its rows rounded up to the entry's tokens a CTA.
            let mp = rows.next_multiple_of(e.bm);
            args.push(Arg::I32(i32_of(mp, "rows")?));
            ("skinny_wg_xt", 32 * tiles_a_pass(k) * mp)
        } else {
            ("skinny_wg_x", rows * k.div_ceil(32))
        };
        let grid = (u32::try_from(threads.div_ceil(256))?, 1, 1);
        self.launch_with(rewrite, grid, 256, 0, &args, pdl)?;
        let mut args = vec![Arg::Ptr(xw), Arg::Ptr(w), Arg::I32(m), Arg::I32(kk)];
        let ld = tiles * 16;
        if let Some(part) = part {
            args.extend([Arg::Ptr(part), Arg::I32(i32_of(ld, "partial row")?)]);
        }
        args.extend(epi.args(n)?);
        let ctas = u32::try_from(e.ctas(tiles, rows))?;
        let grid = (ctas, if e.split { 16 } else { 1 }, 1);
        let (threads, smem) = (e.threads() as u32, e.smem_bytes() as u32);
        self.launch_with(&e.name, grid, threads, smem, &args, pdl)?;
        match part {
            Some(part) => self.tc_join(epi, pdl, part, rows, n),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_read_from_the_source_have_their_shapes() {
        let got: Vec<_> = wg_entries()
            .iter()
            .map(|e| (e.name.as_str(), e.tile(), e.stages, e.min_blocks))
            .collect();
        let want = [
            ("skinny_wg_1x64", (64, 64), 4, 3),
            ("skinny_wg_2x64", (128, 64), 4, 2),
            ("skinny_wg_1x128", (64, 128), 4, 2),
            ("skinny_wg_2x128", (128, 128), 4, 1),
        ];
        assert_eq!(got, want);
        let split: Vec<_> = wg_split_entries().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(split, ["skinny_wgs_1x64", "skinny_wgs_2x128"]);
        // o at 128 rows: 32 CTAs of 128 x 128 a chain, 512 in all, fill 132 SMs.
        assert_eq!(
            choose_wg_split_entry(256, 128, 132).name,
            "skinny_wgs_2x128"
        );
    }

    /// The CTAs the launch bounds promise fit an H100/H200 multiprocessor: 228 KB of shared
    /// memory (1 KB of it reserved per CTA) and 64K registers.
    #[test]
    fn every_entry_fits_its_occupancy() {
        for e in all_wg_entries() {
            let smem = e.min_blocks * (e.smem_bytes() + 1024);
            assert!(smem <= 228 * 1024, "{}: {smem} bytes", e.name);
            assert!(
                e.min_blocks * e.threads() * 128 <= 65536 || e.bm == 128,
                "{}",
                e.name
            );
        }
    }

    #[test]
    fn every_entry_has_clustered_twins_of_its_shape() {
        for e in wg_entries().iter().chain(wg_split_entries()) {
            for c in [2, 4] {
                let t = e.clustered(c);
                assert_eq!(t.name, format!("{}_c{c}", e.name));
                assert_eq!((t.tile(), t.split, t.cluster), (e.tile(), e.split, c));
                assert_eq!(t.smem_bytes(), e.smem_bytes() + 16 * e.stages);
            }
            assert!(std::ptr::eq(e.clustered(1), e));
        }
        // gate/up at 128 rows in 2 x 64 tiles: 224 CTAs along the weight, two token blocks.
        let e = find_wg_entry("skinny_wg_2x64_c4").unwrap();
        assert_eq!(e.ctas(28672 / 16, 128), 224 * 2);
        // 100 16-row tiles, 64 rows a CTA: 25 CTAs along, rounded up to 28 for clusters of 4.
        let e = find_wg_entry("skinny_wg_1x64_c4").unwrap();
        assert_eq!(e.ctas(100, 64), 28);
    }

    #[test]
    fn the_shape_follows_the_weight_and_the_rows() {
        // gate/up at 128 rows: 128 x 128 CTAs (224) fill 132 SMs once.
        assert_eq!(
            choose_wg_entry(28672 / 16, 128, 132).name,
            "skinny_wg_2x128"
        );
        // o at 128 rows: none fills the GPU; the most CTAs (64 x 64: 64 x 2).
        let e = choose_wg_entry(4096 / 16, 128, 132);
        assert_eq!(e.name, "skinny_wg_1x64");
        assert_eq!(e.ctas(256, 128), 128);
        // Three tokens of 40: skinny_wg_x's 3 x 64; skinny_wg_xt's 16 passes of one k-tile of
        // 128 rows (the rows rounded up), the larger. Llama-3-8B's widths take the same either
        // way.
        assert_eq!(wg_x_elems(3, 40), 16 * 128 * 64);
        assert_eq!(wg_x_elems(128, 14336), 128 * 14336);
        assert_eq!(wg_x_elems(256, 4096), 256 * 4096);
    }
}
