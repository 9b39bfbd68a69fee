#line 1 "norm_rows.cuh"
// RMSNorm's row pieces, written once for the modules that norm rows: elementwise.cu's kernels
// and fp8.cu's norm that also quantises its output (concatenated before each, kernel_sources.rs).

// The norm weight's first NORM_WPRE elements per thread (all of them for hidden <= 8 x block, the
// launch's rule): loaded before pdl_wait, so when started as a dependent launch the weight comes
// in while the previous kernel ends (it never changes; ld_store_here, common.cuh); the rest are
// read when used.
#define NORM_WPRE 8

__device__ __forceinline__ void norm_weight_prefetch(const store_t* __restrict__ w, int hidden,
                                                     store_t (&wv)[NORM_WPRE]) {
#pragma unroll
    for (int j = 0; j < NORM_WPRE; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        wv[j] = i < hidden ? ld_store_here(w + i) : (store_t)0;
    }
}

// o[i] = store(v(j, i) * inv * w[i]) over the row: the prefetched weights first, then the
// rest. j is the value's place among the thread's first NORM_WPRE (known when unrolled, so a
// register array can be read with it), NORM_WPRE for the rest.
template <typename V>
__device__ __forceinline__ void norm_store(store_t* __restrict__ o, int hidden, float inv,
                                           const store_t (&wv)[NORM_WPRE], const store_t* __restrict__ w, V v) {
#pragma unroll
    for (int j = 0; j < NORM_WPRE; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < hidden) o[i] = to_store(v(j, i) * inv * from_store(wv[j]));
    }
    for (int i = threadIdx.x + NORM_WPRE * blockDim.x; i < hidden; i += blockDim.x)
        o[i] = to_store(v(NORM_WPRE, i) * inv * from_store(w[i]));
}

// x[t] += delta[t] (when delta is not null), then out[t] = store(x[t] * rsqrt(mean(x^2) + eps) * w)
// for row t = blockIdx.x, from the weight's prefetch on (the caller triggers its dependents).
// A thread's first NORM_WPRE values of the row (all of them for hidden <= 8 x block) are loaded
// together into registers and then summed in index order, as the loop after them sums the
// rest: a loop that loaded each value and added it before the next load waited on every load
// (4.6 us a row at batch 1, 1.6 TB/s over a 2048-row chunk; H200, 2026-12-03).
__device__ __forceinline__ void rmsnorm_residual_row(float* __restrict__ x, const float* __restrict__ delta,
                                                     const store_t* __restrict__ w, store_t* __restrict__ out,
                                                     int hidden, float eps) {
    store_t wv[NORM_WPRE];
    norm_weight_prefetch(w, hidden, wv);
    pdl_wait();
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    float* xr = x + (u64)t * hidden;
    const float* dr = delta ? delta + (u64)t * hidden : nullptr;
    float xv[NORM_WPRE], dv[NORM_WPRE];
#pragma unroll
    for (int j = 0; j < NORM_WPRE; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        xv[j] = i < hidden ? xr[i] : 0.f;
        dv[j] = dr && i < hidden ? dr[i] : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < NORM_WPRE; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < hidden) {
            if (dr) {
                xv[j] += dv[j];
                xr[i] = xv[j];
            }
            ss += xv[j] * xv[j];
        }
    }
    for (int i = threadIdx.x + NORM_WPRE * blockDim.x; i < hidden; i += blockDim.x) {
        float v = xr[i];
        if (dr) {
            v += dr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / (float)hidden + eps);
    norm_store(out + (u64)t * hidden, hidden, inv, wv, w,
               [&](int j, int i) { return j < NORM_WPRE ? xv[j] : xr[i]; });
}

