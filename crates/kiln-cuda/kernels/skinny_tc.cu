#line 1 "skinny_tc.cu"
// Decode GEMM for many rows (32-256 tokens) on the tensor cores, with the bits of the 16-warp
// skinny kernel: Y[m, n] = sum_k X[m, k] W[n, k], W bf16 [N, K], X bf16 [M, K], K % 8 == 0.
//
// The order it keeps. skinny_wide_* splits K into 32-wide chunks, chunk c summed by warp c % 16:
// each warp chains its chunks in order (two m16n8k16 MMAs a chunk, lane (g, t) holding k = 32 c
// + 8 t .. + 8 of rows g and g + 8 as its fragment slots), from zero, and the 16 warp sums are
// added in warp order, s = ((0 + a0) + a1) + ... + a15. A product with many tokens cannot give a
// CTA's 16 warps a copy of every output (registers), so here each output has one owner thread,
// which walks the same chains one after the other: pass p (0..7) computes a_{2p} and a_{2p+1}
// together from k-tiles of chunks (16 j + 2p, 16 j + 2p + 1) for j = 0, 1, ... (64 k, 128
// contiguous bytes of a row), then adds them to s in that order. The MMAs see the same operands
// in the same slots, in the same order, and a row's place in an MMA does not change its result,
// so every output has the skinny kernel's bits for any row count, tile shape or CTA.
//
// CTA: WN x WM warps, each warp 16 MI weight rows (MI 16-row tiles) x 32 tokens (four 8-token
// MMA columns). A k-tile holds two chunks (64 k, 128 bytes of a row in shared memory) and a pass
// builds CH chains at once: CH = 2 takes chunks 16 j + 2p and 16 j + 2p + 1 (chains 2p and
// 2p + 1, 128 contiguous bytes of a row, accumulators a[0] and a[1]); CH = 1 takes chunks
// 16 (2j) + p and 16 (2j + 1) + p (chain p alone, two 64-byte pieces, one accumulator), which
// frees a third of the registers for a warp tile twice as tall: half the shared-memory reads
// per MMA and, in a larger CTA, half the L2 reads per output (at 128 tokens the 64 x 64 CTAs
// read the weight twice and x once per 64 rows, about 5.4 TB/s through L2 on the H200: the
// bound). Both orders are the same chains added in the same order. W and X k-tiles stream
// through an S-stage cp.async ring, row r of a stage at 128 r bytes, its 16-byte piece q at
// q ^ 4 (r & 1) (lanes g and g + 1 of a quarter warp read pieces 4h + t of adjacent rows: no
// bank conflicts). The CTAs of one weight tile (its token tiles) are adjacent in the grid, so
// they read it from memory once. Weight rows and what becomes of the sums: the Epi
// (skinny_epilogue.cu).

#define TC_W 16

// SPLIT: the CTA builds chain p = blockIdx.y alone (CH = 1) and writes it, as float, to
// part[p][m][16 tile + r] (row length ld) for skinny_tc_join to add up in chain order.
template <int WN, int WM, int MI, int CH, int S, bool SPLIT>
__device__ __forceinline__ void tc_body(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w,
                                        int M, int K, const Epi& ep, float* __restrict__ part,
                                        int ld) {
    constexpr int BN = 16 * MI * WN, BM = 32 * WM, ROWS = BN + BM, THREADS = 32 * WN * WM;
    constexpr int STAGE = ROWS * 128;
    constexpr int R = 2 / CH;  // steps j a k-tile spans
    static_assert(CH == 1 || CH == 2, "one or two chains a pass");
    static_assert(!SPLIT || CH == 1, "a split CTA builds one chain");
    // Each thread copies piece q = tid % 8 of rows tid / 8 + i * THREADS / 8; the first PW of
    // them are weight rows (BN is a multiple of THREADS / 8), the other PX token rows.
    constexpr int PW = BN * 8 / THREADS, PX = BM * 8 / THREADS;
    static_assert(BN * 8 % THREADS == 0 && BM * 8 % THREADS == 0, "pieces split evenly");
    extern __shared__ __align__(128) unsigned char tc_smem[];
    pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wn = warp % WN, wm = warp / WN;
    const int m_tiles = (M + BM - 1) / BM;
    const int nb = blockIdx.x / m_tiles, mb = blockIdx.x - nb * m_tiles;
    const int tile0 = nb * (BN / 16), m0 = mb * BM;
    const int chunks = (K + 31) / 32;
    const int J = (chunks + TC_W - 1) / TC_W;  // chunks of the longest chain
    const int JS = (J + R - 1) / R;            // k-tiles a pass
    const int T = SPLIT ? JS : (TC_W / CH) * JS;
    const int p0 = SPLIT ? (int)blockIdx.y : 0;  // the first (SPLIT: only) pass

    // Rows r0 + i * THREADS / 8 all have r0's parity (THREADS / 8 and BN are even), hence one
    // swizzled piece offset for all of this thread's copies.
    const int q = tid & 7, r0 = tid >> 3;
    const int piece = (q ^ ((r0 & 1) << 2)) << 4;
    u32 woff[PW], xoff[PX];
    bool wok[PW], xok[PX];
    epi_weight_rows<PW, THREADS / 8>(ep, tile0, r0, K, woff, wok);
    token_rows<PX, THREADS / 8>(m0, r0, M, K, xoff, xok);
    // Half h of k-tile (pass p, step j) is chunk 16 (R j + h / CH) + CH p + h % CH; this thread's
    // piece q lies in half q / 4, 8 (q % 4) into it. The loop below steps (p, j, stage) instead
    // of dividing.
    const int hq = q >> 2, qk = 32 * TC_W * (hq / CH) + 32 * (hq % CH) + 8 * (q & 3);
    auto tile_k = [&](int p, int j) { return 32 * TC_W * R * j + 32 * CH * p + qk; };
    auto issue_w = [&](int it, int p, int j, int stage) {
        if (it >= T) return;
        const int k = tile_k(p, j);
        const bool kin = k < K;
        unsigned char* st = tc_smem + stage * STAGE;
#pragma unroll
        for (int i = 0; i < PW; ++i)
            cp_async_16(st + (r0 + i * (THREADS / 8)) * 128 + piece, w + woff[i] + (kin ? k : 0),
                        (kin && wok[i]) ? 16 : 0);
    };
    auto issue_x = [&](int it, int p, int j, int stage) {
        if (it >= T) return;
        const int k = tile_k(p, j);
        const bool kin = k < K;
        unsigned char* st = tc_smem + stage * STAGE;
#pragma unroll
        for (int i = 0; i < PX; ++i)
            cp_async_16(st + (BN + r0 + i * (THREADS / 8)) * 128 + piece, x + xoff[i] + (kin ? k : 0),
                        (kin && xok[i]) ? 16 : 0);
    };

    // Weights are the model's and never written: their first stages stream in while the previous
    // kernel ends. x belongs to it until pdl_wait. Group 0 holds the early weights and x of tile
    // 0, group s the x of tile s, so waiting for group i still means "tile i has landed".
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue_w(s, p0 + s / JS, s % JS, s);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        issue_x(s, p0 + s / JS, s % JS, s);
        cp_async_commit();
    }

    float acc[MI][4][4], a[CH][MI][4][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                acc[mi][ni][v] = 0.f;
#pragma unroll
                for (int c = 0; c < CH; ++c) a[c][mi][ni][v] = 0.f;
            }

    // One chunk (half h of a k-tile) into `a`: the skinny kernel's two MMAs per fragment.
    auto chunk = [&](const unsigned char* st, int h, float (&a)[MI][4][4]) {
        const int off = ((4 * h + t) ^ ((g & 1) << 2)) << 4;
        uint4 va[MI], vb[MI], vx[4];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const int r = wn * 16 * MI + mi * 16 + g;
            va[mi] = *reinterpret_cast<const uint4*>(st + r * 128 + off);
            vb[mi] = *reinterpret_cast<const uint4*>(st + (r + 8) * 128 + off);
        }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int r = BN + wm * 32 + ni * 8 + g;
            vx[ni] = *reinterpret_cast<const uint4*>(st + r * 128 + off);
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const u32 f0[4] = {va[mi].x, vb[mi].x, va[mi].y, vb[mi].y};
            const u32 f1[4] = {va[mi].z, vb[mi].z, va[mi].w, vb[mi].w};
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const u32 b0[2] = {vx[ni].x, vx[ni].y};
                const u32 b1[2] = {vx[ni].z, vx[ni].w};
                mma_bf16_16816(a[mi][ni], f0, b0);
                mma_bf16_16816(a[mi][ni], f1, b1);
            }
        }
    };

    // (pass, step, stage) of the tile issued next (it + S - 1) and of the tile summed (it).
    int np = p0 + (S - 1) / JS, nj = (S - 1) % JS, nst = S - 1;
    int p = p0, j = 0, cst = 0;
    for (int it = 0; it < T; ++it) {
        cp_async_wait<S - 2>();  // tile it has landed (this thread's copies)
        __syncthreads();         // everyone's copies; everyone is done with tile it - 1's stage
        issue_w(it + S - 1, np, nj, nst);
        issue_x(it + S - 1, np, nj, nst);
        cp_async_commit();
        if (++nj == JS) nj = 0, ++np;
        nst = nst + 1 == S ? 0 : nst + 1;
        const unsigned char* st = tc_smem + cst * STAGE;
        // A chunk past K is one the skinny kernel never sums (its warp has fewer chunks).
#pragma unroll
        for (int h = 0; h < 2; ++h)
            if (TC_W * (R * j + h / CH) + CH * p + h % CH < chunks) chunk(st, h, a[h % CH]);
        if (j == JS - 1) {
            // The end of pass p: its warp sums join s, in warp order.
#pragma unroll
            for (int c = 0; c < CH; ++c)
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                        for (int v = 0; v < 4; ++v) {
                            acc[mi][ni][v] = acc[mi][ni][v] + a[c][mi][ni][v];
                            a[c][mi][ni][v] = 0.f;
                        }
        }
        if (++j == JS) j = 0, ++p;
        cst = cst + 1 == S ? 0 : cst + 1;
    }
    cp_async_wait<0>();

    if (SPLIT) {
        // Accumulator element v of (mi, ni): token 8 ni + 2 t + (v & 1) after the warp's first,
        // row g + 8 (v >> 1) of 16-row tile mi.
        // 0 + a_p: the chain as the join's first addition would see it either way.
        float* pp = part + (u64)p0 * M * ld;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const int mv = m0 + wm * 32 + 8 * ni + 2 * t + (v & 1);
                    const int rv = (tile0 + wn * MI + mi) * 16 + g + 8 * (v >> 1);
                    if (mv < M && rv < ld) pp[(u64)mv * ld + rv] = acc[mi][ni][v];
                }
        return;
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int tile = tile0 + wn * MI + mi, m = m0 + wm * 32 + ni * 8 + 2 * t;
            if (m < M) epi_pair(ep, tile, g, m, acc[mi][ni][0], acc[mi][ni][2]);
            if (m + 1 < M) epi_pair(ep, tile, g, m + 1, acc[mi][ni][1], acc[mi][ni][3]);
        }
}

// The entries: warps along the weight (WN) and along the tokens (WM), 16-row tiles a warp (MI),
// chains a pass (CH), ring stages, CTAs per SM the launch bounds promise. src/skinny_tc.rs
// reads the shapes from these lines and picks one per launch; every entry gives the same bits.
// Shared memory: S * (16 MI WN + 32 WM) * 128 bytes.
#define TC_ENTRY(NAME, WN, WM, MI, CH, S, MINB)                                                     \
    extern "C" __global__ void __launch_bounds__(32 * WN * WM, MINB)                               \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, EPI_PARAMS) {                          \
        tc_body<WN, WM, MI, CH, S, false>(x, w, M, K, EPI_MAKE, nullptr, 0);                        \
    }
TC_ENTRY(skinny_tc_4x1, 4, 1, 2, 2, 4, 2)
TC_ENTRY(skinny_tc_2x2, 2, 2, 2, 2, 4, 3)
TC_ENTRY(skinny_tc_1x4, 1, 4, 2, 2, 4, 2)
TC_ENTRY(skinny_tc_4x2, 4, 2, 2, 2, 6, 1)
TC_ENTRY(skinny_tc_2x4, 2, 4, 2, 2, 6, 1)
// One chain a pass: 64 x 32 warp tiles (128 x 128, 128 x 64 and 64 x 128 CTAs), and 16 warps of
// 32 x 32 (128 x 128).
TC_ENTRY(skinny_tc_t2x4, 2, 4, 4, 1, 4, 1)
TC_ENTRY(skinny_tc_t2x2, 2, 2, 4, 1, 4, 2)
TC_ENTRY(skinny_tc_t1x4, 1, 4, 4, 1, 4, 2)
TC_ENTRY(skinny_tc_w4x4, 4, 4, 2, 1, 4, 1)

// Split along the chains (skinny_tcs_*, then skinny_tc_join): grid (CTAs of the tiling, 16), CTA
// (c, p) building chain p of its tile into part; for weights with few 16-row tiles (QKV, o and
// down at 128-256 tokens), where the whole-K CTAs are too few to fill the GPU. The chains are
// the skinny kernel's, each built alike, and the join adds them in chain order: the same bits.
#define TC_SPLIT_ENTRY(NAME, WN, WM, MI, CH, S, MINB)                                               \
    extern "C" __global__ void __launch_bounds__(32 * WN * WM, MINB)                               \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, float* part, int ld, EPI_PARAMS) {    \
        tc_body<WN, WM, MI, CH, S, true>(x, w, M, K, EPI_MAKE, part, ld);                           \
    }
TC_SPLIT_ENTRY(skinny_tcs_t2x4, 2, 4, 4, 1, 4, 1)
TC_SPLIT_ENTRY(skinny_tcs_t2x2, 2, 2, 4, 1, 4, 2)
TC_SPLIT_ENTRY(skinny_tcs_2x2, 2, 2, 2, 1, 4, 3)

// The sums of the chains part[0..16][m][16 tile + r], s = ((0 + a0) + a1) + ..., into the
// epilogue: one thread per token and tile row pair (r, r + 8), as the GEMM's owner threads hold
// them. Grid: ceil(M * tiles * 8 / 256) CTAs of 256 threads.
extern "C" __global__ void __launch_bounds__(256) skinny_tc_join(const float* __restrict__ part, int M, int ld,
                                                                 int tiles, EPI_PARAMS) {
    pdl_enter();
    const Epi ep = EPI_MAKE;
    const int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= M * tiles * 8) return;
    const int r = i & 7, tile = (i >> 3) % tiles, m = (i >> 3) / tiles;
    const u64 lo = (u64)m * ld + tile * 16 + r, stride = (u64)M * ld;
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int c = 0; c < TC_W; ++c) {
        a = __fadd_rn(a, part[c * stride + lo]);
        b = __fadd_rn(b, part[c * stride + lo + 8]);
    }
    epi_pair(ep, tile, r, m, a, b);
}
