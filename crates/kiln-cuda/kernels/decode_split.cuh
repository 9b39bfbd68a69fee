#line 1 "decode_split.cuh"
// The split of a decode row's keys and the order its splits are merged in, which decode_mma.cu
// and decode_mma_wide.cu share, written once (their splits are merged by the one
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
// pow2ceil(len) / max_splits.
__device__ __forceinline__ int dm_span(int len, int max_splits, int min_span, int round) {
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
