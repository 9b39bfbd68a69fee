//! Kernel contract for the fp8 rows of `--quantize fp8`: kernels/fp8.cu's quantisation bit for
//! bit against the host's definition (kiln_formats::fp8::quantize_row) on fresh random rows of
//! several magnitudes, a row of zeros, an outlier and a NaN, read at a row stride; and the fp8
//! GEMM (gemm_fp8.rs) in both scale modes against a float64 product of the same fp8 values, its
//! rows bit-identical whatever the row count and offset.

use crate::common;
use common::planted::planted_bugs_fail;

use common::{f32_bits, from_bf16, gpu_or_skip, timed, to_bf16, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::fp8_rows::Fp8Matrix;
use kiln_cuda::gemm_fp8::Fp8Scales;
use kiln_cuda::gemm_lt::LtGemm;
use kiln_formats::fp8::{e4m3_to_f32, quantize_row};

/// A row-major matrix quantised on the host: bytes and one scale a row.
fn host_rows(x: &[f32], cols: usize) -> (Vec<u8>, Vec<f32>) {
    let mut q = vec![0u8; x.len()];
    let scales = x
        .chunks_exact(cols)
        .zip(q.chunks_exact_mut(cols))
        .map(|(row, out)| quantize_row(row, out))
        .collect();
    (q, scales)
}

/// An fp8 matrix on the device from host bytes and scales.
fn upload(gpu: &Gpu, q: &[u8], scale: &[f32], rows: usize, cols: usize) -> Fp8Matrix {
    let m = Fp8Matrix {
        q: gpu.alloc(rows * cols).unwrap(),
        scale: gpu.alloc(rows).unwrap(),
        rows,
        cols,
    };
    m.q.upload(0, q).unwrap();
    m.scale.upload(0, scale).unwrap();
    m
}

/// Every quantisation case on `gpu`'s kernels.
fn quantize_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    // (rows, cols, amplitude, padding between rows)
    for (rows, cols, amp, pad) in [
        (1, 4096, 1.0f32, 0),
        (7, 1000, 0.05, 24),
        (3, 14_336, 30.0, 8),
        (5, 72, 1e-3, 0),
        (2, 8, 1e4, 16),
        (4, 4104, 2.0, 0),
    ] {
        let stride = cols + pad;
        let mut x = rng.vec(rows * stride, amp);
        // Row 0 with one outlier (the rest near its subnormals); with several rows, row 1 zeros.
        x[rng.below(cols)] = amp * 300.0;
        if rows > 1 {
            x[stride..stride + cols].fill(0.0);
        }
        let stored = to_bf16(&x);
        let seen = from_bf16(&stored);
        let rows_seen: Vec<f32> = (0..rows)
            .flat_map(|r| seen[r * stride..r * stride + cols].to_vec())
            .collect();
        let (want_q, want_s) = host_rows(&rows_seen, cols);
        let dx = gpu.alloc::<u16>(stored.len()).unwrap();
        dx.upload(0, &stored).unwrap();
        let (dq, ds) = (
            gpu.alloc::<u8>(rows * cols).unwrap(),
            gpu.alloc::<f32>(rows).unwrap(),
        );
        dq.fill_bytes(0x7f).unwrap();
        ds.fill_bytes(0xff).unwrap();
        let secs = timed(gpu, || {
            gpu.fp8_quantize_rows(dx.ptr(), dq.ptr(), ds.ptr(), rows, cols, stride)
        });
        let case = format!(
            "fp8_quantize_rows {rows} x {cols} (stride {stride}, amplitude {amp:e}, {:.3}ms)",
            secs * 1e3
        );
        c.identical(
            &format!("{case}: bytes"),
            &dq.download(gpu, 0, rows * cols).unwrap(),
            &want_q,
        );
        c.identical(
            &format!("{case}: scales"),
            &f32_bits(&ds.download(gpu, 0, rows).unwrap()),
            &f32_bits(&want_s),
        );
    }
    // A NaN makes its row's scale NaN, as on the host; the other rows are untouched by it.
    let cols = 64;
    let mut x = rng.vec(2 * cols, 1.0);
    x[cols + 5] = f32::NAN;
    let stored = to_bf16(&x);
    let (want_q, want_s) = host_rows(&from_bf16(&stored), cols);
    let dx = gpu.alloc::<u16>(stored.len()).unwrap();
    dx.upload(0, &stored).unwrap();
    let (dq, ds) = (
        gpu.alloc::<u8>(2 * cols).unwrap(),
        gpu.alloc::<f32>(2).unwrap(),
    );
    gpu.fp8_quantize_rows(dx.ptr(), dq.ptr(), ds.ptr(), 2, cols, cols)
        .unwrap();
    let s = ds.download(gpu, 0, 2).unwrap();
    let q = dq.download(gpu, 0, 2 * cols).unwrap();
    c.check(
        s[1].is_nan() && want_s[1].is_nan() && s[0] == want_s[0] && q[..cols] == want_q[..cols],
        format!("fp8_quantize_rows with a NaN in row 1: scales {s:?} (host {want_s:?})"),
    );
}

/// The float64 product of fp8 rows and its error scale: sum |terms| of each element.
fn product_ref(
    xq: &[u8],
    xs: &[f32],
    wq: &[u8],
    ws: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut mag) = (vec![0f64; m * n], vec![0f64; m * n]);
    let wv: Vec<f64> = wq.iter().map(|&b| e4m3_to_f32(b) as f64).collect();
    for i in 0..m {
        let xv: Vec<f64> = xq[i * k..(i + 1) * k]
            .iter()
            .map(|&b| e4m3_to_f32(b) as f64)
            .collect();
        for j in 0..n {
            let w = &wv[j * k..(j + 1) * k];
            let (s, a) = xv.iter().zip(w).fold((0f64, 0f64), |(s, a), (x, w)| {
                (s + x * w, a + (x * w).abs())
            });
            let f = xs[i] as f64 * ws[j] as f64;
            y[i * n + j] = s * f;
            mag[i * n + j] = a * f.abs();
        }
    }
    (y, mag)
}

/// A random fp8 product's operands, quantised on the host (x rows of amplitude 3, w rows of
/// 0.05, each first rounded to bf16 as a step's would be) and uploaded.
pub(crate) struct Product {
    pub xq: Vec<u8>,
    pub xs: Vec<f32>,
    pub wq: Vec<u8>,
    pub ws: Vec<f32>,
    pub x: Fp8Matrix,
    pub w: Fp8Matrix,
}

impl Product {
    pub fn random(gpu: &Gpu, rng: &mut Rng, m: usize, n: usize, k: usize) -> Product {
        let (xq, xs) = host_rows(&from_bf16(&to_bf16(&rng.vec(m * k, 3.0))), k);
        let (wq, ws) = host_rows(&from_bf16(&to_bf16(&rng.vec(n * k, 0.05))), k);
        let (x, w) = (upload(gpu, &xq, &xs, m, k), upload(gpu, &wq, &ws, n, k));
        Product {
            xq,
            xs,
            wq,
            ws,
            x,
            w,
        }
    }

    /// The worst error of `got` (m x n) against the float64 product, as a fraction of the
    /// terms' magnitude (infinite for a value that is not finite).
    pub fn worst_error(&self, got: &[f32]) -> f64 {
        let (m, n, k) = (self.x.rows, self.w.rows, self.w.cols);
        let (want, mag) = product_ref(&self.xq, &self.xs, &self.wq, &self.ws, m, n, k);
        got.iter()
            .zip(&want)
            .zip(&mag)
            .map(|((&g, &w), &a)| match g.is_finite() {
                true => (g as f64 - w).abs() / a.max(1e-30),
                false => f64::INFINITY,
            })
            .fold(0f64, f64::max)
    }
}

/// Hopper's fp8 products keep partial sums of about 14 bits until they are promoted to f32
/// (cuBLASLt with fast accumulation off; mma.sync's E4M3 as f16 MMAs): within about 2^-13 of
/// the terms' magnitude. 2^-10 leaves room for that, and a wrong scale or element is off by its
/// whole size.
pub(crate) const FP8_PRODUCT_TOLERANCE: f64 = 1.0 / 1024.0;

/// Every fp8 GEMM case, with the scales applied as `scales` says.
fn gemm_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, scales: Fp8Scales) {
    let mut lt = LtGemm::new(gpu, 256).unwrap();
    lt.enable_fp8(gpu, scales).unwrap();
    // (m, n, k): one row, a few, more than a tile; k of the 8B's projections and an odd multiple of 16.
    for (m, n, k) in [
        (1, 512, 4096),
        (7, 1040, 1024),
        (300, 256, 14_336),
        (37, 6144, 4096),
        (65, 96, 208),
        // 8 rows past 512: a launch of their own on 132 multiprocessors (gemm_tail.rs).
        (520, 4096, 4096),
    ] {
        let p = Product::random(gpu, rng, m, n, k);
        let (x, w) = (&p.x, &p.w);
        let y = gpu.alloc::<f32>(m * n).unwrap();
        y.fill_bytes(0xff).unwrap();
        let fp8 = lt.fp8().unwrap();
        // Pinned first, so that the time is the product's alone.
        fp8.pin(gpu, n, k).unwrap();
        let secs = timed(gpu, || {
            fp8.matmul(gpu, y.ptr(), x.q.ptr(), x.scale.ptr(), w, m)
        });
        let got = y.download(gpu, 0, m * n).unwrap();
        let worst = p.worst_error(&got);
        c.check(
            worst <= FP8_PRODUCT_TOLERANCE,
            format!("fp8 GEMM {scales:?} m={m} n={n} k={k}: worst error {worst:.2e} of the terms' magnitude ({:.3}ms)", secs * 1e3),
        );
        // The last rows apart or in the one launch: the same bits.
        fp8.set_tail(false);
        let yw = gpu.alloc::<f32>(m * n).unwrap();
        let whole_secs = timed(gpu, || {
            fp8.matmul(gpu, yw.ptr(), x.q.ptr(), x.scale.ptr(), w, m)
        });
        fp8.set_tail(true);
        c.identical(
            &format!(
                "fp8 GEMM {scales:?} m={m} n={n} k={k}: as launched ({:.1} us) vs whole ({:.1} us)",
                secs * 1e6,
                whole_secs * 1e6
            ),
            &f32_bits(&yw.download(gpu, 0, m * n).unwrap()),
            &f32_bits(&got),
        );
        // Rows 4.. of the same product at m - 4 rows, from that offset (its scales 16-byte
        // aligned, as a step's are): the same bits.
        if m > 4 {
            let part = gpu.alloc::<f32>((m - 4) * n).unwrap();
            part.fill_bytes(0xff).unwrap();
            fp8.matmul(gpu, part.ptr(), x.q.at(4 * k), x.scale.at(4), w, m - 4)
                .unwrap();
            let a = part.download(gpu, 0, (m - 4) * n).unwrap();
            c.identical(
                &format!("fp8 GEMM {scales:?} m={m} n={n} k={k}: rows 4.. alone"),
                &f32_bits(&a),
                &f32_bits(&got[4 * n..]),
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_contract() {
    let Some(gpu) = gpu_or_skip("fp8_contract") else {
        return;
    };
    let mut rng = Rng::new("fp8_contract");
    let mut c = Checks::new("fp8");
    quantize_cases(&gpu, &mut rng, &mut c);
    for scales in [Fp8Scales::Outer, Fp8Scales::Kernel] {
        gemm_cases(&gpu, &mut rng, &mut c, scales);
    }
    c.finish();
}

/// fp8.cu with one planted bug each: the scale off by one in 448, the last value of a group
/// of eight rounded from its neighbour, the two scales of the kernel mode from one row.
const PLANTED_FP8: &[(&str, &str)] = &[
    ("amax / 448.f", "amax / 447.f"),
    ("e4m3x2(v[6] / s, v[7] / s)", "e4m3x2(v[6] / s, v[6] / s)"),
    ("y[i] * (a[r] * w[c])", "y[i] * (a[r] * w[r % cols])"),
];

/// Every case of the module's kernels: the quantisation and the kernel-mode scales.
fn fp8_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    quantize_cases(gpu, rng, c);
    gemm_cases(gpu, rng, c, Fp8Scales::Kernel);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_planted_bugs_fail() {
    planted_bugs_fail("fp8_planted_bugs_fail", "fp8", PLANTED_FP8, fp8_cases);
}

/// The planted fp8 bugs' texts are in the module once and change its machine code (where NVRTC
/// is present), so that `fp8_planted_bugs_fail` tests what it says.
#[test]
fn fp8_planted_bugs_compile() {
    for &(from, to) in PLANTED_FP8 {
        let planted = common::planted::planted_module("fp8", from, to);
        common::planted::assert_planted_compiles(&planted, kiln_cuda::StoreType::Bf16, to);
    }
}
