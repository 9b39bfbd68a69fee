#line 1 "fp8_wg.cu"
// Decode rows of an fp8 product on Hopper's fp8 tensor cores (KILN_FP8_WG, wg_rows.rs):
// Y[m, n] (f32) = (sum_k Xq[m, k] Wq[n, k]) * (xs[m] * ws[n]), Xq and Wq E4M3 rows of K bytes
// (K % 16 == 0), their scales f32: the product of fp8.cu's skinny kernels and of cuBLASLt's fp8
// GEMM, summed in wg_rows.cuh's order with wgmma's own E4M3 (which mma.sync does not reach on
// sm_90: its E4M3 runs as f16 MMAs after an unpacking).

struct WgE4m3 {
    WG_SS_FAMILY(mma, "k32.f32.e4m3.e4m3", "")
};

// FP8_WG_ENTRY(NAME, WR, WT, BN, S, MINB, OV): WR x 64 weight rows and WT x BN tokens a CTA, S
// ring stages, CTAs a multiprocessor the launch bounds promise; OV (the `_o` entries): a tile's
// adds beside the next tile's wgmmas. wg_rows.rs reads the shapes from here. Shared memory:
// S * (64 WR + BN WT) * 128 bytes. part and count: a split launch's (wg_rows.rs).
#define FP8_WG_ENTRY(NAME, WR, WT, BN, S, MINB, OV)                                                         \
    extern "C" __global__ void __launch_bounds__(128 * WR * WT, MINB)                                      \
        NAME(float* y, const unsigned char* x, const float* xs, const unsigned char* w, const float* ws,    \
             int M, int N, int K, float* part, int* count) {                                                \
        const auto rows = wg_plain_rows(y, N, [&](float s, int m, int n) { return s * (xs[m] * ws[n]); });   \
        wg_rows_body<WgE4m3, WR, WT, BN, S, OV>(x, w, M, N, K, part, count, rows);                          \
    }
FP8_WG_ENTRY(fp8_wg_1x1_n8, 1, 1, 8, 8, 3, false)
FP8_WG_ENTRY(fp8_wg_2x1_n8, 2, 1, 8, 6, 2, false)
FP8_WG_ENTRY(fp8_wg_1x1_n16, 1, 1, 16, 7, 3, false)
FP8_WG_ENTRY(fp8_wg_1x1_n32, 1, 1, 32, 6, 3, false)
FP8_WG_ENTRY(fp8_wg_1x1_n64, 1, 1, 64, 6, 2, false)
FP8_WG_ENTRY(fp8_wg_2x1_n64, 2, 1, 64, 4, 2, false)
FP8_WG_ENTRY(fp8_wg_1x2_n64, 1, 2, 64, 4, 2, false)
FP8_WG_ENTRY(fp8_wg_2x2_n64, 2, 2, 64, 4, 1, false)
// With OV, two sets of a tile's products: one warpgroup a CTA (more would spill at the
// register budget their launch bounds leave).
FP8_WG_ENTRY(fp8_wg_1x1_n64_o, 1, 1, 64, 6, 2, true)
FP8_WG_ENTRY(fp8_wg_1x1_n32_o, 1, 1, 32, 6, 3, true)
