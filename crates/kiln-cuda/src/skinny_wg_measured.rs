//! The wgmma decode GEMM's measured launches (`KILN_SKINNY_WG=auto`,
//! `KILN_SKINNY_WG_CLUSTER=auto`): which entry of skinny_wg.cu each Llama-3-8B weight takes
//! at each row count, from timings on the H200.

use crate::skinny_wg::{find_wg_entry, WgEntry};

/// A weight's name, rows, columns and (first row count, entry) list in [`MEASURED`].
pub type WgShape = (
    &'static str,
    usize,
    usize,
    &'static [(usize, Option<&'static str>)],
);

/// `KILN_SKINNY_WG=auto`'s launches: per Llama-3-8B weight (n, k), `from` lists (first row
/// count, entry), None for the path the launch took before (skinny_tc.rs), each holding up to
/// the next; the last holds beyond. From `cuda_bench llama3-8b gemm` on the H200 (2026-12-03,
/// 03:23Z, microseconds; bench/results/2026-12-03-h200-skinny-wg.json). The split entries reuse
/// the chain partials KILN_SKINNY_TC_SPLIT reserves: without them the launch keeps its path.
/// Shapes not listed (o: the skinny kernel 39.4 at 128 rows, tc_2x4 49.6 from 192, neither
/// beaten) keep theirs.
pub const MEASURED: [WgShape; 4] = [
    // 64: skinny 34.3 vs wg_1x64 44.1; 128: wg_1x64 46.6 vs tc_2x4 50.0; 192: 53.7 vs tc_2x2
    // 65.9; 256: 53.5 vs 66.0.
    (
        "qkv",
        6144,
        4096,
        &[(1, None), (97, Some("skinny_wg_1x64"))],
    ),
    // 64: wg_2x64 101.8 vs tc_2x2 104.0 (under 5%); 128: wg_2x64 130.1 vs tc_t2x2 151.4; 192:
    // 185.3 vs 226.4; 256: 230.7 vs 274.1. (wg_1x128 at 128 rows, 124.8, and wg_1x64 at 256,
    // 227.1, were faster alone but the step with them 1.6% and 2.9% slower.)
    (
        "gate_up",
        28672,
        4096,
        &[(1, None), (97, Some("skinny_wg_2x64"))],
    ),
    // 128: wgs_2x128 82.1 vs the chain split tcs 93.4 (skinny 119.7); 192: 135.8 vs tcs 131.7
    // (wgs_1x64 122.8); 256: wg_1x64 150.7 vs tc_2x4 162.2.
    (
        "down",
        4096,
        14336,
        &[
            (1, None),
            (97, Some("skinny_wgs_2x128")),
            (193, Some("skinny_wg_1x64")),
        ],
    ),
    // 64: tc_2x2 347.0 vs wg_1x64 406.5; 128: wg_1x128 526.0 vs tc_t2x2 683.3; 192: wg_2x64
    // 811.8 vs 921.3 (wg_1x64 799.5); 256: wg_2x128 1015.7 vs 1237.8.
    (
        "lm_head",
        128256,
        4096,
        &[
            (1, None),
            (97, Some("skinny_wg_1x128")),
            (129, Some("skinny_wg_2x64")),
            (193, Some("skinny_wg_2x128")),
        ],
    ),
];

/// `KILN_SKINNY_WG_CLUSTER=auto`'s launches where they differ from [`MEASURED`]: clustered
/// entries, from `cuda_bench llama3-8b gemm` on the H200 (2026-12-03 06:57Z, microseconds,
/// against MEASURED's entry; bench/results/2026-12-03-h200-wg-clusters.json). QKV, down and o
/// keep theirs (no clustered entry ahead by more than 3%).
pub const MEASURED_CLUSTERED: [WgShape; 2] = [
    // 128 rows: wg_1x128_c4 117.1 vs wg_2x64 131.9; 256: 228.2 vs 242.1.
    (
        "gate_up",
        28672,
        4096,
        &[(1, None), (97, Some("skinny_wg_1x128_c4"))],
    ),
    // 128: wg_1x128_c2 527.3 vs wg_1x128 566.4; 256: 937.2 vs wg_2x128 1015.1.
    (
        "lm_head",
        128256,
        4096,
        &[(1, None), (97, Some("skinny_wg_1x128_c2"))],
    ),
];

/// The fewest rows a launch of [`MEASURED`] has.
pub const MEASURED_MIN_ROWS: usize = 97;

/// The entry [`MEASURED`] gives an `n` x `k` weight at `rows` rows (`clustered`:
/// [`MEASURED_CLUSTERED`] first); None: the launch keeps its path.
pub fn measured_wg_entry(
    n: usize,
    k: usize,
    rows: usize,
    clustered: bool,
) -> Option<&'static WgEntry> {
    let tables: &[&[WgShape]] = match clustered {
        true => &[&MEASURED_CLUSTERED, &MEASURED],
        false => &[&MEASURED],
    };
    let (_, _, _, from) = tables
        .iter()
        .find_map(|t| t.iter().find(|s| s.1 == n && s.2 == k))?;
    let (_, name) = from.iter().rev().find(|(r, _)| rows >= *r)?;
    Some(find_wg_entry((*name)?).expect("MEASURED names entries of skinny_wg.cu (unit-tested)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_table_names_entries_in_order() {
        for (what, _, _, from) in MEASURED.iter().chain(&MEASURED_CLUSTERED) {
            assert_eq!(from[0].0, 1, "{what}: starts at one row");
            assert!(from.windows(2).all(|w| w[0].0 < w[1].0), "{what}");
            for (r, name) in from.iter() {
                if let Some(name) = name {
                    assert!(find_wg_entry(name).is_some(), "{name}");
                    assert!(*r >= MEASURED_MIN_ROWS, "{what}: {r}");
                }
            }
        }
        let name = |n, k, rows| measured_wg_entry(n, k, rows, false).map(|e| e.name.as_str());
        let cl = |n, k, rows| measured_wg_entry(n, k, rows, true).map(|e| e.name.as_str());
        assert_eq!(cl(28672, 4096, 128), Some("skinny_wg_1x128_c4"));
        assert_eq!(cl(128256, 4096, 256), Some("skinny_wg_1x128_c2"));
        assert_eq!(cl(4096, 14336, 128), name(4096, 14336, 128));
        assert_eq!(cl(28672, 4096, 96), None);
        assert_eq!(name(28672, 4096, 96), None);
        assert_eq!(name(28672, 4096, 97), Some("skinny_wg_2x64"));
        assert_eq!(name(4096, 14336, 128), Some("skinny_wgs_2x128"));
        assert_eq!(name(4096, 14336, 192), Some("skinny_wgs_2x128"));
        assert_eq!(name(4096, 14336, 300), Some("skinny_wg_1x64"));
        assert_eq!(name(128256, 4096, 192), Some("skinny_wg_2x64"));
        assert_eq!(name(4096, 4096, 128), None);
    }
}
