//! Kernel contract for the prefill-order decode GEMM (kernels/chain_gemm.cu and, on sm_90,
//! kernels/chain_wg.cu): every entry
//! against a float64 host reference on fresh random inputs (odd sizes, k not a multiple of 16,
//! poisoned outputs), every entry giving the same bits, a row's bits not depending on the row
//! count, and the property the kernel exists for: its rows are bit for bit the rows of the
//! pinned cuBLASLt GEMM the prefill runs, on the shapes of Llama-3-8B and on odd ones.

use crate::common;
use crate::contract_gemm::{rows_of, Problem};

use common::{gpu_or_skip, timed, Checks, Rng};
use kiln_cuda::chain_gemm::device_entries;
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
        let all: Vec<usize> = (0..m).collect();
        let y = gpu.alloc::<f32>(m * n).unwrap();
        y.fill_bytes(0xff).unwrap();
        let secs = timed(&gpu, || {
            gpu.chain_gemm(true, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
        });
        let got = y.download(&gpu, 0, m * n).unwrap();
        c.close(
            &format!("m={m} n={n} k={k}"),
            &got,
            &p.reference(&all),
            p.atol(),
            1e-5,
            secs,
        );
        // Every entry that holds the rows gives the same bits (chain_wg.cu's too, on sm_90).
        for e in device_entries(&gpu) {
            let rows = m.min(e.max_rows());
            let ye = gpu.alloc::<f32>(rows * n).unwrap();
            ye.fill_bytes(0xff).unwrap();
            gpu.chain_entry_launch(e, true, ye.ptr(), p.dx.ptr(), p.dw.ptr(), rows, n, k)
                .unwrap();
            c.identical(
                &format!("m={m} n={n} k={k}: {} on the first {rows} rows", e.name),
                &ye.download(&gpu, 0, rows * n).unwrap(),
                &got[..rows * n],
            );
        }
        // The last row alone (at an offset) as in the batch.
        let y1 = gpu.alloc::<f32>(n).unwrap();
        gpu.chain_gemm(true, y1.ptr(), p.dx.at((m - 1) * k), p.dw.ptr(), 1, n, k)
            .unwrap();
        c.identical(
            &format!("m={m} n={n} k={k}: last row alone vs in the batch"),
            &y1.download(&gpu, 0, n).unwrap(),
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
        let ylt = gpu.alloc::<f32>(m * n).unwrap();
        lt.matmul(&gpu, ylt.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
            .unwrap();
        let want = ylt.download(&gpu, 0, m * n).unwrap();
        let y = gpu.alloc::<f32>(m * n).unwrap();
        y.fill_bytes(0xff).unwrap();
        gpu.chain_gemm(true, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
            .unwrap();
        let got = y.download(&gpu, 0, m * n).unwrap();
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
