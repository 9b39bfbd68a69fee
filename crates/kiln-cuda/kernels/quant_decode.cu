#line 1 "quant_decode.cu"
// skinny2_<fmt>_<rows>: the decode-shaped product of skinny_<fmt>_<rows> (same records, grid,
// warps, chunk order and warp sums) in fewer instructions per record, which is what bounds the
// first family at batch 1: skinny_q4_k_8 issues 332 instructions per 1,216-byte record, so
// streaming at 3.6 TB/s would need 3.7 of the SM's 4 issue slots a cycle. Here:
// - 4- and 6-bit quants enter the tensor cores as 128 + q (one LOP3 a pair, no bf16 subtract)
//   and the offset comes back through the sum of x over the group: Q4_0 and Q6_K chain a
//   product with a constant operand (-136, -160) into the group's accumulator; Q4_K folds
//   -128 into the coefficient of its minimum, whose sum of x it already takes.
// - x is read from one pointer per row fragment set before the loop, issued before the
//   record's shared-memory reads so that its latency overlaps the conversions; the ring copies
//   from a pointer stepped once per record, into a stage counted without a division.
// - ODD false (the one-row entries): only the even columns of each product (x rows 0, 2, ..)
//   are accumulated; the rows written are summed exactly as in the other entries.
// The order of every sum is fixed by K and W alone, as in the first family, so a row's bits do
// not depend on how many rows run; they differ from the first family's (the offset terms).

// The constant operand whose product with x takes the offset back: bf16 -136 (Q4_0:
// (128 + q) - 136 = q - 8) and -160 (Q6_K: (128 + q) - 160 = q - 32).
template <int F> __device__ __forceinline__ constexpr u32 offset_operand() {
    return F == QF_Q4_0 ? 0xC308C308u : 0xC320C320u;
}

// Byte k of `word` as 2^23 + byte, as byte_plus_2p23, with the magic in a register `m`
// (0x4B000000) so that the byte selector is the PRMT's immediate: the other form spends an
// instruction per call materialising the selector.
template <int k>
__device__ __forceinline__ float byte_f(u32 word, u32 m) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(word), "r"(m), "n"(0x7540 | k));
    return __uint_as_float(r);
}

// The four bytes of `word`, each as 2^23 + byte.
__device__ __forceinline__ void bytes_f(u32 word, u32 m, float* b) {
    b[0] = byte_f<0>(word, m);
    b[1] = byte_f<1>(word, m);
    b[2] = byte_f<2>(word, m);
    b[3] = byte_f<3>(word, m);
}

template <int F, int NT, int S, int W, bool ODD>
__device__ __forceinline__ void skinny2_body(float* __restrict__ y, const bf16_t* __restrict__ x,
                                             const unsigned char* __restrict__ wq, int M, int N,
                                             int K, int ldy) {
    using Q = QFmt<F>;
    constexpr int REC = q_record<F>();
    constexpr int G = Q::G, P = G / 4, NG = 128 / G;
    constexpr int PIECES = REC / 16, ROUNDS = (PIECES + 31) / 32;
    // K-quant rows are whole 256-value blocks: every chunk is whole.
    constexpr bool WHOLE = F == QF_Q4K || F == QF_Q6K;
    constexpr bool HOIST = NT == 1;
    extern __shared__ __align__(16) unsigned char sq_smem[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int chunks = (K + 127) / 128;
    const int n_my = chunks > warp ? (chunks - warp + W - 1) / W : 0;
    const unsigned char* src = wq + ((u64)blockIdx.x * chunks + warp) * REC + lane * 16;
    unsigned char* const ring = sq_smem + warp * S * REC;
    int put = 0, issued = 0;
    // Copies this warp's next record into its stage; always commits a group (maybe empty) so
    // that the wait counts below hold at the tail.
    auto issue = [&]() {
        if (issued < n_my) {
            unsigned char* dst = ring + put * REC + lane * 16;
#pragma unroll
            for (int r = 0; r < ROUNDS; ++r)
                if (32 * (r + 1) <= PIECES || lane + 32 * r < PIECES)
                    cp_async_16(dst + 512 * r, src + 512 * r, 16);
            src += (u64)W * REC;
            put = put + 1 == S ? 0 : put + 1;
        }
        ++issued;
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue();
    // Started as a dependent launch: the weights above stream in while the previous kernel
    // finishes; x and y belong to it until here.
    pdl_wait();

    // Row g of each fragment, at lane t's first k of a group.
    const bf16_t* xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        // A row past M reads row 0 instead: a column of the product depends on its own x row
        // only, and those columns are not written. No predicate, no zero fill.
        xrow[j] = x + (u64)(j * 8 + g < M ? j * 8 + g : 0) * K + t * P;
    }
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const u32 ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
    const u32 offs[4] = {offset_operand<F>(), offset_operand<F>(), offset_operand<F>(),
                         offset_operand<F>()};
    int get = 0;

    for (int i = 0; i < n_my; ++i) {
        const int k0 = (warp + i * W) * 128;
        // x of group grp of fragment j: G / 16 steps of two registers.
        auto load_x = [&](int j, int grp, u32* b) {
            // Q8_0 and Q4_0: a group past K is zero (the weights' padding there is zero too,
            // but 0 times whatever lies past the row need not be).
            const bool in = WHOLE || k0 + grp * G < K;
            const bf16_t* p = xrow[j] + k0 + grp * G;
            if (G == 32) {
                const uint4 v = in ? ld_16(p) : make_uint4(0u, 0u, 0u, 0u);
                b[0] = v.x;
                b[1] = v.y;
                b[G / 8 - 2] = v.z;
                b[G / 8 - 1] = v.w;
            } else {
                const uint2 v = in ? *reinterpret_cast<const uint2*>(p) : make_uint2(0u, 0u);
                b[0] = v.x;
                b[1] = v.y;
            }
        };
        // One fragment: the whole chunk's x is loaded before the record is read (16
        // registers a fragment); more, group by group where it is used.
        u32 bxa[HOIST ? NT : 1][NG][G / 8];
        if (HOIST) {
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int grp = 0; grp < NG; ++grp) load_x(j, grp, bxa[j][grp]);
        }
        cp_async_wait<S - 2>();  // this lane's copies of record i have landed
        __syncwarp();            // ... and every other lane's
        const unsigned char* st = ring + get * REC;
        get = get + 1 == S ? 0 : get + 1;
        const LaneRow<F> ra = lane_row<F>(st, g, t);
        const LaneRow<F> rb = lane_row<F>(st, g + 8, t);
        // Every lane has read the stage read one iteration ago (the barrier above): refill it.
        issue();

        // The magic of byte_f, opaque to the compiler so that it stays in a register.
        u32 m23;
        asm("mov.b32 %0, 0x4B000000;" : "=r"(m23));
        // Q4_K: d and dmin of both rows, and -2^23 times each, once per chunk; the scale and
        // minimum bytes of both rows as 2^23 + byte. Q6_K: the scale bytes (+ 128).
        float k4[8], sc[4][F == QF_Q6K ? 8 : 4];
        if (F == QF_Q4K) {
            bytes_f(ra.s[1], m23, sc[0]);
            bytes_f(rb.s[1], m23, sc[1]);
            bytes_f(ra.s[2], m23, sc[2]);
            bytes_f(rb.s[2], m23, sc[3]);
        } else if (F == QF_Q6K) {
            bytes_f(ra.s[0], m23, sc[0]);
            bytes_f(ra.s[1], m23, sc[0] + 4);
            bytes_f(rb.s[0], m23, sc[1]);
            bytes_f(rb.s[1], m23, sc[1] + 4);
        }
        if (F == QF_Q4K) {
            k4[0] = scale_f16(ra.s, 0);
            k4[1] = scale_f16(ra.s, 1);
            k4[2] = scale_f16(rb.s, 0);
            k4[3] = scale_f16(rb.s, 1);
#pragma unroll
            for (int e = 0; e < 4; ++e) k4[4 + e] = -k4[e] * 8388608.0f;
        }
#pragma unroll
        for (int grp = 0; grp < NG; ++grp) {
            u32 a[G / 16][4];
            if (F == QF_Q8_0) {
                // Word w of the lane's 32 bytes is group w / 2's bytes 4 (w % 2)..: pairs p and
                // p + 1 of a step are one word, bytes + 128 through f32 (exact), minus 128.
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int w = 2 * grp + u;
                    const u32 wa = u4_word(ra.q[w >> 2], w & 3) ^ 0x80808080u;
                    const u32 wb = u4_word(rb.q[w >> 2], w & 3) ^ 0x80808080u;
                    float fa[4], fb[4];
                    bytes_f(wa, m23, fa);
                    bytes_f(wb, m23, fb);
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        fa[e] -= 8388736.0f;
                        fb[e] -= 8388736.0f;
                    }
                    a[u][0] = pack_bf16x2(fa[0], fa[1]);
                    a[u][1] = pack_bf16x2(fb[0], fb[1]);
                    a[u][2] = pack_bf16x2(fa[2], fa[3]);
                    a[u][3] = pack_bf16x2(fb[2], fb[3]);
                }
            } else {
#pragma unroll
                for (int u = 0; u < G / 16; ++u) {
                    const int h = grp * (G / 16) + u, w = h >> 1, p = 2 * (h & 1);
                    a[u][0] = lane_pair_biased<F>(ra, w, p);
                    a[u][1] = lane_pair_biased<F>(rb, w, p);
                    a[u][2] = lane_pair_biased<F>(ra, w, p + 1);
                    a[u][3] = lane_pair_biased<F>(rb, w, p + 1);
                }
            }
            // Scales of rows g (s0) and g + 8 (s8); Q4_K's minimum coefficients with the offset.
            float s0, s8, ma = 0.f, mb = 0.f;
            if (F == QF_Q4K) {
                s0 = __fmaf_rn(k4[0], sc[0][grp], k4[4]);
                s8 = __fmaf_rn(k4[2], sc[1][grp], k4[6]);
                // -(dmin m + 128 d sc): dmin m exact, one rounding.
                ma = -__fmaf_rn(s0, 128.0f, __fmaf_rn(k4[1], sc[2][grp], k4[5]));
                mb = -__fmaf_rn(s8, 128.0f, __fmaf_rn(k4[3], sc[3][grp], k4[7]));
            } else if (F == QF_Q6K) {
                const float fa = sc[0][grp] - 8388736.0f;
                const float fb = sc[1][grp] - 8388736.0f;
                s0 = __fmul_rn(f16_bits_to_f32(ra.s[2]), fa);
                s8 = __fmul_rn(f16_bits_to_f32(rb.s[2]), fb);
            } else {
                s0 = scale_f16(ra.s, grp);
                s8 = scale_f16(rb.s, grp);
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                u32 bl[G / 8];
                if (!HOIST) load_x(j, grp, bl);
                const u32* b = HOIST ? bxa[HOIST ? j : 0][grp] : bl;
                float tmp[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int u = 0; u < G / 16; ++u) {
                    if (F == QF_Q4_0 || F == QF_Q6K) mma_bf16_16816(tmp, offs, &b[2 * u]);
                    mma_bf16_16816(tmp, a[u], &b[2 * u]);
                }
                // c0, c1: row g; c2, c3: row g + 8 (columns 2t, 2t + 1 are x rows).
                acc[j][0] = __fmaf_rn(s0, tmp[0], acc[j][0]);
                acc[j][2] = __fmaf_rn(s8, tmp[2], acc[j][2]);
                if (ODD) {
                    acc[j][1] = __fmaf_rn(s0, tmp[1], acc[j][1]);
                    acc[j][3] = __fmaf_rn(s8, tmp[3], acc[j][3]);
                }
                if (F == QF_Q4K) {
                    float xs[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                    for (int u = 0; u < G / 16; ++u) mma_bf16_16816(xs, ones, &b[2 * u]);
                    acc[j][0] = __fmaf_rn(ma, xs[0], acc[j][0]);
                    acc[j][2] = __fmaf_rn(mb, xs[2], acc[j][2]);
                    if (ODD) {
                        acc[j][1] = __fmaf_rn(ma, xs[1], acc[j][1]);
                        acc[j][3] = __fmaf_rn(mb, xs[3], acc[j][3]);
                    }
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

// As SQ_ENTRY, with ODD: whether the odd columns are accumulated (false only in the one-row
// entries, `_1`). Every entry of a format has the same W, so the same order.
#define SQ2_ENTRY(NAME, F, NT, S, W, MINB, ODD)                                                      \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                       \
        NAME(float* y, const bf16_t* x, const unsigned char* w, int M, int N, int K, int ldy) {      \
        skinny2_body<F, NT, S, W, ODD>(y, x, w, M, N, K, ldy);                                       \
    }
SQ2_ENTRY(skinny2_q8_0_1, QF_Q8_0, 1, 3, 16, 2, false)
SQ2_ENTRY(skinny2_q8_0_8, QF_Q8_0, 1, 3, 16, 2, true)
SQ2_ENTRY(skinny2_q8_0_16, QF_Q8_0, 2, 3, 16, 2, true)
SQ2_ENTRY(skinny2_q8_0_32, QF_Q8_0, 4, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q8_0_64, QF_Q8_0, 8, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q4_0_1, QF_Q4_0, 1, 6, 16, 2, false)
SQ2_ENTRY(skinny2_q4_0_8, QF_Q4_0, 1, 6, 16, 2, true)
SQ2_ENTRY(skinny2_q4_0_16, QF_Q4_0, 2, 6, 16, 2, true)
SQ2_ENTRY(skinny2_q4_0_32, QF_Q4_0, 4, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q4_0_64, QF_Q4_0, 8, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q4_k_1, QF_Q4K, 1, 5, 16, 2, false)
SQ2_ENTRY(skinny2_q4_k_8, QF_Q4K, 1, 5, 16, 2, true)
SQ2_ENTRY(skinny2_q4_k_16, QF_Q4K, 2, 5, 16, 2, true)
SQ2_ENTRY(skinny2_q4_k_32, QF_Q4K, 4, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q4_k_64, QF_Q4K, 8, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q6_k_1, QF_Q6K, 1, 4, 16, 2, false)
SQ2_ENTRY(skinny2_q6_k_8, QF_Q6K, 1, 4, 16, 2, true)
SQ2_ENTRY(skinny2_q6_k_16, QF_Q6K, 2, 4, 16, 2, true)
SQ2_ENTRY(skinny2_q6_k_32, QF_Q6K, 4, 4, 16, 1, true)
SQ2_ENTRY(skinny2_q6_k_64, QF_Q6K, 8, 4, 16, 1, true)
