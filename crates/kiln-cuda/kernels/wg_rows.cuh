#line 1 "wg_rows.cuh"
// Decode rows on Hopper's wgmma in one order that K alone fixes (fp8_wg.cu's E4M3 rows,
// bf16_wg.cu's bf16 ones; wg_rows.rs): Y[m, n] (f32) = sum_k X[m, k] W[n, k], then an entry's
// scaling (an fp8 row's two scales), in "the wgmma row order":
// - k-tile i is bytes 128 i .. 128 i + 127 of a row (zeros past its end). Its product is four
//   wgmmas of 32 bytes of k each (64 weight rows x N tokens: m64nNk32 E4M3, m64nNk16 bf16), the
//   first from zero, each next on top.
// - WR_CHAINS chains: chain c holds the tiles c TPC .. (c + 1) TPC - 1 (TPC the tiles over the
//   chains, rounded up; the last chains may be short or empty) and sums their products in
//   order from zero, in f32 adds.
// - The chain sums are added in chain order from zero, then scaled.
// A token is one column of each wgmma it takes part in; the other columns (other tokens, or the
// zeros past M) and N leave its bits alone, so a decode row alone, among any number of others or
// as a verify row gets the same bits (contract_wg_rows checks it). The tensor cores' own sum of a
// product, and of four on top of each other, is exact only to their accumulator's width (about
// 14 bits for E4M3): the f32 adds between tiles keep a long row's error near one such sum's.
//
// CTA: WR x WT warpgroups, warpgroup (r, t) computing weight rows 64 r .. of the CTA's 64 WR
// for tokens BN t .. of its BN WT (blockIdx.x the token block, blockIdx.y the weight block). Its
// k-tiles (64 WR weight rows and BN WT token rows of 128 bytes) stream through an S-stage
// cp.async ring, each row's 16-byte piece q at q ^ (row % 8) (wgmma's 128-byte swizzle). With
// gridDim.z == 1 the CTA sums every chain; with gridDim.z == WR_CHAINS it sums chain blockIdx.z
// alone into `part` ([chain][M][N] f32), and the block's last CTA to finish adds the chains
// there in chain order: the same adds in the same order, the same bits.
#define WR_CHAINS 4

// The four D registers of m64nNk* (N / 2 floats a thread), four at a time.
#define WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])

// NAME<BN>(d, da, db, accumulate): D[64 x BN] (+)= A * B, A and B in shared memory, K-major
// (descriptors da, db), 32 bytes of k; KTYPES the instruction's k and types, TAIL what follows
// its scale operands (bf16's transpose flags); accumulate = 0 overwrites D.
#define WG_SS_FAMILY(NAME, KTYPES, TAIL)                                                                    \
    template <int BN>                                                                                       \
    static __device__ __forceinline__ void NAME(float(&d)[BN / 2], u64 da, u64 db, int accumulate) {        \
        static_assert(BN == 8 || BN == 16 || BN == 32 || BN == 64, "an N the entries use");                 \
        if constexpr (BN == 8)                                                                              \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\nwgmma.mma_async.sync.aligned.m64n8" KTYPES \
                         " {%0, %1, %2, %3}, %4, %5, p, 1, 1" TAIL ";\n}\n"                                   \
                         : WG_D4(0)                                                                         \
                         : "l"(da), "l"(db), "r"(accumulate));                                              \
        if constexpr (BN == 16)                                                                             \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\nwgmma.mma_async.sync.aligned.m64n16" KTYPES \
                         " {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1" TAIL ";\n}\n"                    \
                         : WG_D4(0), WG_D4(4)                                                               \
                         : "l"(da), "l"(db), "r"(accumulate));                                              \
        if constexpr (BN == 32)                                                                             \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32" KTYPES \
                         " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, " \
                         "p, 1, 1" TAIL ";\n}\n"                                                              \
                         : WG_D4(0), WG_D4(4), WG_D4(8), WG_D4(12)                                          \
                         : "l"(da), "l"(db), "r"(accumulate));                                              \
        if constexpr (BN == 64)                                                                             \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64" KTYPES \
                         " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "  \
                         "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, "   \
                         "p, 1, 1" TAIL ";\n}\n"                                                              \
                         : WG_D4(0), WG_D4(4), WG_D4(8), WG_D4(12), WG_D4(16), WG_D4(20), WG_D4(24),        \
                           WG_D4(28)                                                                        \
                         : "l"(da), "l"(db), "r"(accumulate));                                              \
    }

// The last tile (exclusive) of chain c of a row of T k-tiles.
__device__ __forceinline__ int wr_chain_end(int c, int T) {
    const int tpc = (T + WR_CHAINS - 1) / WR_CHAINS;
    return min((c + 1) * tpc, T);
}

// The product of x's M rows and the weight's rows, each row KB bytes (KB % 16 == 0), in the
// order above with Op's wgmma (`Op::mma<BN>`, 32 bytes of k an instruction), over NP row
// places: `rows.wrow(p)` is the weight row at place p (-1: none, read as zeros), and
// `rows.emit(m, p, lo, hi)` takes token m's sums of places p and p + 8 (p % 16 < 8: one thread
// holds both, as the skinny kernels' epilogues want them, skinny_epilogue.cu).
template <class Op, int WR, int WT, int BN, int S, bool OV, class Rows>
__device__ __forceinline__ void wg_rows_body(const unsigned char* __restrict__ x, const unsigned char* __restrict__ w,
                                             int M, int NP, int KB, float* __restrict__ part,
                                             int* __restrict__ count, const Rows& rows) {
    constexpr int THREADS = 128 * WR * WT, ROWS = 64 * WR, TOK = BN * WT;
    constexpr int WS = ROWS * 128, XS = TOK * 128, STAGE = WS + XS;
    // 16-byte pieces a thread: W's split evenly, x's in rounds (fewer than the threads at few tokens).
    constexpr int PW = ROWS * 8 / THREADS, PX = (TOK * 8 + THREADS - 1) / THREADS;
    static_assert(ROWS * 8 % THREADS == 0 && THREADS / 8 % 8 == 0, "whole pieces; one row phase a thread");
    static_assert(STAGE % 1024 == 0 && XS % 1024 == 0, "each tile 1024-aligned, as the swizzle needs");
    // Tiles copied ahead of the one computed: with OV one fewer, the stage of the tile before
    // still read by its wgmmas while this one's are issued.
    constexpr int AHEAD = OV ? S - 2 : S - 1;
    static_assert(AHEAD >= 1, "a tile in flight while one is read");
    extern __shared__ __align__(1024) unsigned char wr_smem[];
    pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wg = warp >> 2, wq = warp & 3, wr = wg / WT, wt = wg % WT;
    const int m0 = blockIdx.x * TOK, n0 = blockIdx.y * ROWS;
    const int T = (KB + 127) / 128;
    const bool split = gridDim.z > 1;
    const int t0 = split ? (blockIdx.z == 0 ? 0 : wr_chain_end(blockIdx.z - 1, T)) : 0;
    const int t1 = split ? wr_chain_end(blockIdx.z, T) : T;

    // This thread copies piece q = tid % 8 of rows tid / 8 + i * THREADS / 8 (all of one row
    // phase mod 8: one swizzled offset).
    const int q = tid & 7, r0 = tid >> 3;
    const u32 piece = (u32)((q ^ (r0 & 7)) << 4);
    u64 woff[PW], xoff[PX];
    bool wok[PW], xok[PX];
#pragma unroll
    for (int i = 0; i < PW; ++i) {
        const int n = rows.wrow(n0 + r0 + i * (THREADS / 8));
        wok[i] = n >= 0;
        woff[i] = (u64)(wok[i] ? n : 0) * KB + 16 * q;
    }
#pragma unroll
    for (int i = 0; i < PX; ++i) {
        const int r = r0 + i * (THREADS / 8), m = m0 + r;
        xok[i] = r < TOK && m < M;
        xoff[i] = (u64)(xok[i] ? m : 0) * KB + 16 * q;
    }
    auto issue_w = [&](int tile, int stage) {
        if (tile >= t1) return;
        const int k = 128 * tile + 16 * q;
        unsigned char* st = wr_smem + stage * STAGE;
#pragma unroll
        for (int i = 0; i < PW; ++i)
            cp_async_16(st + (r0 + i * (THREADS / 8)) * 128 + piece, w + woff[i] + (k < KB ? 128 * tile : 0),
                        (k < KB && wok[i]) ? 16 : 0);
    };
    auto issue_x = [&](int tile, int stage) {
        if (tile >= t1) return;
        const int k = 128 * tile + 16 * q;
        unsigned char* st = wr_smem + stage * STAGE + WS;
#pragma unroll
        for (int i = 0; i < PX; ++i) {
            const int r = r0 + i * (THREADS / 8);
            if (TOK * 8 % THREADS != 0 && r >= TOK) break;
            cp_async_16(st + r * 128 + piece, x + xoff[i] + (k < KB ? 128 * tile : 0), (k < KB && xok[i]) ? 16 : 0);
        }
    };

    // The weights are never written: the first stages' rows come in while the kernel before
    // ends; x belongs to it until pdl_wait. One commit group a stage (the first holds the
    // weights of all of them).
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) issue_w(t0 + s, s);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        issue_x(t0 + s, s);
        cp_async_commit();
    }

    float out[BN / 2], chain[BN / 2], p[OV ? 2 : 1][BN / 2];
#pragma unroll
    for (int v = 0; v < BN / 2; ++v) out[v] = chain[v] = 0.f;
#pragma unroll
    for (int b = 0; b < (OV ? 2 : 1); ++b)
#pragma unroll
        for (int v = 0; v < BN / 2; ++v) p[b][v] = 0.f;
    const u32 base = (u32)__cvta_generic_to_shared(wr_smem);
    int c = split ? (int)blockIdx.z : 0, c_end = wr_chain_end(c, T);
    // Tile `tile` (in stage `stage`): its copies landed, the ring refilled, its wgmmas into acc
    // issued (not waited for).
    auto start_tile = [&](float(&acc)[BN / 2], int tile, int stage) {
        cp_async_wait<AHEAD - 1>();  // this tile has landed (this thread's copies)
        fence_async_smem();          // ... where wgmma, the async proxy, reads them
        __syncthreads();             // everyone's; and the stage refilled below is free
        const int refill = stage + AHEAD >= S ? stage + AHEAD - S : stage + AHEAD;
        issue_w(tile + AHEAD, refill);
        issue_x(tile + AHEAD, refill);
        cp_async_commit();
        const u32 sa = base + stage * STAGE + wr * 64 * 128, sb = base + stage * STAGE + WS + wt * BN * 128;
        const u64 da = gdesc(sa, 16, 1024), db = gdesc(sb, 16, 1024);
        wgmma_fence();
        // k 32 kk of the tile: 32 kk bytes into each row, 2 kk in the descriptors' 16-byte units.
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) Op::template mma<BN>(acc, da + 2 * kk, db + 2 * kk, kk);
        wgmma_commit();
    };
    // Tile `tile`'s products (waited for) into its chain; the chain, and any empty ones after
    // it, into the sum where it ends, in order.
    auto add_tile = [&](float(&acc)[BN / 2], int tile) {
        reg_fence(acc);
#pragma unroll
        for (int v = 0; v < BN / 2; ++v) chain[v] = chain[v] + acc[v];
        while (!split && tile + 1 == c_end && c < WR_CHAINS) {
#pragma unroll
            for (int v = 0; v < BN / 2; ++v) {
                out[v] = out[v] + chain[v];
                chain[v] = 0.f;
            }
            c_end = wr_chain_end(++c, T);
        }
    };
    auto next = [](int stage) { return stage + 1 == S ? 0 : stage + 1; };
    if constexpr (!OV) {
        for (int tile = t0, stage = 0; tile < t1; ++tile, stage = next(stage)) {
            start_tile(p[0], tile, stage);
            wgmma_wait<0>();
            add_tile(p[0], tile);
        }
    } else if (t1 > t0) {
        // Tile j's products in p[(j - t0) % 2], added once tile j + 1's are issued; the loop's
        // body straight-line (ptxas serialises the wgmmas of a loop whose branches it cannot
        // follow).
        start_tile(p[0], t0, 0);
        int tile = t0 + 1, stage = next(0);
        for (; tile + 1 < t1; tile += 2) {
            start_tile(p[1], tile, stage);
            stage = next(stage);
            wgmma_wait<1>();
            add_tile(p[0], tile - 1);
            start_tile(p[0], tile + 1, stage);
            stage = next(stage);
            wgmma_wait<1>();
            add_tile(p[1], tile);
        }
        if (tile < t1) {
            start_tile(p[1], tile, stage);
            wgmma_wait<1>();
            add_tile(p[0], tile - 1);
            wgmma_wait<0>();
            add_tile(p[1], tile);
        } else {
            wgmma_wait<0>();
            add_tile(p[0], tile - 1);
        }
    }
    cp_async_wait<0>();

    // Accumulator 4 j + v: token 8 j + 2 t + (v & 1), place 16 wq + g + 8 (v >> 1) of the
    // warpgroup's 64.
    const int mw = m0 + wt * BN, pw = n0 + wr * 64 + 16 * wq + g;
    if (!split) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int m = mw + 8 * j + 2 * t + e;
                if (m < M) rows.emit(m, pw, out[4 * j + e], out[4 * j + 2 + e]);
            }
        return;
    }
    // Split: this chain's sums to part; the block's last CTA adds every chain's, in order.
    float* mine = part + (u64)blockIdx.z * M * NP;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            const int m = mw + 8 * j + 2 * t + (v & 1), p = pw + 8 * (v >> 1);
            if (m < M && p < NP) mine[(u64)m * NP + p] = chain[4 * j + v];
        }
    __threadfence();  // this CTA's partials seen by the device before its arrival is
    __syncthreads();
    int* arrived = count + blockIdx.x * gridDim.y + blockIdx.y;
    bool last = false;
    if (tid == 0) {
        last = atomicAdd(arrived, 1) == WR_CHAINS - 1;
        if (last) *arrived = 0;  // for the next launch (no other CTA of this one comes here)
    }
    if (!__syncthreads_or(last)) return;
    __threadfence();
    // Place p's chains, in chain order (0 past the places).
    auto joined = [&](int m, int p) {
        float s = 0.f;
        if (p < NP) {
#pragma unroll
            for (int ch = 0; ch < WR_CHAINS; ++ch) s = s + __ldcg(part + ((u64)ch * M + m) * NP + p);
        }
        return s;
    };
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int m = mw + 8 * j + 2 * t + e;
            if (m < M) rows.emit(m, pw, joined(m, pw), joined(m, pw + 8));
        }
}

// The plain rows of an N-row weight: place p is row p, its sums scaled by scaled(sum, m, n)
// into y [M, N].
template <class Scaled>
struct WgPlainRows {
    float* y;
    int N;
    Scaled scaled;
    __device__ __forceinline__ int wrow(int p) const { return p < N ? p : -1; }
    __device__ __forceinline__ void emit(int m, int p, float lo, float hi) const {
        if (p < N) y[(u64)m * N + p] = scaled(lo, m, p);
        if (p + 8 < N) y[(u64)m * N + p + 8] = scaled(hi, m, p + 8);
    }
};
template <class Scaled>
__device__ __forceinline__ WgPlainRows<Scaled> wg_plain_rows(float* y, int N, Scaled scaled) {
    return WgPlainRows<Scaled>{y, N, scaled};
}
