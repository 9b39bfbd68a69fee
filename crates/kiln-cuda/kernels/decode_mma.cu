#line 1 "decode_mma.cu"
// Decode attention on the tensor cores (mma.sync m16n8k16): one query row per sequence (or a
// few rows of one sequence, as a speculative verify step has), split over the KV length.
//
// The 16 rows of the MMA are query slots: the heads of one GQA group (up to 16) times up to
// 16 / group rows of one sequence, so every K/V step is read once for all of them. A split
// covers keys [s * span, (s + 1) * span) with span = max(min_span, pow2ceil(len) / max_splits): a
// power of two fixed by the row's own length bucket, boundaries at absolute positions. One warp
// computes a whole split: steps of 16 keys at absolute multiples of 16 stream through the warp's
// own cp.async ring (no barrier of the CTA inside the loop), under one online softmax, into the
// split's partial (m, l, o). The splits then join DM_CHAINS chains (split s in chain s % 4, each
// folded in index order) and the chains are merged in index order (decode_split.cuh). Where one
// CTA serves all of a row's splits (`fold`, the launcher's choice when the rows are many) warp
// c is chain c: it folds its splits in registers and shared memory and the CTA writes the
// output. Otherwise each warp writes its splits' partials and decode_mma_combine folds them in
// the same order with the same operations. So a row's bits depend on its own length and
// positions only: alone, in any batch, beside the other rows of its sequence, with or without
// the fold (keys past a row's length are masked, which leaves its state exactly unchanged).
// Cache layout: [block][kv_head][block_size][head_dim].

#define DM_WARPS DM_CHAINS
#define DM_STEP 16
static_assert(DECODE_MIN_SPAN % DM_STEP == 0, "a split holds whole steps");
// decode_mma's `flags`: DM_LAZY (KILN_DECODE_LAZY: o rescaled only where a maximum moved) and
// DM_LEAN (KILN_DECODE_LEAN: a step of one KV block loaded from one table entry, and steps every
// row sees wholly scored without masks). The same bits every way.
#define DM_LAZY 1
#define DM_LEAN 2

// One step of 16 keys into a warp's ring stage (keys from kv_end on read as zeros): CH lanes
// to a row; lane l < 16 looks up row l in the block table (once for K and V) and the copying
// lanes take it by shuffle: no division or dependent load per 16-byte copy. With bs_shift >= 0
// (DM_LEAN, blocks of 2^bs_shift keys, a multiple of 16) the step's keys lie in one block, its
// rows consecutive there: one table entry for the warp and no shuffles, and no guards but in a
// split's short last step. A step is at most a few hundred instructions of a warp that waits on
// each of them at batch 1, so these are a good part of its time.
template <int HD>
__device__ __forceinline__ void dm_load_step(bf16_t* sk, bf16_t* sv, const bf16_t* __restrict__ kc,
                                             const bf16_t* __restrict__ vc, const int* __restrict__ table,
                                             int k0, int kv_end, int kvh, int n_kv, int block_size, int bs_shift,
                                             int lane) {
    constexpr int LD = HD + 8, CH = HD / 8, RPW = 32 / CH;  // rows a pass of the warp
    static_assert(CH <= 32 && RPW * CH == 32, "decode_mma step shape");
    if (bs_shift >= 0) {
        const int r0 = lane / CH, c8 = (lane % CH) * 8;
        const u32 row = ((u32)table[k0 >> bs_shift] * (u32)n_kv + (u32)kvh) * (u32)block_size +
                        (u32)(k0 & (block_size - 1)) + (u32)r0;
        const bf16_t* kp = kc + (u64)row * HD + c8;
        const bf16_t* vp = vc + (u64)row * HD + c8;
        bf16_t* dk = sk + r0 * LD + c8;
        bf16_t* dv = sv + r0 * LD + c8;
        if (k0 + DM_STEP <= kv_end) {
#pragma unroll
            for (int j = 0; j < DM_STEP / RPW; ++j) {
                cp_async_16(dk + RPW * j * LD, kp + RPW * j * HD, 16);
                cp_async_16(dv + RPW * j * LD, vp + RPW * j * HD, 16);
            }
        } else {
#pragma unroll
            for (int j = 0; j < DM_STEP / RPW; ++j) {
                const int bytes = k0 + r0 + RPW * j < kv_end ? 16 : 0;  // the block's rows: valid addresses
                cp_async_16(dk + RPW * j * LD, kp + RPW * j * HD, bytes);
                cp_async_16(dv + RPW * j * LD, vp + RPW * j * HD, bytes);
            }
        }
        return;
    }
    const int mp = k0 + (lane & 15);
    const u32 mine = mp < kv_end
        ? ((u32)table[mp / block_size] * (u32)n_kv + (u32)kvh) * (u32)block_size + (u32)(mp % block_size)
        : 0u;  // 0 (a valid address) past kv_end
    const int c = lane % CH;
#pragma unroll
    for (int j = 0; j < DM_STEP / RPW; ++j) {
        const int r = lane / CH + RPW * j;
        const u32 row = __shfl_sync(0xffffffffu, mine, r);
        const int bytes = k0 + r < kv_end ? 16 : 0;
        const u64 off = (u64)row * HD + c * 8;
        cp_async_16(sk + r * LD + c * 8, kc + off, bytes);
        cp_async_16(sv + r * LD + c * 8, vc + off, bytes);
    }
}

// The scores of one step: Q's 16 slots (sq) against the step's 16 keys (sk), both rows of stride
// LD; lane (g, t) ends with keys 8 n + 2 t and + 1 of slots g (elements 0-1) and g + 8 (2-3).
template <int HD>
__device__ __forceinline__ void dm_scores(float (&sc)[2][4], const bf16_t* sq, const bf16_t* sk, int ld, int lane) {
#pragma unroll
    for (int n = 0; n < 2; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
    const int mi = lane >> 3;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        u32 a[4], b[4];
        ldmatrix_x4(a, sq + ((mi & 1) * 8 + (lane & 7)) * ld + kk * 16 + (mi >> 1) * 8);
        ldmatrix_x4(b, sk + ((mi >> 1) * 8 + (lane & 7)) * ld + kk * 16 + (mi & 1) * 8);
        mma_bf16_16816(sc[0], a, b);
        mma_bf16_16816(sc[1], a, b + 2);
    }
}

// LA (the decode_mma_la_* entries, KILN_DECODE_LOOKAHEAD): a step's scores are computed one step
// ahead, beside the previous step's softmax and P V, whose chain of dependent instructions is
// what a warp waits on at batch 1; the ring has a stage more, so that the copies still go out
// NST - 2 steps before their scores. The same operations on the same values: the same bits.
// TR (the decode_mmat_* entries): the transposed step of decode_mmat.cuh, 8 query slots a CTA
// (rows per run halved), o as O^T; the rest (splits, ring, masks' keys, chains) as above.
template <int HD, int NST, bool LA, bool TR>
__device__ __forceinline__ void decode_mma_body(
    const bf16_t* __restrict__ q, const bf16_t* __restrict__ k_cache, const bf16_t* __restrict__ v_cache,
    const int* __restrict__ positions, const int* __restrict__ token_seq, const int* __restrict__ bt_start,
    const int* __restrict__ block_tables, float* __restrict__ part_o, float* __restrict__ part_ml,
    bf16_t* __restrict__ out, int n_q, int n_kv, int block_size, int window, float scale_log2, int max_splits,
    int min_span, int span_round, int fold, int early, int flags) {
    constexpr int LD = HD + 8, DT = HD / 8, LDO = HD + 8;
    // o's MMA tiles: 8 columns of the head each, or (TR) 16 of its dims.
    constexpr int OT = TR ? HD / 16 : DT;
    static_assert(!(TR && LA), "the transposed step has no scores-ahead form");
    // Folding, a chain's O stays in registers up to head dim 128, in shared memory beyond.
    constexpr bool RO = HD <= 128;
    static_assert(NST >= (LA ? 3 : 2), "a ring of two stages at least, three with the scores ahead");
    extern __shared__ __align__(16) unsigned char dm_smem[];
    // Without RO, first [chain][slot][LDO] floats: the chains' O; then the query slots, then
    // each warp's ring of NST stages of K and V. With RO the chains' O go to the start once
    // the rings are drained.
    float* s_o = reinterpret_cast<float*>(dm_smem);
    bf16_t* sq = reinterpret_cast<bf16_t*>(dm_smem + (RO ? 0 : DM_CHAINS * 16 * LDO * 4));
    __shared__ int s_len[16];
    __shared__ float s_ml[DM_CHAINS][16][2];

    const int row0 = blockIdx.z;
    DmRun run;
    if (!dm_run<TR ? 8 : 16>(run, token_seq, positions, n_q, n_kv, window, max_splits, min_span, span_round))
        return;
    const int kvh = run.kvh, hc0 = run.hc0, nh = run.nh, gc = run.gc, nr = run.nr;
    const int max_len = run.max_len, min_first = run.min_first;
    const int span = dm_span(max_len, max_splits, min_span, span_round);
    const bool lazy = flags & DM_LAZY, lean = flags & DM_LEAN;
    // DM_LEAN: blocks of a power of two keys, a multiple of a step, load a step from one entry.
    const int bs_shift =
        lean && block_size % DM_STEP == 0 && (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
    // DM_LEAN: the keys every row of the run sees; the steps wholly inside need no mask.
    const int in_lo = lean ? run.max_first : 0x7fffffff, in_hi = lean ? run.min_len : 0;
    // The CTA's first split, and the stride of each warp's splits.
    if ((int)blockIdx.x * DM_WARPS * span >= max_len) return;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int* table = block_tables + bt_start[token_seq[row0]];
    bf16_t* sk0 = sq + 16 * LD + warp * NST * 2 * DM_STEP * LD;  // this warp's ring: K then V a stage
    if (threadIdx.x < 16) {
        const int r = threadIdx.x / gc, h = threadIdx.x % gc;
        s_len[threadIdx.x] = (r < nr && h < nh) ? positions[row0 + r] + 1 : 0;  // 0: an empty slot
    }
    // This warp's splits: first, first + stride, ... (with the fold: warp c's are chain c's).
    const int first = (int)blockIdx.x * DM_WARPS + warp, stride = (int)gridDim.x * DM_WARPS;
    auto has_split = [&](int s) { return s < max_splits && s * span < max_len; };
    // Split s: keys [lo, hi) and its steps from t_lo (steps wholly before every row's window
    // change no row's state: they start at the first one needed); returns how many.
    auto split_steps = [&](int s, int& lo, int& hi, int& t_lo) {
        lo = s * span;
        hi = min(max_len, lo + span);
        t_lo = max(lo, min_first / DM_STEP * DM_STEP);
        return t_lo < hi ? (hi - t_lo + DM_STEP - 1) / DM_STEP : 0;
    };
    // The warp's splits as one stream of steps, the ring running across split boundaries:
    // flat step f lives in stage f % NST. The cursor: step ii of split is (of in).
    int is = first - stride, ii = 0, in = 0, ilo, ihi, it_lo, issued = 0;
    bool ends = false;
    auto next_k0 = [&]() {  // moves the cursor to the stream's next step: its first key, or -1
        while (!ends && ii == in) {
            is += stride;
            ii = 0;
            if (!has_split(is))
                ends = true;
            else
                in = split_steps(is, ilo, ihi, it_lo);
        }
        return ends ? -1 : it_lo + ii * DM_STEP;
    };
    auto issue = [&]() {  // the stream's next step, if any, and a commit group either way
        if (next_k0() >= 0) {
            bf16_t* sk = sk0 + (issued % NST) * 2 * DM_STEP * LD;
            dm_load_step<HD>(sk, sk + DM_STEP * LD, k_cache, v_cache, table, it_lo + ii * DM_STEP, ihi, kvh, n_kv,
                             block_size, bs_shift, lane);
            ++ii;
            ++issued;
        }
        cp_async_commit();
    };
    // `early`: the ring's first steps whose keys all come before this step's first new key
    // (the smallest position of the sequence's rows in the step: those keys were written by
    // earlier steps, never by the kernels this one may overlap) go out before pdl_wait, while
    // the QKV GEMM before finishes. Positions, sequences and block tables are step inputs,
    // uploaded before the step's first kernel.
    int pre = 0;
    if (early) {
        const int seq = token_seq[row0];
        int first_new = positions[row0];
        for (int r = row0 - 1; r >= 0 && token_seq[r] == seq; --r) first_new = min(first_new, positions[r]);
        for (int r = 1; r < nr; ++r) first_new = min(first_new, positions[row0 + r]);
        while (pre < NST - 1) {
            const int k0 = next_k0();
            if (k0 < 0 || k0 + DM_STEP > first_new) break;
            issue();
            ++pre;
        }
    }
    pdl_wait();
    // The query slots, in a commit group of their own.
    dm_load_query<HD, DM_WARPS * 32>(sq, LD, q, row0, nr, n_q, hc0, nh, gc);
    cp_async_commit();
    for (int st = pre; st < NST - 1; ++st) issue();
    // The query slots landed (this thread's: NST - 1 - pre groups were committed after
    // them), then everyone's: the one barrier before the end. The loop below finds step f's
    // group complete once NST - 2 groups are pending, as with the query group first.
    cp_async_wait_upto(NST - 1 - pre);
    __syncthreads();

    // The chain (fold) of this lane's two slots (a, b): slots g and g + 8, or (TR) 2t and
    // 2t + 1: maximum and sum here, O in co (RO) or in s_o, zero to start.
    const int slot_a = TR ? 2 * t : g, slot_b = TR ? 2 * t + 1 : g + 8;
    float cm_a = KILN_NEG_INF, cm_b = KILN_NEG_INF, cl_a = 0.f, cl_b = 0.f;
    float co[RO ? OT : 1][4];
    float* co_a = s_o + (warp * 16 + g) * LDO + 2 * t;
    float* co_b = co_a + 8 * LDO;
#pragma unroll
    for (int d = 0; d < (RO ? OT : 1); ++d) co[d][0] = co[d][1] = co[d][2] = co[d][3] = 0.f;
    if (!RO && fold) {
        if constexpr (TR) {
            for (int i = lane; i < 16 * HD; i += 32) s_o[(warp * 16 + i / HD) * LDO + i % HD] = 0.f;
        } else {
#pragma unroll
            for (int d = 0; d < DT; ++d) {
                *reinterpret_cast<float2*>(co_a + d * 8) = make_float2(0.f, 0.f);
                *reinterpret_cast<float2*>(co_b + d * 8) = make_float2(0.f, 0.f);
            }
        }
    }
    // TR: Q^T's fragments, once for the whole loop (the slots landed at the barrier above).
    u32 qb[TR ? HD / 8 : 1];
    if constexpr (TR) dmt_query<HD>(qb, sq, LD, lane);
    const int len_a = s_len[slot_a], len_b = s_len[slot_b];
    const int first_a = window > 0 ? len_a - window : 0, first_b = window > 0 ? len_b - window : 0;
    const int my_len = lane < 16 ? s_len[lane] : 0;

    // A split's state: the warp's online softmax over its steps.
    float m_a, m_b, l_a, l_b, o[OT][4];
    int f = 0;  // the flat index of the next step to compute
    for (int s = first; has_split(s); s += stride) {
        int lo, hi, t_lo;
        const int n_steps = split_steps(s, lo, hi, t_lo);
        m_a = m_b = KILN_NEG_INF;
        l_a = l_b = 0.f;
#pragma unroll
        for (int d = 0; d < OT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
        // LA: the scores of step f, computed in the iteration before (or, for a split's first
        // step, in its own).
        float sc[2][4];
        for (int it = 0; it < n_steps; ++it, ++f) {
            // Step f landed (with LA step f + 1 too: this thread's copies, then the warp's);
            // the stage of step f - 1, read by every lane by now, takes the step NST - 1 ahead.
            if constexpr (LA) cp_async_wait<NST - 3>();
            else cp_async_wait<NST - 2>();
            __syncwarp();
            issue();
            const bf16_t* sk = sk0 + (f % NST) * 2 * DM_STEP * LD;
            const bf16_t* sv = sk + DM_STEP * LD;
            const int k0 = t_lo + it * DM_STEP;
            const bool interior = k0 >= in_lo && k0 + DM_STEP <= in_hi;
            // Does any slot see any of these 16 keys? If not, every state stays as it is. (Every
            // real slot sees an interior step's, and a CTA has one at least.)
            auto sees = [&](int k) { return k < my_len && (window <= 0 || k + DM_STEP - 1 >= my_len - window); };
            const bool any = interior || __any_sync(0xffffffffu, sees(k0));
            if constexpr (LA) {
                if (it == 0 && any) dm_scores<HD>(sc, sq, sk, LD, lane);
                const bool next = it + 1 < n_steps && __any_sync(0xffffffffu, sees(k0 + DM_STEP));
                float sn[2][4];
                if (next) dm_scores<HD>(sn, sq, sk0 + ((f + 1) % NST) * 2 * DM_STEP * LD, LD, lane);
                if (any)
                    dm_softmax_pv(sc, o, m_a, m_b, l_a, l_b, sv, LD, lane, k0, len_a, len_b, first_a, first_b,
                                  scale_log2, lazy, interior);
                if (next) {
#pragma unroll
                    for (int n = 0; n < 2; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) sc[n][e] = sn[n][e];
                }
            } else if constexpr (TR) {
                if (!any) continue;
                dmt_scores<HD>(sc[0], qb, sk, LD, lane);
                dmt_softmax_pv<HD>(sc[0], o, m_a, m_b, l_a, l_b, sv, LD, lane, k0, len_a, len_b, first_a, first_b,
                                   scale_log2, lazy, interior);
            } else {
                if (!any) continue;
                dm_scores<HD>(sc, sq, sk, LD, lane);
                dm_softmax_pv(sc, o, m_a, m_b, l_a, l_b, sv, LD, lane, k0, len_a, len_b, first_a, first_b, scale_log2,
                              lazy, interior);
            }
        }
        // The split's partial: l summed over the quad (each lane held its own columns' share),
        // or (TR) over the column's eight lanes (each held keys g and g + 8).
#pragma unroll
        for (int x = TR ? 4 : 1; x < (TR ? 32 : 4); x <<= 1) {
            l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, x));
            l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, x));
        }
        // Slot g (h = 0: o's elements 0-1) or g + 8 (h = 1: 2-3) takes the split, folding it
        // into its chain or writing it for the combine, if it is a real row with keys here (the
        // combine reads no others: a row shorter than the CTA's longest has fewer splits).
        auto take = [&](int h, int len, float m, float l, float& cm, float& cl, float* co_h) {
            if (lo >= len) return;
            if constexpr (TR) {
                // o[d][h] and o[d][h + 2]: dims 16 d + g and + 8 of slot 2t + h.
                const int slot = 2 * t + h;
                if (fold) {
                    const DmScale fs = dm_fold_scale(cm, m);
                    cm = fs.m;
                    cl = dm_fold(cl, l, fs);
                    float* c = s_o + (warp * 16 + slot) * LDO + g;
#pragma unroll
                    for (int d = 0; d < OT; ++d) {
                        if constexpr (RO) {
                            co[d][h] = dm_fold(co[d][h], o[d][h], fs);
                            co[d][h + 2] = dm_fold(co[d][h + 2], o[d][h + 2], fs);
                        } else {
                            c[16 * d] = dm_fold(c[16 * d], o[d][h], fs);
                            c[16 * d + 8] = dm_fold(c[16 * d + 8], o[d][h + 2], fs);
                        }
                    }
                } else {
                    const u64 p = ((u64)(row0 + slot / gc) * n_q + hc0 + slot % gc) * max_splits + s;
#pragma unroll
                    for (int d = 0; d < OT; ++d) {
                        part_o[p * HD + 16 * d + g] = o[d][h];
                        part_o[p * HD + 16 * d + g + 8] = o[d][h + 2];
                    }
                    if (g == 0) *reinterpret_cast<float2*>(part_ml + p * 2) = make_float2(m, l);
                }
                return;
            }
            if (fold) {
                const DmScale fs = dm_fold_scale(cm, m);
                cm = fs.m;
                cl = dm_fold(cl, l, fs);
#pragma unroll
                for (int d = 0; d < DT; ++d) {
                    if constexpr (RO) {
                        co[d][2 * h] = dm_fold(co[d][2 * h], o[d][2 * h], fs);
                        co[d][2 * h + 1] = dm_fold(co[d][2 * h + 1], o[d][2 * h + 1], fs);
                    } else {
                        float2* c = reinterpret_cast<float2*>(co_h + d * 8);
                        *c = make_float2(dm_fold(c->x, o[d][2 * h], fs), dm_fold(c->y, o[d][2 * h + 1], fs));
                    }
                }
            } else {
                const int slot = g + 8 * h;
                const u64 p = ((u64)(row0 + slot / gc) * n_q + hc0 + slot % gc) * max_splits + s;
#pragma unroll
                for (int d = 0; d < DT; ++d)
                    *reinterpret_cast<float2*>(part_o + p * HD + d * 8 + 2 * t) =
                        make_float2(o[d][2 * h], o[d][2 * h + 1]);
                if (t == 0) *reinterpret_cast<float2*>(part_ml + p * 2) = make_float2(m, l);
            }
        };
        take(0, len_a, m_a, l_a, cm_a, cl_a, co_a);
        take(1, len_b, m_b, l_b, cm_b, cl_b, co_b);
    }
    cp_async_wait<0>();
    if (!fold) return;
    // The fold: the chains merged in index order, the output written.
    if constexpr (RO) {
        __syncthreads();  // every warp is done with its ring and the query slots
#pragma unroll
        for (int d = 0; d < OT; ++d) {
            if constexpr (TR) {
                float* ca = s_o + (warp * 16 + slot_a) * LDO + 16 * d + g;
                float* cb = s_o + (warp * 16 + slot_b) * LDO + 16 * d + g;
                ca[0] = co[d][0];
                cb[0] = co[d][1];
                ca[8] = co[d][2];
                cb[8] = co[d][3];
            } else {
                *reinterpret_cast<float2*>(co_a + d * 8) = make_float2(co[d][0], co[d][1]);
                *reinterpret_cast<float2*>(co_b + d * 8) = make_float2(co[d][2], co[d][3]);
            }
        }
    }
    if (TR ? g == 0 : t == 0) {
        s_ml[warp][slot_a][0] = cm_a;
        s_ml[warp][slot_a][1] = cl_a;
        s_ml[warp][slot_b][0] = cm_b;
        s_ml[warp][slot_b][1] = cl_b;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < 16 * HD; idx += DM_WARPS * 32) {
        const int i = idx / HD, d = idx % HD;
        if (s_len[i] == 0) continue;
        float M[DM_CHAINS], L[DM_CHAINS], O[DM_CHAINS], sc[DM_CHAINS];
#pragma unroll
        for (int c = 0; c < DM_CHAINS; ++c) {
            M[c] = s_ml[c][i][0];
            L[c] = s_ml[c][i][1];
            O[c] = s_o[(c * 16 + i) * LDO + d];
        }
        const float l = dm_chain_scales(M, L, sc);
        out[((u64)(row0 + i / gc) * n_q + hc0 + i % gc) * HD + d] = dm_chain_out(O, sc, l);
    }
}

// decode_mma_hd*: `fold` 1 (one CTA a row run and head group: gridDim.x == 1) writes the output;
// 0 writes each split's partials for decode_mma_combine. `flags`: DM_LAZY and DM_LEAN (above).
#define DM_ENTRY(NAME, HD, NST, MINB, LA, TR)                                                           \
    extern "C" __global__ void __launch_bounds__(128, MINB) NAME(                                       \
        const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const int* positions, const int* token_seq, \
        const int* bt_start, const int* block_tables, float* part_o, float* part_ml, bf16_t* out, int n_q, \
        int n_kv, int block_size, int window, float scale_log2, int max_splits, int min_span, int span_round, \
        int fold, int early, int flags) {                                                               \
        pdl_trigger();                                                                                  \
        decode_mma_body<HD, NST, LA, TR>(q, kc, vc, positions, token_seq, bt_start, block_tables, part_o, part_ml, \
                                 out, n_q, n_kv, block_size, window, scale_log2, max_splits, min_span, span_round, \
                                 fold, early, flags);                                                   \
    }
// Ring depth (a warp's stages of 16 keys) and CTAs per SM by head dim: about 100 KB of K/V in
// flight per SM or more (the shared memory: attn_launch.rs's decode_mma_smem_bytes).
DM_ENTRY(decode_mma_hd16, 16, 6, 4, false, false)
DM_ENTRY(decode_mma_hd32, 32, 4, 4, false, false)
DM_ENTRY(decode_mma_hd64, 64, 3, 3, false, false)
DM_ENTRY(decode_mma_hd128, 128, 3, 2, false, false)
DM_ENTRY(decode_mma_hd256, 256, 2, 1, false, false)
// The scores one step ahead (LA), a stage more each; none at head dim 256, whose three stages
// and folding chains would not fit in shared memory.
DM_ENTRY(decode_mma_la_hd16, 16, 7, 4, true, false)
DM_ENTRY(decode_mma_la_hd32, 32, 5, 4, true, false)
DM_ENTRY(decode_mma_la_hd64, 64, 4, 3, true, false)
DM_ENTRY(decode_mma_la_hd128, 128, 4, 2, true, false)
// The transposed step (TR, KILN_DECODE_TRANSPOSE=1): the same rings and CTAs a multiprocessor.
DM_ENTRY(decode_mmat_hd64, 64, 3, 3, false, true)
DM_ENTRY(decode_mmat_hd128, 128, 3, 2, false, true)
DM_ENTRY(decode_mmat_hd256, 256, 2, 1, false, true)
// Deep rings (KILN_DECODE_DEEP, on for launches of one wave that do not fold): more steps in
// flight a warp, and as many of them issued before the wait on the kernel ahead, one CTA a
// multiprocessor (about 144 KB); the same bits as the shallow ones.
DM_ENTRY(decode_mma_deep_hd64, 64, 7, 1, false, false)
DM_ENTRY(decode_mma_deep_hd128, 128, 4, 1, false, false)
DM_ENTRY(decode_mmat_deep_hd64, 64, 7, 1, false, true)
DM_ENTRY(decode_mmat_deep_hd128, 128, 4, 1, false, true)
// Deeper rings for A/B runs (KILN_DECODE_DEEP_STAGES=6, hd 128, the first form): 213 KB.
DM_ENTRY(decode_mma_deep6_hd128, 128, 6, 1, false, false)
