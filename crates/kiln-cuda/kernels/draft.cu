// A draft model that reads its target (Gemma 4's assistant): the input rows of its
// pre-projection and the mask of its ordered LM head (kiln_cpu's draft_head.rs on the host).

// out[r] = [store(e[r]), store(h[rows[r]])]: the target's scaled embedding of row r's token
// (f32, `b` wide) beside the hidden state the row starts from (`b` wide, row rows[r] of h), as
// transformers concatenates them. One block per row.
extern "C" __global__ void draft_concat(store_t* __restrict__ out, const float* __restrict__ e,
                                        const store_t* __restrict__ h, const int* __restrict__ rows,
                                        int b) {
    pdl_enter();
    const int r = blockIdx.x;
    const float* er = e + (u64)r * b;
    const store_t* hr = h + (u64)rows[r] * b;
    store_t* o = out + (u64)r * 2 * b;
    for (int i = threadIdx.x; i < b; i += blockDim.x) {
        o[i] = to_store(er[i]);
        o[b + i] = hr[i];
    }
}

// A total order on f32 as an int, the order of Rust's f32::total_cmp (-NaN < -inf < -0 < +0 <
// +inf < +NaN), so that a NaN score ranks as the host ranks it.
__device__ __forceinline__ int total_order_key(float v) {
    const int k = __float_as_int(v);
    return k ^ ((k >> 31) & 0x7fffffff);
}

// Gemma 4's ordered LM head, in place on the logits rows (one block per row): each row keeps the
// logits of the tokens of its `top_k` best centroids (highest score first, equal scores to the
// lower index); every other token gets the lowest kept logit minus one, so that it ranks below
// them all. scores: [rows, centroids]; owner[t]: the centroid whose share of the token ordering
// holds token t. Dynamic shared memory: `centroids` bytes.
extern "C" __global__ void keep_best_centroids(float* __restrict__ logits, const float* __restrict__ scores,
                                               const int* __restrict__ owner, int vocab, int centroids,
                                               int top_k) {
    pdl_enter();
    extern __shared__ unsigned char kept[];
    __shared__ int wk[32], wi[32];
    __shared__ float wl[32];
    __shared__ float lowest;
    float* row = logits + (u64)blockIdx.x * vocab;
    const float* s = scores + (u64)blockIdx.x * centroids;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int c = threadIdx.x; c < centroids; c += blockDim.x) kept[c] = 0;
    __syncthreads();
    for (int round = 0; round < top_k; ++round) {
        int bk = (int)0x80000000, bi = 0x7fffffff;
        for (int c = threadIdx.x; c < centroids; c += blockDim.x) {
            const int k = total_order_key(s[c]);
            if (!kept[c] && (k > bk || (k == bk && c < bi))) { bk = k; bi = c; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const int ok = __shfl_xor_sync(0xffffffffu, bk, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ok > bk || (ok == bk && oi < bi)) { bk = ok; bi = oi; }
        }
        if (lane == 0) { wk[warp] = bk; wi[warp] = bi; }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < warps; ++w)
                if (wk[w] > bk || (wk[w] == bk && wi[w] < bi)) { bk = wk[w]; bi = wi[w]; }
            kept[bi] = 1;
        }
        __syncthreads();
    }
    // fminf skips NaN as the host's f32::min does; the minimum is the same in any order.
    float lo = __int_as_float(0x7f800000);
    for (int t = threadIdx.x; t < vocab; t += blockDim.x)
        if (kept[owner[t]]) lo = fminf(lo, row[t]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    if (lane == 0) wl[warp] = lo;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < warps; ++w) lo = fminf(lo, wl[w]);
        lowest = __fsub_rn(lo, 1.f);
    }
    __syncthreads();
    const float masked = lowest;
    for (int t = threadIdx.x; t < vocab; t += blockDim.x)
        if (!kept[owner[t]]) row[t] = masked;
}
