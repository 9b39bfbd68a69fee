#line 1 "bf16_wg.cu"
// Decode rows of a bf16 product in wg_rows.cuh's order (`bf16_wg_*`, wg_rows.rs's
// Gpu::bf16_wg_epi; KILN_BF16_WG, opt-in until timed against the skinny kernels' order):
// sum_k X[m, k] W[n, k], X and W bf16 rows of K values (K % 8 == 0), a k-tile 64 values, four
// bf16 wgmmas of 16, the sums through the skinny kernels' epilogues (skinny_epilogue.cu: the
// weight's rows in the mode's order, each thread's pair of rows of a 16-row tile to epi_pair).

struct WgBf16 {
    WG_SS_FAMILY(mma, "k16.f32.bf16.bf16", ", 0, 0")
};

// An Epi's places: place p is row p % 16 of tile p / 16 in the mode's order.
struct WgEpiRows {
    Epi e;
    __device__ __forceinline__ int wrow(int p) const { return epi_row(e, p >> 4, p & 15); }
    __device__ __forceinline__ void emit(int m, int p, float lo, float hi) const {
        epi_pair(e, p >> 4, p & 15, m, lo, hi);
    }
};

// BF16_WG_ENTRY(NAME, WR, WT, BN, S, MINB, OV): fp8_wg.cu's FP8_WG_ENTRY for bf16 rows, over
// NP places (the Epi's tiles x 16).
#define BF16_WG_ENTRY(NAME, WR, WT, BN, S, MINB, OV)                                                        \
    extern "C" __global__ void __launch_bounds__(128 * WR * WT, MINB)                                      \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, float* part, int* count, int NP, EPI_PARAMS) { \
        const WgEpiRows rows{EPI_MAKE};                                                                     \
        wg_rows_body<WgBf16, WR, WT, BN, S, OV>(reinterpret_cast<const unsigned char*>(x),                  \
                                                reinterpret_cast<const unsigned char*>(w), M, NP, 2 * K,    \
                                                part, count, rows);                                         \
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
