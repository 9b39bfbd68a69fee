//! The modes of the KILN_* variables that take more than on/off (parsed in switches.rs).

/// KILN_SKINNY_WG: which decode GEMM launches take the wgmma kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WgMode {
    Off,
    /// Every launch of at least this many rows, in the shape of `skinny_wg::choose_wg_entry`.
    From(usize),
    /// The weights and row counts of `skinny_wg_measured::MEASURED`, in its shapes.
    Measured,
}

impl WgMode {
    /// The fewest rows a launch it takes may have (None: it takes none).
    pub fn min_rows(self) -> Option<usize> {
        match self {
            WgMode::Off => None,
            WgMode::From(n) => Some(n),
            WgMode::Measured => Some(crate::skinny_wg_measured::MEASURED_MIN_ROWS),
        }
    }

    pub(crate) fn describe(self) -> String {
        match self {
            WgMode::Off => "off".into(),
            WgMode::From(n) => format!("{n}+"),
            WgMode::Measured => "auto".into(),
        }
    }
}

/// KILN_SKINNY_WG_CLUSTER: whether the wgmma launches run in clusters (skinny_wg.cu's `_cN`
/// entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WgCluster {
    /// `0` (or any value but those below): one CTA each.
    Off,
    /// `2`, `4`: every launch takes its entry's twin in clusters of that many CTAs.
    Twins(usize),
    /// `auto` (the default): the launches of `skinny_wg_measured::MEASURED_CLUSTERED` take the
    /// entries it names (on the H200 +0.7-2.3% at 128-256 streams, same call).
    Measured,
}

impl WgCluster {
    /// The cluster size every launch's entry is swapped for (1: none).
    pub fn twins(&self) -> usize {
        match self {
            WgCluster::Twins(n) => *n,
            _ => 1,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            WgCluster::Off => "off".into(),
            WgCluster::Twins(n) => n.to_string(),
            WgCluster::Measured => "auto".into(),
        }
    }
}

/// KILN_DECODE_FOLD: `auto` (the default) folds where one CTA a row run and head group fills
/// the GPU (rows x head groups at least the multiprocessors), `1` always, `0` never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeFold {
    Auto,
    Always,
    Never,
}

/// KILN_DECODE_SPLIT_CTAS: how many CTAs decode attention gives a row's head group along its
/// split slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitCtas {
    /// Every slot its own CTA at batch 1, fewer as the rows grow (`decode_split_ctas`).
    Auto,
    /// `all`: every slot its own CTA at any row count.
    All,
    /// `N`: N CTAs (at most the slots), each serving every N-th slot, at any row count.
    Fixed(usize),
}

impl SplitCtas {
    pub(crate) fn parse(v: Option<&str>) -> SplitCtas {
        match v {
            Some("all") => SplitCtas::All,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if n > 0 => SplitCtas::Fixed(n),
                _ => SplitCtas::Auto,
            },
            None => SplitCtas::Auto,
        }
    }

    pub(crate) fn describe(self) -> String {
        match self {
            SplitCtas::Auto => "auto".into(),
            SplitCtas::All => "all".into(),
            SplitCtas::Fixed(n) => n.to_string(),
        }
    }
}

/// Which of a decode step's kernels move into the GEMMs around them (KILN_DECODE_FUSE). Each
/// fused launch computes what the launches it replaces computed, in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeFuse {
    /// `glu`: SwiGLU in the gate/up GEMM's epilogue (no `swiglu` launch).
    pub glu: bool,
    /// `add`: the residual add in the o and down GEMMs' epilogues (the norm after them reads
    /// no pending block output).
    pub add: bool,
    /// `norm`: the RMSNorm in the QKV and gate/up GEMMs' prologues for steps of at most
    /// `FUSED_NORM_MAX_ROWS` rows (no `rmsnorm_residual` launch); needs `add`.
    pub norm: bool,
    /// `rope`: qkv_prepare in the QKV GEMM's epilogue (layers without Q/K/V norms).
    pub rope: bool,
}

impl DecodeFuse {
    /// The fusions that won on the H200 (Llama-3-8B, 2026-12-02, same call): the residual add
    /// in the o and down epilogues and RoPE in QKV's, together 214.3 -> 218.2 tok/s at batch 1,
    /// 4,422 -> 4,533 at 32, 8,612 -> 8,744 at 128, 194.4 -> 198.8 at batch 1 and depth 8k;
    /// batch 8 even (1,493 -> 1,490, 987 -> 981 at 8k). SwiGLU in the gate/up epilogue (0.98x
    /// at batch 1) and the norm in the prologues (0.92x) lost.
    pub const DEFAULT: DecodeFuse = DecodeFuse {
        glu: false,
        add: true,
        norm: false,
        rope: true,
    };

    /// For quantised matrices: SwiGLU too, its rows stored pair by pair at load.
    pub const QUANT_DEFAULT: DecodeFuse = DecodeFuse {
        glu: true,
        add: true,
        norm: false,
        rope: true,
    };

    pub const ALL: DecodeFuse = DecodeFuse {
        glu: true,
        add: true,
        norm: true,
        rope: true,
    };

    /// `all`, or a comma-separated list of glu, add, norm, rope; anything else (`none`, `0`) is
    /// none. `norm`
    /// brings `add` with it (the norm in a GEMM cannot also add the block output).
    pub fn parse(v: &str) -> DecodeFuse {
        if v == "all" {
            return DecodeFuse::ALL;
        }
        let has = |w| v.split(',').any(|p| p.trim() == w);
        DecodeFuse {
            glu: has("glu"),
            add: has("add") || has("norm"),
            norm: has("norm"),
            rope: has("rope"),
        }
    }

    pub fn any(&self) -> bool {
        self.glu || self.add || self.norm || self.rope
    }

    pub(crate) fn describe(&self) -> String {
        let on: Vec<&str> = [
            (self.glu, "glu"),
            (self.add, "add"),
            (self.norm, "norm"),
            (self.rope, "rope"),
        ]
        .iter()
        .filter(|(b, _)| *b)
        .map(|(_, n)| *n)
        .collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}

/// Decode launches of at least this many rows take the tensor-core GEMM under `KILN_SKINNY_TC=on`.
pub const SKINNY_TC_DEFAULT_ROWS: usize = 64;

/// The decode GEMM's choice when `KILN_SKINNY_TC` is unset: the measured table.
pub const SKINNY_TC_DEFAULT: SkinnyTc = SkinnyTc::Measured;

/// Which decode GEMM launches run on the tensor cores (`KILN_SKINNY_TC`). Every choice gives the
/// 16-warp skinny kernel's bits, so it changes speed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkinnyTc {
    /// 0, off: the skinny kernel at every row count.
    Off,
    /// N | on (64): launches of at least N rows, in the CTA shape `choose_tc_entry` picks.
    From(usize),
    /// auto (the default): per weight shape and row count, the kernel and tiling the H200
    /// measured fastest (`skinny_tc::MEASURED`); shapes not measured keep the skinny kernel.
    /// Decode at depth 0: 1.17x at batch 32, 1.12x at batch 128 (2026-12-02).
    Measured,
}
