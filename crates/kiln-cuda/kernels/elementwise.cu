#line 1 "elementwise.cu"
// Row-wise kernels around the GEMMs: embedding gather, RMSNorm with the residual add, the
// final norm of the rows that need logits, SwiGLU, argmax, and the f32 <-> storage copies of the
// upload path. Each row is reduced by one block in a fixed order, so a row's result never
// depends on the other rows of the launch. Written against store_t (common.cuh).

// x[t, :] = embedding[tokens[t], :] * scale as f32 (scale 1 but for Gemma's scaled embeddings,
// and exact then). Token ids were checked on the host.
extern "C" __global__ void embed_gather(float* __restrict__ x, const store_t* __restrict__ emb,
                                        const int* __restrict__ tokens, int hidden, float scale) {
    pdl_enter();
    const int t = blockIdx.x;
    const store_t* row = emb + (u64)tokens[t] * hidden;
    float* out = x + (u64)t * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = from_store(row[i]) * scale;
}

// x[t] += delta[t] (when delta is not null), then out[t] = store(x[t] * rsqrt(mean(x^2) + eps) * w)
// (norm_rows.cuh).
extern "C" __global__ void rmsnorm_residual(float* __restrict__ x, const float* __restrict__ delta,
                                            const store_t* __restrict__ w, store_t* __restrict__ out,
                                            int hidden, float eps) {
    pdl_trigger();
    rmsnorm_residual_row(x, delta, w, out, hidden, eps);
}

// For each output row r: v = x[rows[r]] + delta[rows[r]] (delta may be null: nothing pending, as
// after Gemma 4's layer output scale), out[r] = store(rmsnorm(v) * w). Only the rows that need
// logits go through the final norm and the LM head.
extern "C" __global__ void final_norm_rows(const float* __restrict__ x, const float* __restrict__ delta,
                                           const int* __restrict__ rows, const store_t* __restrict__ w,
                                           store_t* __restrict__ out, int hidden, float eps) {
    pdl_trigger();
    store_t wv[NORM_WPRE];
    norm_weight_prefetch(w, hidden, wv);
    pdl_wait();
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    const u64 t = (u64)rows[r];
    const float* xr = x + t * hidden;
    const float* dr = delta ? delta + t * hidden : nullptr;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = dr ? xr[i] + dr[i] : xr[i];
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / (float)hidden + eps);
    norm_store(out + (u64)r * hidden, hidden, inv, wv, w, [&](int, int i) { return dr ? xr[i] + dr[i] : xr[i]; });
}

// gu[t] = [gate (inter) | up (inter)]; out[t, i] = store(silu(gate) * up).
extern "C" __global__ void swiglu(const float* __restrict__ gu, store_t* __restrict__ out, int inter,
                                  int rows, int vec) {
    pdl_enter();
    gated_rows(gu, out, inter, rows, vec, [](float g, float u) { return silu_mul(g, u); });
}

// ids[r] = argmax over logits[r, :]; ties go to the smallest index, NaN never wins. Each thread
// visits its indices in ascending order whatever `vec` is; with vec (vocab % 4 == 0: every row
// 16-byte aligned) it reads four logits a load and keeps four loads in flight, so one CTA is
// not bound by the latency of a load at a time (H200, ncu, 128k logits: 9 us against 49 with
// one load in flight a thread).
#define ARGMAX_LOADS 4
extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int* __restrict__ ids, int vocab,
                                       int vec) {
    pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = logits + (u64)blockIdx.x * vocab;
    float best = KILN_NEG_INF;
    int bi = 0x7fffffff;
    auto visit = [&](float v, int i) {
        if (v > best) { best = v; bi = i; }
    };
    if (vec) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        const int n4 = vocab >> 2, step = blockDim.x * ARGMAX_LOADS;
        for (int base = threadIdx.x; base < n4; base += step) {
            float4 v[ARGMAX_LOADS];
#pragma unroll
            for (int u = 0; u < ARGMAX_LOADS; ++u) {
                const int j = base + u * blockDim.x;
                v[u] = j < n4 ? row4[j] : make_float4(KILN_NEG_INF, KILN_NEG_INF, KILN_NEG_INF, KILN_NEG_INF);
            }
#pragma unroll
            for (int u = 0; u < ARGMAX_LOADS; ++u) {
                const int i = (base + u * blockDim.x) * 4;
                visit(v[u].x, i);
                visit(v[u].y, i + 1);
                visit(v[u].z, i + 2);
                visit(v[u].w, i + 3);
            }
        }
    } else {
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) visit(row[i], i);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = best; si[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w)
            if (sv[w] > best || (sv[w] == best && si[w] < bi)) { best = sv[w]; bi = si[w]; }
        ids[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}

extern "C" __global__ void f32_to_store_copy(store_t* __restrict__ dst, const float* __restrict__ src, u64 n) {
    pdl_enter();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = to_store(src[i]);
}

extern "C" __global__ void store_to_f32_copy(float* __restrict__ dst, const store_t* __restrict__ src, u64 n) {
    pdl_enter();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = from_store(src[i]);
}
