#line 1 "bf16_wg.cu"
// Decode rows of a bf16 product in wg_rows.cuh's order (`bf16_wg_*`, wg_rows.rs's
// Gpu::bf16_wg; KILN_BF16_WG, opt-in until timed against the skinny kernels' order):
// Y[m, n] (f32) = sum_k X[m, k] W[n, k], X and W bf16 rows of K values (K % 8 == 0), a k-tile
// 64 values, four bf16 wgmmas of 16.

struct WgBf16 {
    WG_SS_FAMILY(mma, "k16.f32.bf16.bf16", ", 0, 0")
};

// BF16_WG_ENTRY(NAME, WR, WT, BN, S, MINB, OV): fp8_wg.cu's FP8_WG_ENTRY for bf16 rows.
#define BF16_WG_ENTRY(NAME, WR, WT, BN, S, MINB, OV)                                                        \
    extern "C" __global__ void __launch_bounds__(128 * WR * WT, MINB)                                      \
        NAME(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K, float* part, int* count) {   \
        wg_rows_body<WgBf16, WR, WT, BN, S, OV>(y, reinterpret_cast<const unsigned char*>(x),               \
                                                reinterpret_cast<const unsigned char*>(w), M, N, 2 * K,     \
                                                part, count, [](float s, int, int) { return s; });          \
    }
BF16_WG_ENTRY(bf16_wg_1x1_n8, 1, 1, 8, 8, 3, false)
BF16_WG_ENTRY(bf16_wg_2x1_n8, 2, 1, 8, 6, 2, false)
BF16_WG_ENTRY(bf16_wg_1x1_n16, 1, 1, 16, 7, 3, false)
BF16_WG_ENTRY(bf16_wg_1x1_n32, 1, 1, 32, 6, 3, false)
BF16_WG_ENTRY(bf16_wg_1x1_n64, 1, 1, 64, 6, 2, false)
BF16_WG_ENTRY(bf16_wg_2x1_n64, 2, 1, 64, 4, 2, false)
BF16_WG_ENTRY(bf16_wg_1x2_n64, 1, 2, 64, 4, 2, false)
BF16_WG_ENTRY(bf16_wg_2x2_n64, 2, 2, 64, 4, 1, false)
BF16_WG_ENTRY(bf16_wg_1x1_n64_o, 1, 1, 64, 6, 2, true)
BF16_WG_ENTRY(bf16_wg_1x1_n32_o, 1, 1, 32, 6, 3, true)
