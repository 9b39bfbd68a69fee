//! Kernel contract for the decode rows on wgmma in one order (wg_rows.rs, kernels/wg_rows.cuh;
//! sm_90): fp8_wg.cu's (KILN_FP8_WG) against float64 of the same fp8 values within the fp8
//! GEMM's tolerance (contract_fp8.rs), bf16_wg.cu's against float64 of the bf16 values within
//! the bf16 GEMMs' (contract_gemm.rs); and one order for every row whatever the launch: each
//! row's bits the same alone, among the others and from another row offset, in every entry
//! (wgmma N of 8 to 64, one or two token and weight groups a CTA, the overlapped ones), whole or
//! split along the chains, a split launch again after another (its arrival counters left at
//! zero); nothing written past the rows.

use crate::common;
use crate::contract_fp8::{Product, FP8_PRODUCT_TOLERANCE};
use crate::contract_gemm::Problem;
use common::planted::{each_planted_bug_fails, Bug};

use common::{all, f32_bits, poisoned, timed, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::fp8_rows::{Fp8Matrix, Fp8Rows};
use kiln_cuda::skinny_fused::Epilogue;
use kiln_cuda::wg_rows::{
    bf16_wg_entries, bf16_wg_launch, splittable, wg_entries, wg_launch, SPLIT_MAX_ROWS,
};

fn rows_of(x: &Fp8Matrix, from: usize) -> Fp8Rows {
    Fp8Rows {
        q: x.q.at(from * x.cols),
        scale: x.scale.at(from),
    }
}

/// Rows `from..` of `p` in entry `e` (split or not) into a buffer one poisoned row longer;
/// the rows, and whether the row past them kept its poison.
fn launch(gpu: &Gpu, p: &Product, e: usize, split: bool, from: usize) -> (Vec<f32>, bool, f64) {
    let (m, n) = (p.x.rows - from, p.w.rows);
    let y = poisoned::<f32>(gpu, (m + 1) * n);
    let entry = &wg_entries()[e];
    let secs = timed(gpu, || {
        gpu.fp8_wg_in(entry, split, y.ptr(), rows_of(&p.x, from), &p.w, m)
    });
    let got = all(gpu, &y);
    let untouched = got[m * n..].iter().all(|v| v.to_bits() == u32::MAX);
    (got[..m * n].to_vec(), untouched, secs)
}

fn wg_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    if !gpu.has_wg_rows() {
        eprintln!("fp8_wg: not built for sm_{} (sm_90 only)", gpu.arch);
        return;
    }
    gpu.reserve_wg_rows(true, SPLIT_MAX_ROWS).unwrap();
    // (m, n, k): one row (the 8B's o), a few on QKV, each N's row counts, the 8B's down (k
    // 14,336), k no multiple of 128 (a short last tile, fewer tiles than chains), weights no
    // multiple of 64 rows, more tokens than a CTA takes, past the split's rows.
    for (m, n, k) in [
        (1, 4096, 4096),
        (3, 6144, 4096),
        (8, 1040, 1024),
        (13, 512, 14_336),
        (29, 640, 2064),
        (64, 256, 4096),
        (65, 96, 208),
        (100, 1000, 48),
        (130, 2056, 1040),
        (200, 640, 4096),
    ] {
        let p = Product::random(gpu, rng, m, n, k);
        let case = format!("fp8_wg m={m} n={n} k={k}");
        let y = poisoned::<f32>(gpu, m * n);
        let secs = timed(gpu, || gpu.fp8_wg(y.ptr(), rows_of(&p.x, 0), &p.w, m));
        let got = all(gpu, &y);
        let worst = p.worst_error(&got);
        c.check(
            worst <= FP8_PRODUCT_TOLERANCE,
            format!(
                "{case}: worst error {worst:.2e} of the terms' magnitude ({:.3}ms)",
                secs * 1e3
            ),
        );
        // Each of a few rows alone, and rows 3.. together, as the launcher chooses.
        for r in [0, m / 2, m - 1] {
            let alone = poisoned::<f32>(gpu, n);
            gpu.fp8_wg(alone.ptr(), rows_of(&p.x, r), &p.w, 1).unwrap();
            c.identical(
                &format!("{case}: row {r} alone"),
                &f32_bits(&all(gpu, &alone)),
                &f32_bits(&got[r * n..(r + 1) * n]),
            );
        }
        if m > 3 {
            let rest = poisoned::<f32>(gpu, (m - 3) * n);
            gpu.fp8_wg(rest.ptr(), rows_of(&p.x, 3), &p.w, m - 3)
                .unwrap();
            c.identical(
                &format!("{case}: rows 3.. together"),
                &f32_bits(&all(gpu, &rest)),
                &f32_bits(&got[3 * n..]),
            );
        }
        // Every entry, whole and (where the workspace holds it) split, from row 0 and the last.
        for (e, entry) in wg_entries().iter().enumerate() {
            for from in [0, m - 1] {
                for split in [false, true] {
                    if split && !splittable(n, m - from) {
                        continue;
                    }
                    let (rows, untouched, secs) = launch(gpu, &p, e, split, from);
                    let how = if split { "split" } else { "whole" };
                    let what = format!("{case}: rows {from}.. in {} {how}", entry.name);
                    c.identical(
                        &format!("{what} ({:.3}ms)", secs * 1e3),
                        &f32_bits(&rows),
                        &f32_bits(&got[from * n..]),
                    );
                    c.check(untouched, format!("{what}: nothing past its rows"));
                }
            }
        }
    }
    // A split launch right after another of the same blocks: the first left its counters at zero.
    let p = Product::random(gpu, rng, 5, 2048, 4096);
    let chosen = wg_launch(2048, 4096, 5, gpu.sm_count as usize).entry;
    let e = wg_entries()
        .iter()
        .position(|e| e.name == chosen.name)
        .unwrap();
    let (first, _, _) = launch(gpu, &p, e, true, 0);
    let (second, _, _) = launch(gpu, &p, e, true, 0);
    c.identical(
        "fp8_wg: a split launch twice",
        &f32_bits(&second),
        &f32_bits(&first),
    );
    c.check(
        p.worst_error(&second) <= FP8_PRODUCT_TOLERANCE,
        "fp8_wg: the second split launch within tolerance".to_string(),
    );
}

/// bf16_wg.cu's entries, each whole and split, on the same shapes: within the bf16 GEMMs'
/// tolerance of float64, every entry's rows the bits of the launcher's choice, rows alone the
/// batch's.
fn bf16_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    if !gpu.has_wg_rows() {
        return;
    }
    gpu.reserve_wg_rows(true, SPLIT_MAX_ROWS).unwrap();
    let sms = gpu.sm_count as usize;
    for (m, n, k) in [
        (1, 4096, 4096),
        (3, 6144, 4096),
        (13, 512, 14_336),
        (29, 640, 2056),
        (65, 96, 200),
        (130, 1000, 1032),
    ] {
        let p = Problem::new(gpu, rng, m, n, k);
        let case = format!("bf16_wg m={m} n={n} k={k}");
        // Rows from.. in entry e: the rows, whether the row past them kept its poison, seconds.
        let run = |e, split, from: usize| {
            let rows = m - from;
            let y = poisoned::<f32>(gpu, (rows + 1) * n);
            let x = p.dx.ptr() + (from * k * 2) as u64;
            let secs = timed(gpu, || {
                let store = Epilogue::Store { y: y.ptr() };
                gpu.bf16_wg_in(e, split, &store, x, p.dw.ptr(), rows, n, k)
            });
            let got = all(gpu, &y);
            let untouched = got[rows * n..].iter().all(|v| v.to_bits() == u32::MAX);
            (got[..rows * n].to_vec(), untouched, secs)
        };
        let chosen = bf16_wg_launch(n, 2 * k, m, sms);
        let (got, _, secs) = run(chosen.entry, chosen.split, 0);
        let want = p.reference(&(0..m).collect::<Vec<_>>());
        c.close(&case, &got, &want, p.atol(), 1e-5, secs);
        let alone = bf16_wg_launch(n, 2 * k, 1, sms);
        let (last, _, _) = run(alone.entry, alone.split, m - 1);
        c.identical(
            &format!("{case}: the last row alone"),
            &f32_bits(&last),
            &f32_bits(&got[(m - 1) * n..]),
        );
        for e in bf16_wg_entries() {
            for split in [false, true] {
                if split && !splittable(n, m) {
                    continue;
                }
                let (rows, untouched, _) = run(e, split, 0);
                let what = format!(
                    "{case}: {} {}",
                    e.name,
                    if split { "split" } else { "whole" }
                );
                c.identical(&what, &f32_bits(&rows), &f32_bits(&got));
                c.check(untouched, format!("{what}: nothing past its rows"));
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn bf16_wg_contract() {
    crate::common::run_contract("bf16_wg_contract", "bf16 wgmma rows", bf16_cases);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_wg_contract() {
    crate::common::run_contract("fp8_wg_contract", "fp8 wgmma", wg_cases);
}

/// The row order with one planted bug each: a chain never zeroed after joining the sum (its
/// tiles counted again); in bf16_wg.cu, the split's join adding the chains in reverse order (the
/// same terms within the tolerance, other bits: only the bit checks see it; in fp8 the chains'
/// partials, sums of the E4M3 tensor cores' few-bit results, add exactly in any order, and the
/// H100 saw no bit change on 2026-12-05); a tile's first product on top of the last tile's
/// instead of from zero; the copies without the swizzle wgmma reads; in the `_o` entries, the
/// products of the tile before read from the registers the next tile's wgmmas are writing;
/// bf16_wg.cu's pair of sums given to the epilogue the other way round. (Its first planted bug
/// here, rows read as half their bytes, faulted on a misaligned copy instead of failing checks.)
const PLANTED_WG: &[Bug] = &[
    (
        "fp8_wg",
        "                chain[v] = 0.f;\n",
        "                chain[v] = chain[v];\n",
    ),
    (
        "bf16_wg",
        "__ldcg(part + ((u64)ch * M + m) * NP + p)",
        "__ldcg(part + ((u64)(WR_CHAINS - 1 - ch) * M + m) * NP + p)",
    ),
    (
        "fp8_wg",
        "Op::template mma<BN>(acc, da + 2 * kk, db + 2 * kk, kk);",
        "Op::template mma<BN>(acc, da + 2 * kk, db + 2 * kk, 1);",
    ),
    (
        "fp8_wg",
        "const u32 piece = (u32)((q ^ (r0 & 7)) << 4);",
        "const u32 piece = (u32)(q << 4);",
    ),
    (
        "fp8_wg",
        "add_tile(p[1], tile);\n        }\n        if (tile < t1)",
        "add_tile(p[0], tile);\n        }\n        if (tile < t1)",
    ),
    (
        "bf16_wg",
        "epi_pair(e, p >> 4, p & 15, m, lo, hi);",
        "epi_pair(e, p >> 4, p & 15, m, hi, lo);",
    ),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_wg_planted_bugs_fail() {
    each_planted_bug_fails(
        "fp8_wg_planted_bugs_fail",
        kiln_cuda::StoreType::Bf16,
        PLANTED_WG,
        |gpu, i, rng, c| match PLANTED_WG[i].0 {
            "bf16_wg" => bf16_cases(gpu, rng, c),
            _ => wg_cases(gpu, rng, c),
        },
    );
}

/// The planted bugs' texts are in fp8_wg.cu once and change its machine code (where NVRTC is
/// present), so that `fp8_wg_planted_bugs_fail` tests what it says.
#[test]
fn fp8_wg_planted_bugs_compile() {
    common::planted::each_planted_compiles(PLANTED_WG.iter().copied());
}
