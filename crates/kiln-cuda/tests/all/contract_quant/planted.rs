//! The quantised GEMM contract's planted bugs: each planted in quant_gemm.cu's text, the module
//! built with it, and the skinny and row contracts run on it; every one must be caught.

use super::*;
use crate::common::planted::planted_module;
use kiln_cuda::kernel_sources::SOURCES;
use kiln_cuda::StoreType;

/// quant_gemm.cu with one planted bug each: (text, replacement).
const PLANTED: &[(&str, &str)] = &[
    // Q4_0 quants without their offset of 8.
    (
        "F == QF_Q4_0 ? 0xC308C308u : 0xC300C300u",
        "F == QF_Q4_0 ? 0xC300C300u : 0xC300C300u",
    ),
    // Q8_0 bytes read as unsigned.
    (
        "2 * (w & 1) + (p >> 1)) ^ 0x80808080u",
        "2 * (w & 1) + (p >> 1)) ^ 0x00808080u",
    ),
    // Q8_0 and Q4_0: the first block's scale for every group.
    ("sa = scale_f16(ra.s, grp);", "sa = scale_f16(ra.s, 0);"),
    // Q4_K without its minimum.
    ("ma = -__fmaf_rn(k4[1],", "ma = 0.f * __fmaf_rn(k4[1],"),
    // Q6_K's high bits of each eighth pair read from the seventh's.
    (
        "masked_or<0x00300030u>(a2 >> 10, magic)",
        "masked_or<0x00300030u>(a2 >> 8, magic)",
    ),
    // Q6_K's expansion: the eighth pairs' high bits read from the seventh's.
    (
        "(((a2 >> (14 + h)) & 3u) << 4)",
        "(((a2 >> (12 + h)) & 3u) << 4)",
    ),
    // The bf16 expansion of Q4_K without its minimum.
    (
        "v[e] = __fsub_rn(__fmul_rn(d1, (float)lo), m1);",
        "v[e] = __fmul_rn(d1, (float)lo);",
    ),
    // The embedding's first value of each run unscaled.
    (
        "make_float4(__fmul_rn(v[4 * run], scale),",
        "make_float4(v[4 * run],",
    ),
    // skinny2: Q4_K's offset of 128 taken back as 64.
    (
        "ma[r] = __fmaf_rn(s0[r], 128.0f,",
        "ma[r] = __fmaf_rn(s0[r], 64.0f,",
    ),
    // skinny2, scales shared by the four lanes of two rows: Q4_K's offset taken back as 64.
    ("sc, 128.0f, __fmaf_rn(dmin,", "sc, 64.0f, __fmaf_rn(dmin,"),
    // skinny2, scales shared: Q6_K's two groups of a lane swapped.
    (
        "make_float2(__fmul_rn(d, f0), __fmul_rn(d, f1))",
        "make_float2(__fmul_rn(d, f1), __fmul_rn(d, f0))",
    ),
    // skinny2: Q6_K's offset of 160 taken back as 128.
    (
        "F == QF_Q4_0 ? 0xC308C308u : 0xC320C320u",
        "F == QF_Q4_0 ? 0xC308C308u : 0xC300C300u",
    ),
    // skinny2: Q8_0 bytes without their offset of 128.
    ("fb[e] -= 8388736.0f;", "fb[e] -= 8388608.0f;"),
    // skinny2: row g + 8 with row g's scale.
    (
        "c[2] = __fmaf_rn(s8[r], tmp[2], c[2]);",
        "c[2] = __fmaf_rn(s0[r], tmp[2], c[2]);",
    ),
    // skinny2, two tiles a CTA: the second tile's records read from the first tile's.
    ("const u64 at = (u64)r * chunks * CB;", "const u64 at = 0;"),
    // Q4K2: the second half's scales with the wrong two high bits.
    (
        "(v.w & 0x0F0F0F0Fu) | ((v.y >> 2) & 0x30303030u)",
        "(v.w & 0x0F0F0F0Fu) | ((v.y >> 4) & 0x30303030u)",
    ),
    // Q4K2: a super-block's second half of quants read from its first.
    ("return sb + (c & 1) * 1024;", "return sb;"),
    // Q6K2: a super-block's second half of quants read from its first.
    ("return sb + (c & 1) * 1536;", "return sb;"),
    // Q6K2: the second half's scales read where its d is.
    (
        "scl + (half ? 32 : 0) + r * 8",
        "scl + (half ? 0 : 0) + r * 8",
    ),
    // skinny2 on Q6K2: the second half's scales and d copied from the first half's place.
    ("3072 - 1408 * HALF", "3072 - 1536 * HALF"),
];

/// Every planted bug's text is in quant_gemm's source once, and the planted module compiles
/// into other machine code than quant_gemm's (where NVRTC is present: scripts/ci-nvrtc.sh), so
/// that `planted_bugs_fail` tests what it says on a GPU.
#[test]
fn quant_planted_bugs_are_in_the_source() {
    let src = SOURCES.iter().find(|s| s.name == "quant_gemm").unwrap();
    for &(from, _) in PLANTED {
        assert_eq!(
            src.body.matches(from).count(),
            1,
            "quant_gemm: `{from}` must occur once"
        );
    }
    if !kiln_cuda::nvrtc_build::nvrtc_present() {
        return;
    }
    // Each planted module compiles on its own; they are independent, so they share the cores
    // (one whole-module NVRTC build each: about five seconds a core).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(PLANTED.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(from, to)) = PLANTED.get(i) else {
                    break;
                };
                let planted = planted_module("quant_gemm", from, to);
                common::planted::assert_planted_compiles(&planted, StoreType::Bf16, to);
            });
        }
    });
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_bugs_fail() {
    let small = |q: GpuQuant| {
        let mut s = vec![(37, 256), (16, 512)];
        if q.dtype().block_elems() == 32 {
            s.push((33, 96));
        }
        if q.two_halves() {
            // Rows long enough that a warp copies records inside its loop, past the ring's
            // first fill (16 warps x 3 records of 128 k), where the halves' offsets are
            // constants of the loop.
            s.push((16, 16384));
        }
        s
    };
    // KILN_PLANTED=TEXT|TEXT..: only the bugs whose original text holds one of them (a GPU
    // run checking the bugs of one change; each bug costs a whole-module build).
    let only: Vec<String> = std::env::var("KILN_PLANTED")
        .map(|v| v.split('|').map(str::to_string).collect())
        .unwrap_or_default();
    let bugs: Vec<(&str, &str)> = PLANTED
        .iter()
        .filter(|(from, _)| {
            let kept = only.is_empty() || only.iter().any(|o| from.contains(o.as_str()));
            if !kept {
                eprintln!("planted bug `{from}` left out (KILN_PLANTED)");
            }
            kept
        })
        .copied()
        .collect();
    crate::common::planted::planted_bugs_fail(
        "quant planted bugs",
        "quant_gemm",
        &bugs,
        |bad, rng, c| {
            skinny_contract(bad, rng, c, &small, &[1, 13, 40], false);
            rows_contract(bad, rng, c, &small);
        },
    );
}
