// RoPE and the KV write. The cos/sin table is built once at load from the model's inverse
// frequencies; qkv_prepare then finishes each head of the QKV projection (bias, Qwen3's
// per-head RMSNorm, rotation) and writes K and V into the paged cache at the token's slot, a
// device input: no per-step offsets, so a captured step stays valid as the context grows. Q, the
// cache, bias and norm weights are store_t (common.cuh).

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
// neox: pairs (i, i + hd/2); otherwise adjacent pairs (2i, 2i + 1).
extern "C" __global__ void qkv_prepare(const float* __restrict__ qkv, const store_t* __restrict__ bias,
                                       const store_t* __restrict__ q_norm, const store_t* __restrict__ k_norm,
                                       const float* __restrict__ rope, const int* __restrict__ positions,
                                       const int* __restrict__ slots, store_t* __restrict__ q_out,
                                       store_t* __restrict__ k_cache, store_t* __restrict__ v_cache,
                                       int n_q, int n_kv, int hd, int neox, int block_size, float eps) {
    pdl_enter();
    __shared__ float buf[4][256];
    const int t = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int head = blockIdx.y * 4 + warp;
    const int n_heads = n_q + 2 * n_kv;
    if (head >= n_heads) return;
    const int width = n_heads * hd;
    const float* src = qkv + (u64)t * width + (u64)head * hd;
    float* b = buf[warp];
    float ss = 0.f;
    for (int i = lane; i < hd; i += 32) {
        float v = src[i];
        if (bias) v += from_store(bias[head * hd + i]);
        b[i] = v;
        ss += v * v;
    }
    const bool is_q = head < n_q, is_k = !is_q && head < n_q + n_kv;
    const store_t* norm = is_q ? q_norm : (is_k ? k_norm : nullptr);
    if (norm) {
        const float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
        for (int i = lane; i < hd; i += 32) b[i] = b[i] * inv * from_store(norm[i]);
    }
    __syncwarp();
    const int slot = slots[t];
    if (!is_q && !is_k) {
        store_t* dst = v_cache + kv_index(slot, head - n_q - n_kv, n_kv, block_size, hd);
        for (int i = lane; i < hd; i += 32) dst[i] = to_store(b[i]);
        return;
    }
    const int half = hd / 2;
    const float* cs = rope + (u64)positions[t] * half * 2;
    store_t* dst = is_q ? q_out + (u64)t * n_q * hd + (u64)head * hd
                       : k_cache + kv_index(slot, head - n_q, n_kv, block_size, hd);
    for (int i = lane; i < half; i += 32) {
        const int i1 = neox ? i : 2 * i, i2 = neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x1 = b[i1], x2 = b[i2];
        dst[i1] = to_store(x1 * c - x2 * s);
        dst[i2] = to_store(x2 * c + x1 * s);
    }
}
