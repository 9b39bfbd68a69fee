//! Kernel contract for the GEMMs: the skinny decode kernel and the pinned cuBLASLt path against a
//! float64 host reference on fresh random inputs (odd sizes, poisoned outputs), plus row
//! invariance (a row's bits do not depend on the row count), plus bandwidth/throughput figures.

use crate::common;

use common::{all, from_bf16, gpu_or_skip, timed, to_bf16, up, Checks, Rng};
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::gemm_lt::{GemmOut, LtGemm};
use kiln_cuda::skinny::{SkinnyKind, SKINNY_MAX_ROWS};

pub(crate) struct Problem {
    pub n: usize,
    pub k: usize,
    x: Vec<u16>,
    w: Vec<u16>,
    pub dx: DevBuf<u16>,
    pub dw: DevBuf<u16>,
}

impl Problem {
    pub fn new(gpu: &Gpu, rng: &mut Rng, m: usize, n: usize, k: usize) -> Problem {
        let x = to_bf16(&rng.vec(m * k, 1.0));
        let w = to_bf16(&rng.vec(n * k, 1.0));
        let dx = gpu.alloc::<u16>(m * k).unwrap();
        let dw = gpu.alloc::<u16>(n * k).unwrap();
        dx.upload(0, &x).unwrap();
        dw.upload(0, &w).unwrap();
        Problem { n, k, x, w, dx, dw }
    }

    /// Reference rows `rows` of x . w^T in float64.
    pub fn reference(&self, rows: &[usize]) -> Vec<f64> {
        let (xf, wf) = (from_bf16(&self.x), from_bf16(&self.w));
        let mut out = Vec::with_capacity(rows.len() * self.n);
        for &r in rows {
            let xr = &xf[r * self.k..(r + 1) * self.k];
            for j in 0..self.n {
                let wr = &wf[j * self.k..(j + 1) * self.k];
                out.push(xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum());
            }
        }
        out
    }

    pub fn atol(&self) -> f64 {
        1e-4 * (self.k as f64).sqrt()
    }
}

pub(crate) fn rows_of(y: &[f32], n: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&r| y[r * n..(r + 1) * n].iter().copied())
        .collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn skinny_gemm_contract() {
    let Some(gpu) = gpu_or_skip("skinny_gemm_contract") else {
        return;
    };
    let mut rng = Rng::new("skinny_gemm_contract");
    let mut c = Checks::new("skinny_gemm");
    for (m, n, k) in [
        (1, 201, 136),
        (3, 4096, 4096),
        (8, 1000, 4104),
        (13, 77, 520),
        (16, 130, 264),
        (31, 96, 1024),
        (64, 512, 1024),
        (77, 96, 256),
        (2, 40, 8),
        (5, 300, 14336),
        (9, 250, 8200),
        (64, 70, 16384),
    ] {
        let p = Problem::new(&gpu, &mut rng, m, n, k);
        let all: Vec<usize> = (0..m).collect();
        let want = p.reference(&all);
        let mut pipe_bits = Vec::new();
        for kind in SkinnyKind::ALL {
            let v = kind.name();
            // One poisoned row past the end must stay untouched.
            let y = gpu.alloc::<f32>((m + 1) * n).unwrap();
            y.fill_bytes(0xff).unwrap();
            let secs = timed(&gpu, || {
                gpu.skinny_gemm_launch(kind, true, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
            });
            let got = y.download(&gpu, 0, (m + 1) * n).unwrap();
            // The deeper ring only prefetches further: the same sums in the same order.
            let bits: Vec<u32> = got[..m * n].iter().map(|v| v.to_bits()).collect();
            if kind == SkinnyKind::Wide && m <= 8 {
                // Both 8-row wide entries (7 stages / 4 stages): one order, the same bits.
                for name in ["skinny_wide_8", "skinny_wide4_8"] {
                    let yo = gpu.alloc::<f32>(m * n).unwrap();
                    gpu.skinny_entry_launch(name, true, yo.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
                        .unwrap();
                    let other: Vec<u32> = yo
                        .download(&gpu, 0, m * n)
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    c.identical(&format!("{name} == wide m={m} n={n} k={k}"), &other, &bits);
                }
            }
            match kind {
                SkinnyKind::Pipe => pipe_bits = bits,
                SkinnyKind::Deep => c.identical(
                    &format!("deep == pipe m={m} n={n} k={k}"),
                    &bits,
                    &pipe_bits,
                ),
                _ => {}
            }
            c.close(
                &format!("{v} m={m} n={n} k={k}"),
                &got[..m * n],
                &want,
                p.atol(),
                1e-5,
                secs,
            );
            let untouched = got[m * n..].iter().all(|v| v.to_bits() == u32::MAX);
            c.check(
                untouched,
                format!("{v} m={m} n={n} k={k}: row past the end left poisoned"),
            );
            // Row invariance: each row alone gives the same bits as inside the batch.
            let single = gpu.alloc::<f32>(n).unwrap();
            let mut same = true;
            for r in [0, m / 2, m - 1] {
                gpu.skinny_gemm_launch(
                    kind,
                    true,
                    single.ptr(),
                    p.dx.at(r * k),
                    p.dw.ptr(),
                    1,
                    n,
                    k,
                )
                .unwrap();
                let alone = single.download(&gpu, 0, n).unwrap();
                same &= alone
                    .iter()
                    .zip(&got[r * n..(r + 1) * n])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            }
            c.check(
                same,
                format!("{v} m={m} n={n} k={k}: rows alone are bit-identical to rows in the batch"),
            );
        }
    }
    // Bandwidth on Llama-3-8B shapes at decode row counts, per family. Each launch reads one of
    // several copies of the weight, together well past the 50 MB L2, as in a decode step where
    // every layer has its own weights: the same copy back to back would be partly served from L2.
    let x = gpu.alloc::<u16>(SKINNY_MAX_ROWS * 14336).unwrap();
    x.upload(0, &to_bf16(&rng.vec(SKINNY_MAX_ROWS * 14336, 1.0)))
        .unwrap();
    for (n, k) in [
        (6144, 4096),
        (4096, 4096),
        (28672, 4096),
        (4096, 14336),
        (128256, 4096),
    ] {
        let host = to_bf16(&rng.vec(n * k, 1.0));
        let copies: Vec<DevBuf<u16>> = (0..(600usize << 20).div_ceil(n * k * 2))
            .map(|_| {
                let w = gpu.alloc::<u16>(n * k).unwrap();
                w.upload(0, &host).unwrap();
                w
            })
            .collect();
        let y = gpu.alloc::<f32>(SKINNY_MAX_ROWS * n).unwrap();
        for m in [1, 2, 8, 16, 32, 64] {
            for (kind, pdl) in [
                (SkinnyKind::Wide, true),
                (SkinnyKind::Wide, false),
                (SkinnyKind::Pipe, true),
                (SkinnyKind::Deep, true),
                (SkinnyKind::Plain, false),
            ] {
                let mut turn = 0;
                let mut launch = || {
                    turn += 1;
                    let w = copies[turn % copies.len()].ptr();
                    gpu.skinny_gemm_launch(kind, pdl, y.ptr(), x.ptr(), w, m, n, k)
                };
                launch().unwrap();
                let iters = 30;
                let secs = timed(&gpu, || {
                    for _ in 0..iters {
                        launch()?;
                    }
                    Ok(())
                }) / iters as f64;
                let tbs = (n * k * 2) as f64 / secs / 1e12;
                eprintln!(
                    "[skinny_gemm] BENCH {}{} m={m} n={n} k={k}: {:.1} us, weights read at {tbs:.2} TB/s",
                    kind.name(),
                    if pdl { "+pdl" } else { "" },
                    secs * 1e6
                );
            }
        }
    }
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn lt_gemm_contract() {
    let Some(gpu) = gpu_or_skip("lt_gemm_contract") else {
        return;
    };
    let mut rng = Rng::new("lt_gemm_contract");
    let mut c = Checks::new("lt_gemm");
    let mut lt = LtGemm::new(&gpu, 2048).unwrap();
    for (m, n, k) in [
        (1, 4096, 4096),
        (17, 1008, 264),
        (300, 512, 1024),
        (2048, 6144, 4096),
        (1000, 28672, 4096),
        // 8 rows past 512: on 132 multiprocessors they run as a launch of their own
        // (gemm_tail.rs), and must give the bits of the whole.
        (520, 4096, 4096),
    ] {
        let p = Problem::new(&gpu, &mut rng, m, n, k);
        let y = gpu.alloc::<f32>(m * n).unwrap();
        y.fill_bytes(0xff).unwrap();
        let secs = timed(&gpu, || {
            lt.matmul(&gpu, y.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
        });
        let got = y.download(&gpu, 0, m * n).unwrap();
        // A full reference for small problems, sampled rows for large ones.
        let rows: Vec<usize> = if m * n * k <= 1 << 28 {
            (0..m).collect()
        } else {
            vec![0, 1, m / 3, m - 1]
        };
        c.close(
            &format!(
                "m={m} n={n} k={k} ({:.1} TFLOP/s)",
                2.0 * (m * n * k) as f64 / secs / 1e12
            ),
            &rows_of(&got, n, &rows),
            &p.reference(&rows),
            p.atol(),
            1e-5,
            secs,
        );
        // The last rows apart or in the one launch: the same bits.
        lt.set_tail(false);
        let yw = gpu.alloc::<f32>(m * n).unwrap();
        let whole_secs = timed(&gpu, || {
            lt.matmul(&gpu, yw.ptr(), p.dx.ptr(), p.dw.ptr(), m, n, k)
        });
        lt.set_tail(true);
        c.identical(
            &format!(
                "m={m} n={n} k={k}: as launched ({:.1} us) vs whole (KILN_GEMM_TAIL=0, {:.1} us)",
                secs * 1e6,
                whole_secs * 1e6
            ),
            &yw.download(&gpu, 0, m * n).unwrap(),
            &got,
        );
        // The pinned algorithm gives each row the same bits at any row count.
        for sub in [1usize, 5, m / 2 + 1] {
            if sub >= m {
                continue;
            }
            let ys = gpu.alloc::<f32>(sub * n).unwrap();
            lt.matmul(&gpu, ys.ptr(), p.dx.ptr(), p.dw.ptr(), sub, n, k)
                .unwrap();
            let part = ys.download(&gpu, 0, sub * n).unwrap();
            c.identical(
                &format!("m={m} n={n} k={k}: first {sub} rows alone vs in the batch"),
                &part,
                &got[..sub * n],
            );
        }
        // And at an offset: rows m-3..m alone.
        if m > 3 {
            let ys = gpu.alloc::<f32>(3 * n).unwrap();
            lt.matmul(&gpu, ys.ptr(), p.dx.at((m - 3) * k), p.dw.ptr(), 3, n, k)
                .unwrap();
            let part = ys.download(&gpu, 0, 3 * n).unwrap();
            c.identical(
                &format!("m={m} n={n} k={k}: last 3 rows alone vs in the batch"),
                &part,
                &got[(m - 3) * n..],
            );
        }
        // An add in the epilogue gives the bits of the product stored, then added on the host
        // in f32 (one rounding of the same sum), on a residual of the size of the product.
        if lt.adds_exactly(&gpu, n, k).unwrap() {
            let base = rng.vec(m * n, 4.0);
            let ya = up(&gpu, &base);
            lt.matmul_to(
                &gpu,
                GemmOut::Add,
                ya.ptr(),
                p.dx.ptr(),
                p.dw.ptr(),
                m,
                n,
                k,
            )
            .unwrap();
            let added = all(&gpu, &ya);
            let want: Vec<f32> = base.iter().zip(&got).map(|(b, g)| b + g).collect();
            c.identical(
                &format!("m={m} n={n} k={k}: added in the epilogue vs stored, then added"),
                &added,
                &want,
            );
        } else {
            eprintln!("[lt_gemm] m={m} n={n} k={k}: pinned with split-K, no add in the epilogue");
        }
    }
    for line in &lt.choices {
        eprintln!("[lt_gemm] {line}");
    }
    c.finish();
}
