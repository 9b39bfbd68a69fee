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
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) red[warp][j][q][lane] = acc[j][q];
    __syncthreads();
    // Warps are summed in index order; thread i of the block finishes fragment element i.
    for (int e = threadIdx.x; e < NT * 4 * 32; e += blockDim.x) {
        const int j = e / 128, q = (e / 32) % 4, l = e % 32;
        float s = 0.f;
#pragma unroll
        for (int wi = 0; wi < SK_WARPS; ++wi) s += red[wi][j][q][l];
        const int n = row0 + (l >> 2) + ((q & 2) ? 8 : 0);
        const int m = j * 8 + (l & 3) * 2 + (q & 1);
        if (n < N && m < M) y[(u64)m * N + n] = s;
    }
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
