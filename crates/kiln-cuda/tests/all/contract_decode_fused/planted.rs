//! The decode GEMM contract's planted bugs: each planted in a kernel's text, the module built
//! with it, and the contract run where the bug shows; every one must be caught.

use super::*;

/// Modules with one planted bug each: (module, text, replacement).
const PLANTED: &[(&str, &str, &str)] = &[
    // Warp sums 2p and 2p + 1 joined in the wrong order.
    (
        "skinny_tc",
        "acc[mi][ni][v] = acc[mi][ni][v] + a[c][mi][ni][v];",
        "acc[mi][ni][v] = acc[mi][ni][v] + a[CH - 1 - c][mi][ni][v];",
    ),
    // One-chain passes: a k-tile's two chunks of the chain summed in the wrong order.
    (
        "skinny_tc",
        "chunk(st, h, a[h % CH]);",
        "chunk(st, CH == 1 ? 1 - h : h, a[h % CH]);",
    ),
    // The join adds a tile row's chains last to first.
    (
        "skinny_tc",
        "a = __fadd_rn(a, part[c * stride + lo]);",
        "a = __fadd_rn(a, part[(TC_W - 1 - c) * stride + lo]);",
    ),
    // A split CTA leaves the last 8 rows of the partials unwritten.
    (
        "skinny_tc",
        "if (mv < M && rv < ld) pp[",
        "if (mv < M && rv < ld - 8) pp[",
    ),
    // Copies into shared memory without the swizzle the reads undo.
    (
        "skinny_tc",
        "const int piece = (q ^ ((r0 & 1) << 2)) << 4;",
        "const int piece = q << 4;",
    ),
    // The x rewrite: two words of a unit swapped (slots 2 t.. of two lanes exchanged).
    (
        "skinny_wg",
        "make_uint4(in[0].y, in[1].y, in[2].y, in[3].y)",
        "make_uint4(in[1].y, in[0].y, in[2].y, in[3].y)",
    ),
    // The second product of a chunk reads the first one's slots of x.
    (
        "skinny_wg",
        "gdesc(sx + 64 * h + 32, 16, 1024)",
        "gdesc(sx + 64 * h, 16, 1024)",
    ),
    // The clustered entries: every CTA sends the first slice of x's k-tile (the byte count
    // still right, so nothing hangs: the other slices' tokens read the first one's).
    ("skinny_wg", "src + rank * (XS / CL / 2)", "src"),
    // A chain left in its accumulator when the next begins (never zeroed after joining).
    ("skinny_wg", "                a[v] = 0.f;\n", "\n"),
    // SwiGLU of up times gate's silu swapped.
    ("skinny_gemm", "silu_mul(lo, hi)", "silu_mul(hi, lo)"),
    // The norm reduced with the CTA's stride instead of the norm kernel's.
    ("skinny_gemm", "i += n.nb)", "i += blockDim.x)"),
    // A NeoX pair's second element a quarter head on instead of half.
    (
        "skinny_tc",
        "(r < 8 ? 0 : hd >> 1)",
        "(r < 8 ? 0 : hd >> 2)",
    ),
    // The wgmma row order's places read as the weight's rows in order, not in the mode's
    // (SwiGLU's gate and up rows, RoPE's pairs).
    (
        "bf16_wg",
        "return epi_row(e, p >> 4, p & 15);",
        "return p < e.rows ? p : -1;",
    ),
];

/// Without a GPU: each planted text occurs once, and with NVRTC each planted module compiles
/// into other machine code than the module's.
#[test]
fn planted_modules_compile() {
    common::planted::each_planted_compiles(PLANTED.iter().copied());
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_bugs_fail() {
    let store = kiln_cuda::StoreType::Bf16;
    common::planted::each_planted_bug_fails(
        "planted_bugs_fail",
        store,
        PLANTED,
        |bad, i, rng, q| {
            let (module, from, _) = PLANTED[i];
            // The GEMM's own bugs show against the skinny kernel, the epilogues' against the
            // unfused launches.
            if module == "skinny_wg" {
                wgmma::wg_matches_skinny(bad, rng, q, true);
            } else if [
                "acc[",
                "chunk(",
                "const int piece",
                "a = __fadd_rn",
                "if (mv < M",
                "make_uint4(a.x",
                "8 * (ni & 1)",
            ]
            .iter()
            .any(|p| from.starts_with(p))
            {
                tc_matches_skinny(bad, rng, q, true);
            } else {
                fused_matches(bad, rng, q, true);
            }
        },
    );
}
