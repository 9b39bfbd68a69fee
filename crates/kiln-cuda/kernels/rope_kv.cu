// RoPE and the KV write. The cos/sin table is built once at load from the model's inverse
// frequencies; qkv_prepare then finishes each head of the QKV projection (bias, per-head Q/K
// RMSNorms, Gemma 4's V norm, rotation) and writes K and V into the paged cache at the token's
// slot, a device input: no per-step offsets, so a captured step stays valid as the context
// grows. Q, the cache, bias and norm weights are store_t (common.cuh).

// table[(p * half + i) * 2 + {0, 1}] = (cos, sin)(p * inv_freq[i]) * attn_factor.
extern "C" __global__ void rope_table_build(float* __restrict__ table, const float* __restrict__ inv_freq,
                                            int max_pos, int half, float attn_factor) {
    pdl_enter();
    const u64 n = (u64)max_pos * half;
    for (u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (u64)gridDim.x * blockDim.x) {
        const double angle = (double)(idx / half) * (double)inv_freq[idx % half];
        table[idx * 2] = (float)cos(angle) * attn_factor;
        table[idx * 2 + 1] = (float)sin(angle) * attn_factor;
    }
}

// Cache layout: [block][kv_head][block_size][head_dim]; slot = block * block_size + offset.
__device__ __forceinline__ u64 kv_index(int slot, int kvh, int n_kv, int block_size, int hd) {
    const u64 block = (u64)(slot / block_size), off = (u64)(slot % block_size);
    return ((block * n_kv + kvh) * block_size + off) * hd;
}

// One warp per (token, head). Heads 0..n_q-1 are Q, then n_kv K heads, then n_kv V heads.
// neox: pairs (i, i + hd/2); otherwise adjacent pairs (2i, 2i + 1). kv_mode says which heads a
// row of `qkv` holds: 0 Q, K and V; 1 Q and K, V being the K projection as it was before K's
// norm and RoPE (Gemma 4's attention_k_eq_v); 2 Q only (a layer that reads another layer's KV
// and writes none). v_norm: an RMSNorm without weight on each V head.
#define QKV_MAX_HD 512
extern "C" __global__ void qkv_prepare(const float* __restrict__ qkv, const store_t* __restrict__ bias,
                                       const store_t* __restrict__ q_norm, const store_t* __restrict__ k_norm,
                                       const float* __restrict__ rope, const int* __restrict__ positions,
                                       const int* __restrict__ slots, store_t* __restrict__ q_out,
                                       store_t* __restrict__ k_cache, store_t* __restrict__ v_cache,
                                       int n_q, int n_kv, int hd, int neox, int block_size, float eps,
                                       int kv_mode, int v_norm) {
    pdl_enter();
    __shared__ float buf[4][QKV_MAX_HD];
    const int t = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int head = blockIdx.y * 4 + warp;
    const int n_heads = n_q + (kv_mode == 2 ? 0 : 2 * n_kv);
    if (head >= n_heads) return;
    const int row_heads = n_q + (kv_mode == 0 ? 2 * n_kv : (kv_mode == 1 ? n_kv : 0));
    const bool is_q = head < n_q, is_k = !is_q && head < n_q + n_kv;
    // The head of the row this one is read from: a V taken from K reads K's.
    const int src_head = (!is_q && !is_k && kv_mode == 1) ? head - n_kv : head;
    const float* src = qkv + (u64)t * row_heads * hd + (u64)src_head * hd;
    float* b = buf[warp];
    float ss = 0.f;
    for (int i = lane; i < hd; i += 32) {
        float v = src[i];
        if (bias) v += from_store(bias[src_head * hd + i]);
        b[i] = v;
        ss += v * v;
    }
    const store_t* norm = is_q ? q_norm : (is_k ? k_norm : nullptr);
    if (norm || (!is_q && !is_k && v_norm)) {
        const float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
        for (int i = lane; i < hd; i += 32) b[i] = norm ? b[i] * inv * from_store(norm[i]) : b[i] * inv;
    }
    __syncwarp();
    if (!is_q && !is_k) {
        store_t* dst = v_cache + kv_index(slots[t], head - n_q - n_kv, n_kv, block_size, hd);
        for (int i = lane; i < hd; i += 32) dst[i] = to_store(b[i]);
        return;
    }
    const int half = hd / 2;
    const float* cs = rope + (u64)positions[t] * half * 2;
    store_t* dst = is_q ? q_out + (u64)t * n_q * hd + (u64)head * hd
                       : k_cache + kv_index(slots[t], head - n_q, n_kv, block_size, hd);
    for (int i = lane; i < half; i += 32) {
        const int i1 = neox ? i : 2 * i, i2 = neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        float o1, o2;
        rope_rotate(b[i1], b[i2], c, s, o1, o2);
        dst[i1] = to_store(o1);
        dst[i2] = to_store(o2);
    }
}
