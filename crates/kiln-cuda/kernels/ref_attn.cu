// The simple attention kernel every fast path is checked against (KILN_FLASH_ATTN=0 runs the
// whole model on it): one warp per (token, query head), keys visited one by one in position
// order with an f32 online softmax. Causal and sliding-window limits come from the token's
// position; K/V are read through the block table. head_dim at most 32, or a multiple of 32 up to 512.
// Q, K, V and the output are store_t (common.cuh).
extern "C" __global__ void ref_attn(const store_t* __restrict__ q, const store_t* __restrict__ k_cache,
                                    const store_t* __restrict__ v_cache, const int* __restrict__ positions,
                                    const int* __restrict__ token_seq, const int* __restrict__ bt_start,
                                    const int* __restrict__ block_tables, store_t* __restrict__ out,
                                    int n_tokens, int n_q, int n_kv, int hd, int block_size, int window,
                                    float scale_log2) {
    pdl_enter();
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= n_tokens * n_q) return;
    const int t = warp / n_q, h = warp % n_q;
    const int kvh = h / (n_q / n_kv);
    // Elements per lane; heads narrower than a warp leave the upper lanes idle.
    const int per = hd >= 32 ? hd / 32 : 1;
    const bool active = lane < hd / per;
    const int lane_off = active ? lane * per : 0;
    const int pos = positions[t];
    const int* table = block_tables + bt_start[token_seq[t]];
    float qv[16], o[16];
    for (int e = 0; e < per; ++e) {
        qv[e] = active ? from_store(q[((u64)t * n_q + h) * hd + lane_off + e]) * scale_log2 : 0.f;
        o[e] = 0.f;
    }
    float m = KILN_NEG_INF, l = 0.f;
    const int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    for (int p = lo; p <= pos; ++p) {
        const u64 base = (((u64)table[p / block_size] * n_kv + kvh) * block_size + p % block_size) * hd + lane_off;
        float d = 0.f;
        if (active)
            for (int e = 0; e < per; ++e) d += qv[e] * from_store(k_cache[base + e]);
        const float s = warp_sum(d);
        const float mn = fmaxf(m, s);
        const float alpha = exp2f(m - mn), pr = exp2f(s - mn);
        l = l * alpha + pr;
        if (active)
            for (int e = 0; e < per; ++e) o[e] = o[e] * alpha + pr * from_store(v_cache[base + e]);
        m = mn;
    }
    if (active)
        for (int e = 0; e < per; ++e)
            out[((u64)t * n_q + h) * hd + lane_off + e] = to_store(l > 0.f ? o[e] / l : 0.f);
}
