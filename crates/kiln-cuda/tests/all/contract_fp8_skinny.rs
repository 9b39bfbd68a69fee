//! Kernel contract for the fp8 skinny kernels (fp8_skinny.rs, kernels/fp8.cu's skinny_fp8_*;
//! KILN_FP8_SKINNY): the decode rows' product against float64 of the same fp8 values within
//! 2^-10 of the terms' magnitude, as the fp8 GEMM's contract holds it (contract_fp8.rs), and each
//! row's bits the same alone, among the others, and from another row offset, whatever the count
//! of rows (launches of up to 64 rows, four entries by row count). The wide kernels
//! (kernels/fp8_wide.cu, KILN_FP8_WIDE) give every row the skinny kernels' bits, in one launch
//! of any count of rows, each of their entries (on sm_90, where they run).

use crate::common;
use crate::contract_fp8::{Product, FP8_PRODUCT_TOLERANCE};
use common::planted::{each_planted_bug_fails, Bug};

use common::{all, f32_bits, poisoned, timed, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::fp8_rows::{Fp8Matrix, Fp8Rows};
use kiln_cuda::fp8_skinny::{wide_entries, wide_entry, wide_matches_skinny};

fn rows_of(x: &Fp8Matrix, from: usize) -> Fp8Rows {
    Fp8Rows {
        q: x.q.at(from * x.cols),
        scale: x.scale.at(from),
    }
}

fn skinny_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    // (m, n, k): one row (the 8B's o and QKV), a few, every entry's row count, more than one
    // launch, the 8B's down (k 14,336), a width that is no multiple of 16 rows of the weight.
    for (m, n, k) in [
        (1, 4096, 4096),
        (3, 6144, 4096),
        (8, 1040, 1024),
        (13, 512, 14_336),
        (29, 640, 2048),
        (64, 256, 4096),
        (100, 96, 208),
        (5, 2056, 14_336),
        // The wide kernels' entries on 132 multiprocessors (the H200's): 8x2, 8x1 (k past a
        // pass of 4,096 and no multiple of 64), 4x1; three CTAs of tokens, then one.
        (130, 16_640, 1040),
        (130, 6144, 4160),
        (33, 1040, 1040),
    ] {
        let p = Product::random(gpu, rng, m, n, k);
        let (x, w) = (&p.x, &p.w);
        let y = poisoned::<f32>(gpu, m * n);
        let secs = timed(gpu, || gpu.fp8_skinny(y.ptr(), rows_of(x, 0), w, m));
        let got = all(gpu, &y);
        let worst = p.worst_error(&got);
        let case = format!("fp8 skinny m={m} n={n} k={k}");
        c.check(
            worst <= FP8_PRODUCT_TOLERANCE,
            format!(
                "{case}: worst error {worst:.2e} of the terms' magnitude ({:.3}ms)",
                secs * 1e3
            ),
        );
        // Each of a few rows alone (a one-row launch from its offset), and rows 3.. together.
        for r in [0, m / 2, m - 1] {
            let alone = poisoned::<f32>(gpu, n);
            gpu.fp8_skinny(alone.ptr(), rows_of(x, r), w, 1).unwrap();
            c.identical(
                &format!("{case}: row {r} alone"),
                &f32_bits(&all(gpu, &alone)),
                &f32_bits(&got[r * n..(r + 1) * n]),
            );
        }
        if m > 3 {
            let part = poisoned::<f32>(gpu, (m - 3) * n);
            gpu.fp8_skinny(part.ptr(), rows_of(x, 3), w, m - 3).unwrap();
            c.identical(
                &format!("{case}: rows 3.. together"),
                &f32_bits(&all(gpu, &part)),
                &f32_bits(&got[3 * n..]),
            );
        }
        wide_cases(gpu, c, &p, &got, &case);
    }
}

/// The wide kernels over the same rows, each entry (the one the launcher would choose first): all rows in one launch, then rows 3.. and the last row, each
/// the skinny kernels' bits (`skinny`, all of p's rows).
fn wide_cases(gpu: &Gpu, c: &mut Checks, p: &Product, skinny: &[f32], case: &str) {
    if !wide_matches_skinny(gpu.arch) {
        return;
    }
    let (x, w) = (&p.x, &p.w);
    let (m, n) = (x.rows, w.rows);
    let chosen = wide_entry(n, m, gpu.sm_count as usize);
    let others = wide_entries().iter().filter(|e| e.name != chosen.name);
    for e in std::iter::once(chosen).chain(others) {
        for from in [0, 3.min(m - 1), m - 1] {
            let rows = m - from;
            let y = poisoned::<f32>(gpu, rows * n);
            let secs = timed(gpu, || {
                gpu.fp8_wide_in(e, y.ptr(), rows_of(x, from), w, rows)
            });
            c.identical(
                &format!(
                    "{case}: rows {from}.. in {} as the skinny kernels ({:.3}ms)",
                    e.name,
                    secs * 1e3
                ),
                &f32_bits(&all(gpu, &y)),
                &f32_bits(&skinny[from * n..]),
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_skinny_contract() {
    crate::common::run_contract("fp8_skinny_contract", "fp8 skinny", skinny_cases);
}

/// fp8.cu's skinny kernels with one planted bug each: the second MMA's x fragment with its two
/// words swapped (its k slots no longer W's), the weight's scale left out; then fp8_wide.cu's
/// products summed straight into the running sum, not chain by chain (the same terms within the
/// tolerance, other bits).
const PLANTED_SKINNY: &[Bug] = &[
    (
        "fp8",
        "const u32 b1[2] = {vx[u][j].z, vx[u][j].w};",
        "const u32 b1[2] = {vx[u][j].w, vx[u][j].z};",
    ),
    ("fp8", "s * (xs[m] * ws[n])", "s * xs[m]"),
    (
        "fp8_wide",
        "chain[i][j][q] = chain[i][j][q] + p[q];",
        "out[i][j][q] = out[i][j][q] + p[q];",
    ),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_skinny_planted_bugs_fail() {
    each_planted_bug_fails(
        "fp8_skinny_planted_bugs_fail",
        kiln_cuda::StoreType::Bf16,
        PLANTED_SKINNY,
        |gpu, _, rng, c| skinny_cases(gpu, rng, c),
    );
}

/// The planted bugs' texts are in their modules once and change their machine code (where
/// NVRTC is present), so that `fp8_skinny_planted_bugs_fail` tests what it says.
#[test]
fn fp8_skinny_planted_bugs_compile() {
    common::planted::each_planted_compiles(PLANTED_SKINNY.iter().copied());
}
