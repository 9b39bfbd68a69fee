#line 1 "decode_wide.cu"
// Decode attention for heads too wide for the registers of decode_attn.cu (Gemma 4's
// full-attention layers: head dim 512). Decode rows are split over the KV length as
// decode_attn.cu splits them (the split count and bounds a function of the sequence's own
// length, keys visited in a fixed order), so a row's result is the same alone or in any batch.
// A CTA serves one split of one KV head for up to DW_GROUP query heads, DW_KEYS keys per warp
// round, each lane holding HD / 32 consecutive elements; decode_attn_wide_combine merges the
// splits in index order. With many rows a CTA serves splits blockIdx.x, blockIdx.x + gridDim.x,
// ... (as decode_mma.cu: no CTAs that only start and exit; each split computed alike whichever
// CTA serves it). Q, K, V and the output are store_t (common.cuh).

#define DW_WARPS 4
#define DW_GROUP 2
#define DW_KEYS 4
// Splits a sequence with decode_attn.cu's rule (da_split, decode_simt.cuh), so a wide layer splits
// it as the others do.

// PER (a multiple of 8) consecutive stored values into floats, 8 at a time.
template <int PER>
__device__ __forceinline__ void load_wide(const store_t* p, float* out) {
#pragma unroll
    for (int c = 0; c < PER / 8; ++c) from_store_vec<8>(p + c * 8, out + c * 8);
}

template <int HD>
__device__ __forceinline__ void decode_wide_body(
    const store_t* __restrict__ q, const store_t* __restrict__ k_cache, const store_t* __restrict__ v_cache,
    const int* __restrict__ positions, const int* __restrict__ token_seq, const int* __restrict__ bt_start,
    const int* __restrict__ block_tables, float* __restrict__ part_o, float* __restrict__ part_ml,
    int n_q, int n_kv, int block_size, int window, float scale_log2, int max_splits, int min_span) {
    constexpr int PER = HD / 32;
    const int row = blockIdx.z;
    const int group = n_q / n_kv;
    const int groups_per_kv = (group + DW_GROUP - 1) / DW_GROUP;
    const int kvh = blockIdx.y / groups_per_kv;
    const int h0 = kvh * group + (blockIdx.y % groups_per_kv) * DW_GROUP;
    const int nh = min(DW_GROUP, kvh * group + group - h0);
    const int len = positions[row] + 1;
    int n_splits, span;
    da_split(len, max_splits, min_span, &n_splits, &span);
    __shared__ float sm_ml[DW_WARPS][DW_GROUP][2];
    __shared__ float sm_o[DW_WARPS][DW_GROUP][HD];
    // The row's query heads and block table, once for all the splits this CTA serves.
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lane_off = lane * PER;
    const int* table = block_tables + bt_start[token_seq[row]];
    float qv[DW_GROUP][PER];
#pragma unroll
    for (int h = 0; h < DW_GROUP; ++h) {
        if (h < nh) {
            load_wide<PER>(q + ((u64)row * n_q + h0 + h) * HD + lane_off, qv[h]);
        } else {
#pragma unroll
            for (int e = 0; e < PER; ++e) qv[h][e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < PER; ++e) qv[h][e] *= scale_log2;
    }
    for (int split = blockIdx.x; split < n_splits; split += gridDim.x) {
        int lo = split * span;
        const int hi = min(len, lo + span);
        if (window > 0 && lo < len - window) lo = min(hi, max(lo, len - window));

        float o[DW_GROUP][PER], m[DW_GROUP], l[DW_GROUP];
#pragma unroll
        for (int h = 0; h < DW_GROUP; ++h) {
#pragma unroll
            for (int e = 0; e < PER; ++e) o[h][e] = 0.f;
            m[h] = KILN_NEG_INF;
            l[h] = 0.f;
        }
        // Warp w takes key groups w, w + DW_WARPS, ... of DW_KEYS consecutive keys each.
        for (int k0 = lo + warp * DW_KEYS; k0 < hi; k0 += DW_WARPS * DW_KEYS) {
            float kf[DW_KEYS][PER];
            u64 base[DW_KEYS];
#pragma unroll
            for (int j = 0; j < DW_KEYS; ++j) {
                const int p = min(k0 + j, hi - 1);
                base[j] = (((u64)table[p / block_size] * n_kv + kvh) * block_size + p % block_size) * HD + lane_off;
                load_wide<PER>(k_cache + base[j], kf[j]);
            }
            float s[DW_GROUP][DW_KEYS];
#pragma unroll
            for (int h = 0; h < DW_GROUP; ++h)
#pragma unroll
                for (int j = 0; j < DW_KEYS; ++j) {
                    float d = 0.f;
#pragma unroll
                    for (int e = 0; e < PER; ++e) d += qv[h][e] * kf[j][e];
                    d = warp_sum(d);
                    s[h][j] = (k0 + j < hi) ? d : KILN_NEG_INF;
                }
#pragma unroll
            for (int j = 0; j < DW_KEYS; ++j) {
                float vf[PER];
                load_wide<PER>(v_cache + base[j], vf);
#pragma unroll
                for (int h = 0; h < DW_GROUP; ++h) {
                    // One key at a time: the running max moves only when this key beats it.
                    const float mx = fmaxf(m[h], s[h][j]);
                    const float alpha = mx == KILN_NEG_INF ? 1.f : exp2f(m[h] - mx);
                    const float p = mx == KILN_NEG_INF ? 0.f : exp2f(s[h][j] - mx);
                    l[h] = l[h] * alpha + p;
#pragma unroll
                    for (int e = 0; e < PER; ++e) o[h][e] = o[h][e] * alpha + p * vf[e];
                    m[h] = mx;
                }
            }
        }
        // Merge the warps in index order through shared memory.
#pragma unroll
        for (int h = 0; h < DW_GROUP; ++h) {
            if (lane == 0) {
                sm_ml[warp][h][0] = m[h];
                sm_ml[warp][h][1] = l[h];
            }
#pragma unroll
            for (int e = 0; e < PER; ++e) sm_o[warp][h][lane_off + e] = o[h][e];
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < nh * HD; idx += blockDim.x) {
            const int h = idx / HD, d = idx % HD;
            float mm = KILN_NEG_INF;
            for (int wi = 0; wi < DW_WARPS; ++wi) mm = fmaxf(mm, sm_ml[wi][h][0]);
            float ll = 0.f, oo = 0.f;
            for (int wi = 0; wi < DW_WARPS; ++wi) {
                const float sc = mm == KILN_NEG_INF ? 0.f : exp2f(sm_ml[wi][h][0] - mm);
                ll += sm_ml[wi][h][1] * sc;
                oo += sm_o[wi][h][d] * sc;
            }
            const u64 pi = ((u64)row * n_q + h0 + h) * max_splits + split;
            part_o[pi * HD + d] = oo;
            if (d == 0) {
                part_ml[pi * 2] = mm;
                part_ml[pi * 2 + 1] = ll;
            }
        }
        // The merge read sm_o and sm_ml; the next split's warps write them.
        __syncthreads();
    }
}

#define DW_ENTRY(HD)                                                                                       \
    extern "C" __global__ void __launch_bounds__(128, 1) decode_attn_wide_hd##HD(                          \
        const store_t* q, const store_t* kc, const store_t* vc, const int* positions, const int* token_seq,  \
        const int* bt_start, const int* block_tables, float* part_o, float* part_ml, int n_q, int n_kv,  \
        int block_size, int window, float scale_log2, int max_splits, int min_span) {                   \
        pdl_enter();                                                                                     \
        decode_wide_body<HD>(q, kc, vc, positions, token_seq, bt_start, block_tables, part_o, part_ml,   \
                             n_q, n_kv, block_size, window, scale_log2, max_splits, min_span);           \
    }
DW_ENTRY(512)

// The merge (decode_simt.cuh), up to 1024 threads over the head's elements.
extern "C" __global__ void decode_attn_wide_combine(const float* __restrict__ part_o,
                                                    const float* __restrict__ part_ml,
                                                    const int* __restrict__ positions, store_t* __restrict__ out,
                                                    int n_q, int hd, int max_splits, int min_span) {
    pdl_enter();
    da_combine(part_o, part_ml, positions, out, n_q, hd, max_splits, min_span);
}
