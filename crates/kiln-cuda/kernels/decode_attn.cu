#line 1 "decode_attn.cu"
// Decode attention: one query row per sequence, split over the KV length. The split count and
// the split boundaries depend only on the sequence's own length, and every split visits its keys
// in a fixed order, so a row's result is the same alone or in any batch. A CTA owns one split of
// one KV head for up to 4 query heads of its GQA group; a combine kernel merges the splits in
// index order. Cache layout: [block][kv_head][block_size][head_dim]. Each warp loads 8 keys per
// round (the loads of a round are in flight together; fewer heads per CTA keep the registers).
// Q, K, V and the output are store_t (common.cuh).

#define DA_WARPS 4
#define DA_MAX_GROUP 4
#define DA_KEYS 8
// The split rule (da_split) and the merge: decode_simt.cuh.

template <int HD>
__device__ __forceinline__ void decode_attn_body(
    const store_t* __restrict__ q, const store_t* __restrict__ k_cache, const store_t* __restrict__ v_cache,
    const int* __restrict__ positions, const int* __restrict__ token_seq, const int* __restrict__ bt_start,
    const int* __restrict__ block_tables, float* __restrict__ part_o, float* __restrict__ part_ml,
    int n_q, int n_kv, int block_size, int window, float scale_log2, int max_splits, int min_span) {
    // Elements of a head per lane; heads narrower than a warp leave the upper lanes idle.
    constexpr int PER = HD >= 32 ? HD / 32 : 1;
    constexpr int ACTIVE = HD / PER;
    const int row = blockIdx.z;
    const int group = n_q / n_kv;
    const int groups_per_kv = (group + DA_MAX_GROUP - 1) / DA_MAX_GROUP;
    const int kvh = blockIdx.y / groups_per_kv;
    const int h0 = kvh * group + (blockIdx.y % groups_per_kv) * DA_MAX_GROUP;
    const int nh = min(DA_MAX_GROUP, kvh * group + group - h0);
    const int pos = positions[row];
    const int len = pos + 1;
    int n_splits, span;
    da_split(len, max_splits, min_span, &n_splits, &span);
    // Merged through shared memory at the end of each split.
    __shared__ float sm_ml[DA_WARPS][DA_MAX_GROUP][2];
    __shared__ float sm_o[DA_WARPS][DA_MAX_GROUP][HD];
    // Splits blockIdx.x, blockIdx.x + gridDim.x, ... (as decode_mma.cu: with many rows, fewer
    // CTAs than split slots; each split computed alike whichever CTA serves it).
    // The row's query heads and block table, once for all the splits this CTA serves.
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool active = lane < ACTIVE;
    const int lane_off = active ? lane * PER : 0;
    const int* table = block_tables + bt_start[token_seq[row]];
    float qv[DA_MAX_GROUP][PER];
#pragma unroll
    for (int h = 0; h < DA_MAX_GROUP; ++h)
#pragma unroll
        for (int e = 0; e < PER; ++e)
            qv[h][e] = (h < nh && active) ? from_store(q[((u64)row * n_q + h0 + h) * HD + lane_off + e]) * scale_log2 : 0.f;
    for (int split = blockIdx.x; split < n_splits; split += gridDim.x) {
        int lo = split * span;
        const int hi = min(len, lo + span);
        if (window > 0 && lo < len - window) lo = min(hi, max(lo, len - window));

        float m[DA_MAX_GROUP], l[DA_MAX_GROUP], o[DA_MAX_GROUP][PER];
#pragma unroll
        for (int h = 0; h < DA_MAX_GROUP; ++h) {
            m[h] = KILN_NEG_INF;
            l[h] = 0.f;
#pragma unroll
            for (int e = 0; e < PER; ++e) o[h][e] = 0.f;
        }
        // Warp w takes key groups w, w + DA_WARPS, ... of DA_KEYS consecutive keys each.
        for (int k0 = lo + warp * DA_KEYS; k0 < hi; k0 += DA_WARPS * DA_KEYS) {
            float kf[DA_KEYS][PER], vf[DA_KEYS][PER];
#pragma unroll
            for (int j = 0; j < DA_KEYS; ++j) {
                const int p = k0 + j;
                if (p < hi && active) {
                    const u64 base = (((u64)table[p / block_size] * n_kv + kvh) * block_size + p % block_size) * HD + lane_off;
                    from_store_vec<PER>(k_cache + base, kf[j]);
                    from_store_vec<PER>(v_cache + base, vf[j]);
                } else {
#pragma unroll
                    for (int e = 0; e < PER; ++e) kf[j][e] = vf[j][e] = 0.f;
                }
            }
#pragma unroll
            for (int h = 0; h < DA_MAX_GROUP; ++h) {
                if (h >= nh) break;
                float s[DA_KEYS];
                float mx = m[h];
#pragma unroll
                for (int j = 0; j < DA_KEYS; ++j) {
                    float d = 0.f;
#pragma unroll
                    for (int e = 0; e < PER; ++e) d += qv[h][e] * kf[j][e];
                    d = warp_sum(d);
                    s[j] = (k0 + j < hi) ? d : KILN_NEG_INF;
                    mx = fmaxf(mx, s[j]);
                }
                const float alpha = exp2f(m[h] - mx);  // m[h] = -inf gives 0; mx is finite here
                l[h] *= alpha;
#pragma unroll
                for (int e = 0; e < PER; ++e) o[h][e] *= alpha;
#pragma unroll
                for (int j = 0; j < DA_KEYS; ++j) {
                    const float p = exp2f(s[j] - mx);
                    l[h] += p;
#pragma unroll
                    for (int e = 0; e < PER; ++e) o[h][e] += p * vf[j][e];
                }
                m[h] = mx;
            }
        }
        // Merge the warps in index order through shared memory.
#pragma unroll
        for (int h = 0; h < DA_MAX_GROUP; ++h) {
            if (lane == 0) { sm_ml[warp][h][0] = m[h]; sm_ml[warp][h][1] = l[h]; }
            if (active)
#pragma unroll
                for (int e = 0; e < PER; ++e) sm_o[warp][h][lane_off + e] = o[h][e];
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < nh * HD; idx += blockDim.x) {
            const int h = idx / HD, d = idx % HD;
            float mm = KILN_NEG_INF;
            for (int wi = 0; wi < DA_WARPS; ++wi) mm = fmaxf(mm, sm_ml[wi][h][0]);
            float ll = 0.f, oo = 0.f;
            for (int wi = 0; wi < DA_WARPS; ++wi) {
                const float sc = mm == KILN_NEG_INF ? 0.f : exp2f(sm_ml[wi][h][0] - mm);
                ll += sm_ml[wi][h][1] * sc;
                oo += sm_o[wi][h][d] * sc;
            }
            const u64 pi = ((u64)row * n_q + h0 + h) * max_splits + split;
            part_o[pi * HD + d] = oo;
            if (d == 0) { part_ml[pi * 2] = mm; part_ml[pi * 2 + 1] = ll; }
        }
        // The merge read sm_o and sm_ml; the next split's warps write them.
        __syncthreads();
    }
}

#define DA_ENTRY(HD, MINB)                                                                                \
    extern "C" __global__ void __launch_bounds__(128, MINB) decode_attn_hd##HD(                          \
        const store_t* q, const store_t* kc, const store_t* vc, const int* positions, const int* token_seq, \
        const int* bt_start, const int* block_tables, float* part_o, float* part_ml, int n_q, int n_kv, \
        int block_size, int window, float scale_log2, int max_splits, int min_span) {                \
        pdl_enter();                                                                                  \
        decode_attn_body<HD>(q, kc, vc, positions, token_seq, bt_start, block_tables, part_o, part_ml, \
                             n_q, n_kv, block_size, window, scale_log2, max_splits, min_span);        \
    }
// Four CTAs per SM where the registers allow it without spills.
DA_ENTRY(16, 4)
DA_ENTRY(32, 4)
DA_ENTRY(64, 4)
DA_ENTRY(128, 4)
DA_ENTRY(256, 1)

// The merge (decode_simt.cuh), for the head dims up to 256.
extern "C" __global__ void decode_attn_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                               const int* __restrict__ positions, store_t* __restrict__ out,
                                               int n_q, int hd, int max_splits, int min_span) {
    pdl_enter();
    da_combine(part_o, part_ml, positions, out, n_q, hd, max_splits, min_span);
}
