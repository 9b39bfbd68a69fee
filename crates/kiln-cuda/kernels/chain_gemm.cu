#line 1 "chain_gemm.cu"
// Decode GEMM in the prefill GEMM's order: y[m, n] = sum_k x[m, k] * w[n, k], x bf16 [M, K], w bf16
// [N, K] (the weight as stored), y f32 [M, N]. Each output is one chain of m16n8k16 tensor-core
// products over k in ascending 16-wide groups, the accumulator carried from each group into the
// next. That is the order of cuBLAS's split-K-free Hopper GEMMs, the algorithms the prefill pins
// (scripts/probes/gemm_order.py found it; contract_chain checks it against the pinned GEMM on
// every run), so a row gets here the bits a prefill step's GEMM gives it, whatever the row count.
//
// A warp owns 16 weight rows and streams them, with the same 64 k of x's rows, through its own
// ring of shared-memory stages (cp.async, 16-byte chunks XOR-swizzled by row so that ldmatrix
// reads them without bank conflicts), and reads a stage's fragments one stage ahead of its
// products, so that the chain waits on the tensor cores only. The weights do not depend on the
// kernel before: their first stages are on their way before pdl_wait. Requires k % 8 == 0 and
// 16-byte aligned rows.

#define CG_BK CHAIN_BK
// A stage: 16 weight rows, then NT * 8 rows of x, each 64 k.
#define CG_STAGE(NT) ((16 + 8 * (NT)) * CG_BK)

template <int NT, int WARPS, int STAGES>
__device__ __forceinline__ void chain_body(float* __restrict__ y, const bf16_t* __restrict__ x,
                                           const bf16_t* __restrict__ w, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char cg_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = (blockIdx.x * WARPS + warp) * 16;
    pdl_trigger();
    if (n0 >= N) {
        pdl_wait();
        return;
    }
    bf16_t* ring = reinterpret_cast<bf16_t*>(cg_smem) + warp * STAGES * CG_STAGE(NT);
    const int nk = (K + CG_BK - 1) / CG_BK;
    // Stage kt (chain_copy.cuh's layout): the weight's 16 rows, then x's.
    bool xready = false;
    auto issue_x = [&](int kt) {
        bf16_t* s = ring + (kt % STAGES) * CG_STAGE(NT) + 16 * CG_BK;
#pragma unroll
        for (int i = 0; i < 2 * NT; ++i) {
            const int idx = lane + 32 * i, r = idx >> 3;
            chain_copy_chunk(s, r, x, r, M, K, idx & 7, kt * CG_BK);
        }
    };
    auto issue = [&](int kt) {
        if (kt < nk) {
            bf16_t* s = ring + (kt % STAGES) * CG_STAGE(NT);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int idx = lane + 32 * i, r = idx >> 3;
                chain_copy_chunk(s, r, w, n0 + r, N, K, idx & 7, kt * CG_BK);
            }
            // x's rows need pdl_wait: the first stages' are sent after it (xready).
            if (xready) issue_x(kt);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    pdl_wait();
    // The first stages' x, a group each: group S - 1 + s then holds stage s's x, and stage
    // s's weights are in an earlier group, so waiting for the first S - 1 + s + 1 groups (all but
    // S - 2 of those committed when stage s is read) covers the stage, as for the later stages
    // (weights and x in group S - 1 + s).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) issue_x(s);
        cp_async_commit();
    }
    xready = true;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int q = lane >> 3, ar = (lane & 7) + ((q & 1) << 3), ac = q >> 1;
    // A stage's fragments, read one stage ahead of its products: A's four registers by one
    // ldmatrix.x4 a 16-wide group (lane l addresses matrix l / 8: rows 0-7 or 8-15 by bit 0, k 0-7
    // or 8-15 by bit 1; row l % 8 of it); B's by one a pair of groups and 8 rows of x (lane l
    // addresses row l % 8, k chunk l / 8 of the pair's four).
    u32 a[2][CG_BK / 16][4], b[2][CG_BK / 16][NT][2];
    auto fragments = [&](int kt, u32 (&af)[CG_BK / 16][4], u32 (&bf)[CG_BK / 16][NT][2]) {
        cp_async_wait<STAGES - 2>();
        __syncwarp();
        issue(kt + STAGES - 1);
        const bf16_t* s = ring + (kt % STAGES) * CG_STAGE(NT);
#pragma unroll
        for (int kk = 0; kk < CG_BK / 16; ++kk)
            ldmatrix_x4(af[kk], s + ar * CG_BK + (((2 * kk + ac) ^ (ar & 7)) << 3));
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int kp = 0; kp < CG_BK / 32; ++kp) {
                const int r = j * 8 + (lane & 7);
                u32 q4[4];
                ldmatrix_x4(q4, s + (16 + r) * CG_BK + (((4 * kp + (lane >> 3)) ^ (r & 7)) << 3));
                bf[2 * kp][j][0] = q4[0];
                bf[2 * kp][j][1] = q4[1];
                bf[2 * kp + 1][j][0] = q4[2];
                bf[2 * kp + 1][j][1] = q4[3];
            }
    };
    auto products = [&](const u32 (&af)[CG_BK / 16][4], const u32 (&bf)[CG_BK / 16][NT][2]) {
#pragma unroll
        for (int kk = 0; kk < CG_BK / 16; ++kk)
#pragma unroll
            for (int j = 0; j < NT; ++j) mma_bf16_16816(acc[j], af[kk], bf[kk][j]);
    };
    // Two stages a turn, so that each buffer of fragments has a fixed place in registers.
    fragments(0, a[0], b[0]);
    for (int kt = 0; kt < nk; kt += 2) {
        if (kt + 1 < nk) fragments(kt + 1, a[1], b[1]);
        products(a[0], b[0]);
        if (kt + 1 >= nk) break;
        if (kt + 2 < nk) fragments(kt + 2, a[0], b[0]);
        products(a[1], b[1]);
    }
    cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int m = j * 8 + 2 * t, na = n0 + g, nb = n0 + g + 8;
        if (m < M && na < N) y[(u64)m * N + na] = acc[j][0];
        if (m + 1 < M && na < N) y[(u64)(m + 1) * N + na] = acc[j][1];
        if (m < M && nb < N) y[(u64)m * N + nb] = acc[j][2];
        if (m + 1 < M && nb < N) y[(u64)(m + 1) * N + nb] = acc[j][3];
    }
}

// NT 8-row groups of x (up to 8 * NT rows a launch), WARPS warps (16 weight rows each) a CTA,
// STAGES stages of (2 + NT) KB a warp.
#define CG_ENTRY(NAME, NT, WARPS, STAGES)                                                             \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                          \
        NAME(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K) {                       \
        chain_body<NT, WARPS, STAGES>(y, x, w, M, N, K);                                              \
    }

CG_ENTRY(chain_gemm_1x1, 1, 1, 16)
CG_ENTRY(chain_gemm_1x2, 1, 2, 16)
CG_ENTRY(chain_gemm_1x4, 1, 4, 12)
CG_ENTRY(chain_gemm_2x4, 2, 4, 8)
CG_ENTRY(chain_gemm_4x4, 4, 4, 8)
