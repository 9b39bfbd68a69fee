//! Kernel contract for the prefill-order decode GEMM (kernels/chain_gemm.cu): every entry
//! against a float64 host reference on fresh random inputs (odd sizes, k not a multiple of 16,
//! poisoned outputs), every entry giving the same bits, a row's bits not depending on the row
//! count, and the property the kernel exists for: its rows are bit for bit the rows of the
//! pinned cuBLASLt GEMM the prefill runs, on the shapes of Llama-3-8B and on odd ones. A bug
//! planted in each module is seen to fail.

use crate::common;
use crate::contract_gemm::{rows_of, Problem};

use common::planted::each_planted_bug_fails;
use common::{all, gpu_or_skip, poisoned, timed, Checks, Rng};
use kiln_cuda::chain_gemm::entries;
use kiln_cuda::device::Gpu;
use kiln_cuda::gemm_lt::LtGemm;

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn chain_gemm_contract() {
    let Some(gpu) = gpu_or_skip("chain_gemm_contract") else {
        return;
    };
    let mut rng = Rng::new("chain_gemm_contract");
    let mut c = Checks::new("chain_gemm");
    for (m, n, k) in [
        (1, 201, 136),
        (3, 4096, 4096),
        (8, 1000, 4104),
        (13, 77, 520),
        (16, 130, 264),
        (31, 96, 1024),
        (32, 512, 1024),
        (45, 96, 256),
        (2, 40, 8),
        (5, 300, 14336),
        (9, 250, 8200),
        (70, 70, 16384),
    ] {
        let p = Problem::new(&gpu, &mut rng, m, n, k);
        let rows: Vec<usize> = (0..m).collect();
        let y = poisoned::<f32>(&gpu, m * n);
        let secs = timed(&gpu, || {
            gpu.chain_gemm(true, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
        });
        let got = all(&gpu, &y);
        c.close(
            &format!("m={m} n={n} k={k}"),
            &got,
            &p.reference(&rows),
            p.atol(),
            1e-5,
            secs,
        );
        // Every entry that holds the rows gives the same bits.
        for e in entries() {
            let rows = m.min(e.max_rows());
            let ye = poisoned::<f32>(&gpu, rows * n);
            gpu.chain_entry_launch(e, true, ye.ptr(), p.dx.ptr(), p.dw.ptr(), rows, n, k)
                .unwrap();
            c.identical(
                &format!("m={m} n={n} k={k}: {} on the first {rows} rows", e.name),
                &all(&gpu, &ye),
                &got[..rows * n],
            );
        }
        // The last row alone (at an offset) as in the batch.
        let y1 = poisoned::<f32>(&gpu, n);
        gpu.chain_gemm(true, y1.ptr(), p.dx.at((m - 1) * k), p.dw.ptr(), 1, n, k)
            .unwrap();
        c.identical(
            &format!("m={m} n={n} k={k}: last row alone vs in the batch"),
            &all(&gpu, &y1),
            &got[(m - 1) * n..],
        );
    }
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn chain_gemm_is_the_pinned_order() {
    let Some(gpu) = gpu_or_skip("chain_gemm_is_the_pinned_order") else {
        return;
    };
    let mut rng = Rng::new("chain_gemm_is_the_pinned_order");
    let mut c = Checks::new("chain_gemm_pinned");
    let mut lt = LtGemm::new(&gpu, 2048).unwrap();
    // Llama-3-8B's QKV, o, gate/up, down and LM head, then odd shapes.
    for (m, n, k) in [
        (40, 6144, 4096),
        (33, 4096, 4096),
        (20, 28672, 4096),
        (24, 4096, 14336),
        (3, 128256, 4096),
        (17, 1008, 264),
        (9, 512, 1024),
        (5, 4096, 1000),
    ] {
        let p = Problem::new(&gpu, &mut rng, m, n, k);
        let want = pinned_product(&gpu, &mut lt, &p, m);
        let y = poisoned::<f32>(&gpu, m * n);
        gpu.chain_gemm(true, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
            .unwrap();
        let got = all(&gpu, &y);
        // Both near the float64 reference, then equal bit for bit.
        let rows = [0, m / 2, m - 1];
        c.close(
            &format!("m={m} n={n} k={k}: pinned GEMM"),
            &rows_of(&want, n, &rows),
            &p.reference(&rows),
            p.atol(),
            1e-5,
            0.0,
        );
        c.identical(
            &format!("m={m} n={n} k={k}: chain kernel vs pinned GEMM"),
            &got,
            &want,
        );
    }
    for line in &lt.choices {
        eprintln!("[chain_gemm_pinned] {line}");
    }
    c.finish();
}

/// The pinned cuBLASLt GEMM's m rows of `p`.
fn pinned_product(gpu: &Gpu, lt: &mut LtGemm, p: &Problem, m: usize) -> Vec<f32> {
    let y = poisoned::<f32>(gpu, m * p.n);
    lt.matmul(gpu, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, p.n, p.k)
        .unwrap();
    all(gpu, &y)
}

/// Planted bugs of the chain module: (module, text, replacement).
const PLANTED_CHAIN: &[(&str, &str, &str)] = &[
    // A stage's four 16-wide groups summed last first: near the reference, not the GEMM's bits.
    (
        "chain_gemm",
        "mma_bf16_16816(acc[j], af[kk], bf[kk][j]);",
        "mma_bf16_16816(acc[j], af[3 - kk], bf[3 - kk][j]);",
    ),
    // A stage's chunks stored without the swizzle that ldmatrix reads them through.
    (
        "chain_gemm",
        "sr * CHAIN_BK + ((c ^ (sr & 7)) << 3)",
        "sr * CHAIN_BK + (c << 3)",
    ),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_chain_bugs_fail() {
    let store = kiln_cuda::StoreType::Bf16;
    each_planted_bug_fails(
        "chain_gemm planted bugs",
        store,
        PLANTED_CHAIN,
        |bad, _, rng, c| {
            let mut lt = LtGemm::new(bad, 2048).unwrap();
            for (m, n, k) in [(1, 4096, 4096), (13, 512, 1024), (32, 1000, 4104)] {
                let p = Problem::new(bad, rng, m, n, k);
                let want = pinned_product(bad, &mut lt, &p, m);
                let first: Vec<usize> = (0..m).collect();
                for e in entries() {
                    let rows = m.min(e.max_rows());
                    let y = poisoned::<f32>(bad, rows * n);
                    bad.chain_entry_launch(e, true, y.ptr(), p.dx.ptr(), p.dw.ptr(), rows, n, k)
                        .unwrap();
                    let got = all(bad, &y);
                    let case = format!("m={m} n={n} k={k} {}", e.name);
                    c.close(
                        &case,
                        &got,
                        &p.reference(&first[..rows]),
                        p.atol(),
                        1e-5,
                        0.0,
                    );
                    c.identical(&case, &got, &want[..rows * n]);
                }
            }
        },
    );
}

/// Every planted bug's text is in its module once, and the planted module compiles into other
/// machine code (where NVRTC is present), so that `planted_chain_bugs_fail` tests what it says.
#[test]
fn chain_planted_bugs_are_in_the_source() {
    common::planted::each_planted_compiles(PLANTED_CHAIN.iter().copied());
}
