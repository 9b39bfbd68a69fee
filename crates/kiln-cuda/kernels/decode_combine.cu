#line 1 "decode_combine.cu"
// out[row, h, :] = the row's splits folded into their chains and the chains merged (decode_split.cuh),
// for the launches without the fold. Grid (n_q, rows), hd threads or fewer. The partials' maxima
// and sums are staged in shared memory and each chain's fold factors computed once (by one
// thread a chain, the same operations as everywhere); the output columns then fold their
// partials in split order, each chain its own splits. While more than DM_COMBINE_FEW splits
// remain, a column's partials are loaded DM_COMBINE_BATCH at a time into registers before any
// is folded: folded as they came, the loads went out a few at a time, and at depth 8k (64
// splits) the combine took as long as decode_mma itself. The loads keep their guards: without
// them ptxas put each fold right after its load, a few loads in flight again. The last few
// splits go DM_CHAINS at a time, as before: a whole guarded batch for one or two splits cost
// batch 1 near depth 0 1.4%.
#define DM_COMBINE_MAX_SPLITS 256
#define DM_COMBINE_BATCH 32
#define DM_COMBINE_FEW 8
static_assert(DM_COMBINE_BATCH % DM_CHAINS == 0, "a batch starts at chain 0");

// The combine's staging in shared memory: the splits' (m, l), their fold factors, the chains'.
struct DmCombineSmem {
    float2 ml[DM_COMBINE_MAX_SPLITS];
    float a[DM_COMBINE_MAX_SPLITS], b[DM_COMBINE_MAX_SPLITS];
    float m[DM_CHAINS], l[DM_CHAINS];
};

// A column's partials of splits s0 .. s0 + B - 1 that exist (s < n; zeros past), B loads in
// flight (guarded: see above), then folded into the chains (s0 a multiple of DM_CHAINS).
template <int B>
__device__ __forceinline__ void dm_combine_load(float (&v)[B], const float* po, int s0, int n, int hd) {
#pragma unroll
    for (int j = 0; j < B; ++j) v[j] = s0 + j < n ? po[(u64)(s0 + j) * hd] : 0.f;
}
template <int B>
__device__ __forceinline__ void dm_combine_fold(float (&O)[DM_CHAINS], const float (&v)[B], int s0, int n,
                                                const DmCombineSmem& sm) {
#pragma unroll
    for (int j = 0; j < B; ++j) {
        const int s = s0 + j;
        if (s < n) O[j % DM_CHAINS] = dm_fold(O[j % DM_CHAINS], v[j], DmScale{0.f, sm.a[s], sm.b[s]});
    }
}

// The (m, l) of a (row, head)'s n splits at part_ml + base * 2 staged in shared memory, a
// thread a split (both combines; the caller's barrier follows).
__device__ __forceinline__ void dm_stage_ml(float2* ml, const float* __restrict__ part_ml, u64 base, int n) {
    for (int s = threadIdx.x; s < n; s += blockDim.x) ml[s] = *reinterpret_cast<const float2*>(part_ml + (base + s) * 2);
}

// The combine of one (row, head) of n splits at part_o + base * hd. PRE > 0 (`early`): the
// thread's first column loads its first PRE partials right away, before the maxima are staged
// and the fold factors computed, so their latency hides behind that work; they are folded
// first, the rest as without. The same operations in the same order either way.
template <int PRE>
__device__ __forceinline__ void dm_combine(DmCombineSmem& sm, const float* __restrict__ part_o,
                                           const float* __restrict__ part_ml, bf16_t* __restrict__ out, u64 base,
                                           int n_splits, int hd, u64 out_at) {
    constexpr int P = PRE > 0 ? PRE : 1;
    float pre[P];
    if (PRE > 0 && (int)threadIdx.x < hd) dm_combine_load<P>(pre, part_o + base * hd + threadIdx.x, 0, n_splits, hd);
    dm_stage_ml(sm.ml, part_ml, base, n_splits);
    __syncthreads();
    if (threadIdx.x < DM_CHAINS) {
        const int c = threadIdx.x;
        float M = KILN_NEG_INF, L = 0.f;
        for (int s = c; s < n_splits; s += DM_CHAINS) {
            const DmScale f = dm_fold_scale(M, sm.ml[s].x);
            M = f.m;
            L = dm_fold(L, sm.ml[s].y, f);
            sm.a[s] = f.a;
            sm.b[s] = f.b;
        }
        sm.m[c] = M;
        sm.l[c] = L;
    }
    __syncthreads();
    float M[DM_CHAINS], L[DM_CHAINS], sc[DM_CHAINS];
#pragma unroll
    for (int c = 0; c < DM_CHAINS; ++c) {
        M[c] = sm.m[c];
        L[c] = sm.l[c];
    }
    const float l = dm_chain_scales(M, L, sc);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float O[DM_CHAINS];
#pragma unroll
        for (int c = 0; c < DM_CHAINS; ++c) O[c] = 0.f;
        const float* po = part_o + base * hd + d;
        // Split s joins chain s % DM_CHAINS, after the chain's earlier splits.
        int s0 = 0;
        if (PRE > 0 && d == (int)threadIdx.x) {
            dm_combine_fold<P>(O, pre, 0, n_splits, sm);
            s0 = PRE;
        }
        for (; n_splits - s0 > DM_COMBINE_FEW; s0 += DM_COMBINE_BATCH) {
            float v[DM_COMBINE_BATCH];
            dm_combine_load(v, po, s0, n_splits, hd);
            dm_combine_fold(O, v, s0, n_splits, sm);
        }
        for (; s0 < n_splits; s0 += DM_CHAINS) {
#pragma unroll
            for (int c = 0; c < DM_CHAINS; ++c) {
                const int s = s0 + c;
                if (s < n_splits) O[c] = dm_fold(O[c], po[(u64)s * hd], DmScale{0.f, sm.a[s], sm.b[s]});
            }
        }
        out[out_at + d] = dm_chain_out(O, sc, l);
    }
}

// Both combines' (row, head) of grid (n_q heads, rows): its split count and the first of its
// partials. `early` (KILN_ATTN_EARLY): the row's length is read before the wait for decode_mma
// (positions are step inputs); otherwise everything after it.
struct DmCombineRow {
    int n;
    u64 base;
};
__device__ __forceinline__ DmCombineRow dm_combine_row(const int* __restrict__ positions, int n_q, int max_splits,
                                                       int min_span, int span_round, int early) {
    pdl_trigger();
    if (!early) pdl_wait();
    const int len = positions[blockIdx.y] + 1;
    const int span = dm_span(len, max_splits, min_span, span_round);
    const DmCombineRow r{(len + span - 1) / span, ((u64)blockIdx.y * n_q + blockIdx.x) * max_splits};
    if (early) pdl_wait();
    return r;
}

// `early` (KILN_ATTN_EARLY, as decode_mma's): the row's length read before the wait (positions
// are step inputs) and the first partials loaded before the fold factors, as many as the row
// has up to 64 in one of four sizes (a guarded load past the last split costs: see above).
extern "C" __global__ void decode_mma_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                              const int* __restrict__ positions, bf16_t* __restrict__ out,
                                              int n_q, int hd, int max_splits, int min_span, int span_round,
                                              int early) {
    __shared__ DmCombineSmem sm;
    const DmCombineRow r = dm_combine_row(positions, n_q, max_splits, min_span, span_round, early);
    const int n = r.n;
    const u64 base = r.base;
    const u64 at = ((u64)blockIdx.y * n_q + blockIdx.x) * hd;
    if (!early)
        dm_combine<0>(sm, part_o, part_ml, out, base, n, hd, at);
    else if (n <= 4)
        dm_combine<4>(sm, part_o, part_ml, out, base, n, hd, at);
    else if (n <= 8)
        dm_combine<8>(sm, part_o, part_ml, out, base, n, hd, at);
    else if (n <= 32)
        dm_combine<32>(sm, part_o, part_ml, out, base, n, hd, at);
    else
        dm_combine<64>(sm, part_o, part_ml, out, base, n, hd, at);
}

// decode_mma_combine_cols (KILN_COMBINE_COLS): the same fold, spread so that no thread walks a
// long chain. decode_mma_combine gives a head one CTA, four warps on one multiprocessor, whose
// threads each fold all of a column's splits after four threads have computed the fold factors
// one split after another: at depth 8k (64 splits) 7.6 us a layer in ncu (H100), a quarter of
// decode attention, on 32 multiprocessors at batch 1. Here thread (column, chain) folds only its
// chain's splits, blockDim / DM_CHAINS columns a pass (the launcher gives 128 threads and a
// CTA a pass: grid (n_q, rows, hd / 32); a smaller grid walks the passes), the fold factors
// come from prefix maxima over the chains (a warp's shuffles: max is exact, so any grouping
// gives the serial maxima, and each factor is computed from them by the same operations),
// each thread folds its chain's sum L beside its O in the serial order, and the four chains of
// a column meet by shuffles in index order. The same bits as decode_mma_combine.
#define DMC_BATCH 16  // a thread's loads in flight

// A thread's next DMC_BATCH splits of its chain c (splits c + DM_CHAINS j from j0 on), zeros past n.
__device__ __forceinline__ void dmc_load(float (&v)[DMC_BATCH], const float* po, int c, int j0, int n, int hd) {
#pragma unroll
    for (int j = 0; j < DMC_BATCH; ++j) {
        const int s = c + DM_CHAINS * (j0 + j);
        v[j] = s < n ? po[(u64)s * hd] : 0.f;
    }
}

extern "C" __global__ void __launch_bounds__(256) decode_mma_combine_cols(
    const float* __restrict__ part_o, const float* __restrict__ part_ml, const int* __restrict__ positions,
    bf16_t* __restrict__ out, int n_q, int hd, int max_splits, int min_span, int span_round, int early) {
    __shared__ float2 s_ml[DM_COMBINE_MAX_SPLITS];
    __shared__ float s_a[DM_COMBINE_MAX_SPLITS], s_b[DM_COMBINE_MAX_SPLITS];
    __shared__ float s_m[DM_CHAINS];
    const DmCombineRow r = dm_combine_row(positions, n_q, max_splits, min_span, span_round, early);
    const int n = r.n;
    const u64 base = r.base;
    const int lane = threadIdx.x & 31, c = threadIdx.x % DM_CHAINS, per = blockDim.x / DM_CHAINS;
    int d = blockIdx.z * per + threadIdx.x / DM_CHAINS;
    // The first pass's partials go out before the maxima are staged and the factors computed.
    float v[DMC_BATCH];
    dmc_load(v, part_o + base * hd + (d < hd ? d : 0), c, 0, n, hd);
    dm_stage_ml(s_ml, part_ml, base, n);
    __syncthreads();
    // Warp 0: split s's factors against its chain's maximum before it (dm_fold_scale), 32
    // splits a pass; lane l holds split s0 + l, of chain l % DM_CHAINS (s0 a multiple of 32).
    if (threadIdx.x < 32) {
        float carry = KILN_NEG_INF;  // the chain's maximum over the passes before
        for (int s0 = 0; s0 < n; s0 += 32) {
            const int s = s0 + lane;
            const float m = s < n ? s_ml[s].x : KILN_NEG_INF;
            float x = m;  // becomes the maximum of this pass's splits of the chain up to s
#pragma unroll
            for (int off = DM_CHAINS; off < 32; off *= 2) {
                const float y = __shfl_up_sync(0xffffffffu, x, off);
                if (lane >= off) x = fmaxf(x, y);
            }
            const float before = __shfl_up_sync(0xffffffffu, x, DM_CHAINS);
            const float M = lane < DM_CHAINS ? carry : fmaxf(carry, before);
            if (s < n) {
                const DmScale f = dm_fold_scale(M, m);
                s_a[s] = f.a;
                s_b[s] = f.b;
            }
            carry = fmaxf(carry, __shfl_sync(0xffffffffu, x, 32 - DM_CHAINS + c));
        }
        if (lane < DM_CHAINS) s_m[lane] = carry;
    }
    __syncthreads();
    float Mc[DM_CHAINS];
#pragma unroll
    for (int k = 0; k < DM_CHAINS; ++k) Mc[k] = s_m[k];
    // Passes over the columns (the pass's first column decides, alike for the whole CTA).
    for (bool first = true; d - (int)threadIdx.x / DM_CHAINS < hd; d += gridDim.z * per, first = false) {
        const float* po = part_o + base * hd + (d < hd ? d : 0);
        // Chain c of column d: its O and its L, split after split in index order.
        float O = 0.f, L = 0.f;
        for (int j0 = 0;; j0 += DMC_BATCH) {
            if (!first || j0 > 0) dmc_load(v, po, c, j0, n, hd);
#pragma unroll
            for (int j = 0; j < DMC_BATCH; ++j) {
                const int s = c + DM_CHAINS * (j0 + j);
                if (s < n) {
                    const DmScale f{0.f, s_a[s], s_b[s]};
                    O = dm_fold(O, v[j], f);
                    L = dm_fold(L, s_ml[s].y, f);
                }
            }
            if (c + DM_CHAINS * (j0 + DMC_BATCH) >= n) break;
        }
        // The column's chains, in index order, as decode_mma_combine merges them.
        float Oc[DM_CHAINS], Lc[DM_CHAINS], sc[DM_CHAINS];
#pragma unroll
        for (int k = 0; k < DM_CHAINS; ++k) {
            Oc[k] = __shfl_sync(0xffffffffu, O, (lane & ~(DM_CHAINS - 1)) + k);
            Lc[k] = __shfl_sync(0xffffffffu, L, (lane & ~(DM_CHAINS - 1)) + k);
        }
        if (c == 0 && d < hd) {
            const float l = dm_chain_scales(Mc, Lc, sc);
            out[((u64)blockIdx.y * n_q + blockIdx.x) * hd + d] = dm_chain_out(Oc, sc, l);
        }
    }
}
