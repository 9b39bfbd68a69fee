//! Kernel contract for the fused producers of fp8 rows (KILN_FP8_FUSE, kernels/fp8.cu):
//! `rmsnorm_residual_fp8` against `rmsnorm_residual` then `fp8_quantize_rows`, and `gated_fp8`
//! against `swiglu` or `geglu` then `fp8_quantize_rows`, bit for bit in every output (the
//! residual stream, the stored rows, the fp8 bytes and scales) on fresh random rows; and the
//! fused launch's fp8 rows against the host's definition (kiln_formats::fp8::quantize_row) of
//! the rows it stored, in every storage type the module is built for (bf16, f16, f32). The two
//! launches they replace have contracts of their own (contract_rows, contract_gemma,
//! contract_fp8).

use crate::common;
use common::planted::planted_bugs_fail;

use common::{all, f32_bits, gpu_with_store_or_skip, poisoned, timed, up, Checks, Rng};
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::fp8_rows::Fp8Rows;
use kiln_cuda::store::StoreBuf;
use kiln_cuda::StoreType;
use kiln_formats::fp8::quantize_row;
use kiln_model::Activation;

/// One launch's outputs on the device: stored rows and their fp8 bytes and scales, poisoned
/// first (what a kernel leaves unwritten shows).
struct Rows {
    out: StoreBuf,
    q: DevBuf<u8>,
    s: DevBuf<f32>,
    rows: usize,
    cols: usize,
}

impl Rows {
    fn poisoned(gpu: &Gpu, rows: usize, cols: usize) -> Rows {
        let out = gpu.alloc_store(rows * cols).unwrap();
        out.fill_bytes(0xff).unwrap();
        Rows {
            out,
            q: poisoned(gpu, rows * cols),
            s: poisoned(gpu, rows),
            rows,
            cols,
        }
    }

    fn to(&self) -> Fp8Rows {
        Fp8Rows {
            q: self.q.ptr(),
            scale: self.s.ptr(),
        }
    }

    /// The second launch of a pair: the stored rows quantised by fp8_quantize_rows.
    fn quantize(&self, gpu: &Gpu) {
        let (r, c) = (self.rows, self.cols);
        gpu.fp8_quantize_rows(self.out.ptr(), self.q.ptr(), self.s.ptr(), r, c, c)
            .unwrap();
    }
}

/// The fused launch's outputs against the pair's, and its fp8 rows against the host's
/// quantisation of the rows it stored.
fn same_rows(gpu: &Gpu, c: &mut Checks, case: &str, pair: &Rows, fused: &Rows) {
    let stored_of = |r: &Rows| r.out.download_f32(gpu, 0, r.rows * r.cols).unwrap();
    let seen = stored_of(fused);
    c.identical(
        &format!("{case}: stored rows"),
        &f32_bits(&seen),
        &f32_bits(&stored_of(pair)),
    );
    let (q, s) = (all(gpu, &fused.q), all(gpu, &fused.s));
    c.identical(&format!("{case}: fp8 bytes"), &q, &all(gpu, &pair.q));
    c.identical(
        &format!("{case}: scales"),
        &f32_bits(&s),
        &f32_bits(&all(gpu, &pair.s)),
    );
    let mut want_q = vec![0u8; seen.len()];
    let want_s: Vec<f32> = seen
        .chunks_exact(fused.cols)
        .zip(want_q.chunks_exact_mut(fused.cols))
        .map(|(row, out)| quantize_row(row, out))
        .collect();
    c.check(
        q == want_q && f32_bits(&s) == f32_bits(&want_s),
        format!("{case}: fp8 rows as the host quantises the stored rows"),
    );
}

/// RMSNorm with the residual add (and without: delta 0) fused with the quantisation.
fn norm_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    // (rows, hidden, amplitude): the 8B's width at batch 1, odd widths and row counts, and a
    // width past 8 values a thread of the widest block (the norm's second loop).
    for (rows, hidden, amp) in [
        (1, 4096, 1.0f32),
        (2, 12_288, 2.0),
        (3, 1000, 20.0),
        (17, 5120, 0.01),
        (2, 2056, 3.0),
        (40, 2048, 1.0),
    ] {
        for with_delta in [true, false] {
            let x = rng.vec(rows * hidden, amp);
            let delta = rng.vec(rows * hidden, amp);
            let (x_pair, x_fused) = (up(gpu, &x), up(gpu, &x));
            let dd = up(gpu, &delta);
            let dw = gpu.alloc_store(hidden).unwrap();
            dw.upload_f32(0, &rng.vec(hidden, 1.5)).unwrap();
            let dptr = if with_delta { dd.ptr() } else { 0 };
            let (pair, fused) = (
                Rows::poisoned(gpu, rows, hidden),
                Rows::poisoned(gpu, rows, hidden),
            );
            let (w, eps) = (dw.ptr(), 1e-5);
            gpu.rmsnorm_residual(x_pair.ptr(), dptr, w, pair.out.ptr(), rows, hidden, eps)
                .unwrap();
            pair.quantize(gpu);
            let (x, out, to) = (x_fused.ptr(), fused.out.ptr(), fused.to());
            let secs = timed(gpu, || {
                gpu.rmsnorm_residual_fp8(x, dptr, w, out, to, rows, hidden, eps)
            });
            let case = format!(
                "rmsnorm_residual_fp8 {rows} x {hidden} (amplitude {amp:e}, delta {with_delta}, {:.3}ms)",
                secs * 1e3
            );
            c.identical(
                &format!("{case}: residual stream"),
                &f32_bits(&all(gpu, &x_fused)),
                &f32_bits(&all(gpu, &x_pair)),
            );
            same_rows(gpu, c, &case, &pair, &fused);
        }
    }
}

/// SwiGLU and GeGLU fused with the quantisation.
fn gated_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    // (rows, inter): the 8B's width at batch 1, a width of 8 more than a multiple of 32, a chunk.
    for (rows, inter) in [(1, 14_336), (5, 1000), (3, 8200), (64, 512)] {
        for act in [Activation::Silu, Activation::GeluTanh] {
            // Gates wide enough to reach both tails of the activations.
            let gu = up(gpu, &rng.vec(rows * 2 * inter, 8.0));
            let (pair, fused) = (
                Rows::poisoned(gpu, rows, inter),
                Rows::poisoned(gpu, rows, inter),
            );
            match act {
                Activation::Silu => gpu.swiglu(gu.ptr(), pair.out.ptr(), inter, rows),
                Activation::GeluTanh => gpu.geglu(gu.ptr(), pair.out.ptr(), inter, rows),
            }
            .unwrap();
            pair.quantize(gpu);
            let secs = timed(gpu, || {
                gpu.gated_fp8(gu.ptr(), fused.out.ptr(), fused.to(), inter, rows, act)
            });
            let case = format!("gated_fp8 {act:?} {rows} x {inter} ({:.3}ms)", secs * 1e3);
            same_rows(gpu, c, &case, &pair, &fused);
        }
    }
}

fn fused_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    norm_cases(gpu, rng, c);
    gated_cases(gpu, rng, c);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_fused_contract() {
    for store in [StoreType::Bf16, StoreType::F16, StoreType::F32] {
        let test = format!("fp8_fused_contract ({store})");
        let Some(gpu) = gpu_with_store_or_skip(&test, store) else {
            return;
        };
        let mut rng = Rng::new(&test);
        let mut c = Checks::new(&test);
        fused_cases(&gpu, &mut rng, &mut c);
        c.finish();
    }
}

/// fp8.cu's fused kernels with one planted bug each: the norm's last eight values of a row
/// left out of its quantisation, the gated activation's fourth value of a load from its third
/// gate.
const PLANTED_FUSED: &[(&str, &str)] = &[
    (
        "fp8_quantize_row(out + t * hidden, q + t * hidden, scale + t, hidden);",
        "fp8_quantize_row(out + t * hidden, q + t * hidden, scale + t, hidden - 8);",
    ),
    ("f(gv.w, uv.w)", "f(gv.z, uv.w)"),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fp8_fused_planted_bugs_fail() {
    planted_bugs_fail(
        "fp8_fused_planted_bugs_fail",
        "fp8",
        PLANTED_FUSED,
        fused_cases,
    );
}

/// The planted bugs' texts are in the module once and change its machine code (where NVRTC is
/// present), so that `fp8_fused_planted_bugs_fail` tests what it says.
#[test]
fn fp8_fused_planted_bugs_compile() {
    for &(from, to) in PLANTED_FUSED {
        let planted = common::planted::planted_module("fp8", from, to);
        common::planted::assert_planted_compiles(&planted, kiln_cuda::StoreType::Bf16, to);
    }
}
