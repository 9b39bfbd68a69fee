#line 1 "chain_wg.cu"
// chain_gemm.cu's order with wgmma (sm_90a): y[m, n] = sum_k x[m, k] * w[n, k], each output one
// chain of 16-wide tensor-core products over k in ascending order, the pinned prefill GEMM's
// order (contract_chain checks every entry against it). mma.sync waits for each product before
// the next can start (about 125 cycles each on the H200, 2026-12-04), so a weight of few rows
// (o, down) took 1.6-1.8x the skinny kernel's time at one row; wgmma products into one
// accumulator follow each other inside the tensor core without that wait.
//
// A CTA is one warpgroup: 64 weight rows (16 a warp, as chain_gemm.cu's warps) and up to 8 * NT
// rows of x. Each stage of its ring holds the 64 rows' 64 k (each warp copies its own 16) and
// x's 8 * NT rows (copied by the warpgroup), both in 128-byte rows XOR-swizzled by row: wgmma's
// 128-byte swizzle, K-major, from which it reads both operands. A stage's four products are
// issued together, and its slot is refilled only once wgmma_wait says they are done, a stage
// later. Requires k % 8 == 0.

#define CW_BK CHAIN_BK
// A stage: the 64 weight rows, then x's 8 * NT rows, 128 bytes each (1024-byte aligned).
#define CW_STAGE(NT) ((64 + 8 * (NT)) * CW_BK)

// D[64 x 8 NT] += A[64 x 16] * B[16 x 8 NT], both in shared memory, K-major.
template <int NT>
__device__ __forceinline__ void cw_mma(float (&d)[4 * NT], u64 da, u64 db) {
    if constexpr (NT == 1) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(da), "l"(db), "r"(1));
    } else if constexpr (NT == 2) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(da), "l"(db), "r"(1));
    } else {
        static_assert(NT == 4, "chain_wg takes 8, 16 or 32 rows of x");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "l"(da), "l"(db), "r"(1));
    }
}

template <int NT, int STAGES>
__device__ __forceinline__ void chain_wg_body(float* __restrict__ y, const bf16_t* __restrict__ x,
                                              const bf16_t* __restrict__ w, int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char cw_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 64, nw = n0 + 16 * warp;  // the CTA's and this warp's rows
    pdl_trigger();
    bf16_t* ring = reinterpret_cast<bf16_t*>(cw_smem);
    const int nk = (K + CW_BK - 1) / CW_BK;
    // Stage kt (chain_copy.cuh's layout): a warp copies its own 16 weight rows (4 chunks a lane);
    // the warpgroup copies x's rows.
    auto issue_x = [&](int kt) {
        bf16_t* s = ring + (kt % STAGES) * CW_STAGE(NT) + 64 * CW_BK;
        for (int idx = tid; idx < 64 * NT; idx += 128)
            chain_copy_chunk(s, idx >> 3, x, idx >> 3, M, K, idx & 7, kt * CW_BK);
    };
    bool xready = false;
    auto issue = [&](int kt) {
        if (kt < nk) {
            bf16_t* s = ring + (kt % STAGES) * CW_STAGE(NT) + 16 * warp * CW_BK;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int idx = lane + 32 * i, r = idx >> 3;
                chain_copy_chunk(s, r, w, nw + r, N, K, idx & 7, kt * CW_BK);
            }
            if (xready) issue_x(kt);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    pdl_wait();
    // The first stages' x after pdl_wait, a group each (chain_gemm.cu says why the waits hold).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) issue_x(s);
        cp_async_commit();
    }
    xready = true;
    float acc[4 * NT];
#pragma unroll
    for (int v = 0; v < 4 * NT; ++v) acc[v] = 0.f;
    const u32 ring_addr = smem_addr(ring);
    for (int kt = 0; kt < nk; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // every thread's copies of stage kt have landed
        fence_async_smem();
        const u32 sa = ring_addr + (u32)((kt % STAGES) * CW_STAGE(NT)) * 2, sx = sa + 64 * CW_BK * 2;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CW_BK / 16; ++kk)
            cw_mma<NT>(acc, gdesc(sa + 32 * kk, 16, 1024), gdesc(sx + 32 * kk, 16, 1024));
        wgmma_commit();
        // Stage kt - 1's products done (every warp's: the slot is the warpgroup's): its slot
        // takes stage kt + S - 1.
        wgmma_wait<1>();
        __syncthreads();
        issue(kt + STAGES - 1);
    }
    wgmma_wait<0>();
    reg_fence(acc);
    cp_async_wait<0>();
    // Accumulator 4 j + v: x row 8 j + 2 t + (v & 1), weight row g + 8 (v >> 1) of the warp's 16.
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            const int m = 8 * j + 2 * t + (v & 1), n = nw + g + 8 * (v >> 1);
            if (m < M && n < N) y[(u64)m * N + n] = acc[4 * j + v];
        }
}

// NT 8-row groups of x (up to 8 * NT rows a launch), STAGES stages of (8 + NT) KB.
#define CW_ENTRY(NAME, NT, STAGES)                                                                    \
    extern "C" __global__ void __launch_bounds__(128)                                                 \
        NAME(float* y, const bf16_t* x, const bf16_t* w, int M, int N, int K) {                       \
        chain_wg_body<NT, STAGES>(y, x, w, M, N, K);                                                  \
    }

CW_ENTRY(chain_wg_1, 1, 16)
CW_ENTRY(chain_wg_2, 2, 14)
CW_ENTRY(chain_wg_4, 4, 12)
