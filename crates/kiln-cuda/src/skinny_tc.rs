//! Launchers of the tensor-core decode GEMM (kernels/skinny_tc.cu): the 16-warp skinny kernel's
//! bits for many rows, weights read once per launch for all of them. Which CTA shape a launch
//! takes never changes a bit (contract_decode_fused checks every shape against the skinny kernel
//! at every row count), so it is chosen per launch from the weight and the row count: by the
//! L2 rule of [`choose_tc_entry`] (`KILN_SKINNY_TC=N|on`) or by the measured table
//! [`MEASURED`] (`KILN_SKINNY_TC=auto`).

use std::sync::OnceLock;

use anyhow::{bail, Result};

use crate::device::{i32_of, Arg, Gpu};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::macro_entries;
use crate::skinny::SkinnyKind;
use crate::skinny_fused::Epilogue;
use crate::switches::{KernelChoice, SkinnyTc};

/// One `TC_ENTRY(NAME, WN, WM, MI, CH, S, MINB)` of skinny_tc.cu.
#[derive(Debug, Clone)]
pub struct TcEntry {
    pub name: String,
    /// Warps along the weight (16 `mi` rows each) and along the tokens (32 each).
    pub wn: usize,
    pub wm: usize,
    /// 16-row weight tiles a warp holds.
    pub mi: usize,
    /// Chains (warp sums of the skinny kernel) a pass builds at once: 2 or 1.
    pub chains: usize,
    pub stages: usize,
    /// CTAs per multiprocessor the launch bounds promise.
    pub min_blocks: usize,
    /// `TC_SPLIT_ENTRY` (`skinny_tcs_*`): CTAs along the 16 chains, joined by skinny_tc_join.
    pub split: bool,
}

impl TcEntry {
    fn from_source(p: &EntryPoint) -> Result<TcEntry> {
        let num = |what: &str| p.num(what);
        Ok(TcEntry {
            name: p.name.clone(),
            wn: num("WN")?,
            wm: num("WM")?,
            mi: num("MI")?,
            chains: num("CH")?,
            stages: num("S")?,
            min_blocks: num("MINB")?,
            split: p.name.starts_with("skinny_tcs_"),
        })
    }

    pub fn threads(&self) -> usize {
        32 * self.wn * self.wm
    }

    /// Weight rows and tokens of one CTA.
    pub fn tile(&self) -> (usize, usize) {
        (16 * self.mi * self.wn, 32 * self.wm)
    }

    /// The ring: `stages` k-tiles of 128 bytes per weight row and token row.
    pub fn smem_bytes(&self) -> usize {
        ring_bytes(self.tile(), self.stages)
    }

    /// CTAs of a launch over `tiles` 16-row weight tiles and `rows` tokens.
    pub fn ctas(&self, tiles: usize, rows: usize) -> usize {
        let (bn, bm) = self.tile();
        tiles.div_ceil(bn / 16) * rows.div_ceil(bm)
    }

    /// Bytes the CTAs read through L2, in units of the weight's bytes: the weight once per token
    /// tile, the tokens once per weight tile (`k` cancels).
    fn l2_reads(&self, tiles: usize, rows: usize) -> f64 {
        let (bn, bm) = self.tile();
        rows.div_ceil(bm) as f64
            + rows as f64 * tiles.div_ceil(bn / 16) as f64 / tiles as f64 / 16.0
    }
}

/// The ring of a decode GEMM CTA of `tile` (weight rows, tokens): `stages` k-tiles of 128 bytes
/// per weight row and token row (skinny_tc.cu and skinny_wg.cu alike).
pub(crate) fn ring_bytes(tile: (usize, usize), stages: usize) -> usize {
    stages * (tile.0 + tile.1) * 128
}

/// Every GEMM entry of skinny_tc.cu (`TC_ENTRY` and `TC_SPLIT_ENTRY`), read from its source
/// once.
pub(crate) fn all_entries() -> &'static [TcEntry] {
    static ENTRIES: OnceLock<Vec<TcEntry>> = OnceLock::new();
    ENTRIES.get_or_init(|| macro_entries("skinny_tc", TcEntry::from_source))
}

/// The whole-K entries (`TC_ENTRY`): one launch, the sums straight into the
/// epilogue.
pub fn tc_entries() -> &'static [TcEntry] {
    static WHOLE: OnceLock<Vec<TcEntry>> = OnceLock::new();
    WHOLE.get_or_init(|| all_entries().iter().filter(|e| !e.split).cloned().collect())
}

pub fn find_tc_entry(name: &str) -> Option<&'static TcEntry> {
    tc_entries().iter().find(|e| e.name == name)
}

/// The CTA shape for `tiles` 16-row weight tiles and `rows` tokens on `sms` multiprocessors: of
/// the shapes whose CTAs fill every resident slot at least once, the one reading the least
/// through L2 (the largest tiles); when none fills the GPU, the one with the most CTAs, then
/// the least L2 traffic; ties go to fewer token tiles. KILN_SKINNY_TC_TILE=WNxWM forces a shape (for A/B runs).
pub fn choose_tc_entry(tiles: usize, rows: usize, sms: usize) -> &'static TcEntry {
    if let Some(e) = forced_tile() {
        return e;
    }
    let all = tc_entries();
    // Equal L2 traffic: fewer token tiles, so each weight byte leaves memory once for sure.
    let by_l2 = |a: &&TcEntry, b: &&TcEntry| {
        a.l2_reads(tiles, rows)
            .total_cmp(&b.l2_reads(tiles, rows))
            .then(rows.div_ceil(a.tile().1).cmp(&rows.div_ceil(b.tile().1)))
    };
    let filling = all
        .iter()
        .filter(|e| e.ctas(tiles, rows) >= sms * e.min_blocks)
        .min_by(by_l2);
    filling.unwrap_or_else(|| {
        let most = all.iter().map(|e| e.ctas(tiles, rows)).max().unwrap_or(0);
        all.iter()
            .filter(|e| e.ctas(tiles, rows) == most)
            .min_by(by_l2)
            .expect("skinny_tc.cu has entries")
    })
}

fn forced_tile() -> Option<&'static TcEntry> {
    static FORCED: OnceLock<Option<&'static TcEntry>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        let v = std::env::var("KILN_SKINNY_TC_TILE").ok()?;
        find_tc_entry(&format!("skinny_tc_{v}"))
    })
}

/// One weight shape of `KILN_SKINNY_TC=auto`: `from` lists (first row count, tiling), the
/// tiling `None` for the skinny kernel, each holding up to the next; the last holds beyond.
#[derive(Debug)]
pub struct MeasuredShape {
    pub what: &'static str,
    pub n: usize,
    pub k: usize,
    pub from: &'static [(usize, Option<&'static str>)],
}

/// The decode GEMM per Llama-3-8B weight and row count, from `cuda_bench llama3-8b gemm` on
/// the H200 (bench/results/2026-12-02-h200-decode-split.json, gemm_us; microseconds below,
/// skinny = the 16-warp kernel in launches of 64 rows). Rows (lo, hi] take the fastest tiling at
/// the measured row count whose grid covers them, where it beats by 5% or more the skinny
/// kernel's least time over them (its launches of 64 rows, plus the remainder's at the smallest
/// measured count of the same entry, e.g. 65 rows: 64 + 1). Past 256 rows the last choice
/// holds: the tensor-core time grows by a token tile per 32 or 64 rows, the skinny one by a
/// launch per 64. QKV, o and down at 128-192 rows take the split entries first
/// (skinny_tc_split.rs). Other shapes (not measured) keep the skinny kernel.
pub const MEASURED: [MeasuredShape; 5] = [
    // 64: 4x1 51.3 vs skinny 34.4; 128: 2x4 49.9 (4x2 51.7, 2x2 60.2) vs 72.2; 192: 2x2 66.1
    // (2x4 97.4) vs 106.7; 256: 2x2 65.8 vs 142.6.
    MeasuredShape {
        what: "qkv",
        n: 6144,
        k: 4096,
        from: &[(1, None), (97, Some("2x4")), (129, Some("2x2"))],
    },
    // 128: 2x4 49.7 vs skinny 38.7; 192: 2x4 49.7 (4x2 51.6) vs 57.4; 256: 2x4 50.5 vs 77.0.
    MeasuredShape {
        what: "o",
        n: 4096,
        k: 4096,
        from: &[(1, None), (129, Some("2x4"))],
    },
    // 1-16: skinny 60.8-63.9 vs 4x1's 66.4 at 32 (its grid up to 32 rows); 32: 4x1 66.4 vs
    // 86.7; 64: 2x2 106.4 (4x1 103.9, under 5% apart) vs 122.8; 128: t2x2 152.7 vs 2x2 167.3
    // and skinny 250.0; 192: t2x2 227.3 vs 2x2 237.2; 256: t2x2 274.4 vs 2x2 301.3.
    MeasuredShape {
        what: "gate_up",
        n: 28672,
        k: 4096,
        from: &[
            (1, None),
            (17, Some("4x1")),
            (33, Some("2x2")),
            (97, Some("t2x2")),
        ],
    },
    // 128: 2x4 159.3 vs skinny 119.6; 192: 2x4 160.1 vs 179.1; 256: 2x4 160.4 vs 239.6.
    MeasuredShape {
        what: "down",
        n: 4096,
        k: 14336,
        from: &[(1, None), (129, Some("2x4"))],
    },
    // 1 and 8: 4x1 255.3 / 261.2 vs skinny 263.0 / 266.5 (under 5%); 32: 4x1 272.6 vs 354.4;
    // 64: 2x2 382.0 vs 514.1; 128: t2x2 689.5 (t2x4 681.5, 2x2 707.1); 192: t2x2 868.4 vs 2x2
    // 1087.4 (t2x4 1296.4); 256: t2x2 1232.2 vs 2x2 1393.5.
    MeasuredShape {
        what: "lm_head",
        n: 128256,
        k: 4096,
        from: &[
            (1, None),
            (17, Some("4x1")),
            (33, Some("2x2")),
            (97, Some("t2x2")),
        ],
    },
];

/// The tiling [`MEASURED`] gives an `n` x `k` weight at `rows` rows; None: the skinny kernel.
pub fn measured_entry(n: usize, k: usize, rows: usize) -> Option<&'static TcEntry> {
    let shape = MEASURED.iter().find(|s| s.n == n && s.k == k)?;
    let (_, tiling) = shape.from.iter().rev().find(|(r, _)| rows >= *r)?;
    let tiling = (*tiling)?;
    let e = tc_entries()
        .iter()
        .find(|e| e.name.strip_prefix("skinny_tc_") == Some(tiling));
    Some(e.expect("MEASURED names entries of skinny_tc.cu (unit-tested)"))
}

/// The tensor-core entry a decode launch of `rows` rows of an `n` x `k` weight in family
/// `kind` takes under `c`, over `tiles` weight tiles on `sms` multiprocessors; None: the
/// skinny kernel. Only the 16-warp family has the tensor-core kernel's order.
pub fn tc_choice(
    c: &KernelChoice,
    kind: SkinnyKind,
    rows: usize,
    n: usize,
    k: usize,
    tiles: usize,
    sms: usize,
) -> Option<&'static TcEntry> {
    if kind != SkinnyKind::Wide {
        return None;
    }
    match c.skinny_tc {
        SkinnyTc::Off => None,
        SkinnyTc::From(min) => (rows >= min).then(|| choose_tc_entry(tiles, rows, sms)),
        SkinnyTc::Measured => measured_entry(n, k, rows),
    }
}

/// The tensor-core entries with the dynamic shared memory each needs.
pub fn smem_needs() -> Vec<(String, usize)> {
    all_entries()
        .iter()
        .map(|e| (e.name.clone(), e.smem_bytes()))
        .collect()
}

impl Gpu {
    /// [`tc_choice`] for a launch through epilogue `epi` on this GPU.
    #[allow(clippy::too_many_arguments)]
    pub fn tc_for(
        &self,
        c: &KernelChoice,
        kind: SkinnyKind,
        epi: &Epilogue,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<Option<&'static TcEntry>> {
        let tiles = epi.tiles(n)?;
        Ok(tc_choice(
            c,
            kind,
            rows,
            n,
            k,
            tiles,
            self.sm_count as usize,
        ))
    }

    /// x . w^T for `rows` rows (any number, one launch) on the tensor cores, the sums going where
    /// `epi` says: each row gets the bits of the 16-warp skinny kernel (and of the kernels the
    /// epilogue replaces). Needs k % 8 == 0 and 16-byte aligned x and w.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_tc(
        &self,
        epi: &Epilogue,
        pdl: bool,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let tiles = epi.tiles(n)?;
        let e = choose_tc_entry(tiles, rows, self.sm_count as usize);
        self.skinny_tc_entry(e, epi, pdl, x, w, rows, n, k)
    }

    /// [`Gpu::skinny_tc`] through entry `e` (tests and benchmarks compare the shapes).
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_tc_entry(
        &self,
        e: &TcEntry,
        epi: &Epilogue,
        pdl: bool,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        self.launch_tc(e, epi, pdl, x, w, rows, n, k, None)
    }

    /// One launch of entry `e` over `rows` tokens; `split`: the chain partials (pointer, row
    /// length) of a split entry, whose grid also runs along the 16 chains.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_tc(
        &self,
        e: &TcEntry,
        epi: &Epilogue,
        pdl: bool,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
        split: Option<(u64, usize)>,
    ) -> Result<()> {
        if !k.is_multiple_of(8) {
            bail!("tensor-core decode GEMM needs k % 8 == 0, got {k}");
        }
        if e.split != split.is_some() {
            bail!("{}: split entries take partials, the others none", e.name);
        }
        let mut args = vec![
            Arg::Ptr(x),
            Arg::Ptr(w),
            Arg::I32(i32_of(rows, "rows")?),
            Arg::I32(i32_of(k, "k")?),
        ];
        if let Some((part, ld)) = split {
            args.extend([Arg::Ptr(part), Arg::I32(i32_of(ld, "partial row")?)]);
        }
        args.extend(epi.args(n)?);
        let ctas = e.ctas(epi.tiles(n)?, rows);
        let grid = (u32::try_from(ctas)?, if e.split { 16 } else { 1 }, 1);
        self.launch_with(
            &e.name,
            grid,
            e.threads() as u32,
            e.smem_bytes() as u32,
            &args,
            pdl,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_read_from_the_source_have_their_shapes() {
        let got: Vec<_> = tc_entries()
            .iter()
            .map(|e| {
                let (bn, bm) = e.tile();
                (e.name.as_str(), bn, bm, e.chains, e.stages, e.min_blocks)
            })
            .collect();
        let want = [
            ("skinny_tc_4x1", 128, 32, 2, 4, 2),
            ("skinny_tc_2x2", 64, 64, 2, 4, 3),
            ("skinny_tc_1x4", 32, 128, 2, 4, 2),
            ("skinny_tc_4x2", 128, 64, 2, 6, 1),
            ("skinny_tc_2x4", 64, 128, 2, 6, 1),
            ("skinny_tc_t2x4", 128, 128, 1, 4, 1),
            ("skinny_tc_t2x2", 128, 64, 1, 4, 2),
            ("skinny_tc_t1x4", 64, 128, 1, 4, 2),
            ("skinny_tc_w4x4", 128, 128, 1, 4, 1),
        ];
        assert_eq!(got, want);
    }

    /// The CTAs the launch bounds promise fit an H100/H200 multiprocessor: 228 KB of shared
    /// memory (1 KB of it reserved per CTA) and 64K registers at what a thread of the entry
    /// takes (kernels_compile prints them): 168 for 32 x 32 warp tiles and two chains a pass,
    /// about 100 with one chain, 64 x 32 tiles up to the 255 a thread can have.
    #[test]
    fn every_entry_fits_its_occupancy() {
        for e in all_entries() {
            let smem = e.min_blocks * (e.smem_bytes() + 1024);
            assert!(smem <= 228 * 1024, "{}: {smem} bytes", e.name);
            let regs = match (e.mi, e.chains, e.min_blocks) {
                (2, 2, _) => 168,
                (2, 1, 3) => 136,
                (2, 1, _) => 128,
                _ => 255,
            };
            assert!(e.min_blocks * e.threads() * regs <= 65536, "{}", e.name);
        }
    }

    #[test]
    fn the_shape_follows_the_weight_and_the_rows() {
        let sms = 132;
        // A wide weight at 128 rows: 128 x 128 tiles fill the GPU and read the least (the weight
        // once, x once per 128 rows); the 16-warp entry of that shape reads alike and comes later.
        let e = choose_tc_entry(28672 / 16, 128, sms);
        assert_eq!(e.name, "skinny_tc_t2x4");
        assert_eq!(e.ctas(28672 / 16, 128), 224);
        assert_eq!(e.l2_reads(28672 / 16, 128), 2.0);
        // 4096 rows at 128 tokens fill no shape: the most CTAs, then the least L2 (64 x 64).
        let e = choose_tc_entry(4096 / 16, 128, sms);
        assert_eq!(e.name, "skinny_tc_2x2");
        // The LM head at 256 rows: 128 x 128 tiles, two token tiles.
        let e = choose_tc_entry(128256 / 16, 256, sms);
        assert_eq!(e.l2_reads(8016, 256), 2.0 + 256.0 / 128.0);
        assert_eq!(e.name, "skinny_tc_t2x4");
    }

    #[test]
    fn the_measured_table_names_entries_in_order() {
        for s in &MEASURED {
            assert_eq!(s.from[0].0, 1, "{}: starts at one row", s.what);
            assert!(s.from.windows(2).all(|w| w[0].0 < w[1].0), "{}", s.what);
            for (_, t) in s.from {
                if let Some(t) = t {
                    assert!(find_tc_entry(&format!("skinny_tc_{t}")).is_some(), "{t}");
                }
            }
        }
    }

    #[test]
    fn auto_follows_the_measured_table() {
        let name = |n, k, rows| measured_entry(n, k, rows).map(|e| &e.name["skinny_tc_".len()..]);
        // gate/up: skinny to 16 rows, 4x1 to 32, 2x2 to 96, t2x2 from 97 (and past 256).
        assert_eq!(name(28672, 4096, 16), None);
        assert_eq!(name(28672, 4096, 17), Some("4x1"));
        assert_eq!(name(28672, 4096, 32), Some("4x1"));
        assert_eq!(name(28672, 4096, 33), Some("2x2"));
        assert_eq!(name(28672, 4096, 96), Some("2x2"));
        assert_eq!(name(28672, 4096, 128), Some("t2x2"));
        assert_eq!(name(28672, 4096, 1000), Some("t2x2"));
        assert_eq!(name(128256, 4096, 64), Some("2x2"));
        assert_eq!(name(128256, 4096, 97), Some("t2x2"));
        // qkv: 2x4 at 97-128 rows, 2x2 from 129; o and down from 129, in 2x4.
        assert_eq!(name(6144, 4096, 96), None);
        assert_eq!(name(6144, 4096, 97), Some("2x4"));
        assert_eq!(name(6144, 4096, 129), Some("2x2"));
        assert_eq!(name(4096, 4096, 128), None);
        assert_eq!(name(4096, 4096, 129), Some("2x4"));
        assert_eq!(name(4096, 14336, 128), None);
        assert_eq!(name(4096, 14336, 256), Some("2x4"));
        // A shape not measured keeps the skinny kernel.
        assert_eq!(name(5120, 4096, 256), None);
        let c = |tc| KernelChoice {
            skinny_tc: tc,
            ..KernelChoice::ALL_FAST
        };
        let auto = c(SkinnyTc::Measured);
        let pick = |c: &KernelChoice, kind, rows| tc_choice(c, kind, rows, 28672, 4096, 1792, 132);
        assert_eq!(
            pick(&auto, SkinnyKind::Wide, 128).unwrap().name,
            "skinny_tc_t2x2"
        );
        assert!(pick(&auto, SkinnyKind::Pipe, 128).is_none());
        assert!(pick(&c(SkinnyTc::Off), SkinnyKind::Wide, 128).is_none());
        let from64 = c(SkinnyTc::From(64));
        assert!(pick(&from64, SkinnyKind::Wide, 63).is_none());
        assert_eq!(
            pick(&from64, SkinnyKind::Wide, 128).unwrap().name,
            "skinny_tc_t2x4"
        );
    }
}
