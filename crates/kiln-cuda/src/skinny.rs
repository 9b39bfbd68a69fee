//! Launchers of the decode-shaped GEMM (kernels/skinny_gemm.cu): which kernel family, how much
//! shared memory, how many threads, and whether it starts as a dependent launch.

use anyhow::{bail, Result};

use crate::device::{Arg, Gpu};
use crate::kernels::i32_of;
use crate::switches::KernelChoice;

/// Rows one skinny-GEMM launch takes at most.
pub const SKINNY_MAX_ROWS: usize = 64;

/// Which skinny kernel family a launch uses. Each gives every row the same bits whatever the
/// row count; the families differ from one another in summation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkinnyKind {
    /// `skinny_gemm_*`: weights loaded straight into registers.
    Plain,
    /// `skinny_pipe_*`: 8 warps, each streaming its chunks through a cp.async ring.
    Pipe,
    /// `skinny_deep_*` up to 16 rows, else `skinny_pipe_*`: a 14-stage ring, the same bits as
    /// `Pipe` (for long K).
    Deep,
    /// `skinny_wide_*`: the ring kernel with 16 warps per CTA.
    Wide,
}

impl SkinnyKind {
    pub const ALL: [SkinnyKind; 4] = [
        SkinnyKind::Pipe,
        SkinnyKind::Deep,
        SkinnyKind::Wide,
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

    /// The kernel family for `nt` fragments of 8 rows.
    fn family(self, nt: usize) -> &'static str {
        match self {
            SkinnyKind::Plain => "skinny_gemm",
            SkinnyKind::Pipe => "skinny_pipe",
            SkinnyKind::Deep if nt <= 2 => "skinny_deep",
            SkinnyKind::Deep => "skinny_pipe",
            SkinnyKind::Wide => "skinny_wide",
        }
    }

    fn warps(self) -> usize {
        match self {
            SkinnyKind::Wide => 16,
            _ => 8,
        }
    }

    /// Ring stages of the kernel for `nt` fragments of 8 rows (as in the SP_ENTRY lines).
    fn stages(self, nt: usize) -> usize {
        match (self, nt) {
            (SkinnyKind::Plain, _) => 0,
            (SkinnyKind::Deep, 1 | 2) => 14,
            (SkinnyKind::Pipe, 1 | 2) => 8,
            (SkinnyKind::Pipe | SkinnyKind::Deep, 4) => 6,
            (SkinnyKind::Wide, 1 | 2) => 7,
            _ => 4,
        }
    }

    /// Dynamic shared memory: warps x stages x 1 KB.
    fn smem_bytes(self, nt: usize) -> usize {
        self.warps() * self.stages(nt) * 1024
    }
}

/// The ring kernels with more than 48 KB of dynamic shared memory, with their needs.
pub fn large_smem_kernels() -> Vec<(String, usize)> {
    let mut v = Vec::new();
    for kind in [SkinnyKind::Pipe, SkinnyKind::Deep, SkinnyKind::Wide] {
        for nt in [1, 2, 4, 8] {
            let name = format!("{}_{}", kind.family(nt), 8 * nt);
            if !v.iter().any(|(n, _)| *n == name) {
                v.push((name, kind.smem_bytes(nt)));
            }
        }
    }
    v
}

/// Which weights take the 16-warp kernels. The rule looks at the weight's shape only, never at
/// the row count, so a row's bits stay the same in any batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WideRule {
    /// KILN_SKINNY_WIDE=0: none.
    Off,
    /// KILN_SKINNY_WIDE=longk: inner dimension of at least WIDE_MIN_K (Llama-3-8B's down).
    LongK,
    /// KILN_SKINNY_WIDE=large: also an output count of at least WIDE_MIN_N (gate/up, LM head).
    Large,
}

/// Weights with an inner dimension or an output count of at least these count as long / large.
pub const WIDE_MIN_K: usize = 8192;
pub const WIDE_MIN_N: usize = 16384;

impl WideRule {
    /// On the H200 with Llama-3-8B, `Large` decodes 2.6% faster at batch 1 and 6.8% at 32 but
    /// 3% slower at 8 and 11% at 128 (the 16-warp kernels lose at 33-64 rows); `LongK` sits
    /// between. Off keeps the batched throughput (docs/BENCH.md).
    pub const DEFAULT: WideRule = WideRule::Off;

    pub fn from_env() -> WideRule {
        match std::env::var("KILN_SKINNY_WIDE").as_deref() {
            Ok("0") | Ok("off") => WideRule::Off,
            Ok("longk") => WideRule::LongK,
            Ok("large") | Ok("1") => WideRule::Large,
            _ => WideRule::DEFAULT,
        }
    }

    fn takes(self, n: usize, k: usize) -> bool {
        match self {
            WideRule::Off => false,
            WideRule::LongK => k >= WIDE_MIN_K,
            WideRule::Large => k >= WIDE_MIN_K || n >= WIDE_MIN_N,
        }
    }
}

impl KernelChoice {
    /// The skinny family for an `n` x `k` weight.
    pub fn skinny_kind(&self, n: usize, k: usize) -> SkinnyKind {
        if !self.skinny_pipe {
            SkinnyKind::Plain
        } else if self.skinny_wide.takes(n, k) {
            SkinnyKind::Wide
        } else if self.skinny_deep && k >= WIDE_MIN_K {
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
        let c = KernelChoice::from_env();
        let kind = c.skinny_kind(n, k);
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
        let threads = 32 * kind.warps() as u32;
        let mut done = 0;
        while done < rows {
            let m = (rows - done).min(SKINNY_MAX_ROWS);
            let nt = m.div_ceil(8).next_power_of_two();
            let name = format!("{}_{}", kind.family(nt), 8 * nt);
            let smem = kind.smem_bytes(nt) as u32;
            let args = [
                Arg::Ptr(y + (done * n * 4) as u64),
                Arg::Ptr(x + (done * k * 2) as u64),
                Arg::Ptr(w),
                Arg::I32(m as i32),
                Arg::I32(ni),
                Arg::I32(ki),
            ];
            let grid = (n.div_ceil(16) as u32, 1, 1);
            self.launch_with(&name, grid, threads, smem, &args, pdl)?;
            done += m;
        }
        Ok(())
    }
}
