#line 1 "fp8_wide.cu"
// Decode rows of an fp8 product at many rows (KILN_FP8_WIDE, fp8_skinny.rs): the skinny
// kernels' bits (fp8.cu's skinny_fp8_*) with x read once per CTA of many weight rows, where the
// skinny kernels read all of x again for every 16 weight rows and so are bound by x's reads
// through L2 from about 32 rows.
//
// The order is the skinny kernels': chunk c (64 k) belongs to chain (c / 8) % 8 (warp w's chunks
// there), a chain sums its chunks in order from zero, each chunk as two products of 32 k (a
// lane's 16 bytes: bytes 0-7, then 8-15), and the eight chain sums are added in chain order from
// zero, then scaled by (xs[m] * ws[n]). On sm_90 ptxas builds mma.sync's E4M3 m16n8k32 as two
// f16 m16n8k16 from zero, the low byte pair of each word first and the high pair on top
// (F2FP.F16.E4M3.UNPACK_B, then .H1), whose sum is then added to the accumulator (FADD): this
// kernel writes those MMAs and adds itself, with the same values in the same slots, x's values
// converted to f16 (exactly) once per CTA into shared memory instead of once per 16 weight rows
// in registers. contract_fp8_skinny checks every row against the skinny kernels bit for bit.
// sm_89 has E4M3 MMAs of its own (QMMA), other bits: this module is built for sm_90 alone and
// elsewhere the launcher runs the skinny kernels (fp8_skinny.rs's wide_matches_skinny;
// sass_order checks both lowerings).
//
// CTA: WARPS warps; warp w owns TILES 16-row tiles of the weight and walks every chain, one
// after another (the chain's sum and the running sum in registers); TOK tokens a CTA
// (blockIdx.x: a weight's CTAs for all tokens run side by side and share its reads through L2),
// the weight's rows along blockIdx.y. Each step takes U consecutive chunks of the chain-major
// sequence (a chunk's products start from zero, so those of U chunks are independent work for
// the tensor cores; only the adds into the chain's sum keep their order): their weight rows and
// x's 64 bytes a token come through an S-stage cp.async ring; x's bytes are then rewritten into
// xh as f16 pairs, each lane's 16 bytes as the 8 words of its four products' B fragments, the
// two 16-byte halves of a token's odd rows swapped (no bank conflict between the two tokens a
// quarter-warp reads). One step of one chunk spent most of its time waiting (two barriers and
// the ring's latency for 32-64 MMAs a warp): 1.2x the skinny kernels at 128 rows, 0.5x at 32
// (H200, 2026-12-05).
#define FW_CHAINS 8

// Bytes 2 h and 2 h + 1 of w as f16 (the lower byte in the lower half), exact.
__device__ __forceinline__ u32 f16x2_of_e4m3(u32 w, int h) {
    u32 r;
    const unsigned short b = (unsigned short)(h ? (w >> 16) : (w & 0xffffu));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(b));
    return r;
}

// The chunk after c in the chain-major sequence, -1 after the last: the chain's next of its
// pass, else the first of its next pass, else the next chain's first (chains past the last
// chunk are empty, and so are all after them).
__device__ __forceinline__ int fw_next(int c, int chunks) {
    if ((c & 7) != 7 && c + 1 < chunks) return c + 1;
    if ((c & ~7) + 64 < chunks) return (c & ~7) + 64;
    const int chain = ((c >> 3) & 7) + 1;
    return (chain < FW_CHAINS && chain * 8 < chunks) ? chain * 8 : -1;
}

__device__ __forceinline__ int fw_chain(int c) { return (c >> 3) & 7; }

template <int WARPS, int TILES, int U, int S, int TOK>
__device__ __forceinline__ void fp8_wide_body(float* __restrict__ y, const unsigned char* __restrict__ x,
                                              const float* __restrict__ xs, const unsigned char* __restrict__ w,
                                              const float* __restrict__ ws, int M, int N, int K) {
    constexpr int THREADS = WARPS * 32, ROWS = WARPS * TILES * 16, NT = TOK / 8;
    constexpr int WB = ROWS * 64, XB = TOK * 64, SLOT = WB + XB;  // a chunk: W, then x
    constexpr int STAGE = U * SLOT;
    // 16-byte pieces a thread: W's split evenly, x's in rounds (fewer pieces than threads at 32
    // tokens and 8 warps).
    constexpr int PW = ROWS * 4 / THREADS, PX = (TOK * 4 + THREADS - 1) / THREADS;
    static_assert(ROWS * 4 % THREADS == 0 && TOK % 8 == 0, "pieces split evenly; whole 8-token groups");
    static_assert(S >= 2, "a stage in flight while one is read");
    extern __shared__ __align__(16) unsigned char fw_smem[];
    unsigned char* xh = fw_smem + S * STAGE;  // U chunks of TOK rows of 128 bytes
    pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * TOK, n0 = blockIdx.y * ROWS;
    const int chunks = (K + 63) / 64;

    // Chunk c's weight rows and x rows into the slot at byte `slot` of the ring.
    auto issue_w = [&](int c, int slot) {
        if (c < 0) return;
        unsigned char* st = fw_smem + slot;
#pragma unroll
        for (int i = 0; i < PW; ++i) {
            const int p = tid + i * THREADS, r = p >> 2, k = c * 64 + (p & 3) * 16;
            const bool ok = n0 + r < N && k < K;
            cp_async_16(st + r * 64 + (p & 3) * 16, w + (ok ? (u64)(n0 + r) * K + k : 0), ok ? 16 : 0);
        }
    };
    auto issue_x = [&](int c, int slot) {
        if (c < 0) return;
        unsigned char* st = fw_smem + slot + WB;
#pragma unroll
        for (int i = 0; i < PX; ++i) {
            const int p = tid + i * THREADS, r = p >> 2, k = c * 64 + (p & 3) * 16;
            if (p >= TOK * 4) break;
            const bool ok = m0 + r < M && k < K;
            cp_async_16(st + r * 64 + (p & 3) * 16, x + (ok ? (u64)(m0 + r) * K + k : 0), ok ? 16 : 0);
        }
    };
    auto next = [&](int c) { return c < 0 ? -1 : fw_next(c, chunks); };

    // The weights are never written: the first stages' rows come in while the kernel ahead
    // ends; x belongs to it until pdl_wait. One commit group a stage (the first holds the
    // weights of all of them).
    {
        int c = 0;
        for (int s = 0; s < S - 1; ++s)
#pragma unroll
            for (int u = 0; u < U; ++u, c = next(c)) issue_w(c, s * STAGE + u * SLOT);
    }
    pdl_wait();
    int pc = 0;  // the next chunk to copy
    for (int s = 0; s < S - 1; ++s) {
#pragma unroll
        for (int u = 0; u < U; ++u, pc = next(pc)) issue_x(pc, s * STAGE + u * SLOT);
        cp_async_commit();
    }

    float chain[TILES][NT][4], out[TILES][NT][4];
#pragma unroll
    for (int i = 0; i < TILES; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) chain[i][j][q] = out[i][j][q] = 0.f;

    for (int c = 0, stage = 0; c >= 0;) {
        cp_async_wait<S - 2>();  // this step's group has landed (this thread's copies)
        __syncthreads();         // everyone's; and the step before is done with its stage and xh
        {
            const int refill = ((stage + S - 1) % S) * STAGE;
#pragma unroll
            for (int u = 0; u < U; ++u, pc = next(pc)) {
                issue_w(pc, refill + u * SLOT);
                issue_x(pc, refill + u * SLOT);
            }
            cp_async_commit();
        }

        // x's bytes of this step's chunks as the f16 words of the B fragments.
        const unsigned char* st = fw_smem + stage * STAGE;
#pragma unroll 4
        for (int e0 = 0; e0 < U * TOK * 4; e0 += THREADS) {
            const int e = e0 + tid;
            if ((U * TOK * 4) % THREADS != 0 && e >= U * TOK * 4) break;
            const int u = e / (TOK * 4), tok = (e >> 2) % TOK, tq = e & 3;
            const uint4 v = *reinterpret_cast<const uint4*>(st + u * SLOT + WB + tok * 64 + tq * 16);
            const uint4 h0 = make_uint4(f16x2_of_e4m3(v.x, 0), f16x2_of_e4m3(v.y, 0), f16x2_of_e4m3(v.x, 1),
                                        f16x2_of_e4m3(v.y, 1));
            const uint4 h1 = make_uint4(f16x2_of_e4m3(v.z, 0), f16x2_of_e4m3(v.w, 0), f16x2_of_e4m3(v.z, 1),
                                        f16x2_of_e4m3(v.w, 1));
            unsigned char* d = xh + (u * TOK + tok) * 128 + tq * 32;
            const int sw = (tok & 1) * 16;
            *reinterpret_cast<uint4*>(d + sw) = h0;
            *reinterpret_cast<uint4*>(d + (16 ^ sw)) = h1;
        }
        __syncthreads();

#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (c < 0) break;
            // The warp's weight rows as A fragments: per tile, the first product's low and high
            // byte pairs, then the second's (skinny_fp8's a0 = {va.x, vb.x, va.y, vb.y}, a1
            // from .z, .w).
            const unsigned char* wst = st + u * SLOT;
            u32 a[TILES][4][4];
#pragma unroll
            for (int i = 0; i < TILES; ++i) {
                const int r = (warp * TILES + i) * 16 + g;
                const uint4 va = *reinterpret_cast<const uint4*>(wst + r * 64 + t * 16);
                const uint4 vb = *reinterpret_cast<const uint4*>(wst + (r + 8) * 64 + t * 16);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    a[i][h][0] = f16x2_of_e4m3(va.x, h);
                    a[i][h][1] = f16x2_of_e4m3(vb.x, h);
                    a[i][h][2] = f16x2_of_e4m3(va.y, h);
                    a[i][h][3] = f16x2_of_e4m3(vb.y, h);
                    a[i][2 + h][0] = f16x2_of_e4m3(va.z, h);
                    a[i][2 + h][1] = f16x2_of_e4m3(vb.z, h);
                    a[i][2 + h][2] = f16x2_of_e4m3(va.w, h);
                    a[i][2 + h][3] = f16x2_of_e4m3(vb.w, h);
                }
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const unsigned char* s = xh + (u * TOK + j * 8 + g) * 128 + t * 32;
                const int sw = (g & 1) * 16;
                const uint4 h0 = *reinterpret_cast<const uint4*>(s + sw);
                const uint4 h1 = *reinterpret_cast<const uint4*>(s + (16 ^ sw));
                const u32 b[4][2] = {{h0.x, h0.y}, {h0.z, h0.w}, {h1.x, h1.y}, {h1.z, h1.w}};
#pragma unroll
                for (int i = 0; i < TILES; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        // One E4M3 m16n8k32 as ptxas builds it: low pairs from zero, high pairs on top.
                        float p[4] = {0.f, 0.f, 0.f, 0.f};
                        mma_f16_16816(p, a[i][2 * e], b[2 * e]);
                        mma_f16_16816(p, a[i][2 * e + 1], b[2 * e + 1]);
#pragma unroll
                        for (int q = 0; q < 4; ++q) chain[i][j][q] = chain[i][j][q] + p[q];
                    }
            }

            const int nc = fw_next(c, chunks);
            if (nc < 0 || fw_chain(nc) != fw_chain(c)) {
#pragma unroll
                for (int i = 0; i < TILES; ++i)
#pragma unroll
                    for (int j = 0; j < NT; ++j)
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            out[i][j][q] = out[i][j][q] + chain[i][j][q];
                            chain[i][j][q] = 0.f;
                        }
            }
            c = nc;
        }
        stage = (stage + 1) % S;
    }
    cp_async_wait<0>();

    // The two scales as the skinny kernels apply them (the sum times their product).
#pragma unroll
    for (int i = 0; i < TILES; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int n = n0 + (warp * TILES + i) * 16 + g + ((q & 2) ? 8 : 0);
                const int m = m0 + j * 8 + t * 2 + (q & 1);
                if (n < N && m < M) y[(u64)m * N + n] = out[i][j][q] * (xs[m] * ws[n]);
            }
}

// FP8_WIDE_ENTRY(NAME, WARPS, TILES, U, S, TOK): the launcher (fp8_skinny.rs) reads the shapes
// from here; the name says WARPS x TILES, then U chunks a step, then TOK tokens where not 64.
#define FP8_WIDE_ENTRY(NAME, WARPS, TILES, U, S, TOK)                                                      \
    extern "C" __global__ void __launch_bounds__(WARPS * 32, 1)                                            \
        NAME(float* y, const unsigned char* x, const float* xs, const unsigned char* w, const float* ws,    \
             int M, int N, int K) {                                                                         \
        fp8_wide_body<WARPS, TILES, U, S, TOK>(y, x, xs, w, ws, M, N, K);                                   \
    }
FP8_WIDE_ENTRY(skinny_fp8_wide_8x2, 8, 2, 1, 4, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_8x1, 8, 1, 1, 4, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_4x1, 4, 1, 1, 4, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_8x2_u2, 8, 2, 2, 3, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_8x1_u4, 8, 1, 4, 3, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_4x1_u4, 4, 1, 4, 3, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_4x1_u8, 4, 1, 8, 2, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_2x1_u8, 2, 1, 8, 2, 64)
FP8_WIDE_ENTRY(skinny_fp8_wide_4x1_u8_t32, 4, 1, 8, 2, 32)
FP8_WIDE_ENTRY(skinny_fp8_wide_2x1_u8_t32, 2, 1, 8, 3, 32)
