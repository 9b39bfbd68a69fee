#line 1 "skinny_gemm.cu"
// Decode-shaped GEMM: Y[m, n] = sum_k X[m, k] * W[n, k] for a few rows m (at most 64 per launch),
// W bf16 [N, K] row-major (the weight as stored), X bf16 [M, K], Y f32 [M, N].
//
// A block of 8 warps owns 16 weight rows and splits K between its warps in fixed 32-wide chunks;
// each lane streams 16-byte pieces of W straight into tensor-core fragments (m16n8k16). The dot
// product does not care in which order the k indices of one chunk meet, as long as W and X use
// the same one, so each lane's 8 consecutive k serve as its fragment slots for two MMAs, with no
// shared-memory staging. Every row of X is reduced in the same order whatever the row count
// (rows beyond M are zeros in other columns of the same MMA), so a decode row gives the same bits
// alone or in a batch, and the same as a verify row. Requires K % 8 == 0.

#define SK_WARPS 8
#define SK_UNROLL 4

template <int NT>
__device__ __forceinline__ void skinny_body(float* __restrict__ y, const bf16_t* __restrict__ x,
                                            const bf16_t* __restrict__ w, int M, int N, int K) {
    __shared__ float red[SK_WARPS][NT][4][32];
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16;
    const int ra = row0 + g, rb = row0 + g + 8;
    const bool ra_ok = ra < N, rb_ok = rb < N;
    const bf16_t* wa = w + (u64)(ra_ok ? ra : 0) * K;
    const bf16_t* wb = w + (u64)(rb_ok ? rb : 0) * K;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int chunks = (K + 31) / 32;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int c0 = warp * SK_UNROLL; c0 < chunks; c0 += SK_WARPS * SK_UNROLL) {
        uint4 va[SK_UNROLL], vb[SK_UNROLL], vx[SK_UNROLL][NT];
#pragma unroll
        for (int u = 0; u < SK_UNROLL; ++u) {
            const int k = (c0 + u) * 32 + t * 8;
            const bool kin = (c0 + u) < chunks && k < K;
            va[u] = (kin && ra_ok) ? ld_stream_16(wa + k) : zero;
            vb[u] = (kin && rb_ok) ? ld_stream_16(wb + k) : zero;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int m = j * 8 + g;
                vx[u][j] = (kin && m < M) ? ld_16(x + (u64)m * K + k) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; ++u) {
            const u32 a0[4] = {va[u].x, vb[u].x, va[u].y, vb[u].y};
            const u32 a1[4] = {va[u].z, vb[u].z, va[u].w, vb[u].w};
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const u32 b0[2] = {vx[u][j].x, vx[u][j].y};
                const u32 b1[2] = {vx[u][j].z, vx[u][j].w};
                mma_bf16_16816(acc[j], a0, b0);
                mma_bf16_16816(acc[j], a1, b1);
            }
        }
    }
    // Warps are summed in index order (common.cuh).
    skinny_warp_sums<NT, SK_WARPS>(red, acc, y, row0, M, N, [](float s, int, int) { return s; });
}

extern "C" __global__ void __launch_bounds__(256) skinny_gemm_8(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K) {
    skinny_body<1>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256) skinny_gemm_16(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K) {
    skinny_body<2>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256) skinny_gemm_32(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K) {
    skinny_body<4>(y, x, w, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256) skinny_gemm_64(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K) {
    skinny_body<8>(y, x, w, M, N, K);
}

// Ring kernels (skinny_pipe_*, skinny_deep_*, skinny_wide*_*): the same block shape, but each
// warp streams its weight chunks through a private ring of S stages in shared memory with
// cp.async, so S - 1 chunks (1 KB each per warp) stay in flight without holding registers; the
// plain kernel above keeps only the two or three loads the compiler schedules ahead. Lane (g, t)
// copies and later reads back only its own 2 x 16 bytes of each stage, so the ring needs no
// barrier inside the loop. Chunk c (32 k) belongs to warp c % W; a warp accumulates its chunks in
// order and the warps are summed in index order, an order fixed by K and W alone: each row's
// bits do not depend on M. XP: x for the next chunk is loaded one chunk ahead (registers for
// latency); without it, just before use (fewer registers, for the many-row kernels). RT: 16-row
// weight tiles per CTA, each x fragment feeding the MMAs of all of them (the order per output is
// unchanged). Dynamic shared memory: W * S * RT KB (the warp sums reuse it after the loop).
//
// FUSED (the skinny_fused* entries): tile T's rows and what becomes of its sums are the Epi's
// (skinny_epilogue.cu), each thread finishing tile rows r and r + 8 of one token; NORM: x is
// built from the residual stream and the norm weight as rmsnorm_residual would have written
// it (norm_prologue, norm_piece; at most 8 rows). Neither changes which warp sums which chunk
// or the order of the warp sums: the bits are those of the entries without them.

template <int NT, int S, int W, bool XP, int RT, bool FUSED = false, bool NORM = false>
__device__ __forceinline__ void skinny_pipe_body(float* __restrict__ y, const bf16_t* __restrict__ x,
                                                 const bf16_t* __restrict__ w, int M, int N, int K,
                                                 const Epi& ep = Epi{}, const NormIn& nin = NormIn{}) {
    extern __shared__ __align__(16) unsigned char sp_smem[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16 * RT;
    // This lane's weight rows: g and g + 8 of each of the RT 16-row tiles.
    const bf16_t* wr[2 * RT];
    bool rok[2 * RT];
#pragma unroll
    for (int r = 0; r < 2 * RT; ++r) {
        if constexpr (FUSED) {
            const int row = epi_row(ep, blockIdx.x * RT + (r >> 1), (r & 1) * 8 + g);
            rok[r] = row >= 0;
            wr[r] = w + (u64)(rok[r] ? row : 0) * K;
        } else {
            const int row = row0 + (r >> 1) * 16 + (r & 1) * 8 + g;
            rok[r] = row < N;
            wr[r] = w + (u64)(rok[r] ? row : 0) * K;
        }
    }
    // Stage s of this warp: 32 pieces of each of the 2 * RT rows (16-byte strides, no conflicts).
    uint4* ring = reinterpret_cast<uint4*>(sp_smem) + warp * S * 64 * RT;
    const int chunks = (K + 31) / 32;
    const int n_my = chunks > warp ? (chunks - warp + W - 1) / W : 0;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

    // Copies this warp's i-th chunk into its stage; always commits a group (maybe empty) so the
    // wait counts below hold at the tail.
    auto issue = [&](int i) {
        if (i < n_my) {
            const int k = (warp + i * W) * 32 + t * 8;
            const bool kin = k < K;
            uint4* st = ring + (i % S) * 64 * RT;
#pragma unroll
            for (int r = 0; r < 2 * RT; ++r)
                cp_async_16(st + r * 32 + lane, wr[r] + (kin ? k : 0), (kin && rok[r]) ? 16 : 0);
        }
        cp_async_commit();
    };
    // NORM: 32 floats of block_sum scratch and each row's inverse norm, past the ring.
    float* nsh = reinterpret_cast<float*>(sp_smem + W * S * RT * 1024);
    auto load_x = [&](int i, uint4* vx) {
        const int k = (warp + i * W) * 32 + t * 8;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int m = j * 8 + g;
            if constexpr (NORM) {
                vx[j] = (i < n_my && k < K && m < M) ? norm_piece(nin, m, K, k, nsh[32 + m]) : zero;
            } else {
                vx[j] = (i < n_my && k < K && m < M) ? ld_16(x + (u64)m * K + k) : zero;
            }
        }
    };

#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(i);
    // Started as a dependent launch (Gpu::launch_with): the weights above stream in while the
    // previous kernel finishes; x and y belong to it until here.
    pdl_wait();
    if constexpr (NORM) norm_prologue(nin, M, K, nsh);
    float acc[RT][NT][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[rt][j][0] = acc[rt][j][1] = acc[rt][j][2] = acc[rt][j][3] = 0.f;
    uint4 vx[NT], vn[NT];
    if (XP) load_x(0, vx);
    for (int i = 0; i < n_my; ++i) {
        cp_async_wait<S - 2>();  // this lane's copies of chunk i have landed
        const uint4* st = ring + (i % S) * 64 * RT;
        uint4 va[RT], vb[RT];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
            va[rt] = st[2 * rt * 32 + lane];
            vb[rt] = st[(2 * rt + 1) * 32 + lane];
        }
        issue(i + S - 1);  // into the stage read one iteration ago
        if (XP) load_x(i + 1, vn);
        else load_x(i, vx);
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
            const u32 a0[4] = {va[rt].x, vb[rt].x, va[rt].y, vb[rt].y};
            const u32 a1[4] = {va[rt].z, vb[rt].z, va[rt].w, vb[rt].w};
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const u32 b0[2] = {vx[j].x, vx[j].y};
                const u32 b1[2] = {vx[j].z, vx[j].w};
                mma_bf16_16816(acc[rt][j], a0, b0);
                mma_bf16_16816(acc[rt][j], a1, b1);
            }
        }
        if (XP) {
#pragma unroll
            for (int j = 0; j < NT; ++j) vx[j] = vn[j];
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(sp_smem);  // [W][RT][NT][4][32]
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q)
                red[(((warp * RT + rt) * NT + j) * 4 + q) * 32 + lane] = acc[rt][j][q];
    __syncthreads();
    if constexpr (FUSED) {
        // Fragment elements q and q + 2 (tile rows r and r + 8, one token) in one thread.
        for (int e2 = threadIdx.x; e2 < RT * NT * 2 * 32; e2 += blockDim.x) {
            const int rt = e2 / (NT * 64), j = (e2 / 64) % NT, qh = (e2 / 32) & 1, l = e2 % 32;
            const int lo_at = ((rt * NT + j) * 4 + qh) * 32 + l, hi_at = lo_at + 64;
            float lo = 0.f, hi = 0.f;
#pragma unroll
            for (int wi = 0; wi < W; ++wi) lo += red[wi * RT * NT * 128 + lo_at];
#pragma unroll
            for (int wi = 0; wi < W; ++wi) hi += red[wi * RT * NT * 128 + hi_at];
            const int m = j * 8 + (l & 3) * 2 + qh;
            if (m < M) epi_pair(ep, blockIdx.x * RT + rt, l >> 2, m, lo, hi);
        }
        return;
    }
    for (int e = threadIdx.x; e < RT * NT * 4 * 32; e += blockDim.x) {
        const int rt = e / (NT * 128), j = (e / 128) % NT, q = (e / 32) % 4, l = e % 32;
        float s = 0.f;
#pragma unroll
        for (int wi = 0; wi < W; ++wi) s += red[wi * RT * NT * 128 + e];
        const int n = row0 + rt * 16 + (l >> 2) + ((q & 2) ? 8 : 0);
        const int m = j * 8 + (l & 3) * 2 + (q & 1);
        if (n < N && m < M) y[(u64)m * N + n] = s;
    }
}

// Stage counts: W * RT KB of ring per stage and block; the warp sums (W * RT * NT * 512 bytes)
// must fit in the ring. src/skinny.rs reads the entries and their shapes from these lines.
#define SP_ENTRY(NAME, NT, S, W, XP, MINB, RT)                                                       \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB) NAME(float* y, const bf16_t* x,      \
                                                                    const bf16_t* w, int M, int N, int K) { \
        skinny_pipe_body<NT, S, W, XP, RT>(y, x, w, M, N, K);                                        \
    }
// skinny_pipe_*: 8 warps (8 streams over K).
SP_ENTRY(skinny_pipe_8, 1, 8, 8, true, 3, 1)
SP_ENTRY(skinny_pipe_16, 2, 8, 8, true, 3, 1)
SP_ENTRY(skinny_pipe_32, 4, 6, 8, true, 2, 1)
SP_ENTRY(skinny_pipe_64, 8, 4, 8, false, 2, 1)
// skinny_deep_*: the 8-warp kernel with a 14-stage ring (112 KB, two CTAs per SM) for long K,
// where 256 CTAs of a 4096-row weight keep too few bytes in flight with 8 stages. The stage
// count does not change which warp sums which chunk: the bits equal skinny_pipe_*'s.
SP_ENTRY(skinny_deep_8, 1, 14, 8, true, 2, 1)
SP_ENTRY(skinny_deep_16, 2, 14, 8, true, 2, 1)
// skinny_wide*_*: 16 warps (16 streams over K), the default family: twice the streams per SM,
// which is what a weight read at the bandwidth limit needs (docs/CUDA.md). The ring depth and the
// CTAs per SM differ between entries, the bits do not: skinny_wide_8 (7 stages, 2 CTAs per SM)
// for weights of at most two CTAs per SM (4096 rows on an H200), skinny_wide4_8 (4 stages, 3 per
// SM) for larger ones. skinny_wide_64 (one CTA per SM by registers) takes two weight tiles per
// CTA: each x fragment then serves 32 weight rows, which halves the x re-reads that bound 64 rows.
SP_ENTRY(skinny_wide_8, 1, 7, 16, true, 2, 1)
SP_ENTRY(skinny_wide4_8, 1, 4, 16, true, 3, 1)
SP_ENTRY(skinny_wide_16, 2, 4, 16, true, 2, 1)
SP_ENTRY(skinny_wide_32, 4, 4, 16, false, 2, 1)
SP_ENTRY(skinny_wide_64, 8, 4, 16, false, 1, 2)

// skinny_fused*: the 16-warp entries with an epilogue (and NORM, a norm prologue), the same
// order as skinny_wide*: a fused launch gives the bits of the plain one and the kernels after
// it. Shared memory: W * S * RT KB, and 256 bytes more with the prologue (NORM = true).
#define SF_ENTRY(NAME, NT, S, W, XP, MINB, RT, NORM)                                                \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                     \
        NAME(const bf16_t* x, const bf16_t* w, int M, int K, EPI_PARAMS, const float* norm_x,       \
             const bf16_t* norm_w, float norm_eps, int norm_nb) {                                   \
        skinny_pipe_body<NT, S, W, XP, RT, true, NORM>(y, x, w, M, 0, K, EPI_MAKE,                  \
                                                       NormIn{norm_x, norm_w, norm_eps, norm_nb}); \
    }
SF_ENTRY(skinny_fused_8, 1, 7, 16, true, 2, 1, false)
SF_ENTRY(skinny_fused4_8, 1, 4, 16, true, 3, 1, false)
SF_ENTRY(skinny_fused_16, 2, 4, 16, true, 2, 1, false)
SF_ENTRY(skinny_fused_32, 4, 4, 16, false, 2, 1, false)
SF_ENTRY(skinny_fused_64, 8, 4, 16, false, 1, 2, false)
SF_ENTRY(skinny_fusedn_8, 1, 7, 16, true, 2, 1, true)
SF_ENTRY(skinny_fusedn4_8, 1, 4, 16, true, 3, 1, true)
