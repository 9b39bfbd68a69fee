//! Pinned cuBLASLt with f32 or f16 inputs (every GEMM of such a backend, the LM head too):
//! against float64 with a bound that TF32 would break, a product TF32 cannot represent, and
//! each row's bits the same at any row count.

use kiln_cuda::device::Gpu;
use kiln_cuda::gemm_lt::LtGemm;
use kiln_cuda::StoreType;

use super::common::{f32_bits, timed, Checks, Rng};
use super::stored_vec;

fn reference(x: &[f32], w: &[f32], rows: &[usize], n: usize, k: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows.len() * n);
    for &r in rows {
        let xr = &x[r * k..(r + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            out.push(xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum());
        }
    }
    out
}

fn rows_of(y: &[f32], n: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&r| y[r * n..(r + 1) * n].iter().copied())
        .collect()
}

pub fn lt_gemm(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    let store = gpu.store;
    let mut lt = LtGemm::new(gpu, 2048).unwrap();
    for (m, n, k) in [
        (1, 4096, 4096),
        (17, 1008, 264),
        (300, 512, 1024),
        (2048, 6144, 4096),
        (1000, 2048, 5632),
        (3, 32_000, 2048),
    ] {
        let x = stored_vec(rng, store, m * k, 1.0);
        let w = stored_vec(rng, store, n * k, 1.0);
        let (dx, dw) = (
            gpu.alloc_store(m * k).unwrap(),
            gpu.alloc_store(n * k).unwrap(),
        );
        dx.upload_f32(0, &x).unwrap();
        dw.upload_f32(0, &w).unwrap();
        let y = gpu.alloc::<f32>(m * n).unwrap();
        y.fill_bytes(0xff).unwrap();
        let secs = timed(gpu, || lt.matmul(gpu, y.ptr(), dx.ptr(), dw.ptr(), m, n, k));
        let got = y.download(gpu, 0, m * n).unwrap();
        let rows: Vec<usize> = if m * n * k <= 1 << 28 {
            (0..m).collect()
        } else {
            vec![0, 1, m / 3, m - 1]
        };
        // f32 inputs: CUDA-core sums of k products of values in [-1, 1] land within ~1e-8 k of
        // float64, while TF32 inputs (10-bit mantissas) would be off by ~1e-4 sqrt(k), 25 times
        // this bound at k=4096. f16 inputs take the tensor cores, whose f32 accumulation is not
        // rounded to nearest: the bound of the bf16 contract (contract_gemm).
        let atol = match store {
            StoreType::F32 => 1e-7 * k as f64 + 1e-6,
            _ => 1e-4 * (k as f64).sqrt(),
        };
        let tflops = 2.0 * (m * n * k) as f64 / secs / 1e12;
        c.close(
            &format!("{store} m={m} n={n} k={k} ({tflops:.1} TFLOP/s)"),
            &rows_of(&got, n, &rows),
            &reference(&x, &w, &rows, n, k),
            atol,
            1e-6,
            secs,
        );
        // The pinned algorithm gives each row the same bits at any row count and offset.
        for (from, sub) in [
            (0, 1usize),
            (0, 5),
            (0, m / 2 + 1),
            (m.saturating_sub(3), 3),
        ] {
            if from + sub > m || sub >= m {
                continue;
            }
            let ys = gpu.alloc::<f32>(sub * n).unwrap();
            lt.matmul(gpu, ys.ptr(), dx.at(from * k), dw.ptr(), sub, n, k)
                .unwrap();
            let part = ys.download(gpu, 0, sub * n).unwrap();
            c.identical(
                &format!(
                    "{store} m={m} n={n} k={k}: rows {from}..{} alone vs in the batch",
                    from + sub
                ),
                &f32_bits(&part),
                &f32_bits(&got[from * n..(from + sub) * n]),
            );
        }
    }
    if store == StoreType::F32 {
        // (1 + 2^-20)(1 + 2^-21) = 1 + 3 * 2^-21 + 2^-41: f32 keeps 1 + 3 * 2^-21, TF32 rounds
        // both inputs to 1 and gives 1.
        let (n, k) = (64, 64);
        let mut x = vec![0f32; k];
        let mut w = vec![0f32; n * k];
        x[0] = 1.0 + 2f32.powi(-20);
        for j in 0..n {
            w[j * k] = 1.0 + 2f32.powi(-21);
        }
        let (dx, dw) = (gpu.alloc_store(k).unwrap(), gpu.alloc_store(n * k).unwrap());
        dx.upload_f32(0, &x).unwrap();
        dw.upload_f32(0, &w).unwrap();
        let y = gpu.alloc::<f32>(n).unwrap();
        lt.matmul(gpu, y.ptr(), dx.ptr(), dw.ptr(), 1, n, k)
            .unwrap();
        let got = y.download(gpu, 0, n).unwrap();
        let want = 1.0 + 3.0 * 2f32.powi(-21);
        c.check(
            got.iter().all(|&v| v == want),
            format!(
                "f32 GEMM is not TF32: (1 + 2^-20)(1 + 2^-21) = {want:e}, got {:e}",
                got[0]
            ),
        );
    }
    for line in &lt.choices {
        c.check(
            !line.contains("NOT batch invariant"),
            format!("pinned for every row count: {line}"),
        );
    }
}
