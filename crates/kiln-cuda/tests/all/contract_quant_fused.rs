//! Contract of the fused epilogues of the quantised decode GEMM (quant_decode.cu, the second
//! family) and of the row orders they need (quant_order.rs), on fresh random blocks of every
//! format the GPU keeps, with odd row counts and poisoned outputs:
//!
//! - a matrix stored in RoPE or SwiGLU pairs gives, through the plain decode GEMM and through
//!   both bf16 expansions, the bits of the same matrix stored as it is;
//! - the residual add, SwiGLU, and bias + RoPE + the KV write give the bits of the plain decode
//!   GEMM followed by the kernels they replace (rmsnorm_residual's add, swiglu, qkv_prepare),
//!   the QKV weight in two segments of different formats, as Q4_K_M files store it;
//! - `fused_planted_bugs_fail`: the module with a bug planted in these paths fails them.

use crate::common;

use common::rope_case::RopeCase;
use common::{all, f32_bits, gpu_or_skip, poisoned, to_bf16, up, Checks, Rng};
use kiln_cuda::device::{DevBuf, Gpu, Lane};
use kiln_cuda::quant_gemm::{quant_skinny_all, quant_skinny_fused};
use kiln_cuda::quant_layout::{repack, GpuQuant};
use kiln_cuda::quant_order::RowOrder;
use kiln_cuda::quant_weights::{QuantMatrix, QuantSegment, SegData};
use kiln_cuda::skinny_fused::Epilogue;
use kiln_model::dummy_quant::random_blocks;

/// The formats a check runs on: all, or (quick: the planted bugs' runs) one of each record size.
fn formats(quick: bool) -> Vec<GpuQuant> {
    if quick {
        vec![GpuQuant::Q4K, GpuQuant::Q6K2]
    } else {
        GpuQuant::ALL.to_vec()
    }
}

/// A matrix of `parts` (format, rows) segments of k columns, random blocks, each segment stored
/// in `order`; `seed` fixes the blocks, so two orders of one seed hold the same weight.
fn matrix(
    gpu: &Gpu,
    parts: &[(GpuQuant, usize)],
    k: usize,
    order: RowOrder,
    seed: u64,
) -> QuantMatrix {
    let mut segments = Vec::new();
    let mut row0 = 0;
    for (i, &(q, rows)) in parts.iter().enumerate() {
        let blocks = random_blocks(q.dtype(), rows, k, seed + i as u64).unwrap();
        let row_bytes = q.dtype().bytes_for(k).unwrap();
        let blocks = order.reorder(rows, row_bytes, &blocks).unwrap();
        let packed = repack(q, rows, k, &blocks).unwrap();
        segments.push(QuantSegment {
            row0,
            rows,
            format: q,
            order,
            data: SegData::Device(up(gpu, &packed)),
        });
        row0 += rows;
    }
    QuantMatrix {
        rows: row0,
        cols: k,
        segments,
    }
}

/// The plain decode GEMM's y [m, rows] of the matrix.
fn plain(gpu: &Gpu, w: &QuantMatrix, x: &DevBuf<u16>, m: usize) -> DevBuf<f32> {
    let y = poisoned::<f32>(gpu, m * w.rows);
    quant_skinny_all(gpu, w, y.ptr(), x.ptr(), m).unwrap();
    y
}

/// Both bf16 expansions of the matrix, [rows, k] each.
fn expanded(gpu: &Gpu, w: &QuantMatrix) -> Vec<Vec<u16>> {
    [false, true]
        .iter()
        .map(|&words| {
            let out = poisoned::<u16>(gpu, w.rows * w.cols);
            for s in &w.segments {
                let at = out.ptr() + (s.row0 * w.cols * 2) as u64;
                gpu.quant_to_bf16_kernel(
                    words,
                    Lane::Main,
                    s.format,
                    at,
                    w.cols,
                    s.data.ptr(),
                    s.rows,
                    w.cols,
                    s.order,
                )
                .unwrap();
            }
            all(gpu, &out)
        })
        .collect()
}

fn x_rows(gpu: &Gpu, rng: &mut Rng, m: usize, k: usize) -> DevBuf<u16> {
    up(gpu, &to_bf16(&rng.vec(m * k, 1.0)))
}

/// Stored in pairs == stored as it is, through the decode GEMM and the expansions.
fn orders_match(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, row_counts: &[usize], quick: bool) {
    let k = 512;
    for q in formats(quick) {
        for (order, rows) in [
            (
                RowOrder::Rope {
                    hd: 128,
                    neox: true,
                },
                3 * 128,
            ),
            (
                RowOrder::Rope {
                    hd: 64,
                    neox: false,
                },
                5 * 64,
            ),
            (RowOrder::Glu, 2 * 200),
        ] {
            let seed = rng.next_u64();
            let nat = matrix(gpu, &[(q, rows)], k, RowOrder::Natural, seed);
            let ord = matrix(gpu, &[(q, rows)], k, order, seed);
            let v = format!("{q:?} {order:?}");
            let (a, b) = (expanded(gpu, &nat), expanded(gpu, &ord));
            c.identical(&format!("{v} expansion"), &b[0], &a[0]);
            c.identical(&format!("{v} expansion (words)"), &b[1], &a[1]);
            for &m in row_counts {
                let x = x_rows(gpu, rng, m, k);
                let want = f32_bits(&all(gpu, &plain(gpu, &nat, &x, m)));
                let got = f32_bits(&all(gpu, &plain(gpu, &ord, &x, m)));
                c.identical(&format!("{v} m={m}"), &got, &want);
            }
        }
    }
}

/// The residual add in the epilogue: x + GEMM as rmsnorm_residual adds a pending output.
fn add_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, row_counts: &[usize], quick: bool) {
    let (n, k) = (1000 / 16 * 16, 768);
    for q in formats(quick) {
        for &m in row_counts {
            let w = matrix(gpu, &[(q, n)], k, RowOrder::Natural, rng.next_u64());
            let x = x_rows(gpu, rng, m, k);
            let x0 = rng.vec(m * n, 4.0);
            let delta = plain(gpu, &w, &x, m);
            let (resid, nw, normed) = (
                up(gpu, &x0),
                up(gpu, &to_bf16(&vec![1.0; n])),
                poisoned::<u16>(gpu, m * n),
            );
            gpu.rmsnorm_residual(resid.ptr(), delta.ptr(), nw.ptr(), normed.ptr(), m, n, 1e-5)
                .unwrap();
            let got = up(gpu, &x0);
            quant_skinny_fused(gpu, &w, &Epilogue::Add { y: got.ptr() }, x.ptr(), m).unwrap();
            c.identical(
                &format!("add {q:?} m={m}"),
                &f32_bits(&all(gpu, &got)),
                &f32_bits(&all(gpu, &resid)),
            );
        }
    }
}

/// SwiGLU in the epilogue of gate/up stored in pairs: silu(gate) * up as swiglu computes it.
fn glu_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, row_counts: &[usize], quick: bool) {
    let (inter, k) = (296, 512);
    for q in formats(quick) {
        for &m in row_counts {
            let seed = rng.next_u64();
            let nat = matrix(gpu, &[(q, 2 * inter)], k, RowOrder::Natural, seed);
            let ord = matrix(gpu, &[(q, 2 * inter)], k, RowOrder::Glu, seed);
            let x = x_rows(gpu, rng, m, k);
            let gu = plain(gpu, &nat, &x, m);
            let want = poisoned::<u16>(gpu, m * inter);
            gpu.swiglu(gu.ptr(), want.ptr(), inter, m).unwrap();
            let got = poisoned::<u16>(gpu, m * inter);
            let epi = Epilogue::Glu {
                act: got.ptr(),
                inter,
            };
            quant_skinny_fused(gpu, &ord, &epi, x.ptr(), m).unwrap();
            c.identical(
                &format!("glu {q:?} m={m}"),
                &all(gpu, &got),
                &all(gpu, &want),
            );
        }
    }
}

/// Bias, RoPE and the KV write in the epilogue of QKV stored in RoPE pairs, as qkv_prepare does
/// them: Q and K in one format, V in another, GQA heads of 64 and 128, both pairings.
fn rope_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, row_counts: &[usize], quick: bool) {
    let (n_q, n_kv, k) = (8, 2, 512);
    let pairs = [
        (GpuQuant::Q4K, GpuQuant::Q6K),
        (GpuQuant::Q4K2, GpuQuant::Q6K2),
        (GpuQuant::Q8_0, GpuQuant::Q8_0),
        (GpuQuant::Q4_0, GpuQuant::Q6K),
    ];
    for &(qk, vq) in &pairs[..if quick { 1 } else { pairs.len() }] {
        for &m in row_counts {
            for (hd, neox, bias) in [(64, true, false), (128, false, true), (128, true, true)] {
                let parts = [(qk, (n_q + n_kv) * hd), (vq, n_kv * hd)];
                let seed = rng.next_u64();
                let nat = matrix(gpu, &parts, k, RowOrder::Natural, seed);
                let ord = matrix(gpu, &parts, k, RowOrder::Rope { hd, neox }, seed);
                let x = x_rows(gpu, rng, m, k);
                let case = RopeCase::new(gpu, rng, m, (n_q, n_kv, hd), neox, bias);
                let want = case.reference(gpu, plain(gpu, &nat, &x, m).ptr());
                let got = case.outputs(gpu);
                quant_skinny_fused(gpu, &ord, &case.epilogue(&got), x.ptr(), m).unwrap();
                let v = format!("rope {qk:?}+{vq:?} m={m} hd={hd} neox={neox} bias={bias}");
                case.compare(gpu, c, &v, &got, &want);
            }
        }
    }
}

fn fused_checks(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, rows: &[usize], quick: bool) {
    orders_match(gpu, rng, c, rows, quick);
    add_matches(gpu, rng, c, rows, quick);
    glu_matches(gpu, rng, c, rows, quick);
    rope_matches(gpu, rng, c, rows, quick);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn quant_fused_contract() {
    let Some(gpu) = gpu_or_skip("quant_fused_contract") else {
        return;
    };
    let mut rng = Rng::new("quant_fused_contract");
    let mut c = Checks::new("quant_fused");
    fused_checks(&gpu, &mut rng, &mut c, &[1, 3, 8, 13, 64, 100], false);
    c.finish();
}

/// The quant_gemm module with one planted bug each in the epilogues and row orders: (text,
/// replacement).
const PLANTED: &[(&str, &str)] = &[
    // The residual add stores instead.
    ("yr[a] = add ? yr[a] + lo : lo;", "yr[a] = lo;"),
    // Row g + 8's sums from row g's other column.
    (
        "hi += red[wi * R * NT * 128 + at + 64];",
        "hi += red[wi * R * NT * 128 + at + 32];",
    ),
    // The epilogue's tiles counted from the segment's first (V written as K).
    (
        "epi_pair(ep, tile_base + tile, g, m, lo, hi);",
        "epi_pair(ep, tile, g, m, lo, hi);",
    ),
    // The expansion writes the rows in stored order.
    (
        "const int n = stored_row(order, (int)tile, r);",
        "const int n = (int)tile * 16 + r;",
    ),
];

/// Every planted text is in the module once, and the planted module compiles into other machine
/// code (where NVRTC is present: scripts/ci-nvrtc.sh).
#[test]
fn fused_planted_bugs_are_in_the_source() {
    common::planted::each_planted_compiles(PLANTED.iter().map(|&(f, t)| ("quant_gemm", f, t)));
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fused_planted_bugs_fail() {
    common::planted::planted_bugs_fail(
        "quant fused planted bugs",
        "quant_gemm",
        PLANTED,
        |bad, rng, c| fused_checks(bad, rng, c, &[1, 13], true),
    );
}
