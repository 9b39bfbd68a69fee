//! Which entry of the wgmma row order (wg_rows.rs) a launch takes, and whether it splits along
//! the chains. Every entry and the split give a row the same bits (contract_wg_rows), so this
//! choice is speed alone.
//!
//! The rule (`by_regime`) reads three regimes off `cuda_bench fp8-gemm` and `gemm` on an H100
//! (2026-12-05, bench/results/raw/2026-12-05-h100-*.json; the unit tests below hold it to them
//! and to the H200's fp8 lines, 2026-12-05-h200-fp8-gemm.json):
//! - a wide weight (a CTA a multiprocessor from its 64-row blocks alone: gate/up, LM heads)
//!   takes two 64-row groups a CTA and one token block where it can (N 8 up to 8 rows, else 64):
//!   more token blocks would read the weight again;
//! - a narrow weight splits along the chains at up to 8 rows (N 8), and at up to 128 when its
//!   rows are deep (96 k-tiles or more, the down projection; N 64): the split's CTAs fill the
//!   GPU, and its join costs little beside a long row. At up to 8 rows a deep weight keeps N 8
//!   although the GEMM alone ran N 64 faster (H200: 18.6 against 20.6 us on down): decode end
//!   to end ran batch 1 faster with N 8 (2026-12-05 11:57Z, one pair of runs: 5.4% fp8, 2.4%
//!   bf16), perhaps because more of its ring's stages (8 against 6) load while the kernel
//!   before it ends;
//! - else the narrow weight runs whole with N about a quarter of the rows (16 to 64): several
//!   token blocks fill the multiprocessors and re-read a weight that stays in L2; two 64-row
//!   groups a CTA where one would need a second wave.
//!
//! `KILN_WG_ROWS_CHOICE=ctas` gives the first rule back (the narrowest N that holds the rows,
//! the largest tiles that still give every multiprocessor a CTA, split when they do not), for
//! A/B runs; `KILN_FP8_WG_TILE` forces an fp8 entry.

use std::sync::OnceLock;

use crate::kernel_sources::entry_from_env;
use crate::wg_rows::{bf16_wg_entries, wg_entries, WgEntry, SPLIT_MAX_N, SPLIT_MAX_ROWS};

/// A launch's entry and whether it splits along the chains (where the workspace holds it).
#[derive(Debug, Clone, Copy)]
pub struct WgLaunch {
    pub entry: &'static WgEntry,
    pub split: bool,
}

/// Rows of 96 k-tiles (128 bytes each) or more are deep enough to split at up to 128 rows.
const DEEP_TILES: usize = 96;

/// `KILN_FP8_WG_TILE=RxT_nN` (e.g. `2x1_n8`): the entry every fp8 launch takes, for A/B runs;
/// None when unset or naming no entry.
fn forced_entry() -> Option<&'static WgEntry> {
    static FORCED: OnceLock<Option<&'static WgEntry>> = OnceLock::new();
    *FORCED.get_or_init(|| entry_from_env(wg_entries(), "KILN_FP8_WG_TILE", "fp8_wg_", |e| &e.name))
}

/// `KILN_WG_ROWS_CHOICE=ctas`: the first rule (read once with every switch, switches_env.rs).
fn first_rule() -> bool {
    crate::switches::Switches::from_env().wg_rows_ctas
}

/// The fp8 launch of `m` rows of an `n`-row weight of `kb` bytes a row on `sms`
/// multiprocessors.
pub fn wg_launch(n: usize, kb: usize, m: usize, sms: usize) -> WgLaunch {
    match forced_entry() {
        Some(entry) => WgLaunch {
            entry,
            split: fills_not(entry, n, m, sms),
        },
        None => choose(wg_entries(), n, kb, m, sms, first_rule()),
    }
}

/// The bf16 launch over `places` weight rows of `kb` bytes a row.
pub fn bf16_wg_launch(places: usize, kb: usize, m: usize, sms: usize) -> WgLaunch {
    choose(bf16_wg_entries(), places, kb, m, sms, first_rule())
}

fn choose(
    table: &'static [WgEntry],
    n: usize,
    kb: usize,
    m: usize,
    sms: usize,
    first: bool,
) -> WgLaunch {
    let regime = if first {
        None
    } else {
        by_regime(table, n, kb, m, sms)
    };
    regime.unwrap_or_else(|| by_ctas(table, n, m, sms))
}

/// Whether a launch of `m` rows of an `n`-row weight may split: within the workspace's bounds.
pub fn splittable(n: usize, m: usize) -> bool {
    n <= SPLIT_MAX_N && m <= SPLIT_MAX_ROWS
}

/// The launch's CTAs leave multiprocessors idle, and a split may take it.
fn fills_not(e: &WgEntry, n: usize, m: usize, sms: usize) -> bool {
    e.ctas(n, m) < sms && splittable(n, m)
}

/// The regimes of the module's comment; None if the table lacks an entry they name.
fn by_regime(
    table: &'static [WgEntry],
    n: usize,
    kb: usize,
    m: usize,
    sms: usize,
) -> Option<WgLaunch> {
    let shape = |wr: usize, bn: usize| {
        table
            .iter()
            .find(|e| e.wr == wr && e.wt == 1 && e.bn == bn && !e.overlap)
    };
    let launch = |entry: Option<&'static WgEntry>, split| {
        Some(WgLaunch {
            entry: entry?,
            split,
        })
    };
    if n.div_ceil(64) >= sms {
        return launch(shape(2, if m <= 8 { 8 } else { 64 }), false);
    }
    let deep = kb.div_ceil(128) >= DEEP_TILES;
    if splittable(n, m) && (m <= 8 || deep) {
        let e = if m <= 8 {
            shape(1, 8)
        } else if m <= 64 {
            shape(1, 64)
        } else {
            shape(2, 64)
        };
        return launch(e, true);
    }
    let bn = m.div_ceil(4).next_power_of_two().clamp(16, 64);
    let one = shape(1, bn)?;
    if one.ctas(n, m) > sms * one.minb {
        return launch(shape(2, 64), false);
    }
    launch(Some(one), false)
}

/// The first rule: of the entries whose wgmma N is the narrowest that holds the rows (64 past
/// 64 rows), the one with the most weight rows and tokens a CTA that still gives every
/// multiprocessor a CTA, else the one with the most CTAs, split when that leaves some idle.
fn by_ctas(table: &'static [WgEntry], n: usize, m: usize, sms: usize) -> WgLaunch {
    let bn = [8, 16, 32, 64].into_iter().find(|&b| b >= m).unwrap_or(64);
    let of_n = || table.iter().filter(move |e| e.bn == bn && !e.overlap);
    let entry = of_n()
        .filter(|e| e.ctas(n, m) >= sms)
        .max_by_key(|e| (e.rows() * e.tokens(), e.rows()))
        .or_else(|| of_n().max_by_key(|e| (e.ctas(n, m), e.rows())))
        .expect("an entry of each N");
    WgLaunch {
        entry,
        split: fills_not(entry, n, m, sms),
    }
}

#[cfg(test)]
#[path = "wg_rows_choice_tests.rs"]
mod tests;
