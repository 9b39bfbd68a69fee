#line 1 "fp8.cu"
// fp8 rows (kiln_formats::fp8, `--quantize fp8`): each row's scale is its largest magnitude over
// 448, E4M3's largest finite value (1 for a row of zeros), and each value is divided by the scale
// (one IEEE division, as the host's quantize_row) and rounded once to E4M3, to nearest even and
// saturating. The fp8 GEMM (gemm_fp8.rs) multiplies such rows and applies both scales after.
// Built for compute capability 8.9 and later (the E4M3 conversion instruction).

// (lo, hi) rounded to E4M3; lo in bits 0..7.
__device__ __forceinline__ unsigned short e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// The row of `cols` values (a multiple of 8) at xr, quantised by the whole block: its scale to
// *scale and its bytes to qr. A NaN anywhere makes the scale NaN, as on the host. Every kernel
// that quantises rows calls this, so their bits are the same whatever the block size (the
// largest magnitude is exact in any order, and each value is converted alone).
__device__ __forceinline__ void fp8_quantize_row(const store_t* __restrict__ xr, unsigned char* __restrict__ qr,
                                                 float* __restrict__ scale, int cols) {
    __shared__ float red[32];
    float m = 0.f;
    int nan = 0;
    for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
        float v[8];
        from_store_vec<8>(xr + c, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            nan |= v[i] != v[i];
            m = fmaxf(m, fabsf(v[i]));
        }
    }
    nan = __syncthreads_or(nan);
    m = warp_max(m);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (warp == 0) {
        float t = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.f;
        t = warp_max(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    const float amax = nan ? __int_as_float(0x7fc00000) : red[0];
    const float s = amax == 0.f ? 1.f : amax / 448.f;
    if (threadIdx.x == 0) *scale = s;
    for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
        float v[8];
        from_store_vec<8>(xr + c, v);
        uint2 out;
        out.x = (u32)e4m3x2(v[0] / s, v[1] / s) | ((u32)e4m3x2(v[2] / s, v[3] / s) << 16);
        out.y = (u32)e4m3x2(v[4] / s, v[5] / s) | ((u32)e4m3x2(v[6] / s, v[7] / s) << 16);
        *reinterpret_cast<uint2*>(qr + c) = out;
    }
}

// One block per row of `cols` values at x + row * x_stride: the row's scale to scale[row] and its
// bytes to q + row * cols.
extern "C" __global__ void fp8_quantize_rows(const store_t* __restrict__ x, unsigned char* __restrict__ q,
                                             float* __restrict__ scale, int cols, long long x_stride) {
    pdl_enter();
    const long long r = blockIdx.x;
    fp8_quantize_row(x + r * x_stride, q + r * cols, scale + r, cols);
}

// The fused producers of an fp8 GEMM's input (KILN_FP8_FUSE): each writes its stored row as
// the kernel it stands for would, then, after the block's barrier (its writes to global memory
// are then seen by every thread of the block), quantises that row as fp8_quantize_rows would.
// One launch where there were two, the same bits in both outputs.

// rmsnorm_residual (norm_rows.cuh), then row t of out quantised to q and scale (hidden values a row).
extern "C" __global__ void rmsnorm_residual_fp8(float* __restrict__ x, const float* __restrict__ delta,
                                                const store_t* __restrict__ w, store_t* __restrict__ out,
                                                unsigned char* __restrict__ q, float* __restrict__ scale,
                                                int hidden, float eps) {
    pdl_trigger();
    rmsnorm_residual_row(x, delta, w, out, hidden, eps);
    __syncthreads();
    const long long t = blockIdx.x;
    fp8_quantize_row(out + t * hidden, q + t * hidden, scale + t, hidden);
}

// gu[t] = [gate (inter) | up (inter)]; out[t, i] = store(act(gate) * up) as swiglu (act 0) or
// geglu (act 1) compute it, then the row quantised to q and scale. One block per row; inter is
// a multiple of 8 (an fp8 row's), so the row is read four values a load.
extern "C" __global__ void gated_fp8(const float* __restrict__ gu, store_t* __restrict__ out,
                                     unsigned char* __restrict__ q, float* __restrict__ scale, int inter,
                                     int act) {
    pdl_enter();
    const long long t = blockIdx.x;
    const float* g = gu + t * 2 * inter;
    const float* u = g + inter;
    store_t* o = out + t * inter;
    auto f = [act](float gv, float uv) { return act == 1 ? gelu_tanh(gv) * uv : silu_mul(gv, uv); };
    for (int i = threadIdx.x * 4; i < inter; i += blockDim.x * 4) {
        const float4 gv = *reinterpret_cast<const float4*>(g + i);
        const float4 uv = *reinterpret_cast<const float4*>(u + i);
        to_store_x4(o + i, f(gv.x, uv.x), f(gv.y, uv.y), f(gv.z, uv.z), f(gv.w, uv.w));
    }
    __syncthreads();
    fp8_quantize_row(o, q + t * inter, scale + t, inter);
}

// y[row, col] *= a[row] * w[col] for `rows` rows of `cols` f32 values: the two scales of an fp8
// product whose GEMM ran with unit scales (KILN_FP8_SCALES=kernel), applied as cuBLASLt's outer-
// vector scaling would be, the two factors multiplied first.
extern "C" __global__ void fp8_apply_scales(float* __restrict__ y, const float* __restrict__ a,
                                            const float* __restrict__ w, int rows, int cols) {
    pdl_enter();
    const long long n = (long long)rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / cols), c = (int)(i % cols);
        y[i] = y[i] * (a[r] * w[c]);
    }
}

// Decode rows of an fp8 product (KILN_FP8_SKINNY): Y[m, n] (f32) = (sum_k Xq[m, k] Wq[n, k]) *
// (xs[m] * ws[n]) for M rows (at most 8 NT), Xq and Wq E4M3 rows of K bytes (K % 16 == 0), their
// scales f32 — the fp8 GEMM's product, as skinny_gemm.cu's decode kernel is bf16's: a block of 8
// warps owns 16 weight rows and splits K between its warps in fixed 64-wide chunks; each lane
// streams 16 bytes of W straight into the fragments of two m16n8k32 MMAs (E4M3, f32 accumulate),
// the k order inside a chunk the same for W and X. Warp w owns chunks w * SKF_SPAN .. + SKF_SPAN
// - 1 of every pass of SKF_WARPS * SKF_SPAN, whatever an entry's U (the chunks it loads at once),
// so a row's sums run in an order fixed by K alone (a warp's chunks in order, the warps in index
// order): its bits do not depend on M or on the other rows, and a decode row alone, in a batch
// or as a verify row gives the same bits.
#define SKF_WARPS 8
#define SKF_SPAN 8

// D += A B on the fp8 tensor cores: A 16x32 (row), B 32x8 (col), E4M3 in, f32 accumulate.
__device__ __forceinline__ void mma_e4m3_16832(float* d, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int NT, int U>
__device__ __forceinline__ void skinny_fp8_body(float* __restrict__ y, const unsigned char* __restrict__ x,
                                                const float* __restrict__ xs, const unsigned char* __restrict__ w,
                                                const float* __restrict__ ws, int M, int N, int K) {
    __shared__ float red[SKF_WARPS][NT][4][32];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16;
    const int ra = row0 + g, rb = row0 + g + 8;
    const bool ra_ok = ra < N, rb_ok = rb < N;
    const unsigned char* wa = w + (u64)(ra_ok ? ra : 0) * K;
    const unsigned char* wb = w + (u64)(rb_ok ? rb : 0) * K;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int chunks = (K + 63) / 64;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    static_assert(SKF_SPAN % U == 0, "a warp's chunks of a pass in whole loads");
    uint4 va[U], vb[U];
    auto load_w = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = (c0 + u) * 64 + t * 16;
            const bool kin = (c0 + u) < chunks && k < K;
            va[u] = (kin && ra_ok) ? ld_weight_16_here(wa + k) : zero;
            vb[u] = (kin && rb_ok) ? ld_weight_16_here(wb + k) : zero;
        }
    };
    // The weights are never written: a warp's first chunks (all of its first pass's for U = 8,
    // the whole weight where K <= 4096) stream in while the kernel before ends; x and y belong
    // to it until pdl_wait.
    const int mine = warp * SKF_SPAN;
    load_w(mine);
    pdl_wait();
    for (int pass = mine; pass < chunks; pass += SKF_WARPS * SKF_SPAN) {
        // The pass's chunks U at a time, in order.
        for (int c0 = pass; c0 < pass + SKF_SPAN && c0 < chunks; c0 += U) {
            if (c0 != mine) load_w(c0);
            uint4 vx[U][NT];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = (c0 + u) * 64 + t * 16;
                const bool kin = (c0 + u) < chunks && k < K;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const int m = j * 8 + g;
                    vx[u][j] = (kin && m < M) ? ld_16(x + (u64)m * K + k) : zero;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const u32 a0[4] = {va[u].x, vb[u].x, va[u].y, vb[u].y};
                const u32 a1[4] = {va[u].z, vb[u].z, va[u].w, vb[u].w};
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const u32 b0[2] = {vx[u][j].x, vx[u][j].y};
                    const u32 b1[2] = {vx[u][j].z, vx[u][j].w};
                    mma_e4m3_16832(acc[j], a0, b0);
                    mma_e4m3_16832(acc[j], a1, b1);
                }
            }
        }
    }
    // Warps are summed in index order (common.cuh), then the two scales applied as the fp8 GEMM
    // applies them (the sum times their product).
    skinny_warp_sums<NT, SKF_WARPS>(red, acc, y, row0, M, N,
                                    [&](float s, int m, int n) { return s * (xs[m] * ws[n]); });
}

extern "C" __global__ void __launch_bounds__(256) skinny_fp8_8(float* y, const unsigned char* x, const float* xs, const unsigned char* w, const float* ws, int M, int N, int K) {
    skinny_fp8_body<1, 8>(y, x, xs, w, ws, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256) skinny_fp8_16(float* y, const unsigned char* x, const float* xs, const unsigned char* w, const float* ws, int M, int N, int K) {
    skinny_fp8_body<2, 8>(y, x, xs, w, ws, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256) skinny_fp8_32(float* y, const unsigned char* x, const float* xs, const unsigned char* w, const float* ws, int M, int N, int K) {
    skinny_fp8_body<4, 4>(y, x, xs, w, ws, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256) skinny_fp8_64(float* y, const unsigned char* x, const float* xs, const unsigned char* w, const float* ws, int M, int N, int K) {
    skinny_fp8_body<8, 2>(y, x, xs, w, ws, M, N, K);
}
