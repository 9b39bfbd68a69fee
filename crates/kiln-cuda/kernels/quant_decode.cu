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

// Byte `sel & 3` of `word` as 2^23 + byte, the selector (0x7540 | byte) in a register.
__device__ __forceinline__ float byte_sel(u32 word, u32 m, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(word), "r"(m), "r"(sel));
    return __uint_as_float(r);
}

// The four bytes of `word`, each as 2^23 + byte.
__device__ __forceinline__ void bytes_f(u32 word, u32 m, float* b) {
    b[0] = byte_f<0>(word, m);
    b[1] = byte_f<1>(word, m);
    b[2] = byte_f<2>(word, m);
    b[3] = byte_f<3>(word, m);
}

// The warps' sums of skinny2_body (red: [W][R][NT][4][32]) added in warp order and put where
// `ep` says: a thread per token and pair of tile rows (g, g + 8), as the epilogue takes them,
// from q = 0, 1 (row g) and q + 2 (row g + 8). Not inlined: inlined, the epilogues changed the
// record loop's register allocation (Q4K2's one-row loop grew by 7 instructions a record); out
// of line the loop stays within a few instructions of the kernel's without epilogues.
template <int NT, int W, int R>
__device__ __noinline__ void skinny2_sums(const float* red, const Epi ep, const RowOrder order,
                                          int tile_base, int tile0, int tiles, int M, int N,
                                          int ldy) {
    for (int e = threadIdx.x; e < R * NT * 64; e += blockDim.x) {
        const int r = e / (NT * 64), j = (e / 64) % NT, q = (e / 32) & 1, l = e % 32;
        const int at = ((r * NT + j) * 4 + q) * 32 + l;
        float lo = 0.f, hi = 0.f;
#pragma unroll
        for (int wi = 0; wi < W; ++wi) {
            lo += red[wi * R * NT * 128 + at];
            hi += red[wi * R * NT * 128 + at + 64];
        }
        const int tile = tile0 + r, g = l >> 2;
        const int m = j * 8 + (l & 3) * 2 + q;
        if (m >= M || tile >= tiles) continue;
        if (ep.mode == EPI_GLU || ep.mode == EPI_ROPE) {
            epi_pair(ep, tile_base + tile, g, m, lo, hi);
            continue;
        }
        const int a = stored_row(order, tile, g), b = stored_row(order, tile, g + 8);
        float* yr = ep.y + (u64)m * ldy;
        const bool add = ep.mode == EPI_ADD;
        if (a >= 0 && a < N) yr[a] = add ? yr[a] + lo : lo;
        if (b >= 0 && b < N) yr[b] = add ? yr[b] + hi : hi;
    }
}

// Where the sums go: `ep` (skinny_epilogue.cu; its y with rows of ldy for STORE and ADD), the
// segment's rows stored in `order` (quant_gemm.cu), `tile_base` the segment's first tile in the
// whole weight (the epilogue's heads and rows count from the weight's first).
template <int F, int NT, int S, int W, bool ODD, int R>
__device__ __forceinline__ void skinny2_body(const Epi& ep, const RowOrder order, int tile_base,
                                             const bf16_t* __restrict__ x,
                                             const unsigned char* __restrict__ wq, int M, int N,
                                             int K, int ldy) {
    using Q = QFmt<F>;
    constexpr int REC = q_record<F>();
    constexpr int G = Q::G, P = G / 4, NG = 128 / G;
    constexpr int PIECES = REC / 16, ROUNDS = (PIECES + 31) / 32, QROUNDS = Q::QB / 512;
    // K-quant rows are whole 256-value blocks: every chunk is whole.
    constexpr bool WHOLE = is_q4k<F>() || is_q6k<F>();
    // x of the whole chunk loaded before the record is read: one fragment (but Q4_K's 8-row
    // entry, which has no registers for it once it shares the scales; see below).
    constexpr bool HOIST = NT == 1 && !(is_q4k<F>() && ODD);
    extern __shared__ __align__(16) unsigned char sq_smem[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int chunks = (K + 127) / 128;
    const int n_my = chunks > warp ? (chunks - warp + W - 1) / W : 0;
    // This CTA's R tiles of 16 rows (a tile past the weight is neither read nor written).
    const int tile0 = blockIdx.x * R, tiles = (N + 15) / 16;
    unsigned char* const ring = sq_smem + warp * S * R * REC;
    // Global bytes a chunk takes (Q4K2, Q6K2: half a 2,304- or 3,360-byte record); a warp's
    // chunks are W apart (W even: a Q4K2 or Q6K2 warp keeps its half).
    constexpr int CB = F == QF_Q4K2 ? 1152 : F == QF_Q6K2 ? 1680 : REC;
    static_assert(!two_halves<F>() || W % 2 == 0, "Q4K2 and Q6K2 warps keep one half of each record");
    const unsigned char* scl;
    const unsigned char* src = chunk_at<F>(wq, (u64)tile0, chunks, warp, scl) + lane * 16;
    // Q4K2, Q6K2: where the rows' scales are from the warp's quants, the same for all its records
    // (a constant in the loop's copy for each half, below).
    const int scl_off = (int)(scl - (src - lane * 16));
    int put = 0, issued = 0;
    // Copies this warp's next record of each tile into its stage (quants, then the rows'
    // scales: a record's two parts, apart only in Q4K2 and Q6K2); always commits a group (maybe empty) so
    // that the wait counts below hold at the tail.
    auto issue = [&](int scales_at) {
        if (issued < n_my) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r > 0 && tile0 + r >= tiles) break;
                unsigned char* dst = ring + (put * R + r) * REC + lane * 16;
                const u64 at = (u64)r * chunks * CB;
#pragma unroll
                for (int k = 0; k < ROUNDS; ++k)
                    if (32 * (k + 1) <= PIECES || lane + 32 * k < PIECES)
                        cp_async_16(dst + 512 * k,
                                    !two_halves<F>() || k < QROUNDS ? src + at + 512 * k
                                                                : src + at + scales_at + 512 * (k - QROUNDS),
                                    16);
            }
            src += (u64)W * CB;
            put = put + 1 == S ? 0 : put + 1;
        }
        ++issued;
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(scl_off);
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
    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;
    const u32 ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
    const u32 offs[4] = {offset_operand<F>(), offset_operand<F>(), offset_operand<F>(),
                         offset_operand<F>()};
    int get = 0;

    // The records, in order. Q4K2's and Q6K2's half (which of a record's two 128-k halves this warp
    // reads: its chunks are W apart, W even) is a constant in each unrolled copy of the loop,
    // so that the unpacking of the packed scales folds to that half's own operations.
    constexpr int HALVES = two_halves<F>() ? 2 : 1;
#pragma unroll
    for (int HALF = 0; HALF < HALVES; ++HALF) {
        if (HALVES == 2 && HALF != (warp & 1)) continue;
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
            // registers a fragment); more, group by group where it is used, once for the R tiles.
            u32 bxa[HOIST ? NT : 1][NG][G / 8];
            if (HOIST) {
    #pragma unroll
                for (int j = 0; j < NT; ++j)
    #pragma unroll
                    for (int grp = 0; grp < NG; ++grp) load_x(j, grp, bxa[j][grp]);
#ifdef KILN_QUANT_HOIST_FENCE
                // A block boundary ptxas keeps: without it, it put the wait below ahead of
                // these loads (the SASS of skinny2_q8_0_1, q4_0, q6_k, q6_k2, NVRTC 13.0), so
                // x came in only after the record had. Never taken (M >= 1). Opt-in
                // (KILN_QUANT_FENCE=1) until measured: it also adds a few spills.
                if (M < 0) sq_smem[0] = 0;
#endif
            }
            cp_async_wait<S - 2>();  // this lane's copies of record i have landed
            __syncwarp();            // ... and every other lane's
            const unsigned char* st = ring + get * R * REC;
            get = get + 1 == S ? 0 : get + 1;
            LaneRow<F> ra[R], rb[R];
    #pragma unroll
            for (int r = 0; r < R; ++r) {
                ra[r] = lane_row<F>(st + r * REC, g, t, HALF);
                rb[r] = lane_row<F>(st + r * REC, g + 8, t, HALF);
            }
            // Every lane has read the stage read one iteration ago (the barrier above): refill it.
            issue(F == QF_Q4K2 ? 2048 - 1024 * HALF : F == QF_Q6K2 ? 3072 - 1408 * HALF : 0);

            // The magic of byte_f, opaque to the compiler so that it stays in a register.
            u32 m23;
            asm("mov.b32 %0, 0x4B000000;" : "=r"(m23));
            // K-quants: each group's scale (and Q4_K's minimum coefficient) of rows g and g + 8,
            // each computed by one lane of the four that share the rows (lane t: Q4_K's group t,
            // Q6_K's groups 2t and 2t + 1) and passed on through the stage just read, whose bytes
            // are all in registers now: the same operations on the same values as when every lane
            // computed all of them, a quarter of the instructions. Each row's eight floats: (scale,
            // minimum) pairs (Q4_K) or scales (Q6_K), read where they are used.
            // The one-row entries, whose registers are spent, compute every scale in every lane.
            constexpr bool KQ = (is_q4k<F>() || is_q6k<F>()) && ODD;
            float k4[R][8], sc[R][4][is_q6k<F>() ? 8 : 4];
            if (!KQ && (is_q4k<F>() || is_q6k<F>())) {
    #pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (is_q4k<F>()) {
                        bytes_f(ra[r].s[1], m23, sc[r][0]);
                        bytes_f(rb[r].s[1], m23, sc[r][1]);
                        bytes_f(ra[r].s[2], m23, sc[r][2]);
                        bytes_f(rb[r].s[2], m23, sc[r][3]);
                        k4[r][0] = scale_f16(ra[r].s, 0);
                        k4[r][1] = scale_f16(ra[r].s, 1);
                        k4[r][2] = scale_f16(rb[r].s, 0);
                        k4[r][3] = scale_f16(rb[r].s, 1);
    #pragma unroll
                        for (int e = 0; e < 4; ++e) k4[r][4 + e] = -k4[r][e] * 8388608.0f;
                    } else {
                        bytes_f(ra[r].s[0], m23, sc[r][0]);
                        bytes_f(ra[r].s[1], m23, sc[r][0] + 4);
                        bytes_f(rb[r].s[0], m23, sc[r][1]);
                        bytes_f(rb[r].s[1], m23, sc[r][1] + 4);
                    }
                }
            }
            if (KQ) {
                __syncwarp();  // every lane has read the stage
    #pragma unroll
                for (int r = 0; r < R; ++r) {
                    float* scr = reinterpret_cast<float*>(const_cast<unsigned char*>(st) + r * REC);
                    if (is_q4k<F>()) {
                        const u32 sel = 0x7540u | (u32)t;
    #pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const LaneRow<F>& L = h ? rb[r] : ra[r];
                            const float d = scale_f16(L.s, 0), dmin = scale_f16(L.s, 1);
                            const float sc = __fmaf_rn(d, byte_sel(L.s[1], m23, sel), -d * 8388608.0f);
                            // dmin m + 128 d sc (dmin m exact, one rounding), taken with a minus sign.
                            const float mc = __fmaf_rn(
                                sc, 128.0f, __fmaf_rn(dmin, byte_sel(L.s[2], m23, sel), -dmin * 8388608.0f));
                            *reinterpret_cast<float2*>(scr + (g + 8 * h) * 8 + 2 * t) = make_float2(sc, mc);
                        }
                    } else {
    #pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const LaneRow<F>& L = h ? rb[r] : ra[r];
                            const float d = f16_bits_to_f32(L.s[2]);
                            // Scale bytes 2t, 2t + 1 (+ 128) of word t / 2.
                            const u32 word = L.s[t >> 1];
                            const u32 sel = 0x7540u | (u32)(2 * (t & 1));
                            const float f0 = byte_sel(word, m23, sel) - 8388736.0f;
                            const float f1 = byte_sel(word, m23, sel + 1) - 8388736.0f;
                            *reinterpret_cast<float2*>(scr + (g + 8 * h) * 8 + 2 * t) =
                                make_float2(__fmul_rn(d, f0), __fmul_rn(d, f1));
                        }
                    }
                }
                __syncwarp();
            }
    #pragma unroll
            for (int grp = 0; grp < NG; ++grp) {
                u32 a[R][G / 16][4];
                // Scales of rows g (s0) and g + 8 (s8); Q4_K's minimum coefficients with the offset
                // (negated where used).
                float s0[R], s8[R], ma[R], mb[R];
    #pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (F == QF_Q8_0) {
                        // Word w of the lane's 32 bytes is group w / 2's bytes 4 (w % 2)..: pairs p
                        // and p + 1 of a step are one word, bytes + 128 through f32 (exact), - 128.
    #pragma unroll
                        for (int u = 0; u < 2; ++u) {
                            const int w = 2 * grp + u;
                            const u32 wa = u4_word(ra[r].q[w >> 2], w & 3) ^ 0x80808080u;
                            const u32 wb = u4_word(rb[r].q[w >> 2], w & 3) ^ 0x80808080u;
                            float fa[4], fb[4];
                            bytes_f(wa, m23, fa);
                            bytes_f(wb, m23, fb);
    #pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                fa[e] -= 8388736.0f;
                                fb[e] -= 8388736.0f;
                            }
                            a[r][u][0] = pack_bf16x2(fa[0], fa[1]);
                            a[r][u][1] = pack_bf16x2(fb[0], fb[1]);
                            a[r][u][2] = pack_bf16x2(fa[2], fa[3]);
                            a[r][u][3] = pack_bf16x2(fb[2], fb[3]);
                        }
                    } else {
    #pragma unroll
                        for (int u = 0; u < G / 16; ++u) {
                            const int h = grp * (G / 16) + u, w = h >> 1, p = 2 * (h & 1);
                            a[r][u][0] = lane_pair_biased<F>(ra[r], w, p);
                            a[r][u][1] = lane_pair_biased<F>(rb[r], w, p);
                            a[r][u][2] = lane_pair_biased<F>(ra[r], w, p + 1);
                            a[r][u][3] = lane_pair_biased<F>(rb[r], w, p + 1);
                        }
                    }
                    ma[r] = mb[r] = 0.f;
                    const float* scr = reinterpret_cast<const float*>(st + r * REC);
                    if (KQ && is_q4k<F>()) {
                        const float2 pa = *reinterpret_cast<const float2*>(scr + g * 8 + 2 * grp);
                        const float2 pb = *reinterpret_cast<const float2*>(scr + (g + 8) * 8 + 2 * grp);
                        s0[r] = pa.x, ma[r] = pa.y, s8[r] = pb.x, mb[r] = pb.y;
                    } else if (KQ) {
                        s0[r] = scr[g * 8 + grp];
                        s8[r] = scr[(g + 8) * 8 + grp];
                    } else if (is_q4k<F>()) {
                        s0[r] = __fmaf_rn(k4[r][0], sc[r][0][grp], k4[r][4]);
                        s8[r] = __fmaf_rn(k4[r][2], sc[r][1][grp], k4[r][6]);
                        // dmin m + 128 d sc (dmin m exact, one rounding), taken with a minus sign.
                        ma[r] = __fmaf_rn(s0[r], 128.0f, __fmaf_rn(k4[r][1], sc[r][2][grp], k4[r][5]));
                        mb[r] = __fmaf_rn(s8[r], 128.0f, __fmaf_rn(k4[r][3], sc[r][3][grp], k4[r][7]));
                    } else if (is_q6k<F>()) {
                        s0[r] = __fmul_rn(f16_bits_to_f32(ra[r].s[2]), sc[r][0][grp] - 8388736.0f);
                        s8[r] = __fmul_rn(f16_bits_to_f32(rb[r].s[2]), sc[r][1][grp] - 8388736.0f);
                    } else {
                        s0[r] = scale_f16(ra[r].s, grp);
                        s8[r] = scale_f16(rb[r].s, grp);
                    }
                }
    #pragma unroll
                for (int j = 0; j < NT; ++j) {
                    u32 bl[G / 8];
                    if (!HOIST) load_x(j, grp, bl);
                    const u32* b = HOIST ? bxa[HOIST ? j : 0][grp] : bl;
                    // Q4_K: the sum of x over the group (taken with the first tile, for every tile).
                    float xs[4] = {0.f, 0.f, 0.f, 0.f};
    #pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float tmp[4] = {0.f, 0.f, 0.f, 0.f};
    #pragma unroll
                        for (int u = 0; u < G / 16; ++u) {
                            if (F == QF_Q4_0 || is_q6k<F>()) mma_bf16_16816(tmp, offs, &b[2 * u]);
                            mma_bf16_16816(tmp, a[r][u], &b[2 * u]);
                        }
                        float* c = acc[r][j];
                        // c0, c1: row g; c2, c3: row g + 8 (columns 2t, 2t + 1 are x rows).
                        c[0] = __fmaf_rn(s0[r], tmp[0], c[0]);
                        c[2] = __fmaf_rn(s8[r], tmp[2], c[2]);
                        if (ODD) {
                            c[1] = __fmaf_rn(s0[r], tmp[1], c[1]);
                            c[3] = __fmaf_rn(s8[r], tmp[3], c[3]);
                        }
                        if (is_q4k<F>()) {
                            if (r == 0) {
    #pragma unroll
                                for (int u = 0; u < G / 16; ++u) mma_bf16_16816(xs, ones, &b[2 * u]);
                            }
                            c[0] = __fmaf_rn(-ma[r], xs[0], c[0]);
                            c[2] = __fmaf_rn(-mb[r], xs[2], c[2]);
                            if (ODD) {
                                c[1] = __fmaf_rn(-ma[r], xs[1], c[1]);
                                c[3] = __fmaf_rn(-mb[r], xs[3], c[3]);
                            }
                        }
                    }
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(sq_smem);  // [W][R][NT][4][32]
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q)
                red[(((warp * R + r) * NT + j) * 4 + q) * 32 + lane] = acc[r][j][q];
    __syncthreads();
    skinny2_sums<NT, W, R>(red, ep, order, tile_base, tile0, tiles, M, N, ldy);
}

// As SQ_ENTRY, with ODD (whether the odd columns are accumulated: false only in the one-row
// entries, `_1`) and R, the 16-row tiles a CTA takes: x is read once for the R tiles (the `_t2`
// entries, one CTA an SM). Every entry of a format has the same W, so the same order.
#define SQ2_ENTRY(NAME, F, NT, S, W, MINB, ODD, R)                                                   \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                       \
        NAME(const bf16_t* x, const unsigned char* w, int M, int N, int K, int ldy, int o_mode,      \
             int o_rows, int o_hd, int o_neox, int tile_base, EPI_PARAMS) {                          \
        skinny2_body<F, NT, S, W, ODD, R>(EPI_MAKE, RowOrder{o_mode, o_rows, o_hd, o_neox},          \
                                          tile_base, x, w, M, N, K, ldy);                            \
    }
SQ2_ENTRY(skinny2_q8_0_1, QF_Q8_0, 1, 3, 16, 2, false, 1)
SQ2_ENTRY(skinny2_q8_0_8, QF_Q8_0, 1, 3, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q8_0_16, QF_Q8_0, 2, 3, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q8_0_32, QF_Q8_0, 4, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q8_0_64, QF_Q8_0, 8, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q8_0_16_t2, QF_Q8_0, 2, 3, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q8_0_32_t2, QF_Q8_0, 4, 3, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q4_0_1, QF_Q4_0, 1, 6, 16, 2, false, 1)
SQ2_ENTRY(skinny2_q4_0_8, QF_Q4_0, 1, 6, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q4_0_16, QF_Q4_0, 2, 6, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q4_0_32, QF_Q4_0, 4, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q4_0_64, QF_Q4_0, 8, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q4_0_16_t2, QF_Q4_0, 2, 4, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q4_0_32_t2, QF_Q4_0, 4, 4, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q4_k_1, QF_Q4K, 1, 5, 16, 2, false, 1)
SQ2_ENTRY(skinny2_q4_k_8, QF_Q4K, 1, 5, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q4_k_16, QF_Q4K, 2, 5, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q4_k_32, QF_Q4K, 4, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q4_k_64, QF_Q4K, 8, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q4_k_16_t2, QF_Q4K, 2, 4, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q4_k_32_t2, QF_Q4K, 4, 4, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q4_k2_1, QF_Q4K2, 1, 5, 16, 2, false, 1)
SQ2_ENTRY(skinny2_q4_k2_8, QF_Q4K2, 1, 5, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q4_k2_16, QF_Q4K2, 2, 5, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q4_k2_32, QF_Q4K2, 4, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q4_k2_64, QF_Q4K2, 8, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q4_k2_16_t2, QF_Q4K2, 2, 4, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q4_k2_32_t2, QF_Q4K2, 4, 4, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q6_k_1, QF_Q6K, 1, 4, 16, 2, false, 1)
SQ2_ENTRY(skinny2_q6_k_8, QF_Q6K, 1, 4, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q6_k_16, QF_Q6K, 2, 4, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q6_k_32, QF_Q6K, 4, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q6_k_64, QF_Q6K, 8, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q6_k_16_t2, QF_Q6K, 2, 3, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q6_k_32_t2, QF_Q6K, 4, 3, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q6_k2_1, QF_Q6K2, 1, 4, 16, 2, false, 1)
SQ2_ENTRY(skinny2_q6_k2_8, QF_Q6K2, 1, 4, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q6_k2_16, QF_Q6K2, 2, 4, 16, 2, true, 1)
SQ2_ENTRY(skinny2_q6_k2_32, QF_Q6K2, 4, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q6_k2_64, QF_Q6K2, 8, 4, 16, 1, true, 1)
SQ2_ENTRY(skinny2_q6_k2_16_t2, QF_Q6K2, 2, 3, 16, 1, true, 2)
SQ2_ENTRY(skinny2_q6_k2_32_t2, QF_Q6K2, 4, 3, 16, 1, true, 2)
