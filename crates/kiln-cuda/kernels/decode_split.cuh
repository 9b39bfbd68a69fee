#line 1 "decode_split.cuh"
// The split of a decode row's keys, a split's softmax step and the order its splits are merged
// in, which decode_mma.cu and decode_mma_wide.cu share, written once (their splits are merged by the one
// decode_mma_combine, or folded inside decode_mma itself, so they must agree): concatenated
// before each of them (kernel_sources.rs).

// The fewest keys a split covers by default (min_span, the launch's floor: a power of two, at
// least 16 for decode_mma, this for decode_mma_wide).
#define DECODE_MIN_SPAN 64

// The chains a row's splits are folded in: split s joins chain s % DM_CHAINS, each chain
// folds its splits in index order, and the chains are merged in index order at the end.
#define DM_CHAINS 4

// Keys per split for a row of length `len`, at least min_span and few enough that no row has
// more than max_splits splits: ceil(len / max_splits) rounded up to a multiple of `round` (a
// power of two dividing min_span: 32 by default, so a length just past a power of two takes
// about max_splits splits, not half as many), or with round 0 (KILN_DECODE_SPAN=pow2)
// pow2ceil(len) / max_splits. `rule` holds `round` in its low 16 bits and above them
// long_from / 1024 (KILN_DECODE_LONG; 0 for none): rows of at most long_from keys then take at
// most half of max_splits, which stays the partials' stride and the longer rows' limit.
__device__ __forceinline__ int dm_span(int len, int max_splits, int min_span, int rule) {
    const int round = rule & 0xffff, long_from = (rule >> 16) << 10;
    if (long_from > 0 && len <= long_from) max_splits /= 2;
    if (round == 0) {
        const int p2 = len <= 1 ? 1 : 1 << (32 - __clz(len - 1));
        return max(min_span, p2 / max_splits);
    }
    const int per = (len + max_splits - 1) / max_splits;
    return max(min_span, (per + round - 1) & -round);
}

// Rows a and b (a < b, adjacent) may share a CTA: one sequence (one block table) and one span.
__device__ __forceinline__ bool dm_same(const int* token_seq, const int* positions, int a, int b,
                                        int max_splits, int min_span, int round) {
    return token_seq[a] == token_seq[b] && dm_span(positions[a] + 1, max_splits, min_span, round) ==
                                               dm_span(positions[b] + 1, max_splits, min_span, round);
}

// What a CTA of decode_mma.cu or decode_mma_wide.cu serves (blockIdx.y: KV head and chunk of
// its group; blockIdx.z: the run's first row): up to 16 query slots, gc heads of one KV head's
// group (from hc0, nh of them real) for each of nr rows of one sequence and span; the run's
// longest row and the first key any of its rows' windows sees; the keys every row sees,
// [max_first, min_len) (first: len - window, or 0 without a window), where no score needs a mask.
struct DmRun {
    int kvh, hc0, nh, gc, nr, max_len, min_first, min_len, max_first;
};

// Forms the CTA's run of up to SLOTS query slots (16, or 8 for decode_mmat): rows share it from
// a multiple of SLOTS / gc on while the sequence and the span stay the same (dm_same). False
// where the row belongs to a run another CTA serves.
template <int SLOTS = 16>
__device__ __forceinline__ bool dm_run(DmRun& run, const int* token_seq, const int* positions, int n_q, int n_kv,
                                       int window, int max_splits, int min_span, int round) {
    const int row0 = blockIdx.z;
    const int group = n_q / n_kv;
    const int gc = min(group, SLOTS);          // heads per CTA
    const int chunks = (group + gc - 1) / gc;  // CTAs per KV head and row run
    const int rpc = SLOTS / gc;                // rows per CTA
    run.gc = gc;
    run.kvh = blockIdx.y / chunks;
    run.hc0 = run.kvh * group + (blockIdx.y % chunks) * gc;  // first query head of this CTA
    run.nh = min(gc, run.kvh * group + group - run.hc0);
    // A run of rows starts at a multiple of rpc or where the sequence or span changes.
    if (row0 % rpc != 0 && dm_same(token_seq, positions, row0 - 1, row0, max_splits, min_span, round)) return false;
    const int n_rows_total = gridDim.z;
    int nr = 1;
    while (nr < rpc && row0 + nr < n_rows_total && (row0 + nr) % rpc != 0 &&
           dm_same(token_seq, positions, row0 + nr - 1, row0 + nr, max_splits, min_span, round))
        ++nr;
    run.nr = nr;
    int max_len = 0, min_first = 0x7fffffff, min_len = 0x7fffffff, max_first = 0;
    for (int r = 0; r < nr; ++r) {
        const int len = positions[row0 + r] + 1;
        max_len = max(max_len, len);
        min_first = min(min_first, window > 0 ? max(0, len - window) : 0);
        min_len = min(min_len, len);
        max_first = max(max_first, window > 0 ? len - window : 0);
    }
    run.max_len = max_len;
    run.min_first = min_first;
    run.min_len = min_len;
    run.max_first = max_first;
    return true;
}

// A CTA's 16 query slots into sq (rows of stride ld), copied by its THREADS threads, one commit
// group's worth (the caller commits): slot i is row row0 + i / gc, head hc0 + i % gc, and zeros
// for slots past the run's nr rows or the CTA's nh heads.
template <int HD, int THREADS>
__device__ __forceinline__ void dm_load_query(bf16_t* sq, int ld, const bf16_t* __restrict__ q, int row0, int nr,
                                              int n_q, int hc0, int nh, int gc) {
    constexpr int CQ = HD / 8;  // 16-byte chunks a row
    for (int idx = threadIdx.x; idx < 16 * CQ; idx += THREADS) {
        const int i = idx / CQ, c = idx % CQ;
        const int r = i / gc, h = i % gc;
        const bool ok = r < nr && h < nh;
        const bf16_t* src = q + ((u64)(row0 + (ok ? r : 0)) * n_q + hc0 + (ok ? h : 0)) * HD + c * 8;
        cp_async_16(sq + i * ld + c * 8, src, ok ? 16 : 0);
    }
}

// One step of a split's online softmax, for both tensor-core decode kernels: the scores s of
// keys k0.. (lane (g, t) holds keys k0 + 8 n + 2 t and + 1 of slots g and g + 8) masked to each
// slot's keys [first, len), scaled, folded into the running maxima m, this lane's share of the
// sums l and the outputs o, then P V from sv (the step's V rows, stride ldv). `lazy`: o is
// scaled only where some slot's maximum moved (kernels are built without ftz, so o * 1 is o:
// the same bits), which spares the warp's chain DT x 4 multiplies in most steps. `interior`
// (warp-uniform): every real slot sees every key of the step, so no score is masked; a slot
// past the CTA's rows or heads (length 0) then keeps finite values nothing reads (its query
// is zeros) instead of -inf, and the real slots' bits are the same.
template <bool MASK, int NT>
__device__ __forceinline__ void dm_scale_scores(float (&s)[NT][4], float& mx_a, float& mx_b, int t, int k0,
                                                int len_a, int len_b, int first_a, int first_b, float scale_log2) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            bool ok = true;
            if constexpr (MASK) {
                const int kp = k0 + n * 8 + 2 * t + (e & 1);
                ok = e < 2 ? (kp < len_a && kp >= first_a) : (kp < len_b && kp >= first_b);
            }
            s[n][e] = ok ? __fmul_rn(s[n][e], scale_log2) : KILN_NEG_INF;
        }
        mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
    }
}
template <int NT, int DT>
__device__ __forceinline__ void dm_softmax_pv(float (&s)[NT][4], float (&o)[DT][4], float& m_a, float& m_b,
                                              float& l_a, float& l_b, const bf16_t* sv, int ldv, int lane, int k0,
                                              int len_a, int len_b, int first_a, int first_b, float scale_log2,
                                              bool lazy, bool interior) {
    const int t = lane & 3;
    float mx_a = KILN_NEG_INF, mx_b = KILN_NEG_INF;
    if (interior)
        dm_scale_scores<false>(s, mx_a, mx_b, t, k0, len_a, len_b, first_a, first_b, scale_log2);
    else
        dm_scale_scores<true>(s, mx_a, mx_b, t, k0, len_a, len_b, first_a, first_b, scale_log2);
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const OnlineMax na = online_max(m_a, mx_a), nb = online_max(m_b, mx_b);
    const float base_a = na.base, base_b = nb.base;
    const float al_a = exp2f(na.shift), al_b = exp2f(nb.shift);
    float ps_a = 0.f, ps_b = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        s[n][0] = exp2f(__fsub_rn(s[n][0], base_a));
        s[n][1] = exp2f(__fsub_rn(s[n][1], base_a));
        s[n][2] = exp2f(__fsub_rn(s[n][2], base_b));
        s[n][3] = exp2f(__fsub_rn(s[n][3], base_b));
        ps_a = __fadd_rn(ps_a, __fadd_rn(s[n][0], s[n][1]));
        ps_b = __fadd_rn(ps_b, __fadd_rn(s[n][2], s[n][3]));
    }
    l_a = __fadd_rn(__fmul_rn(l_a, al_a), ps_a);
    l_b = __fadd_rn(__fmul_rn(l_b, al_b), ps_b);
    if (!lazy || __any_sync(0xffffffffu, al_a != 1.f || al_b != 1.f)) {
#pragma unroll
        for (int d = 0; d < DT; ++d) {
            o[d][0] = __fmul_rn(o[d][0], al_a);
            o[d][1] = __fmul_rn(o[d][1], al_a);
            o[d][2] = __fmul_rn(o[d][2], al_b);
            o[d][3] = __fmul_rn(o[d][3], al_b);
        }
    }
    mma_pv<NT, DT>(o, s, sv, ldv, lane);
}

// A split's partial (maximum m of its scaled scores, l = sum of 2^(s - m), o = the weighted sum of
// V) folded into a chain's running (M, L, O): the same operations wherever the fold runs, in
// registers inside decode_mma or in decode_mma_combine. A split that saw no key (m = -inf) leaves
// M and L as they were; -inf on both sides keeps zeros.
struct DmScale {
    float m, a, b;  // the new maximum, the old state's scale, the split's
};
__device__ __forceinline__ DmScale dm_fold_scale(float M, float m) {
    const float mn = fmaxf(M, m);
    return {mn, M == KILN_NEG_INF ? 0.f : exp2f(__fsub_rn(M, mn)), m == KILN_NEG_INF ? 0.f : exp2f(__fsub_rn(m, mn))};
}
__device__ __forceinline__ float dm_fold(float acc, float part, const DmScale& f) {
    return __fadd_rn(__fmul_rn(acc, f.a), __fmul_rn(part, f.b));
}

// The chains' scales against their common maximum, and the merged L (chains in index order).
__device__ __forceinline__ float dm_chain_scales(const float (&M)[DM_CHAINS], const float (&L)[DM_CHAINS],
                                                 float (&sc)[DM_CHAINS]) {
    float mx = KILN_NEG_INF;
#pragma unroll
    for (int c = 0; c < DM_CHAINS; ++c) mx = fmaxf(mx, M[c]);
    float l = 0.f;
#pragma unroll
    for (int c = 0; c < DM_CHAINS; ++c) {
        sc[c] = M[c] == KILN_NEG_INF ? 0.f : exp2f(__fsub_rn(M[c], mx));
        l = __fadd_rn(l, __fmul_rn(L[c], sc[c]));
    }
    return l;
}

// One output element: the chains' O merged in index order, divided by the merged L.
__device__ __forceinline__ bf16_t dm_chain_out(const float (&O)[DM_CHAINS], const float (&sc)[DM_CHAINS], float l) {
    float o = 0.f;
#pragma unroll
    for (int c = 0; c < DM_CHAINS; ++c) o = __fadd_rn(o, __fmul_rn(O[c], sc[c]));
    return f32_to_bf16(l > 0.f ? o / l : 0.f);
}
