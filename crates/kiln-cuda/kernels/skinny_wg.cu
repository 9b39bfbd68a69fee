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


// Chunk `src` of a row of x (32 k, `left` of them before the row ends: pieces past it zero)
// as four 16-byte units, its 16 words transposed as a 4 x 4 matrix: unit s holds words s, 4 + s,
// 8 + s and 12 + s.
__device__ __forceinline__ void wg_x_units(const bf16_t* src, int left, uint4 (&u)[4]) {
    uint4 in[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) in[t] = 8 * t < left ? ld_16(src + 8 * t) : make_uint4(0u, 0u, 0u, 0u);
    u[0] = make_uint4(in[0].x, in[1].x, in[2].x, in[3].x);
    u[1] = make_uint4(in[0].y, in[1].y, in[2].y, in[3].y);
    u[2] = make_uint4(in[0].z, in[1].z, in[2].z, in[3].z);
    u[3] = make_uint4(in[0].w, in[1].w, in[2].w, in[3].w);
}

// x [M, K] into xp [M, Kp] (Kp = K rounded up to 32; the words past K zero), each chunk's 16
// words transposed as a 4 x 4 matrix. One thread per token and chunk; grid ceil(M * chunks /
// 256) CTAs of 256 threads.
extern "C" __global__ void __launch_bounds__(256) skinny_wg_x(const bf16_t* __restrict__ x,
                                                              bf16_t* __restrict__ xp, int M, int K) {
    pdl_enter();
    const int chunks = (K + 31) / 32, i = blockIdx.x * 256 + threadIdx.x;
    if (i >= M * chunks) return;
    const int m = i / chunks, c = i - m * chunks;
    uint4 u[4];
    wg_x_units(x + (u64)m * K + 32 * c, K - 32 * c, u);
    uint4* dst = reinterpret_cast<uint4*>(xp + (u64)m * (32 * chunks) + 32 * c);
#pragma unroll
    for (int s = 0; s < 4; ++s) dst[s] = u[s];
}

// The k-tiles of the weights' passes (wg_body): JS a pass, chain p's tile j holding chunks
// 16 (2 j) + p and 16 (2 j + 1) + p.
__device__ __forceinline__ int wg_tiles_a_pass(int K) {
    const int J = ((K + 31) / 32 + WG_W - 1) / WG_W;  // chunks of the longest chain
    return (J + 1) / 2;
}

// x [M, K] as the clustered entries copy it, tile by tile: k-tile (p, j) of token m (< Mp, M
// rounded up to the entry's BM) is the 128 bytes at ((p JS + j) Mp + m) * 64 elements, the two
// chunks rewritten as in skinny_wg_x, unit q (4 h + s: unit s of half h) stored at q ^ (m % 8),
// wgmma's 128-byte swizzle. So BM tokens of a k-tile are one linear copy into a 1024-aligned
// stage. Zeros past M and past the chunks. One thread per (p, j, token, half), the two halves
// of a row adjacent; grid ceil(32 JS Mp / 256).
extern "C" __global__ void __launch_bounds__(256) skinny_wg_xt(const bf16_t* __restrict__ x,
                                                               bf16_t* __restrict__ xt, int M, int K,
                                                               int Mp) {
    pdl_enter();
    const int chunks = (K + 31) / 32, JS = wg_tiles_a_pass(K);
    const int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= WG_W * JS * Mp * 2) return;
    const int h = i & 1, row = i >> 1, pj = row / Mp, m = row - pj * Mp;
    const int p = pj / JS, j = pj - p * JS, c = WG_W * (2 * j + h) + p;
    uint4 u[4] = {};
    if (m < M && c < chunks) wg_x_units(x + (u64)m * K + 32 * c, K - 32 * c, u);
    uint4* dst = reinterpret_cast<uint4*>(xt + (u64)row * 64);
#pragma unroll
    for (int s = 0; s < 4; ++s) dst[(4 * h + s) ^ (m & 7)] = u[s];
}

// SPLIT: the CTA builds chain p = blockIdx.y alone and writes it, as float, to
// part[p][m][16 tile + r] (row length ld) for skinny_tc_join to add up in chain order.
// CL > 1: the CTAs of a cluster of CL (consecutive in x) take consecutive 64 WG-row weight
// blocks of the same BM tokens, and share each k-tile of x: CTA r copies the r-th CL-th of it
// (from skinny_wg_xt's layout, one bulk copy) into every CTA's stage at once, so that x is read
// through L2 once per cluster instead of once per CTA. A stage's x is then counted in by the
// stage's `full` barrier, and refilled only once every CTA of the cluster has released it on
// its `empty` barrier (the weights keep their cp.async ring). The same products in the same
// order: the bits of CL = 1.
template <int WG, int BM, int S, bool SPLIT, int CL>
__device__ __forceinline__ void wg_body(const bf16_t* __restrict__ xp, const bf16_t* __restrict__ w,
                                        int M, int K, const Epi& ep, float* __restrict__ part,
                                        int ld) {
    constexpr int BN = 64 * WG, THREADS = 128 * WG;
    constexpr int XS = BM * 128, WS = BN * 128;  // a stage's bytes of xp and of W
    constexpr int PW = BN * 8 / THREADS, PX = BM * 8 / THREADS;
    static_assert(BM == 64 || BM == 128, "wgmma N of 64 or 128 tokens");
    static_assert(BM * 8 % THREADS == 0, "token pieces split evenly");
    static_assert(CL == 1 || (S >= 3 && XS % (16 * CL) == 0), "a stage of slack; whole slices");
    // xp stages first: each starts 1024-aligned, as the swizzle needs; then W's; then (CL > 1)
    // the barriers, full[S] and empty[S].
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wg = warp >> 2, wq = warp & 3;
    const int m_tiles = (M + BM - 1) / BM;
    const int rank = (int)(blockIdx.x % CL), cl = (int)(blockIdx.x / CL);
    const int nb = (cl / m_tiles) * CL + rank;
    const int mb = cl % m_tiles;
    const int tile0 = nb * (BN / 16), m0 = mb * BM;
    const int chunks = (K + 31) / 32, Kp = 32 * chunks;
    const int JS = wg_tiles_a_pass(K);  // k-tiles a pass
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
    const u32 xbase = (u32)__cvta_generic_to_shared(wg_smem);
    const u32 full = xbase + S * (XS + WS), empty = full + 8 * S;
    // CL > 1, thread 0: the next x tile this CTA's slice goes out for (tile, pass, step, stage).
    int xi = 0, xpp = p0, xj = 0, xs = 0;
    auto send_x = [&]() {
        if (xi < T) {
            // The stage's last tile released by every CTA (the (xi / S)-th release of it).
            if (xi >= S) mbar_wait(empty + 8 * xs, (u32)(xi / S - 1) & 1);
            mbar_expect_tx(full + 8 * xs, XS);
            const bf16_t* src = xp + ((u64)(xpp * JS + xj) * (m_tiles * BM) + m0) * 64;
            bulk_multicast(xbase + xs * XS + rank * (XS / CL), src + rank * (XS / CL / 2), XS / CL,
                           full + 8 * xs, (unsigned short)((1u << CL) - 1));
        }
        ++xi;
        if (++xj == JS) xj = 0, ++xpp;
        xs = xs + 1 == S ? 0 : xs + 1;
    };
    if constexpr (CL > 1) {
        if (tid == 0) {
            for (int s = 0; s < S; ++s) {
                mbar_init(full + 8 * s, 1);
                mbar_init(empty + 8 * s, CL);
            }
            fence_mbar_init();
        }
        cluster_sync();  // every CTA's barriers ready before any copy or arrival reaches them
    }

    // Weights first, while the kernel before ends (they are never written); xp after pdl_wait.
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue_w(s, p0 + s / JS, s % JS, s);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if constexpr (CL == 1) issue_x(s, p0 + s / JS, s % JS, s);
        // CL > 1: a stage of slack (S - 2 tiles ahead), so that a CTA seldom waits for the
        // others' releases.
        else if (tid == 0 && s < S - 2) send_x();
        cp_async_commit();
    }

    float acc[BM / 2], a[BM / 2];
#pragma unroll
    for (int v = 0; v < BM / 2; ++v) acc[v] = a[v] = 0.f;
    const int ra = 64 * wg + 16 * wq + g;  // this lane's weight rows ra and ra + 8 of the CTA

    // (pass, step, stage) of the tile issued next (it + S - 1) and of the tile summed (it). A
    // k-tile's products are waited for before its stage is refilled (leaving them in flight
    // while the next tile's were issued measured no faster: the kernel is bound by what it
    // reads through L2, x once per 64 weight rows a warpgroup).
    int np = p0 + (S - 1) / JS, nj = (S - 1) % JS, nst = S - 1;
    int p = p0, j = 0, cst = 0;
    u32 phase = 0;  // CL > 1: parity of the full barriers' phase for stage cst
    for (int it = 0; it < T; ++it) {
        cp_async_wait<S - 2>();  // tile it has landed (this thread's copies)
        __syncthreads();         // everyone's; the stage refilled below (it - 1's) is free
        if constexpr (CL > 1) {
            // Tile it - 1's stage (refilled next) released to every CTA, lane r to CTA r.
            if (it > 0 && tid < CL) mbar_arrive_at(empty + 8 * nst, tid);
            if (tid == 0) send_x();  // tile it + S - 2
        }
        issue_w(it + S - 1, np, nj, nst);
        if constexpr (CL == 1) issue_x(it + S - 1, np, nj, nst);
        cp_async_commit();
        if (++nj == JS) nj = 0, ++np;
        nst = nst + 1 == S ? 0 : nst + 1;
        fence_async_smem();
        if constexpr (CL > 1) mbar_wait(full + 8 * cst, phase);
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
        if (++cst == S) cst = 0, phase ^= 1u;
    }
    cp_async_wait<0>();
    // No CTA leaves while another may still copy into it or arrive on its barriers.
    if constexpr (CL > 1) cluster_sync();

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
        wg_body<WG, BM, S, false, 1>(x, w, M, K, EPI_MAKE, nullptr, 0);                              \
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
        wg_body<WG, BM, S, true, 1>(x, w, M, K, EPI_MAKE, part, ld);                                \
    }
WG_SPLIT_ENTRY(skinny_wgs_1x64, 1, 64, 4, 3)
WG_SPLIT_ENTRY(skinny_wgs_2x128, 2, 128, 4, 1)

// The same in clusters of CL CTAs sharing x (wg_body's CL), from skinny_wg_xt's layout; the
// grid's CTAs along the weight a multiple of CL (the ones past it copy their share of x and
// write nothing). Shared memory: the ring and 16 S bytes of barriers.
#define WGC_ENTRY(NAME, WG, BM, S, MINB, CL)                                                        \
    extern "C" __global__ void __launch_bounds__(128 * WG, MINB) __cluster_dims__(CL, 1, 1)        \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, EPI_PARAMS) {                          \
        wg_body<WG, BM, S, false, CL>(x, w, M, K, EPI_MAKE, nullptr, 0);                             \
    }
WGC_ENTRY(skinny_wg_1x64_c2, 1, 64, 4, 3, 2)
WGC_ENTRY(skinny_wg_2x64_c2, 2, 64, 4, 2, 2)
WGC_ENTRY(skinny_wg_1x128_c2, 1, 128, 4, 2, 2)
WGC_ENTRY(skinny_wg_2x128_c2, 2, 128, 4, 1, 2)
WGC_ENTRY(skinny_wg_1x64_c4, 1, 64, 4, 3, 4)
WGC_ENTRY(skinny_wg_2x64_c4, 2, 64, 4, 2, 4)
WGC_ENTRY(skinny_wg_1x128_c4, 1, 128, 4, 2, 4)
WGC_ENTRY(skinny_wg_2x128_c4, 2, 128, 4, 1, 4)
#define WGC_SPLIT_ENTRY(NAME, WG, BM, S, MINB, CL)                                                  \
    extern "C" __global__ void __launch_bounds__(128 * WG, MINB) __cluster_dims__(CL, 1, 1)        \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, float* part, int ld, EPI_PARAMS) {    \
        wg_body<WG, BM, S, true, CL>(x, w, M, K, EPI_MAKE, part, ld);                               \
    }
WGC_SPLIT_ENTRY(skinny_wgs_1x64_c2, 1, 64, 4, 3, 2)
WGC_SPLIT_ENTRY(skinny_wgs_2x128_c2, 2, 128, 4, 1, 2)
WGC_SPLIT_ENTRY(skinny_wgs_1x64_c4, 1, 64, 4, 3, 4)
WGC_SPLIT_ENTRY(skinny_wgs_2x128_c4, 2, 128, 4, 1, 4)
