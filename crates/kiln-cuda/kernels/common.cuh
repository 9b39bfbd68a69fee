// Prelude prepended to every kernel source. NVRTC sees no CUDA toolkit headers, so the few bf16
// helpers the kernels need are written here with inline PTX. bf16 values travel as raw 16-bit
// patterns (bf16_t); pairs as one 32-bit word, the lower-indexed element in the low half.

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

#define KILN_NEG_INF (__int_as_float(0xff800000))
#define KILN_LOG2E 1.4426950408889634f

// The online softmax's step to a tile's maximum mx: m becomes max(m, mx). `base` is the new
// maximum, or 0 while the row has seen no key (m = -inf), so that every exponent stays finite;
// `shift` (the old m - base) is the exponent of the factor the row's earlier sums are rescaled
// by. Each kernel takes its own exponential of it.
struct OnlineMax {
    float base, shift;
};
__device__ __forceinline__ OnlineMax online_max(float& m, float mx) {
    const float mn = fmaxf(m, mx);
    const float base = mn == KILN_NEG_INF ? 0.f : mn;
    const OnlineMax r{base, __fsub_rn(m, base)};
    m = mn;
    return r;
}

__device__ __forceinline__ float bf16_to_f32(bf16_t h) {
    return __uint_as_float(((u32)h) << 16);
}

// Round to nearest even, the same rounding as the host's half::bf16::from_f32.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    bf16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}

// Packs (lo, hi) into one word: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float bf16x2_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16x2_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// The storage type. The tensors a model keeps between kernels in its own number format (weights,
// GEMM inputs, Q, the KV cache, attention outputs) are store_t: bf16 by default, f32 in a module
// built with -DKILN_STORE_F32, f16 with -DKILN_STORE_F16 (kernel_sources.rs builds each typed
// module for the backend's format). Kernels are written once against store_t and convert only
// through these helpers; the arithmetic is f32 in every format:
//   float   from_store(store_t)               the stored value (exact)
//   store_t to_store(float)                   rounded to nearest even (exact for f32)
//   void    from_store_vec<N>(p, float* out)  N consecutive values (1, 2, 4 or 8), one vector load
// Residual stream, GEMM outputs and logits stay f32 whatever the format.
#if defined(KILN_STORE_F32)
typedef float store_t;
__device__ __forceinline__ float from_store(store_t v) { return v; }
__device__ __forceinline__ store_t to_store(float f) { return f; }
#elif defined(KILN_STORE_F16)
typedef unsigned short store_t;
__device__ __forceinline__ float from_store(store_t v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ store_t to_store(float f) {
    store_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
#else
typedef bf16_t store_t;
__device__ __forceinline__ float from_store(store_t v) { return bf16_to_f32(v); }
__device__ __forceinline__ store_t to_store(float f) { return f32_to_bf16(f); }
#endif

// The two 16-bit values of a word as f32, the lower-indexed one first.
__device__ __forceinline__ void from_store_x2(u32 w, float* out) {
#if defined(KILN_STORE_F16)
    out[0] = from_store((store_t)(w & 0xffffu));
    out[1] = from_store((store_t)(w >> 16));
#else
    out[0] = bf16x2_lo(w);
    out[1] = bf16x2_hi(w);
#endif
}

template <int N>
__device__ __forceinline__ void from_store_vec(const store_t* p, float* out) {
    static_assert(N == 1 || N == 2 || N == 4 || N == 8, "1, 2, 4 or 8 values");
#if defined(KILN_STORE_F32)
    if constexpr (N >= 4) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const float4 v = reinterpret_cast<const float4*>(p)[i];
            out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
        }
    } else if constexpr (N == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x; out[1] = v.y;
    } else {
        out[0] = *p;
    }
#else
    if constexpr (N == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        from_store_x2(v.x, out); from_store_x2(v.y, out + 2);
        from_store_x2(v.z, out + 4); from_store_x2(v.w, out + 6);
    } else if constexpr (N == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        from_store_x2(v.x, out); from_store_x2(v.y, out + 2);
    } else if constexpr (N == 2) {
        from_store_x2(*reinterpret_cast<const u32*>(p), out);
    } else {
        out[0] = from_store(*p);
    }
#endif
}

// Four consecutive values stored with one vector store, each rounded as to_store rounds it.
__device__ __forceinline__ void to_store_x4(store_t* p, float a, float b, float c, float d) {
#if defined(KILN_STORE_F32)
    *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
#else
    const u32 lo = (u32)to_store(a) | ((u32)to_store(b) << 16);
    const u32 hi = (u32)to_store(c) | ((u32)to_store(d) << 16);
    *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
#endif
}

// out[t, i] = act(gu[t, i], gu[t, inter + i]) for rows t < rows of the f32 gate/up product, i <
// inter: rows blockIdx.y, + gridDim.y, ...; along a row four values a thread (16-byte loads,
// one vector store) with `vec` (inter a multiple of 4), else one. No index division; each value
// is the same expression whichever way it is reached.
template <typename Act>
__device__ __forceinline__ void gated_rows(const float* __restrict__ gu, store_t* __restrict__ out, int inter,
                                           int rows, int vec, Act act) {
    const int stride = gridDim.x * blockDim.x, first = blockIdx.x * blockDim.x + threadIdx.x;
    for (int t = blockIdx.y; t < rows; t += gridDim.y) {
        const float* g = gu + (u64)t * 2 * inter;
        const float* u = g + inter;
        store_t* o = out + (u64)t * inter;
        if (vec && (inter & 3) == 0) {
            for (int i = 4 * first; i < inter; i += 4 * stride) {
                const float4 gv = *reinterpret_cast<const float4*>(g + i);
                const float4 uv = *reinterpret_cast<const float4*>(u + i);
                to_store_x4(o + i, act(gv.x, uv.x), act(gv.y, uv.y), act(gv.z, uv.z), act(gv.w, uv.w));
            }
        } else {
            for (int i = first; i < inter; i += stride) o[i] = to_store(act(g[i], u[i]));
        }
    }
}

// D = A * B + D on the tensor cores: A 16x16 (row), B 16x8 (col), TYPE in (bf16 or f16), f32
// accumulate.
#define MMA_16816(NAME, TYPE)                                                                   \
    __device__ __forceinline__ void NAME(float* d, const u32* a, const u32* b) {                \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "              \
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                  \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                           \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));       \
    }
MMA_16816(mma_bf16_16816, "bf16")
// f16 (fp8_wide.cu: the f16 MMAs ptxas builds an E4M3 MMA from on sm_90).
MMA_16816(mma_f16_16816, "f16")

// SwiGLU's product silu(g) * u, written once for every kernel that computes it (swiglu and the
// fused GEMM epilogue), so both are the same expression and compile to the same operations (the
// compiler fuses expf's last scaling with the + 1).
__device__ __forceinline__ float silu_mul(float g, float u) {
    return g / (1.f + expf(-g)) * u;
}

// transformers' gelu_pytorch_tanh, operation for operation as kiln-cpu's gelu_tanh (geglu,
// Gemma's gate activation and fp8.cu's gated rows).
__device__ __forceinline__ float gelu_tanh(float x) {
    const float inner = 0.7978845608028654f * (x + 0.044715f * (x * x * x));
    return 0.5f * x * (1.f + tanhf(inner));
}

// RoPE of the pair (x1, x2) by (c, s): (x1 c - x2 s, x2 c + x1 s), each with one product
// rounded and the other fused, the roundings qkv_prepare has always had; every kernel that
// rotates uses this.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, float& o1, float& o2) {
    o1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s));
    o2 = __fmaf_rn(x1, s, __fmul_rn(x2, c));
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldmatrix_x4(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// o += P V for a warp's 16 rows (lane (g, t): rows g and g + 8 of each 8-key column of s and of
// each 8-wide output column of o): P the probabilities s of NT 8-key columns, rounded to bf16,
// V the NT * 8 rows of `sv` (ldv elements apart) from which the warp's DO output columns start.
// Written once for every mma.sync attention kernel (flash_tile.cuh, decode_mma.cu,
// decode_mma_wide.cu).
template <int NT, int DO>
__device__ __forceinline__ void mma_pv(float (&o)[DO][4], const float (&s)[NT][4], const bf16_t* sv, int ldv,
                                       int lane) {
    const int mi = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < NT / 2; ++ks) {
        u32 a[4];
        a[0] = pack_bf16x2(s[2 * ks][0], s[2 * ks][1]);
        a[1] = pack_bf16x2(s[2 * ks][2], s[2 * ks][3]);
        a[2] = pack_bf16x2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
        a[3] = pack_bf16x2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
        for (int d = 0; d < DO; d += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, sv + (ks * 16 + (mi & 1) * 8 + (lane & 7)) * ldv + d * 8 + (mi >> 1) * 8);
            mma_bf16_16816(o[d], a, b);
            mma_bf16_16816(o[d + 1], a, b + 2);
        }
    }
}

// 16-byte async copy global -> shared; src_bytes 0 fills the destination with zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
// cp_async_wait<n> for a count known only at run time (clamped to 0..7).
__device__ __forceinline__ void cp_async_wait_upto(int n) {
    switch (n) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        case 3: cp_async_wait<3>(); break;
        case 4: cp_async_wait<4>(); break;
        case 5: cp_async_wait<5>(); break;
        case 6: cp_async_wait<6>(); break;
        default: cp_async_wait<7>(); break;
    }
}

// Streaming 16-byte load that skips L1 (weights are read once per launch).
__device__ __forceinline__ uint4 ld_stream_16(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 ld_16(const void* p) {
    return *reinterpret_cast<const uint4*>(p);
}

// Loads of memory no kernel writes (weights), issued where they stand in the code, before
// pdl_wait, so that they come in while the kernel ahead ends: volatile and coherent. The
// compiler put griddepcontrol.wait ahead of plain loads of read-only data, and ahead of volatile
// ld.global.nc ones too (sm_90 SASS, NVRTC 13.0, 2026-12-04; the test sass_order checks it).
// One stored value:
__device__ __forceinline__ store_t ld_store_here(const store_t* p) {
#if defined(KILN_STORE_F32)
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
#else
    unsigned short v;
    asm volatile("ld.global.u16 %0, [%1];" : "=h"(v) : "l"(p));
#endif
    return (store_t)v;
}
// 16 bytes of a streamed weight, kept out of L1 as ld_stream_16 does:
__device__ __forceinline__ uint4 ld_weight_16_here(const void* p) {
    uint4 r;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// One 16-byte store, whatever registers hold v: nvcc may split a uint4 store into four 4-byte
// stores when v's words are not in four consecutive registers (it did in quant_to_bf16_q8_0,
// whose expansion then wrote at three quarters of Q4_K's rate).
__device__ __forceinline__ void st_16(void* p, uint4 v) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// Butterfly sum over the warp: every lane ends with the same value, in a fixed order.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024) in a fixed order;
// every thread gets the result. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = 0.f;
    if (warp == 0) {
        t = lane < nwarps ? scratch[lane] : 0.f;
        t = warp_sum(t);
        if (lane == 0) scratch[0] = t;
    }
    __syncthreads();
    return scratch[0];
}

// Programmatic dependent launch (sm_90 and later; no-ops before). A kernel started with
// Gpu::launch_with(.., dependent) may run while the kernel before it finishes: pdl_wait() returns once
// that kernel has ended and its writes are visible. pdl_trigger() lets the next such kernel
// start now (it then waits in pdl_wait() for this one to end).
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// The first statement of every kernel that may be started as a dependent launch: let the next
// one start launching, then wait for the previous one to end. Launch latency overlaps the
// previous kernel's tail; every memory access still comes after it, as in plain order.
__device__ __forceinline__ void pdl_enter() {
    pdl_trigger();
    pdl_wait();
}

// The end of a skinny kernel's plain form (skinny_gemm.cu, fp8.cu): each warp's m16n8 MMA
// fragments for NT groups of 8 rows of x to shared memory, then summed over the WARPS warps in
// index order, thread i of the block finishing fragment element i: weight row n = row0 + ..,
// x row m, y[m, n] = out(sum, m, n) where n < N and m < M.
template <int NT, int WARPS, typename Out>
__device__ __forceinline__ void skinny_warp_sums(float (&red)[WARPS][NT][4][32], const float (&acc)[NT][4],
                                                 float* __restrict__ y, int row0, int M, int N, Out out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) red[warp][j][q][lane] = acc[j][q];
    __syncthreads();
    for (int e = threadIdx.x; e < NT * 4 * 32; e += blockDim.x) {
        const int j = e / 128, q = (e / 32) % 4, l = e % 32;
        float s = 0.f;
#pragma unroll
        for (int wi = 0; wi < WARPS; ++wi) s += red[wi][j][q][l];
        const int n = row0 + (l >> 2) + ((q & 2) ? 8 : 0);
        const int m = j * 8 + (l & 3) * 2 + (q & 1);
        if (n < N && m < M) y[(u64)m * N + n] = out(s, m, n);
    }
}
