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
