#line 1 "skinny_wg.cu"
// Decode GEMM for many rows with wgmma (sm_90a), with the bits of the 16-warp skinny kernel:
// Y[m, n] = sum_k X[m, k] W[n, k], W bf16 [N, K], X bf16 [M, K], K % 8 == 0.
//
// The order is skinny_tc.cu's (its comment says why it is the skinny kernel's): chunk c (32 k)
// belongs to chain c % 16, a chain sums its chunks in order with two k16 products a chunk, from
// zero, and the 16 chain sums are added in chain order. Pass p builds chain p from k-tiles of
// chunks (16 (2j) + p, 16 (2j + 1) + p), then adds it to the output's sum. A product here is a
// warpgroup's wgmma (64 weight rows x BM tokens x 16 k) instead of mma.sync m16n8k16; the two
// give the same bits for the same operands in the same slots (contract_decode_fused checks
// every row against the skinny kernel). The slots: the skinny kernel's lane (g, t) holds the 8
// consecutive k = 32 c + 8 t .. of its rows, k 8 t + 4 h + e as slot 2 t + e of product h and
// 8 t + 4 h + 2 + e as slot 2 t + 8 + e. The weights (A) reach wgmma from registers, loaded as
// the skinny kernel loads them; the tokens (B) come from shared memory, where a slot's place is
// fixed, so x is first rewritten (skinny_wg_x) with each chunk's 4-byte words transposed as a
// 4 x 4 matrix: word 4 q + t of a chunk of xp is word 4 t + q of x's, and 16-byte unit 2 h + s
// of a chunk then holds slots 8 s .. 8 s + 7 of product h, as wgmma reads them.
//
// CTA: WG warpgroups, each 64 weight rows (four 16-row tiles, one a warp) x BM tokens. W and xp
// k-tiles (two chunks, 128 bytes a row) stream through an S-stage cp.async ring: W rows as in
// skinny_tc.cu (piece q at q ^ 4 (r & 1)), xp rows in wgmma's 128-byte swizzle. Weight rows and
// what becomes of the sums: the Epi (skinny_epilogue.cu).

// D[64 x BM] += A[64 x 16] * B[16 x BM]; A in registers, B (xp) in shared memory, K-major.
template <int BM>
__device__ __forceinline__ void wg_rsk(float (&d)[BM / 2], const u32 (&a)[4], u64 db) {
    if constexpr (BM == 64) wgmma_rs_n64<0>(d, a, db);
    else wgmma_rs_n128<0>(d, a, db);
}

#define WG_W 16  // the skinny kernel's chains


// x [M, K] into xp [M, Kp] (Kp = K rounded up to 32; the words past K zero), each chunk's 16
// words transposed as a 4 x 4 matrix. One thread per token and chunk; grid ceil(M * chunks /
// 256) CTAs of 256 threads.
extern "C" __global__ void __launch_bounds__(256) skinny_wg_x(const bf16_t* __restrict__ x,
                                                              bf16_t* __restrict__ xp, int M, int K) {
    pdl_enter();
    const int chunks = (K + 31) / 32, i = blockIdx.x * 256 + threadIdx.x;
    if (i >= M * chunks) return;
    const int m = i / chunks, c = i - m * chunks;
    const bf16_t* src = x + (u64)m * K + 32 * c;
    uint4 in[4];
#pragma unroll
    for (int t = 0; t < 4; ++t)
        in[t] = 32 * c + 8 * t < K ? ld_16(src + 8 * t) : make_uint4(0u, 0u, 0u, 0u);
    bf16_t* dst = xp + (u64)m * (32 * chunks) + 32 * c;
    *reinterpret_cast<uint4*>(dst) = make_uint4(in[0].x, in[1].x, in[2].x, in[3].x);
    *reinterpret_cast<uint4*>(dst + 8) = make_uint4(in[0].y, in[1].y, in[2].y, in[3].y);
    *reinterpret_cast<uint4*>(dst + 16) = make_uint4(in[0].z, in[1].z, in[2].z, in[3].z);
    *reinterpret_cast<uint4*>(dst + 24) = make_uint4(in[0].w, in[1].w, in[2].w, in[3].w);
}

// SPLIT: the CTA builds chain p = blockIdx.y alone and writes it, as float, to
// part[p][m][16 tile + r] (row length ld) for skinny_tc_join to add up in chain order.
template <int WG, int BM, int S, bool SPLIT>
__device__ __forceinline__ void wg_body(const bf16_t* __restrict__ xp, const bf16_t* __restrict__ w,
                                        int M, int K, const Epi& ep, float* __restrict__ part,
                                        int ld) {
    constexpr int BN = 64 * WG, THREADS = 128 * WG;
    constexpr int XS = BM * 128, WS = BN * 128;  // a stage's bytes of xp and of W
    constexpr int PW = BN * 8 / THREADS, PX = BM * 8 / THREADS;
    static_assert(BM == 64 || BM == 128, "wgmma N of 64 or 128 tokens");
    static_assert(BM * 8 % THREADS == 0, "token pieces split evenly");
    // xp stages first: each starts 1024-aligned, as the swizzle needs.
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wg = warp >> 2, wq = warp & 3;
    const int m_tiles = (M + BM - 1) / BM;
    const int nb = blockIdx.x / m_tiles, mb = blockIdx.x - nb * m_tiles;
    const int tile0 = nb * (BN / 16), m0 = mb * BM;
    const int chunks = (K + 31) / 32, Kp = 32 * chunks;
    const int J = (chunks + WG_W - 1) / WG_W;  // chunks of the longest chain
    const int JS = (J + 1) / 2;                // k-tiles a pass
    const int T = SPLIT ? JS : WG_W * JS;
    const int p0 = SPLIT ? (int)blockIdx.y : 0;  // the first (SPLIT: only) pass

    // This thread copies piece q = tid % 8 of rows tid / 8 + i * THREADS / 8 (one parity, one
    // row phase mod 8 when THREADS / 8 is a multiple of 8: one swizzled offset each).
    const int q = tid & 7, r0 = tid >> 3;
    static_assert(THREADS / 8 % 8 == 0, "rows of one phase");
    const int wpiece = (q ^ ((r0 & 1) << 2)) << 4, xpiece = (q ^ (r0 & 7)) << 4;
    u32 woff[PW], xoff[PX];
    bool wok[PW], xok[PX];
    epi_weight_rows<PW, THREADS / 8>(ep, tile0, r0, K, woff, wok);
    token_rows<PX, THREADS / 8>(m0, r0, M, Kp, xoff, xok);
    // Half h = q / 4 of k-tile (pass p, step j) is chunk 16 (2 j + h) + p; piece q % 4 of it.
    const int qk = 32 * WG_W * (q >> 2) + 8 * (q & 3);
    auto tile_k = [&](int p, int j) { return 64 * WG_W * j + 32 * p + qk; };
    auto issue_w = [&](int it, int p, int j, int stage) {
        if (it >= T) return;
        const int k = tile_k(p, j);
        const bool kin = k < K;
        unsigned char* st = wg_smem + S * XS + stage * WS;
#pragma unroll
        for (int i = 0; i < PW; ++i)
            cp_async_16(st + (r0 + i * (THREADS / 8)) * 128 + wpiece, w + woff[i] + (kin ? k : 0),
                        (kin && wok[i]) ? 16 : 0);
    };
    auto issue_x = [&](int it, int p, int j, int stage) {
        if (it >= T) return;
        const int k = tile_k(p, j);
        const bool kin = k < Kp;
        unsigned char* st = wg_smem + stage * XS;
#pragma unroll
        for (int i = 0; i < PX; ++i)
            cp_async_16(st + (r0 + i * (THREADS / 8)) * 128 + xpiece, xp + xoff[i] + (kin ? k : 0),
                        (kin && xok[i]) ? 16 : 0);
    };

    // Weights first, while the kernel before ends (they are never written); xp after pdl_wait.
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue_w(s, p0 + s / JS, s % JS, s);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        issue_x(s, p0 + s / JS, s % JS, s);
        cp_async_commit();
    }

    float acc[BM / 2], a[BM / 2];
#pragma unroll
    for (int v = 0; v < BM / 2; ++v) acc[v] = a[v] = 0.f;
    const u32 xbase = (u32)__cvta_generic_to_shared(wg_smem);
    const int ra = 64 * wg + 16 * wq + g;  // this lane's weight rows ra and ra + 8 of the CTA

    // (pass, step, stage) of the tile issued next (it + S - 1) and of the tile summed (it). A
    // k-tile's products are waited for before its stage is refilled (leaving them in flight
    // while the next tile's were issued measured no faster: the kernel is bound by what it
    // reads through L2, x once per 64 weight rows a warpgroup).
    int np = p0 + (S - 1) / JS, nj = (S - 1) % JS, nst = S - 1;
    int p = p0, j = 0, cst = 0;
    for (int it = 0; it < T; ++it) {
        cp_async_wait<S - 2>();  // tile it has landed (this thread's copies)
        __syncthreads();         // everyone's; the stage refilled below (it - 1's) is free
        issue_w(it + S - 1, np, nj, nst);
        issue_x(it + S - 1, np, nj, nst);
        cp_async_commit();
        if (++nj == JS) nj = 0, ++np;
        nst = nst + 1 == S ? 0 : nst + 1;
        fence_async_smem();
        const unsigned char* sw = wg_smem + S * XS + cst * WS;
        const u32 sx = xbase + cst * XS;
        u32 f[2][2][4];
        bool live[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            live[h] = WG_W * (2 * j + h) + p < chunks;  // the chunk exists (uniform in the CTA)
            const int off = ((4 * h + t) ^ ((g & 1) << 2)) << 4;
            const uint4 va = *reinterpret_cast<const uint4*>(sw + ra * 128 + off);
            const uint4 vb = *reinterpret_cast<const uint4*>(sw + (ra + 8) * 128 + off);
            f[h][0][0] = va.x, f[h][0][1] = vb.x, f[h][0][2] = va.y, f[h][0][3] = vb.y;
            f[h][1][0] = va.z, f[h][1][1] = vb.z, f[h][1][2] = va.w, f[h][1][3] = vb.w;
        }
        wgmma_fence();
#pragma unroll
        for (int h = 0; h < 2; ++h)
            if (live[h]) {
                wg_rsk<BM>(a, f[h][0], gdesc(sx + 64 * h, 16, 1024));
                wg_rsk<BM>(a, f[h][1], gdesc(sx + 64 * h + 32, 16, 1024));
            }
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(a);
        if (j == JS - 1) {
            // The end of pass p: chain p joins the sum, in chain order.
#pragma unroll
            for (int v = 0; v < BM / 2; ++v) {
                acc[v] = acc[v] + a[v];
                a[v] = 0.f;
            }
        }
        if (++j == JS) j = 0, ++p;
        cst = cst + 1 == S ? 0 : cst + 1;
    }
    cp_async_wait<0>();

    // Accumulator 4 n + v: token 8 n + 2 t + (v & 1), row g + 8 (v >> 1) of the warp's tile.
    const int tile = tile0 + 4 * wg + wq;
    if (SPLIT) {
        // 0 + a_p: the chain as the join's first addition would see it either way.
        float* pp = part + (u64)p0 * M * ld;
#pragma unroll
        for (int n = 0; n < BM / 8; ++n)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int mv = m0 + 8 * n + 2 * t + (v & 1), rv = tile * 16 + g + 8 * (v >> 1);
                if (mv < M && rv < ld) pp[(u64)mv * ld + rv] = acc[4 * n + v];
            }
        return;
    }
#pragma unroll
    for (int n = 0; n < BM / 8; ++n) {
        const int m = m0 + 8 * n + 2 * t;
        if (m < M) epi_pair(ep, tile, g, m, acc[4 * n], acc[4 * n + 2]);
        if (m + 1 < M) epi_pair(ep, tile, g, m + 1, acc[4 * n + 1], acc[4 * n + 3]);
    }
}

// The entries: warpgroups along the weight (64 rows each), tokens a CTA (wgmma N), ring stages,
// CTAs per SM the launch bounds promise. src/skinny_wg.rs reads the shapes from these lines.
// x is xp (skinny_wg_x's). Shared memory: S * (64 WG + BM) * 128 bytes.
#define WG_ENTRY(NAME, WG, BM, S, MINB)                                                             \
    extern "C" __global__ void __launch_bounds__(128 * WG, MINB)                                   \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, EPI_PARAMS) {                          \
        wg_body<WG, BM, S, false>(x, w, M, K, EPI_MAKE, nullptr, 0);                                 \
    }
WG_ENTRY(skinny_wg_1x64, 1, 64, 4, 3)
WG_ENTRY(skinny_wg_2x64, 2, 64, 4, 2)
WG_ENTRY(skinny_wg_1x128, 1, 128, 4, 2)
WG_ENTRY(skinny_wg_2x128, 2, 128, 4, 1)

// Split along the chains (skinny_wgs_*, then skinny_tc.cu's skinny_tc_join): grid (CTAs of the
// tiling, 16), CTA (c, p) building chain p of its tile into part, for weights with few tiles
// (QKV, o and down at 128-192 tokens). The same chains, joined in chain order: the same bits.
#define WG_SPLIT_ENTRY(NAME, WG, BM, S, MINB)                                                       \
    extern "C" __global__ void __launch_bounds__(128 * WG, MINB)                                   \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, float* part, int ld, EPI_PARAMS) {    \
        wg_body<WG, BM, S, true>(x, w, M, K, EPI_MAKE, part, ld);                                   \
    }
WG_SPLIT_ENTRY(skinny_wgs_1x64, 1, 64, 4, 3)
WG_SPLIT_ENTRY(skinny_wgs_2x128, 2, 128, 4, 1)
