#line 1 "skinny_epilogue.cu"
// Where a decode GEMM's sums go: the epilogues (and the norm prologue) of skinny_gemm.cu's fused
// entries and of skinny_tc.cu, shared by both modules. Both kernels compute tiles of 16 weight
// rows, and once a tile's sums are complete one thread holds, for one token, the sums of tile
// rows r and r + 8 together. A mode says which weight rows those are and what becomes of the
// sums, with the arithmetic of the kernel the epilogue replaces, so one fused launch gives the
// bits of the launches it stands for:
//   EPI_STORE  rows 16 T + r:  y[m, row] = sum                       (the plain GEMM)
//   EPI_ADD    rows 16 T + r:  y[m, row] = y[m, row] + sum           (rmsnorm_residual's add of
//              the pending block output, y being the residual stream)
//   EPI_GLU    rows 8 T + r (gate) and inter + 8 T + r (up):
//              act[m, 8 T + r] = silu(gate) * up                     (swiglu)
//   EPI_ROPE   rows r and r + 8 are the two elements of one RoPE pair of a head of the QKV
//              projection: bias, rotation, Q to q_out and K, V into the cache at the token's
//              slot                                                 (qkv_prepare, for layers
//              with Q, K and V rows and no Q/K/V norms)
#define EPI_STORE 0
#define EPI_ADD 1
#define EPI_GLU 2
#define EPI_ROPE 3

struct Epi {
    int mode;
    // STORE/ADD: the weight's rows (y's row length); GLU: the intermediate size; ROPE: heads
    // (n_q + 2 n_kv).
    int rows;
    float* y;
    bf16_t* out;        // GLU: act [M, inter]; ROPE: q_out [M, n_q * hd]
    const bf16_t* bias; // ROPE: the QKV bias, or null
    const float* rope;  // ROPE: (cos, sin) per position and pair
    const int* positions;
    const int* slots;
    bf16_t* kc;
    bf16_t* vc;
    int n_q, n_kv, hd, neox, block_size;
};

// The kernel parameters an Epi is made of (every fused entry takes them in this order).
#define EPI_PARAMS                                                                                  \
    int epi_mode, int epi_rows, float* y, bf16_t* epi_out, const bf16_t* epi_bias,                 \
        const float* epi_rope, const int* epi_pos, const int* epi_slots, bf16_t* epi_kc,           \
        bf16_t* epi_vc, int epi_nq, int epi_nkv, int epi_hd, int epi_neox, int epi_bs
#define EPI_MAKE                                                                                    \
    Epi {                                                                                           \
        epi_mode, epi_rows, y, epi_out, epi_bias, epi_rope, epi_pos, epi_slots, epi_kc, epi_vc,    \
            epi_nq, epi_nkv, epi_hd, epi_neox, epi_bs                                              \
    }

// The weight row that row r (0..15) of 16-row tile `tile` stands for in a mode's order (`rows`
// as Epi's), or -1 past the weight. The quantised decode kernels keep their records in this
// order (quant_order.rs), so that they too have each pair in one tile.
__device__ __forceinline__ int tile_row(int mode, int rows, int hd, int neox, int tile, int r) {
    if (mode == EPI_GLU) {
        const int i = tile * 8 + (r & 7);
        return i < rows ? (r < 8 ? i : rows + i) : -1;
    }
    if (mode == EPI_ROPE) {
        const int tph = hd >> 4, head = tile / tph;
        if (head >= rows) return -1;
        const int i = (tile - head * tph) * 8 + (r & 7);
        return head * hd + (neox ? i + (r < 8 ? 0 : hd >> 1) : 2 * i + (r >> 3));
    }
    const int row = tile * 16 + r;
    return row < rows ? row : -1;
}
__device__ __forceinline__ int epi_row(const Epi& e, int tile, int r) {
    return tile_row(e.mode, e.rows, e.hd, e.neox, tile, r);
}

// The rows a copying thread of a tensor-core decode GEMM CTA loads (skinny_tc.cu, skinny_wg.cu):
// weight rows r0 + i STEP of the CTA's 16-row tiles from tile0 on, through the Epi, and token
// rows m0 + r0 + i STEP, each as its start in elements (row length ld; a weight holds < 2^32 of
// them) and whether it exists (a row past the end is copied as zeros).
template <int P, int STEP>
__device__ __forceinline__ void epi_weight_rows(const Epi& e, int tile0, int r0, int ld, u32 (&off)[P],
                                                bool (&ok)[P]) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
        const int r = r0 + i * STEP;
        const int row = epi_row(e, tile0 + (r >> 4), r & 15);
        ok[i] = row >= 0;
        off[i] = (u32)(ok[i] ? row : 0) * (u32)ld;
    }
}
template <int P, int STEP>
__device__ __forceinline__ void token_rows(int m0, int r0, int M, int ld, u32 (&off)[P], bool (&ok)[P]) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
        const int m = m0 + r0 + i * STEP;
        ok[i] = m < M;
        off[i] = (u32)(ok[i] ? m : 0) * (u32)ld;
    }
}

// qkv_prepare's cache index: [block][kv_head][block_size][head_dim], slot = block * bs + offset.
__device__ __forceinline__ u64 epi_kv_index(int slot, int kvh, int n_kv, int block_size, int hd) {
    const u64 block = (u64)(slot / block_size), off = (u64)(slot % block_size);
    return ((block * n_kv + kvh) * block_size + off) * hd;
}

// Token m's sums of tile rows r (lo) and r + 8 (hi); m < M is the caller's to check.
__device__ __forceinline__ void epi_pair(const Epi& e, int tile, int r, int m, float lo, float hi) {
    if (e.mode == EPI_GLU) {
        const int i = tile * 8 + r;
        if (i < e.rows) e.out[(u64)m * e.rows + i] = f32_to_bf16(silu_mul(lo, hi));
        return;
    }
    if (e.mode == EPI_ROPE) {
        const int tph = e.hd >> 4, head = tile / tph;
        if (head >= e.rows) return;
        const int half = e.hd >> 1;
        const int i = (tile - head * tph) * 8 + r;
        const int i1 = e.neox ? i : 2 * i, i2 = e.neox ? i + half : 2 * i + 1;
        float x1 = lo, x2 = hi;
        if (e.bias) {
            x1 += bf16_to_f32(e.bias[head * e.hd + i1]);
            x2 += bf16_to_f32(e.bias[head * e.hd + i2]);
        }
        if (head >= e.n_q + e.n_kv) {
            bf16_t* dst = e.vc + epi_kv_index(e.slots[m], head - e.n_q - e.n_kv, e.n_kv, e.block_size, e.hd);
            dst[i1] = f32_to_bf16(x1);
            dst[i2] = f32_to_bf16(x2);
            return;
        }
        const float* cs = e.rope + (u64)e.positions[m] * half * 2;
        float o1, o2;
        rope_rotate(x1, x2, cs[2 * i], cs[2 * i + 1], o1, o2);
        bf16_t* dst = head < e.n_q
                          ? e.out + (u64)m * e.n_q * e.hd + (u64)head * e.hd
                          : e.kc + epi_kv_index(e.slots[m], head - e.n_q, e.n_kv, e.block_size, e.hd);
        dst[i1] = f32_to_bf16(o1);
        dst[i2] = f32_to_bf16(o2);
        return;
    }
    const int a = tile * 16 + r, b = a + 8;
    float* yr = e.y + (u64)m * e.rows;
    if (e.mode == EPI_ADD) {
        if (a < e.rows) yr[a] = yr[a] + lo;
        if (b < e.rows) yr[b] = yr[b] + hi;
    } else {
        if (a < e.rows) yr[a] = lo;
        if (b < e.rows) yr[b] = hi;
    }
}

// The RMSNorm of rmsnorm_residual moved into the GEMM that reads its output: the GEMM reads the
// residual stream x (f32) and the norm weight, and builds its bf16 input as the norm kernel
// would have written it. `nb`: the norm kernel's block size for this hidden size (at most the
// CTA's threads); threads nb.. add zeros, which leaves block_sum's tree as it was.
struct NormIn {
    const float* x;
    const bf16_t* w;
    float eps;
    int nb;
};

// inv[m] = rsqrt(mean(x[m]^2) + eps) for m < rows, in the norm kernel's order; `sh` holds 32 +
// rows floats of shared memory. Ends with a barrier: inv is then visible to every thread.
__device__ __forceinline__ void norm_prologue(const NormIn& n, int rows, int K, float* sh) {
    for (int m = 0; m < rows; ++m) {
        float ss = 0.f;
        if ((int)threadIdx.x < n.nb) {
            const float* xr = n.x + (u64)m * K;
            for (int i = threadIdx.x; i < K; i += n.nb) {
                const float v = xr[i];
                ss = __fmaf_rn(v, v, ss);
            }
        }
        const float inv = rsqrtf(block_sum(ss, sh) / (float)K + n.eps);
        if (threadIdx.x == 0) sh[32 + m] = inv;
    }
    __syncthreads();
}

// The 8 normed bf16 inputs x[m, k..k+8) * inv * w[k..k+8), as the norm kernel rounds them, packed
// as one 16-byte piece of the GEMM input.
__device__ __forceinline__ uint4 norm_piece(const NormIn& n, int m, int K, int k, float inv) {
    const float4* xp = reinterpret_cast<const float4*>(n.x + (u64)m * K + k);
    const float4 a = xp[0], b = xp[1];
    const uint4 w = ld_16(n.w + k);
    uint4 r;
    r.x = pack_bf16x2(a.x * inv * bf16x2_lo(w.x), a.y * inv * bf16x2_hi(w.x));
    r.y = pack_bf16x2(a.z * inv * bf16x2_lo(w.y), a.w * inv * bf16x2_hi(w.y));
    r.z = pack_bf16x2(b.x * inv * bf16x2_lo(w.z), b.y * inv * bf16x2_hi(w.z));
    r.w = pack_bf16x2(b.z * inv * bf16x2_lo(w.w), b.w * inv * bf16x2_hi(w.w));
    return r;
}
