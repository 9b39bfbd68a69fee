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

// One block per row of `cols` values (a multiple of 8) at x + row * x_stride: the row's scale to
// scale[row] and its bytes to q + row * cols. A NaN anywhere makes the scale NaN, as on the host.
extern "C" __global__ void fp8_quantize_rows(const store_t* __restrict__ x, unsigned char* __restrict__ q,
                                             float* __restrict__ scale, int cols, long long x_stride) {
    pdl_enter();
    __shared__ float red[32];
    const store_t* xr = x + (long long)blockIdx.x * x_stride;
    unsigned char* qr = q + (long long)blockIdx.x * cols;
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
    // The largest magnitude, the same whichever thread saw it (max is exact in any order).
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
    if (threadIdx.x == 0) scale[blockIdx.x] = s;
    for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
        float v[8];
        from_store_vec<8>(xr + c, v);
        uint2 out;
        out.x = (u32)e4m3x2(v[0] / s, v[1] / s) | ((u32)e4m3x2(v[2] / s, v[3] / s) << 16);
        out.y = (u32)e4m3x2(v[4] / s, v[5] / s) | ((u32)e4m3x2(v[6] / s, v[7] / s) << 16);
        *reinterpret_cast<uint2*>(qr + c) = out;
    }
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
