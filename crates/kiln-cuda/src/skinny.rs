//! Launchers of the decode-shaped GEMM (kernels/skinny_gemm.cu): which kernel family and entry,
//! how much shared memory, how many threads, and whether it starts as a dependent launch.

use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};

use crate::device::{i32_of, Arg, DevPtr, Gpu};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::source;
use crate::switches::KernelChoice;

/// Rows one skinny-GEMM launch takes at most.
pub const SKINNY_MAX_ROWS: usize = 64;

/// One kernel entry of skinny_gemm.cu.
pub(crate) struct Entry {
    pub(crate) name: String,
    /// 8-row fragments per launch.
    nt: usize,
    pub(crate) warps: usize,
    /// Ring stages (0: the plain kernel, no ring).
    stages: usize,
    /// 16-row weight tiles per CTA (sharing each x fragment).
    pub(crate) tiles: usize,
    /// A fused entry with the norm prologue (`SF_ENTRY(.., NORM)` true).
    norm: bool,
}

/// Shared memory past the ring of a norm-prologue entry: block_sum's 32 floats and 8 rows' norms.
const NORM_SMEM_BYTES: usize = 256;

impl Entry {
    /// Dynamic shared memory: warps x stages x 1 KB per weight tile (and the norm's floats).
    pub(crate) fn smem_bytes(&self) -> usize {
        self.warps * self.stages * 1024 * self.tiles + if self.norm { NORM_SMEM_BYTES } else { 0 }
    }

    /// The shape of a kernel as its source gives it: a ring kernel from its line
    /// `SP_ENTRY(NAME, NT, S, W, XP, MINB, RT)`; a register kernel (`skinny_gemm_*`, no ring,
    /// one tile) from its `__launch_bounds__(threads)` and its name, which ends in the rows
    /// it takes.
    fn from_source(p: &EntryPoint) -> Result<Entry> {
        let num = |v: Option<&str>, what: &str| {
            v.and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| anyhow!("skinny entry {}: no number for {what}", p.name))
        };
        let name = p.name.clone();
        if p.macro_args.is_empty() {
            let threads = num(p.launch_bounds.first().map(String::as_str), "threads")?;
            let rows = num(p.name.rsplit('_').next(), "rows")?;
            return Ok(Entry {
                name,
                nt: rows / 8,
                warps: threads / 32,
                stages: 0,
                tiles: 1,
                norm: false,
            });
        }
        Ok(Entry {
            nt: num(p.arg("NT"), "NT")?,
            warps: num(p.arg("W"), "W")?,
            stages: num(p.arg("S"), "S")?,
            tiles: num(p.arg("RT"), "RT")?,
            norm: p.arg("NORM") == Some("true"),
            name,
        })
    }
}

/// Every entry of skinny_gemm.cu, read from its source once.
fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| read_entries().expect("skinny_gemm.cu's entries (unit-tested)"))
}

fn read_entries() -> Result<Vec<Entry>> {
    let src = source("skinny_gemm").ok_or_else(|| anyhow!("no skinny_gemm.cu module"))?;
    src.entry_points()?.iter().map(Entry::from_source).collect()
}

fn find_entry(name: &str) -> Option<&'static Entry> {
    entries().iter().find(|e| e.name == name)
}

/// Which skinny kernel family a launch uses. Each gives every row the same bits whatever the
/// row count; the families differ from one another in summation order, except `Pipe` and `Deep`
/// (the same order with different ring depths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkinnyKind {
    /// `skinny_gemm_*`: weights loaded straight into registers, 8 warps.
    Plain,
    /// `skinny_pipe_*`: 8 warps, each streaming its chunks through a cp.async ring.
    Pipe,
    /// `skinny_deep_*` up to 16 rows, else `skinny_pipe_*`: a 14-stage ring, the same bits as
    /// `Pipe` (for long K).
    Deep,
    /// `skinny_wide*_*`: the ring kernel with 16 warps per CTA (the default).
    Wide,
}

impl SkinnyKind {
    pub const ALL: [SkinnyKind; 4] = [
        SkinnyKind::Wide,
        SkinnyKind::Pipe,
        SkinnyKind::Deep,
        SkinnyKind::Plain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SkinnyKind::Plain => "plain",
            SkinnyKind::Pipe => "pipe",
            SkinnyKind::Deep => "deep",
            SkinnyKind::Wide => "wide",
        }
    }

    /// The entry for `nt` fragments of 8 rows of a weight of `tiles` 16-row tiles, on a GPU of
    /// `sms` multiprocessors. Within a family the choice never changes a row's bits.
    fn entry(self, nt: usize, tiles: usize, sms: usize) -> &'static Entry {
        let name = match (self, nt) {
            (SkinnyKind::Plain, 1) => "skinny_gemm_8",
            (SkinnyKind::Plain, 2) => "skinny_gemm_16",
            (SkinnyKind::Plain, 4) => "skinny_gemm_32",
            (SkinnyKind::Plain, _) => "skinny_gemm_64",
            (SkinnyKind::Deep, 1) => "skinny_deep_8",
            (SkinnyKind::Deep, 2) => "skinny_deep_16",
            (SkinnyKind::Pipe, 1) => "skinny_pipe_8",
            (SkinnyKind::Pipe, 2) => "skinny_pipe_16",
            (SkinnyKind::Pipe | SkinnyKind::Deep, 4) => "skinny_pipe_32",
            (SkinnyKind::Pipe | SkinnyKind::Deep, _) => "skinny_pipe_64",
            // All CTAs of a small weight fit at two per SM: the deeper ring then keeps more
            // bytes in flight; a larger weight wants the third CTA per SM instead.
            (SkinnyKind::Wide, 1) if tiles <= 2 * sms => "skinny_wide_8",
            (SkinnyKind::Wide, 1) => "skinny_wide4_8",
            (SkinnyKind::Wide, 2) => "skinny_wide_16",
            (SkinnyKind::Wide, 4) => "skinny_wide_32",
            (SkinnyKind::Wide, _) => "skinny_wide_64",
        };
        find_entry(name).expect("every name above is an entry of skinny_gemm.cu")
    }
}

/// The fused 16-warp entry (`skinny_fused*`: the order of `skinny_wide*`) for `nt` fragments of
/// 8 rows of `tiles` 16-row tiles on `sms` multiprocessors, with the norm prologue or without.
pub(crate) fn fused_entry(nt: usize, tiles: usize, sms: usize, norm: bool) -> &'static Entry {
    let name = match (nt, norm) {
        (1, true) if tiles <= 2 * sms => "skinny_fusedn_8",
        (1, true) => "skinny_fusedn4_8",
        (1, false) if tiles <= 2 * sms => "skinny_fused_8",
        (1, false) => "skinny_fused4_8",
        (2, _) => "skinny_fused_16",
        (4, _) => "skinny_fused_32",
        _ => "skinny_fused_64",
    };
    find_entry(name).expect("every name above is an entry of skinny_gemm.cu")
}

/// The ring kernels with the dynamic shared memory each needs.
pub fn smem_needs() -> Vec<(String, usize)> {
    entries()
        .iter()
        .map(|e| (e.name.to_string(), e.smem_bytes()))
        .collect()
}

/// Long-K weights take `Deep` rather than `Pipe` in the 8-warp family.
pub const DEEP_MIN_K: usize = 8192;

impl KernelChoice {
    /// The skinny family for a weight of inner dimension `k`: never a function of the row
    /// count, so a row's bits do not depend on its batch.
    pub fn skinny_kind(&self, k: usize) -> SkinnyKind {
        if !self.skinny_pipe {
            SkinnyKind::Plain
        } else if self.skinny_wide {
            SkinnyKind::Wide
        } else if self.skinny_deep && k >= DEEP_MIN_K {
            SkinnyKind::Deep
        } else {
            SkinnyKind::Pipe
        }
    }
}

impl Gpu {
    /// y[m, n] = x[m, :] . w[n, :] for m < rows, in launches of at most 64 rows. Each row's
    /// result is the same whatever `rows` is. Needs k % 8 == 0 and 16-byte aligned x and w.
    pub fn skinny_gemm(
        &self,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        self.skinny_gemm_with(&KernelChoice::from_env(), y, x, w, rows, n, k)
    }

    /// [`Gpu::skinny_gemm`] under the kernel choice `c` (tests follow a switch's routes).
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_gemm_with(
        &self,
        c: &KernelChoice,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let kind = c.skinny_kind(k);
        let epi = crate::skinny_fused::Epilogue::Store { y };
        if let Some(l) = self.wg_for(c, kind, &epi, rows, n, k)? {
            return self.skinny_wg(&l, &epi, c.pdl, x, w, rows, n, k);
        }
        if let Some((e, part)) = self.tc_split_for(c, kind, &epi, rows, n)? {
            return self.skinny_tc_split(e, &epi, c.pdl, x, w, part, rows, n, k);
        }
        if let Some(e) = self.tc_for(c, kind, &epi, rows, n, k)? {
            return self.skinny_tc_entry(e, &epi, c.pdl, x, w, rows, n, k);
        }
        self.skinny_gemm_launch(kind, c.pdl, y, x, w, rows, n, k)
    }

    /// [`Gpu::skinny_gemm`] with the kernel family given, and `pdl`: start as dependent
    /// launches (the ring kernels stream their first weights while the previous kernel ends).
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_gemm_launch(
        &self,
        kind: SkinnyKind,
        pdl: bool,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if !k.is_multiple_of(8) {
            bail!("skinny GEMM needs the inner dimension to be a multiple of 8, got {k}");
        }
        let (ni, ki) = (i32_of(n, "n")?, i32_of(k, "k")?);
        let tiles = n.div_ceil(16);
        let mut done = 0;
        while done < rows {
            let m = (rows - done).min(SKINNY_MAX_ROWS);
            let nt = m.div_ceil(8).next_power_of_two();
            let e = kind.entry(nt, tiles, self.sm_count as usize);
            let yd = DevPtr::<f32>::new(y).row(done, n).addr();
            let xd = DevPtr::<u16>::new(x).row(done, k).addr();
            self.launch_entry(e, pdl, yd, xd, w, m, ni, ki)?;
            done += m;
        }
        Ok(())
    }

    /// One launch of the skinny entry `name` (at most as many rows as it takes): for tests
    /// and benchmarks that compare the entries of one family.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_entry_launch(
        &self,
        name: &str,
        pdl: bool,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let Some(e) = find_entry(name) else {
            bail!("no skinny GEMM entry {name}");
        };
        if rows == 0 || rows > 8 * e.nt || !k.is_multiple_of(8) {
            bail!(
                "{name} takes 1..={} rows and k % 8 == 0, got {rows} rows, k = {k}",
                8 * e.nt
            );
        }
        self.launch_entry(e, pdl, y, x, w, rows, i32_of(n, "n")?, i32_of(k, "k")?)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_entry(
        &self,
        e: &Entry,
        pdl: bool,
        y: u64,
        x: u64,
        w: u64,
        rows: usize,
        n: i32,
        k: i32,
    ) -> Result<()> {
        let args = [
            Arg::Ptr(y),
            Arg::Ptr(x),
            Arg::Ptr(w),
            Arg::I32(rows as i32),
            Arg::I32(n),
            Arg::I32(k),
        ];
        let grid = ((n as u32).div_ceil(16 * e.tiles as u32), 1, 1);
        let threads = 32 * e.warps as u32;
        self.launch_with(&e.name, grid, threads, e.smem_bytes() as u32, &args, pdl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_an_entry_for_every_fragment_count() {
        for kind in SkinnyKind::ALL {
            for nt in [1, 2, 4, 8] {
                for tiles in [1, 256, 8016] {
                    let e = kind.entry(nt, tiles, 132);
                    assert_eq!(e.nt, nt, "{} for {nt} fragments", e.name);
                    // The warp sums reuse the ring after the loop.
                    if e.stages > 0 {
                        assert!(e.smem_bytes() >= e.warps * e.tiles * nt * 512, "{}", e.name);
                        assert!(e.smem_bytes() <= 227 * 1024, "{}", e.name);
                    }
                }
            }
        }
    }

    /// The table as it was written by hand before it was read from skinny_gemm.cu.
    #[test]
    fn the_entries_read_from_the_source_have_their_shapes() {
        let want = [
            ("skinny_gemm_8", 1, 8, 0, 1),
            ("skinny_gemm_16", 2, 8, 0, 1),
            ("skinny_gemm_32", 4, 8, 0, 1),
            ("skinny_gemm_64", 8, 8, 0, 1),
            ("skinny_pipe_8", 1, 8, 8, 1),
            ("skinny_pipe_16", 2, 8, 8, 1),
            ("skinny_pipe_32", 4, 8, 6, 1),
            ("skinny_pipe_64", 8, 8, 4, 1),
            ("skinny_deep_8", 1, 8, 14, 1),
            ("skinny_deep_16", 2, 8, 14, 1),
            ("skinny_wide_8", 1, 16, 7, 1),
            ("skinny_wide4_8", 1, 16, 4, 1),
            ("skinny_wide_16", 2, 16, 4, 1),
            ("skinny_wide_32", 4, 16, 4, 1),
            ("skinny_wide_64", 8, 16, 4, 2),
            ("skinny_fused_8", 1, 16, 7, 1),
            ("skinny_fused4_8", 1, 16, 4, 1),
            ("skinny_fused_16", 2, 16, 4, 1),
            ("skinny_fused_32", 4, 16, 4, 1),
            ("skinny_fused_64", 8, 16, 4, 2),
            ("skinny_fusedn_8", 1, 16, 7, 1),
            ("skinny_fusedn4_8", 1, 16, 4, 1),
        ];
        let got: Vec<_> = entries()
            .iter()
            .map(|e| (e.name.as_str(), e.nt, e.warps, e.stages, e.tiles))
            .collect();
        assert_eq!(got, want);
    }

    /// Each fused entry has the shape of the 16-warp entry whose order it keeps, and the norm
    /// prologue's floats fit beside the ring of the entries that have it.
    #[test]
    fn fused_entries_mirror_the_wide_ones() {
        for (nt, tiles) in [(1, 100), (1, 8016), (2, 8016), (4, 1), (8, 256)] {
            let plain = SkinnyKind::Wide.entry(nt, tiles, 132);
            let fused = fused_entry(nt, tiles, 132, false);
            assert_eq!(
                (fused.nt, fused.warps, fused.stages, fused.tiles, fused.norm),
                (plain.nt, plain.warps, plain.stages, plain.tiles, false),
                "{} against {}",
                fused.name,
                plain.name
            );
        }
        for tiles in [100, 8016] {
            let n = fused_entry(1, tiles, 132, true);
            let plain = SkinnyKind::Wide.entry(1, tiles, 132);
            assert!(n.norm && n.stages == plain.stages, "{}", n.name);
            assert_eq!(n.smem_bytes(), plain.smem_bytes() + NORM_SMEM_BYTES);
        }
        let tc = KernelChoice {
            skinny_tc: crate::switches::SkinnyTc::From(64),
            ..KernelChoice::ALL_FAST
        };
        let takes = |c: &KernelChoice, kind, rows| {
            crate::skinny_tc::tc_choice(c, kind, rows, 4096, 4096, 256, 132).is_some()
        };
        assert!(takes(&tc, SkinnyKind::Wide, 64) && !takes(&tc, SkinnyKind::Wide, 63));
        assert!(!takes(&tc, SkinnyKind::Pipe, 128));
        let off = KernelChoice {
            skinny_tc: crate::switches::SkinnyTc::Off,
            ..KernelChoice::ALL_FAST
        };
        assert!(!takes(&off, SkinnyKind::Wide, 256));
        // The default, the measured table: o_proj's shape takes the tensor cores from 193 rows.
        let fast = KernelChoice::ALL_FAST;
        assert!(takes(&fast, SkinnyKind::Wide, 256) && !takes(&fast, SkinnyKind::Wide, 128));
    }

    #[test]
    fn the_family_depends_on_the_switches_and_k_only() {
        let mut c = KernelChoice::ALL_FAST;
        assert_eq!(c.skinny_kind(14336), SkinnyKind::Wide);
        c.skinny_wide = false;
        assert_eq!(c.skinny_kind(4096), SkinnyKind::Pipe);
        assert_eq!(c.skinny_kind(DEEP_MIN_K), SkinnyKind::Deep);
        c.skinny_pipe = false;
        assert_eq!(c.skinny_kind(4096), SkinnyKind::Plain);
    }
}
