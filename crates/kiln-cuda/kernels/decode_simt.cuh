#line 1 "decode_simt.cuh"
// The split rule and the merge of the CUDA-core decode modules (decode_attn.cu, decode_wide.cu),
// written once: a wide layer splits a sequence as the others do, and both merges fold the splits
// in the same order (concatenated before each, kernel_sources.rs).

#define DA_COMBINE_MAX_SPLITS 128

// Split s of a length-L sequence covers [s * span, min(L, (s + 1) * span)).
__device__ __forceinline__ void da_split(int len, int max_splits, int min_span, int* n_splits, int* span) {
    int n = (len + min_span - 1) / min_span;
    n = n < 1 ? 1 : (n > max_splits ? max_splits : n);
    int sp = (len + n - 1) / n;
    sp = (sp + 15) / 16 * 16;
    *span = sp;
    *n_splits = (len + sp - 1) / sp;
}

// out[row, h, :] = merge of the row's splits, in split order. Grid (n_q, rows), threads over the
// head's elements. The splits' (max, sum) pairs are staged in shared memory first, so the loop
// over splits reads only the partial outputs, whose loads are independent of one another.
__device__ __forceinline__ void da_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                           const int* __restrict__ positions, store_t* __restrict__ out, int n_q,
                                           int hd, int max_splits, int min_span) {
    __shared__ float sm_m[DA_COMBINE_MAX_SPLITS], sm_l[DA_COMBINE_MAX_SPLITS];
    const int h = blockIdx.x, row = blockIdx.y;
    int n_splits, span;
    da_split(positions[row] + 1, max_splits, min_span, &n_splits, &span);
    const u64 base = ((u64)row * n_q + h) * max_splits;
    for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
        sm_m[s] = part_ml[(base + s) * 2];
        sm_l[s] = part_ml[(base + s) * 2 + 1];
    }
    __syncthreads();
    float mm = KILN_NEG_INF;
    for (int s = 0; s < n_splits; ++s) mm = fmaxf(mm, sm_m[s]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float ll = 0.f, oo = 0.f;
#pragma unroll 16
        for (int s = 0; s < n_splits; ++s) {
            const float ms = sm_m[s];
            const float sc = ms == KILN_NEG_INF ? 0.f : exp2f(ms - mm);
            ll += sm_l[s] * sc;
            oo += part_o[(base + s) * hd + d] * sc;
        }
        out[((u64)row * n_q + h) * hd + d] = to_store(ll > 0.f ? oo / ll : 0.f);
    }
}
