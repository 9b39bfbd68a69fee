#line 1 "quant_gemm.cu"
// Block-quantised weights (Q8_0, Q4_0, Q4_K, Q6_K) in the device layout of src/quant_layout.rs:
// records of 16 weight rows x 128 k, quants then per-row scales. Three uses:
//
// skinny_<fmt>_<rows>: the decode-shaped GEMM Y[m, ldy * m + n] = sum_k X[m, k] W[n, k] for up
//   to 64 rows, reading the blocks. The stored integers become exact bf16 tensor-core operands
//   (magic-number conversions; every quant of these formats is an integer of at most 8 bits)
//   and each scale multiplies the f32 sum of its own 16 or 32 k afterwards: more exact than
//   rounding each weight to bf16. Q4_K's minimum multiplies the sum of x over its sub-block,
//   taken by the tensor cores with a weight of ones. A warp owns every W-th chunk of 128 k and
//   streams its records through a private cp.async ring in shared memory, as the bf16 ring
//   kernels do; warps are summed in index order. The order is fixed by K and W alone, so a
//   row's bits do not depend on how many rows run (the entries differ in ring depth only).
// quant_to_bf16: the weight expanded to bf16 (the reference dequantisation's f32 value,
//   rounded to nearest even), for prefill GEMMs through cuBLASLt (256 threads a CTA).
// quant_embed: rows of the weight as f32 (the reference values) times a scale, for the embedding.

#define QF_Q8_0 0
#define QF_Q4_0 1
#define QF_Q4K 2
#define QF_Q6K 3
// Q4_K in records of 256 k (quant_layout.rs, GpuQuant::Q4K2): a super-block's two 128-k halves
// of quants, then each row's 16 bytes of the file (d, dmin, the 12 bytes of packed six-bit
// scales and minimums), 4.5 bits a weight. A warp still takes 128-k chunks: it copies its half's
// quants and the rows' packed scales into a stage laid out as the other formats' records.
#define QF_Q4K2 4
// Q6_K in records of 256 k (GpuQuant::Q6K2): a super-block's two 128-k halves of quants as Q6_K
// lays out a chunk's, then the rows' scales of the first half (8 bytes a row, + 128), the rows'
// f16 d, the rows' scales of the second half: the file's 6.5625 bits a weight. A half's scales
// and the d are 160 contiguous bytes (d after the scales in the first half, before them in the
// second), what a warp copies into its stage after the half's quants.
#define QF_Q6K2 5

// The order a segment's rows are stored in, tile by tile (quant_order.rs): `mode` EPI_STORE
// as they are; EPI_GLU and EPI_ROPE as skinny_epilogue.cu's tile_row pairs them, so that the
// decode GEMM's epilogue finds each pair in one tile. Every kernel that reads the rows maps
// them back through tile_row.
struct RowOrder {
    int mode, rows, hd, neox;
};
__device__ __forceinline__ int stored_row(const RowOrder& o, int tile, int r) {
    return tile_row(o.mode, o.rows, o.hd, o.neox, tile, r);
}

template <int F> struct QFmt;
// G: k per scale; QB: quant bytes per record (per 128-k chunk); SR: scale bytes per row.
template <> struct QFmt<QF_Q8_0> { static constexpr int G = 32, QB = 2048, SR = 8; };
template <> struct QFmt<QF_Q4_0> { static constexpr int G = 32, QB = 1024, SR = 8; };
template <> struct QFmt<QF_Q4K> { static constexpr int G = 32, QB = 1024, SR = 12; };
template <> struct QFmt<QF_Q6K> { static constexpr int G = 16, QB = 1536, SR = 12; };
template <> struct QFmt<QF_Q4K2> { static constexpr int G = 32, QB = 1024, SR = 16; };
template <> struct QFmt<QF_Q6K2> { static constexpr int G = 16, QB = 1536, SR = 10; };

// Bytes of a chunk's stage in shared memory (the record itself but for Q4K2).
template <int F> __host__ __device__ constexpr int q_record() { return QFmt<F>::QB + 16 * QFmt<F>::SR; }

template <int F> __host__ __device__ constexpr bool is_q4k() { return F == QF_Q4K || F == QF_Q4K2; }
template <int F> __host__ __device__ constexpr bool is_q6k() { return F == QF_Q6K || F == QF_Q6K2; }
// Formats whose records hold 256 k, each 128-k chunk read as one half.
template <int F> __host__ __device__ constexpr bool two_halves() { return F == QF_Q4K2 || F == QF_Q6K2; }

// Where chunk c of row tile `tile` is in global memory: its quants (returned) and its rows'
// scales (`scales`), contiguous but for Q4K2 and Q6K2 (Q6K2: the half's 160 bytes of scales and d).
template <int F>
__device__ __forceinline__ const unsigned char* chunk_at(const unsigned char* wq, u64 tile, int chunks, int c,
                                                         const unsigned char*& scales) {
    if (F == QF_Q4K2) {
        const unsigned char* sb = wq + (tile * (u64)(chunks >> 1) + (u64)(c >> 1)) * 2304;
        scales = sb + 2048;
        return sb + (c & 1) * 1024;
    }
    if (F == QF_Q6K2) {
        const unsigned char* sb = wq + (tile * (u64)(chunks >> 1) + (u64)(c >> 1)) * 3360;
        scales = sb + 3072 + (c & 1) * 128;
        return sb + (c & 1) * 1536;
    }
    const unsigned char* q = wq + (tile * (u64)chunks + (u64)c) * q_record<F>();
    scales = q + QFmt<F>::QB;
    return q;
}

__device__ __forceinline__ float f16_bits_to_f32(u32 bits) {
    const unsigned short h = (unsigned short)(bits & 0xffffu);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Byte k of `word` as 2^23 + byte (exact): the float bits 0x4B0000bb.
__device__ __forceinline__ float byte_plus_2p23(u32 word, int k) {
    return __int_as_float((int)__byte_perm(word, 0x4B000000u, 0x7540u | (u32)k));
}

__device__ __forceinline__ u32 bf16x2_fma(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// (a & M) | c in one instruction (ptxas splits the C form in two when c is a constant: a LOP3
// takes one immediate, so c comes in a register).
template <u32 M>
__device__ __forceinline__ u32 masked_or(u32 a, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(M), "r"(c));
    return d;
}

__device__ __forceinline__ u32 u4_word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// One lane's part of one row of a record: 32 quants (words of 8 values) and the row's scales.
template <int F> struct LaneRow {
    uint4 q[F == QF_Q8_0 ? 2 : 1];
    uint2 h;  // Q6_K: the high two bits
    u32 s[3];
};

// Lane t's part of row r from a chunk's quants `rec` and its rows' scales `scl` (a stage: scl =
// rec + QB). Q4K2 unpacks half `half` of the row's packed scales into Q4_K's words: s[1] the
// four sub-block scales, s[2] the four minimums (kiln_formats' scale_min_k4, a word at a time).
template <int F>
__device__ __forceinline__ LaneRow<F> lane_row_at(const unsigned char* rec, const unsigned char* scl, int r,
                                                  int t, int half) {
    using Q = QFmt<F>;
    LaneRow<F> L;
    L.q[0] = *reinterpret_cast<const uint4*>(rec + (r * 4 + t) * 16);
    if (F == QF_Q8_0) L.q[F == QF_Q8_0 ? 1 : 0] = *reinterpret_cast<const uint4*>(rec + 1024 + (r * 4 + t) * 16);
    if (is_q6k<F>()) L.h = *reinterpret_cast<const uint2*>(rec + 1024 + (r * 4 + t) * 8);
    if (F == QF_Q4K2) {
        const uint4 v = *reinterpret_cast<const uint4*>(scl + r * 16);
        L.s[0] = v.x;
        L.s[1] = half ? (v.w & 0x0F0F0F0Fu) | ((v.y >> 2) & 0x30303030u) : v.y & 0x3F3F3F3Fu;
        L.s[2] = half ? ((v.w >> 4) & 0x0F0F0F0Fu) | ((v.z >> 2) & 0x30303030u) : v.z & 0x3F3F3F3Fu;
        return L;
    }
    if (F == QF_Q6K2) {
        // Q6_K's words: the half's eight scales (+ 128), then d.
        const uint2 v = *reinterpret_cast<const uint2*>(scl + (half ? 32 : 0) + r * 8);
        L.s[0] = v.x;
        L.s[1] = v.y;
        L.s[2] = *reinterpret_cast<const unsigned short*>(scl + (half ? 0 : 128) + r * 2);
        return L;
    }
    const u32* s = reinterpret_cast<const u32*>(scl + r * Q::SR);
#pragma unroll
    for (int i = 0; i < Q::SR / 4; ++i) L.s[i] = s[i];
    return L;
}

// From a stage (or a record laid out as one).
template <int F>
__device__ __forceinline__ LaneRow<F> lane_row(const unsigned char* rec, int r, int t, int half = 0) {
    return lane_row_at<F>(rec, rec + QFmt<F>::QB, r, t, half);
}

// Q6_K's three words of lane pairs 8g..8g + 8 (quant_layout.rs, q6_places): a0 and a1 of the
// 16 quant bytes, a2 of the 8 at 1024.
template <int F>
__device__ __forceinline__ void q6_words(const LaneRow<F>& L, int g, u32& a0, u32& a1, u32& a2) {
    a0 = g ? L.q[0].z : L.q[0].x;
    a1 = g ? L.q[0].w : L.q[0].y;
    a2 = g ? L.h.y : L.h.x;
}

// 128 + q as bf16 in each half of lane value pair (word w, pair p) of a 4- or 6-bit format
// (magic-number conversions: 0x4300 | q is the bf16 of 128 + q). Pair p of word w is values
// 8w + 2p (low half) and 8w + 2p + 1. Q6_K's pairs 0-5 of each eight are six-bit fields (one
// mask), pairs 6 and 7 a nibble and two high bits merged into the magic first.
template <int F>
__device__ __forceinline__ u32 lane_pair_biased(const LaneRow<F>& L, int w, int p) {
    const u32 magic = 0x43004300u;
    if constexpr (is_q6k<F>()) {
        u32 a0, a1, a2;
        q6_words(L, w >> 1, a0, a1, a2);
        const int pp = 4 * (w & 1) + p;
        if (pp == 6) return masked_or<0x000F000Fu>(a0 >> 12, masked_or<0x00300030u>(a2 >> 8, magic));
        if (pp == 7) return masked_or<0x000F000Fu>(a1 >> 12, masked_or<0x00300030u>(a2 >> 10, magic));
        const u32 src = pp < 2 ? a0 : pp < 4 ? a1 : a2;
        return masked_or<0x003F003Fu>(src >> (6 * (pp & 1)), magic);
    }
    return masked_or<0x000F000Fu>(u4_word(L.q[0], w) >> (4 * p), magic);
}

// Q6_K's stored six-bit quant (0..63) of lane value pair (word w, pair p), half `half`.
template <int F>
__device__ __forceinline__ int q6_quant(const LaneRow<F>& L, int w, int p, int half) {
    u32 a0, a1, a2;
    q6_words(L, w >> 1, a0, a1, a2);
    const int pp = 4 * (w & 1) + p, h = 16 * half;
    if (pp == 6) return (int)(((a0 >> (12 + h)) & 15u) | (((a2 >> (12 + h)) & 3u) << 4));
    if (pp == 7) return (int)(((a1 >> (12 + h)) & 15u) | (((a2 >> (14 + h)) & 3u) << 4));
    const u32 src = pp < 2 ? a0 : pp < 4 ? a1 : a2;
    return (int)((src >> (6 * (pp & 1) + h)) & 63u);
}

// The stored integer of lane value (word w, pair p, half) as bf16x2 operand pairs, already
// offset as the format says (Q4_0: q - 8, Q6_K: q - 32, Q8_0: signed, Q4_K: q).
template <int F>
__device__ __forceinline__ u32 lane_pair(const LaneRow<F>& L, int w, int p) {
    if (F == QF_Q8_0) {
        // Bytes 2p, 2p + 1 of the word's 8; flipping the sign bit makes them q + 128.
        const u32 word = u4_word(L.q[w >> 1], 2 * (w & 1) + (p >> 1)) ^ 0x80808080u;
        const float lo = byte_plus_2p23(word, 2 * (p & 1)) - 8388736.0f;
        const float hi = byte_plus_2p23(word, 2 * (p & 1) + 1) - 8388736.0f;
        return pack_bf16x2(lo, hi);
    }
    const u32 v = lane_pair_biased<F>(L, w, p);
    if (is_q6k<F>()) return bf16x2_fma(v, 0x3F803F80u, 0xC320C320u);  // - 160
    return bf16x2_fma(v, 0x3F803F80u, F == QF_Q4_0 ? 0xC308C308u : 0xC300C300u);  // - 136 / - 128
}

// The f16 in half (i & 1) of u32 i / 2 of s.
__device__ __forceinline__ float scale_f16(const u32* s, int i) {
    return f16_bits_to_f32(s[i >> 1] >> (16 * (i & 1)));
}

template <int F, int NT, int S, int W>
__device__ __forceinline__ void skinny_quant_body(float* __restrict__ y, const bf16_t* __restrict__ x,
                                                  const unsigned char* __restrict__ wq, int M, int N,
                                                  int K, int ldy) {
    using Q = QFmt<F>;
    constexpr int REC = q_record<F>();
    constexpr int G = Q::G, P = G / 4;
    extern __shared__ __align__(16) unsigned char sq_smem[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int chunks = (K + 127) / 128;
    const unsigned char* tile = wq + (u64)blockIdx.x * chunks * REC;
    unsigned char* ring = sq_smem + warp * S * REC;
    const int n_my = chunks > warp ? (chunks - warp + W - 1) / W : 0;

    // The warp copies its i-th record into its stage; always commits a group (maybe empty)
    // so the wait counts below hold at the tail.
    auto issue = [&](int i) {
        if (i < n_my) {
            const unsigned char* src = tile + (u64)(warp + i * W) * REC;
            unsigned char* dst = ring + (i % S) * REC;
#pragma unroll
            for (int p = lane; p < REC / 16; p += 32) cp_async_16(dst + p * 16, src + p * 16, 16);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(i);
    // Started as a dependent launch: the weights above stream in while the previous kernel
    // finishes; x and y belong to it until here.
    pdl_wait();

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
    const u32 ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};

    for (int i = 0; i < n_my; ++i) {
        cp_async_wait<S - 2>();  // this lane's copies of record i have landed
        __syncwarp();            // ... and every other lane's
        const unsigned char* st = ring + (i % S) * REC;
        const LaneRow<F> ra = lane_row<F>(st, g, t);
        const LaneRow<F> rb = lane_row<F>(st, g + 8, t);
        // Every lane has read the stage read one iteration ago (the barrier above): refill it.
        issue(i + S - 1);
        const int k0 = (warp + i * W) * 128;

        // Q4_K: d and dmin of both rows, then each times -2^23, once per chunk.
        float k4[8];
        if (F == QF_Q4K) {
            k4[0] = scale_f16(ra.s, 0);
            k4[1] = scale_f16(ra.s, 1);
            k4[2] = scale_f16(rb.s, 0);
            k4[3] = scale_f16(rb.s, 1);
#pragma unroll
            for (int i = 0; i < 4; ++i) k4[4 + i] = -k4[i] * 8388608.0f;
        }
#pragma unroll
        for (int grp = 0; grp < 128 / G; ++grp) {
            // This group's operands: G / 16 tensor-core steps; step h of the chunk uses word
            // h / 2, pairs 2 (h % 2) and 2 (h % 2) + 1.
            u32 a[G / 16][4];
#pragma unroll
            for (int u = 0; u < G / 16; ++u) {
                const int h = grp * (G / 16) + u, w = h >> 1, p = 2 * (h & 1);
                a[u][0] = lane_pair<F>(ra, w, p);
                a[u][1] = lane_pair<F>(rb, w, p);
                a[u][2] = lane_pair<F>(ra, w, p + 1);
                a[u][3] = lane_pair<F>(rb, w, p + 1);
            }
            // Scales of rows g and g + 8 for this group.
            float sa, sb_, ma = 0.f, mb = 0.f;
            if (F == QF_Q4K) {
                // d * scale and dmin * min, exact products: fma(d, 2^23 + s, -d 2^23) rounds
                // once, to the exact product.
                sa = __fmaf_rn(k4[0], byte_plus_2p23(ra.s[1], grp), k4[4]);
                sb_ = __fmaf_rn(k4[2], byte_plus_2p23(rb.s[1], grp), k4[6]);
                ma = -__fmaf_rn(k4[1], byte_plus_2p23(ra.s[2], grp), k4[5]);
                mb = -__fmaf_rn(k4[3], byte_plus_2p23(rb.s[2], grp), k4[7]);
            } else if (F == QF_Q6K) {
                const float fa = byte_plus_2p23(ra.s[grp >> 2], grp & 3) - 8388736.0f;
                const float fb = byte_plus_2p23(rb.s[grp >> 2], grp & 3) - 8388736.0f;
                sa = __fmul_rn(f16_bits_to_f32(ra.s[2]), fa);
                sb_ = __fmul_rn(f16_bits_to_f32(rb.s[2]), fb);
            } else {
                sa = scale_f16(ra.s, grp);
                sb_ = scale_f16(rb.s, grp);
            }
            const int kx = k0 + grp * G + t * P;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int m = j * 8 + g;
                const bool in = m < M && kx < K;
                u32 bx[G / 16][2];
                if (G == 32) {
                    const uint4 v = in ? ld_16(x + (u64)m * K + kx) : zero4;
                    bx[0][0] = v.x;
                    bx[0][1] = v.y;
                    bx[G / 16 - 1][0] = v.z;
                    bx[G / 16 - 1][1] = v.w;
                } else {
                    const uint2 v = in ? *reinterpret_cast<const uint2*>(x + (u64)m * K + kx)
                                       : make_uint2(0u, 0u);
                    bx[0][0] = v.x;
                    bx[0][1] = v.y;
                }
                float tmp[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int u = 0; u < G / 16; ++u) mma_bf16_16816(tmp, a[u], bx[u]);
                // c0, c1: row g; c2, c3: row g + 8 (columns 2t, 2t + 1 are x rows).
                acc[j][0] = __fmaf_rn(sa, tmp[0], acc[j][0]);
                acc[j][1] = __fmaf_rn(sa, tmp[1], acc[j][1]);
                acc[j][2] = __fmaf_rn(sb_, tmp[2], acc[j][2]);
                acc[j][3] = __fmaf_rn(sb_, tmp[3], acc[j][3]);
                if (F == QF_Q4K) {
                    float xs[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                    for (int u = 0; u < G / 16; ++u) mma_bf16_16816(xs, ones, bx[u]);
                    acc[j][0] = __fmaf_rn(ma, xs[0], acc[j][0]);
                    acc[j][1] = __fmaf_rn(ma, xs[1], acc[j][1]);
                    acc[j][2] = __fmaf_rn(mb, xs[2], acc[j][2]);
                    acc[j][3] = __fmaf_rn(mb, xs[3], acc[j][3]);
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(sq_smem);  // [W][NT][4][32]
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) red[((warp * NT + j) * 4 + q) * 32 + lane] = acc[j][q];
    __syncthreads();
    const int row0 = blockIdx.x * 16;
    for (int e = threadIdx.x; e < NT * 4 * 32; e += blockDim.x) {
        const int j = e / 128, q = (e / 32) % 4, l = e % 32;
        float s = 0.f;
#pragma unroll
        for (int wi = 0; wi < W; ++wi) s += red[wi * NT * 128 + e];
        const int n = row0 + (l >> 2) + ((q & 2) ? 8 : 0);
        const int m = j * 8 + (l & 3) * 2 + (q & 1);
        if (n < N && m < M) y[(u64)m * ldy + n] = s;
    }
}

// src/quant_gemm.rs reads the entries and their shapes from these lines: F the format, NT
// 8-row fragments of x, S ring stages (W * S records of shared memory, which the warp sums
// reuse), W warps, MINB CTAs per SM the registers must allow. Every entry of a format sums in
// the same order (W is the same).
#define SQ_ENTRY(NAME, F, NT, S, W, MINB)                                                            \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                       \
        NAME(float* y, const bf16_t* x, const unsigned char* w, int M, int N, int K, int ldy) {      \
        skinny_quant_body<F, NT, S, W>(y, x, w, M, N, K, ldy);                                       \
    }
// Up to 16 rows two CTAs per SM (ring stages as 113 KB allow), 32 and 64 rows one.
SQ_ENTRY(skinny_q8_0_8, QF_Q8_0, 1, 3, 16, 2)
SQ_ENTRY(skinny_q8_0_16, QF_Q8_0, 2, 3, 16, 2)
SQ_ENTRY(skinny_q8_0_32, QF_Q8_0, 4, 4, 16, 1)
SQ_ENTRY(skinny_q8_0_64, QF_Q8_0, 8, 4, 16, 1)
SQ_ENTRY(skinny_q4_0_8, QF_Q4_0, 1, 6, 16, 2)
SQ_ENTRY(skinny_q4_0_16, QF_Q4_0, 2, 6, 16, 2)
SQ_ENTRY(skinny_q4_0_32, QF_Q4_0, 4, 4, 16, 1)
SQ_ENTRY(skinny_q4_0_64, QF_Q4_0, 8, 4, 16, 1)
SQ_ENTRY(skinny_q4_k_8, QF_Q4K, 1, 5, 16, 2)
SQ_ENTRY(skinny_q4_k_16, QF_Q4K, 2, 5, 16, 2)
SQ_ENTRY(skinny_q4_k_32, QF_Q4K, 4, 4, 16, 1)
SQ_ENTRY(skinny_q4_k_64, QF_Q4K, 8, 4, 16, 1)
SQ_ENTRY(skinny_q6_k_8, QF_Q6K, 1, 4, 16, 2)
SQ_ENTRY(skinny_q6_k_16, QF_Q6K, 2, 4, 16, 2)
SQ_ENTRY(skinny_q6_k_32, QF_Q6K, 4, 4, 16, 1)
SQ_ENTRY(skinny_q6_k_64, QF_Q6K, 8, 4, 16, 1)

// The eight values of word w of lane t's part L of a row of a record, with the reference
// dequantisation's operations in its order (kiln_formats::dequant; no contractions), and the
// chunk-relative k of the first of each run of four (`kk[0]` for values 0..3, `kk[1]` 4..7).
template <int F>
__device__ __forceinline__ void word_values(const LaneRow<F>& L, int t, int w, float* v, int* kk) {
    using Q = QFmt<F>;
    if (Q::G == 32) {
        kk[0] = w * 32 + t * 8;
        kk[1] = kk[0] + 4;
    } else {
        kk[0] = w * 32 + t * 4;
        kk[1] = kk[0] + 16;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const int p = e >> 1, half = e & 1;
        if (F == QF_Q8_0) {
            const u32 word = u4_word(L.q[w >> 1], 2 * (w & 1) + (e >> 2));
            const int q = (int)(signed char)((word >> (8 * (e & 3))) & 0xffu);
            v[e] = __fmul_rn((float)q, scale_f16(L.s, w));
            continue;
        }
        const u32 word = u4_word(L.q[0], w);
        const int lo = (int)((word >> (4 * p + 16 * half)) & 0xFu);
        if (F == QF_Q4_0) {
            v[e] = __fmul_rn((float)(lo - 8), scale_f16(L.s, w));
        } else if (is_q4k<F>()) {
            const float d1 = __fmul_rn(scale_f16(L.s, 0), (float)((L.s[1] >> (8 * w)) & 0xffu));
            const float m1 = __fmul_rn(scale_f16(L.s, 1), (float)((L.s[2] >> (8 * w)) & 0xffu));
            v[e] = __fsub_rn(__fmul_rn(d1, (float)lo), m1);
        } else if constexpr (is_q6k<F>()) {
            const int q6 = q6_quant(L, w, p, half);
            const int grp = 2 * w + (e >> 2);
            const int sc = (int)((L.s[grp >> 2] >> (8 * (grp & 3))) & 0xffu) - 128;
            const float ds = __fmul_rn(f16_bits_to_f32(L.s[2]), (float)sc);
            v[e] = __fmul_rn(ds, (float)(q6 - 32));
        }
    }
}

// out[n * ld + k] = bf16(value of W[n, k]) for n < N, k < K: a thread per (record, row, lane),
// its 32 values of the row's chunk (four words) from one read of its quants and the row's
// scales, the words unrolled; 64 threads a record, consecutive threads on one row's 128 k.
// Index arithmetic in 32 bits, once per record (it was most of the instructions).
template <int F>
__device__ __forceinline__ void to_bf16_body(bf16_t* __restrict__ out, const unsigned char* __restrict__ wq,
                                             int N, int K, int ld, const RowOrder order, int vstore) {
    pdl_enter();
    const u32 chunks = (u32)(K + 127) / 128;
    const u32 records = (u32)((N + 15) / 16) * chunks;
    const int t = threadIdx.x & 3, r = (threadIdx.x >> 2) & 15;
    const u32 per_cta = blockDim.x / 64;
    // K-quant rows are whole 256-value blocks: every chunk is whole.
    constexpr bool WHOLE = is_q4k<F>() || is_q6k<F>();
    for (u32 rec = blockIdx.x * per_cta + (threadIdx.x >> 6); rec < records; rec += gridDim.x * per_cta) {
        const u32 tile = rec / chunks, c = rec - tile * chunks;
        const int n = stored_row(order, (int)tile, r);
        if (n < 0 || n >= N) continue;
        const unsigned char* scl;
        const unsigned char* q = chunk_at<F>(wq, tile, (int)chunks, (int)c, scl);
        const LaneRow<F> L = lane_row_at<F>(q, scl, r, t, (int)(c & 1));
        bf16_t* row = out + (u64)n * ld + c * 128;
        const int kmax = K - (int)c * 128;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            float v[8];
            int kk[2];
            word_values<F>(L, t, w, v, kk);
            if (!WHOLE && kk[0] >= kmax) continue;
            const uint4 o = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                                       pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
            if (QFmt<F>::G == 32) {
                // Eight values in a run of k (ld is a multiple of 8: quant_gemm.rs); `vstore`:
                // as one 16-byte store (st_16), else as the compiler makes it.
                if (vstore)
                    st_16(row + kk[0], o);
                else
                    *reinterpret_cast<uint4*>(row + kk[0]) = o;
            } else {
                *reinterpret_cast<uint2*>(row + kk[0]) = make_uint2(o.x, o.y);
                *reinterpret_cast<uint2*>(row + kk[1]) = make_uint2(o.z, o.w);
            }
        }
    }
}

// The same values as to_bf16_body, one thread per word (8 values) with 64-bit index arithmetic
// per word: the first expansion, kept for A/B runs (KILN_QUANT_EXPAND=words).
template <int F>
__device__ __forceinline__ void to_bf16_words_body(bf16_t* __restrict__ out, const unsigned char* __restrict__ wq,
                                             int N, int K, int ld, const RowOrder order) {
    pdl_enter();
    const int chunks = (K + 127) / 128;
    const u64 units = (u64)N * chunks * 16;
    for (u64 u = (u64)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += (u64)gridDim.x * blockDim.x) {
        const int t = (int)(u & 3), w = (int)((u >> 2) & 3);
        const u64 rc = u >> 4;
        // sr: the row as stored; n: the weight's row.
        const int c = (int)(rc % chunks), sr = (int)(rc / chunks);
        const int n = stored_row(order, sr >> 4, sr & 15);
        if (n < 0 || n >= N) continue;
        const unsigned char* scl;
        const unsigned char* rec = chunk_at<F>(wq, (u64)(sr >> 4), chunks, c, scl);
        float v[8];
        int kk[2];
        word_values<F>(lane_row_at<F>(rec, scl, sr & 15, t, c & 1), t, w, v, kk);
#pragma unroll
        for (int run = 0; run < 2; ++run) {
            const int k = c * 128 + kk[run];
            if (k >= K) continue;
            uint2 o;
            o.x = pack_bf16x2(v[4 * run], v[4 * run + 1]);
            o.y = pack_bf16x2(v[4 * run + 2], v[4 * run + 3]);
            *reinterpret_cast<uint2*>(out + (u64)n * ld + k) = o;
        }
    }
}


// x[i, :] = f32 values of row ids[i] of W times `scale` (Gemma's scaled embeddings; 1 otherwise),
// one CTA per row.
template <int F>
__device__ __forceinline__ void embed_body(float* __restrict__ xo, const unsigned char* __restrict__ wq,
                                           const int* __restrict__ ids, int K, float scale) {
    pdl_enter();
    const int chunks = (K + 127) / 128;
    const int n = ids[blockIdx.x];
    for (int u = threadIdx.x; u < chunks * 16; u += blockDim.x) {
        const int t = u & 3, w = (u >> 2) & 3, c = u >> 4;
        const unsigned char* scl;
        const unsigned char* rec = chunk_at<F>(wq, (u64)(n >> 4), chunks, c, scl);
        float v[8];
        int kk[2];
        word_values<F>(lane_row_at<F>(rec, scl, n & 15, t, c & 1), t, w, v, kk);
#pragma unroll
        for (int run = 0; run < 2; ++run) {
            const int k = c * 128 + kk[run];
            if (k >= K) continue;
            float4 o = make_float4(__fmul_rn(v[4 * run], scale), __fmul_rn(v[4 * run + 1], scale),
                                   __fmul_rn(v[4 * run + 2], scale), __fmul_rn(v[4 * run + 3], scale));
            *reinterpret_cast<float4*>(xo + (u64)blockIdx.x * K + k) = o;
        }
    }
}

#define QTB_ENTRY(NAME, F)                                                                           \
    extern "C" __global__ void NAME(bf16_t* out, const unsigned char* w, int N, int K, int ld,       \
                                    int o_mode, int o_rows, int o_hd, int o_neox, int vstore) {      \
        to_bf16_body<F>(out, w, N, K, ld, RowOrder{o_mode, o_rows, o_hd, o_neox}, vstore);           \
    }
#define QTBW_ENTRY(NAME, F)                                                                          \
    extern "C" __global__ void NAME(bf16_t* out, const unsigned char* w, int N, int K, int ld,       \
                                    int o_mode, int o_rows, int o_hd, int o_neox) {                  \
        to_bf16_words_body<F>(out, w, N, K, ld, RowOrder{o_mode, o_rows, o_hd, o_neox});             \
    }
#define QEMB_ENTRY(NAME, F)                                                                          \
    extern "C" __global__ void NAME(float* x, const unsigned char* w, const int* ids, int K,         \
                                    float scale) {                                                   \
        embed_body<F>(x, w, ids, K, scale);                                                          \
    }
QTB_ENTRY(quant_to_bf16_q8_0, QF_Q8_0)
QEMB_ENTRY(quant_embed_q8_0, QF_Q8_0)
QTBW_ENTRY(quant_to_bf16_words_q8_0, QF_Q8_0)
QTB_ENTRY(quant_to_bf16_q4_0, QF_Q4_0)
QEMB_ENTRY(quant_embed_q4_0, QF_Q4_0)
QTBW_ENTRY(quant_to_bf16_words_q4_0, QF_Q4_0)
QTB_ENTRY(quant_to_bf16_q4_k, QF_Q4K)
QEMB_ENTRY(quant_embed_q4_k, QF_Q4K)
QTBW_ENTRY(quant_to_bf16_words_q4_k, QF_Q4K)
QTB_ENTRY(quant_to_bf16_q6_k, QF_Q6K)
QEMB_ENTRY(quant_embed_q6_k, QF_Q6K)
QTBW_ENTRY(quant_to_bf16_words_q6_k, QF_Q6K)
QTB_ENTRY(quant_to_bf16_q4_k2, QF_Q4K2)
QEMB_ENTRY(quant_embed_q4_k2, QF_Q4K2)
QTBW_ENTRY(quant_to_bf16_words_q4_k2, QF_Q4K2)
QTB_ENTRY(quant_to_bf16_q6_k2, QF_Q6K2)
QEMB_ENTRY(quant_embed_q6_k2, QF_Q6K2)
QTBW_ENTRY(quant_to_bf16_words_q6_k2, QF_Q6K2)
