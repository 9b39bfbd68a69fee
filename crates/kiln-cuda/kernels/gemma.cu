// Row kernels of the block extras Gemma 4 adds around the Llama-shaped core: GeGLU, the norm
// of a pending block output, the residual stream cast for a projection, the per-layer inputs
// (token table gathered by id on the device, mixed with the projected embedding), the per-layer
// gate, the layer output scale and the logits' soft cap. As in elementwise.cu, each row is
// reduced by one block (or one warp) in a fixed order, so a row's result never depends on the
// other rows of the launch. Weights and projection inputs are store_t (common.cuh); the residual
// stream, block outputs, per-layer inputs and logits are f32.

__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }

// act 0: SiLU, 1: GELU (tanh), as kiln_model::Activation.
__device__ __forceinline__ float gate_act(float x, int act) { return act == 1 ? gelu_tanh(x) : silu(x); }

// gu[t] = [gate (inter) | up (inter)]; out[t, i] = store(gelu_tanh(gate) * up).
extern "C" __global__ void geglu(const float* __restrict__ gu, store_t* __restrict__ out, int inter, int rows,
                                 int vec) {
    pdl_enter();
    gated_rows(gu, out, inter, rows, vec, [](float g, float u) { return gelu_tanh(g) * u; });
}

// delta[t] = rmsnorm(delta[t]) * w, in place and in f32: the norm of a block's output before it
// joins the residual stream (Gemma's post-norms).
extern "C" __global__ void rmsnorm_delta(float* __restrict__ delta, const store_t* __restrict__ w, int hidden,
                                         float eps) {
    pdl_enter();
    __shared__ float scratch[32];
    float* d = delta + (u64)blockIdx.x * hidden;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += d[i] * d[i];
    const float inv = rsqrtf(block_sum(ss, scratch) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) d[i] = d[i] * inv * from_store(w[i]);
}

// x[t] += delta[t] (when delta is not null), out[t] = store(x[t]): the residual stream as the
// input of a projection that reads it without a norm (the per-layer gate and projection).
extern "C" __global__ void residual_to_store(float* __restrict__ x, const float* __restrict__ delta,
                                            store_t* __restrict__ out, int hidden) {
    pdl_enter();
    const u64 row = (u64)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float v = x[row + i];
        if (delta) {
            v += delta[row + i];
            x[row + i] = v;
        }
        out[row + i] = to_store(v);
    }
}

// The per-layer inputs, in place over the projection: for token t and layer l, the `width`
// values p = proj[t, l * width ...] become
//     (rmsnorm(p * proj_scale) * norm_w + table[tokens[t], l * width ...] * table_scale) * mix_scale,
// in transformers' (and kiln-cpu's) order. One warp per (token, layer); the table is the
// resident [vocab, layers * width] token table, read at the id the step uploaded.
extern "C" __global__ void per_layer_mix(float* __restrict__ proj, const store_t* __restrict__ table,
                                         const int* __restrict__ tokens, const store_t* __restrict__ norm_w,
                                         int layers, int width, float proj_scale, float table_scale,
                                         float mix_scale, float eps) {
    pdl_enter();
    const int t = blockIdx.x, lane = threadIdx.x & 31;
    const int l = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (l >= layers) return;
    const u64 all = (u64)layers * width;
    float* p = proj + (u64)t * all + (u64)l * width;
    const store_t* e = table + (u64)tokens[t] * all + (u64)l * width;
    float ss = 0.f;
    for (int i = lane; i < width; i += 32) {
        const float v = p[i] * proj_scale;
        ss += v * v;
    }
    const float inv = rsqrtf(warp_sum(ss) / (float)width + eps);
    for (int i = lane; i < width; i += 32) {
        const float v = p[i] * proj_scale * inv * from_store(norm_w[i]);
        p[i] = (v + from_store(e[i]) * table_scale) * mix_scale;
    }
}

// out[t, i] = store(act(gate[t, i]) * per_layer[t, layer * width + i]): the per-layer gate of
// one layer's slice. `all`: the row stride of per_layer (layers * width).
extern "C" __global__ void per_layer_act(const float* __restrict__ gate, const float* __restrict__ per_layer,
                                         store_t* __restrict__ out, int width, int all, int layer, int rows,
                                         int act) {
    pdl_enter();
    const u64 n = (u64)rows * width;
    for (u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (u64)gridDim.x * blockDim.x) {
        const u64 t = idx / width, i = idx % width;
        out[idx] = to_store(gate_act(gate[idx], act) * per_layer[t * all + (u64)layer * width + i]);
    }
}

// x = (x + delta) * scale[0] over n elements (delta may be null): the end of a layer with an
// output scale (Gemma 4's layer_scalar, a one-element weight).
extern "C" __global__ void scale_residual(float* __restrict__ x, const float* __restrict__ delta,
                                          const store_t* __restrict__ scale, u64 n) {
    pdl_enter();
    const float s = from_store(scale[0]);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const float v = delta ? x[i] + delta[i] : x[i];
        x[i] = v * s;
    }
}

// logits = tanh(logits / cap) * cap over n elements, in place, before argmax and sampling.
extern "C" __global__ void softcap_logits(float* __restrict__ logits, u64 n, float cap) {
    pdl_enter();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        logits[i] = tanhf(logits[i] / cap) * cap;
}

// A post-norm fused into the op that consumes the block output (KILN_GEMMA_FUSE): delta = rmsnorm(delta)
// * w_post, then by `mode`
//   0: x += delta, out = store(rmsnorm(x) * w)   (the post-norm, then the next add-and-norm)
//   1: x += delta, out = store(x)                (then the per-layer gate's input)
//   2: x = (x + delta) * w[0]                    (then the layer output scale)
// The bits of rmsnorm_delta followed by rmsnorm_residual, residual_to_store or scale_residual:
// the same block size, reduction tree and operations (products rounded before the add, as
// when rmsnorm_delta stores them), one launch instead of two.
extern "C" __global__ void post_norm_fused(float* __restrict__ x, const float* __restrict__ delta,
                                           const store_t* __restrict__ w_post, const store_t* __restrict__ w,
                                           store_t* __restrict__ out, int hidden, float eps_post, float eps,
                                           int mode) {
    pdl_enter();
    __shared__ float scratch[32];
    const u64 row = (u64)blockIdx.x * hidden;
    const float* d = delta + row;
    float* xr = x + row;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += d[i] * d[i];
    const float inv_post = rsqrtf(block_sum(ss, scratch) / (float)hidden + eps_post);
    const float s = mode == 2 ? from_store(w[0]) : 0.f;
    float ss_x = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float dn = __fmul_rn(__fmul_rn(d[i], inv_post), from_store(w_post[i]));
        float v = xr[i];
        v += dn;
        if (mode == 2) {
            xr[i] = v * s;
        } else {
            xr[i] = v;
            if (mode == 1) out[row + i] = to_store(v);
            ss_x += v * v;
        }
    }
    if (mode != 0) return;
    const float inv = rsqrtf(block_sum(ss_x, scratch) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[row + i] = to_store(xr[i] * inv * from_store(w[i]));
}
