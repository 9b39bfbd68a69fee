#line 1 "decode_mma.cu"
// Decode attention on the tensor cores (mma.sync m16n8k16): one query row per sequence (or a
// few rows of one sequence, as a speculative verify step has), split over the KV length.
//
// The 16 rows of the MMA are query slots: the heads of one GQA group (up to 16) times up to
// 16 / group rows of one sequence, so every K/V tile is read once for all of them. A split
// covers keys [s * span, (s + 1) * span) with span = max(min_span, pow2ceil(len) / max_splits): a
// power of two fixed by the row's own length bucket, boundaries at absolute positions. Inside
// a split, tiles of 64 keys at absolute multiples of 64 stream through a cp.async ring; warp
// w owns keys 16w..16w+15 of every tile and keeps its own online softmax; the four warps are
// merged in index order, the splits by dm_combine in index order. So a row's sums depend on
// its own length and positions only: alone, in any batch, or beside the other rows of its
// sequence (keys past a row's length are masked, which leaves its state exactly unchanged).
// A CTA serves splits blockIdx.x, blockIdx.x + gridDim.x, ... up to its rows' last: with many
// rows the launcher gives each (row run, head group) fewer CTAs than split slots, so the grid
// holds no CTAs that would only start and exit (at 128 rows and 64 slots, 65,536 CTAs of which
// all but a few thousand are empty at short depths). Each split is computed alike whichever CTA
// serves it, so gridDim.x changes no bit.
// Cache layout: [block][kv_head][block_size][head_dim]. The split rule: decode_split.cuh.

#define DM_WARPS 4
#define DM_TILE 64
static_assert(DM_TILE == DECODE_MIN_SPAN, "a split holds whole tiles");
#define DM_COMBINE_MAX_SPLITS 128

// One tile of 64 keys (keys from kv_end on read as zeros). Warp w copies 16 of its rows, CH
// lanes to a row; lane l < 16 looks up one of them in the block table (once for K and V) and
// the copying lanes take it by shuffle: no division or dependent load per 16-byte copy.
template <int HD>
__device__ __forceinline__ void dm_load_tile(bf16_t* sk, bf16_t* sv, const bf16_t* __restrict__ kc,
                                             const bf16_t* __restrict__ vc, const int* __restrict__ table,
                                             int k0, int kv_end, int kvh, int n_kv, int block_size) {
    constexpr int LD = HD + 8, CH = HD / 8, RPW = 32 / CH, RPS = DM_WARPS * RPW;  // rows per warp, per CTA a step
    static_assert(CH <= 32 && RPW * CH == 32 && DM_TILE * CH == DM_WARPS * 32 * (CH / 2), "decode_mma tile shape");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, l = lane & 15;
    // Lane l's row: the one lane l % RPW copies in step l / RPW. 0 (a valid address) past kv_end.
    const int mp = k0 + warp * RPW + l % RPW + RPS * (l / RPW);
    const u32 mine = mp < kv_end
        ? ((u32)table[mp / block_size] * (u32)n_kv + (u32)kvh) * (u32)block_size + (u32)(mp % block_size)
        : 0u;
    const int c = lane % CH;
#pragma unroll
    for (int j = 0; j < CH / 2; ++j) {
        const int r = warp * RPW + lane / CH + RPS * j;
        const u32 row = __shfl_sync(0xffffffffu, mine, lane / CH + RPW * j);
        const int bytes = k0 + r < kv_end ? 16 : 0;
        const u64 off = (u64)row * HD + c * 8;
        cp_async_16(sk + r * LD + c * 8, kc + off, bytes);
        cp_async_16(sv + r * LD + c * 8, vc + off, bytes);
    }
}

template <int HD, int NST, bool PF>
__device__ __forceinline__ void decode_mma_body(
    const bf16_t* __restrict__ q, const bf16_t* __restrict__ k_cache, const bf16_t* __restrict__ v_cache,
    const int* __restrict__ positions, const int* __restrict__ token_seq, const int* __restrict__ bt_start,
    const int* __restrict__ block_tables, float* __restrict__ part_o, float* __restrict__ part_ml,
    int n_q, int n_kv, int block_size, int window, float scale_log2, int max_splits, int min_span) {
    constexpr int LD = HD + 8, DT = HD / 8;
    extern __shared__ __align__(16) unsigned char dm_smem[];
    bf16_t* sq = reinterpret_cast<bf16_t*>(dm_smem);
    bf16_t* sk0 = sq + 16 * LD;
    bf16_t* sv0 = sk0 + NST * DM_TILE * LD;
    __shared__ int s_len[16];

    const int row0 = blockIdx.z;
    const int group = n_q / n_kv;
    const int gc = min(group, 16);               // heads per CTA
    const int chunks = (group + gc - 1) / gc;    // CTAs per KV head and row run
    const int rpc = 16 / gc;                     // rows per CTA
    const int kvh = blockIdx.y / chunks;
    const int hc0 = kvh * group + (blockIdx.y % chunks) * gc;  // first query head of this CTA
    const int nh = min(gc, kvh * group + group - hc0);

    // A run of rows starts at a multiple of rpc or where the sequence or span changes.
    if (row0 % rpc != 0 && dm_same(token_seq, positions, row0 - 1, row0, max_splits, min_span)) return;
    const int n_rows_total = gridDim.z;
    int nr = 1;
    while (nr < rpc && row0 + nr < n_rows_total && (row0 + nr) % rpc != 0 &&
           dm_same(token_seq, positions, row0 + nr - 1, row0 + nr, max_splits, min_span))
        ++nr;

    int max_len = 0, min_first = 0x7fffffff;
    for (int r = 0; r < nr; ++r) {
        const int len = positions[row0 + r] + 1;
        max_len = max(max_len, len);
        min_first = min(min_first, window > 0 ? max(0, len - window) : 0);
    }
    const int span = dm_span(max_len, max_splits, min_span);
    if ((int)blockIdx.x * span >= max_len) return;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int* table = block_tables + bt_start[token_seq[row0]];
    if (threadIdx.x < 16) {
        const int r = threadIdx.x / gc, h = threadIdx.x % gc;
        s_len[threadIdx.x] = (r < nr && h < nh) ? positions[row0 + r] + 1 : 0;  // 0: an empty slot
    }
    // Query slots: slot i is row i / gc, head hc0 + i % gc. They land with the first split's
    // first tile (the same commit group).
    for (int idx = threadIdx.x; idx < 16 * DT; idx += DM_WARPS * 32) {
        const int i = idx / DT, c = idx % DT;
        const int r = i / gc, h = i % gc;
        const bool ok = r < nr && h < nh;
        const bf16_t* src = q + ((u64)(row0 + (ok ? r : 0)) * n_q + hc0 + (ok ? h : 0)) * HD + c * 8;
        cp_async_16(sq + i * LD + c * 8, src, ok ? 16 : 0);
    }

    // Split `split`: keys [lo, hi) and its tiles from t_lo (tiles wholly before every row's window
    // change no row's state: they start at the first one needed); returns how many.
    auto split_tiles = [&](int split, int& lo, int& hi, int& t_lo) {
        lo = split * span;
        hi = min(max_len, lo + span);
        t_lo = max(lo, min_first / DM_TILE * DM_TILE);
        return t_lo < hi ? (hi - t_lo + DM_TILE - 1) / DM_TILE : 0;
    };
    auto load = [&](int stage, int key0, int hi) {
        dm_load_tile<HD>(sk0 + stage * DM_TILE * LD, sv0 + stage * DM_TILE * LD, k_cache, v_cache, table, key0, hi,
                         kvh, n_kv, block_size);
    };
    // A split's state: each warp's online softmax over its 16 keys of every tile.
    float m_a, m_b, l_a, l_b, o[DT][4];
    auto reset = [&]() {
        m_a = m_b = KILN_NEG_INF;
        l_a = l_b = 0.f;
#pragma unroll
        for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    };
    // The tile in ring stage `stage`, keys key0.., into the state.
    auto tile = [&](int stage, int key0, int len_a, int len_b, int first_a, int first_b) {
        const bf16_t* sk = sk0 + stage * DM_TILE * LD + warp * 16 * LD;
        const bf16_t* sv = sv0 + stage * DM_TILE * LD + warp * 16 * LD;
        const int k0 = key0 + warp * 16;  // this warp's first key
        // Does any slot see any of this warp's 16 keys? If not, every state stays as it is.
        const bool mine = lane < 16 && k0 < s_len[lane] && (window <= 0 || k0 + 15 >= s_len[lane] - window);
        if (__any_sync(0xffffffffu, mine)) {
            float s[2][4];
#pragma unroll
            for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            const int mi = lane >> 3;
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                u32 a[4], b[4];
                ldmatrix_x4(a, sq + ((mi & 1) * 8 + (lane & 7)) * LD + kk * 16 + (mi >> 1) * 8);
                ldmatrix_x4(b, sk + ((mi >> 1) * 8 + (lane & 7)) * LD + kk * 16 + (mi & 1) * 8);
                mma_bf16_16816(s[0], a, b);
                mma_bf16_16816(s[1], a, b + 2);
            }
            float mx_a = KILN_NEG_INF, mx_b = KILN_NEG_INF;
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int kp = k0 + n * 8 + 2 * t + (e & 1);
                    const bool ok = e < 2 ? (kp < len_a && kp >= first_a) : (kp < len_b && kp >= first_b);
                    s[n][e] = ok ? __fmul_rn(s[n][e], scale_log2) : KILN_NEG_INF;
                }
                mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
                mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
            }
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
            const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
            // A slot that has seen no key keeps m = -inf; 0 as the base keeps everything finite.
            const float base_a = mn_a == KILN_NEG_INF ? 0.f : mn_a;
            const float base_b = mn_b == KILN_NEG_INF ? 0.f : mn_b;
            const float al_a = exp2f(__fsub_rn(m_a, base_a)), al_b = exp2f(__fsub_rn(m_b, base_b));
            m_a = mn_a;
            m_b = mn_b;
            float ps_a = 0.f, ps_b = 0.f;
#pragma unroll
            for (int n = 0; n < 2; ++n) {
                s[n][0] = exp2f(__fsub_rn(s[n][0], base_a));
                s[n][1] = exp2f(__fsub_rn(s[n][1], base_a));
                s[n][2] = exp2f(__fsub_rn(s[n][2], base_b));
                s[n][3] = exp2f(__fsub_rn(s[n][3], base_b));
                ps_a = __fadd_rn(ps_a, __fadd_rn(s[n][0], s[n][1]));
                ps_b = __fadd_rn(ps_b, __fadd_rn(s[n][2], s[n][3]));
            }
            l_a = __fadd_rn(__fmul_rn(l_a, al_a), ps_a);
            l_b = __fadd_rn(__fmul_rn(l_b, al_b), ps_b);
#pragma unroll
            for (int d = 0; d < DT; ++d) {
                o[d][0] = __fmul_rn(o[d][0], al_a);
                o[d][1] = __fmul_rn(o[d][1], al_a);
                o[d][2] = __fmul_rn(o[d][2], al_b);
                o[d][3] = __fmul_rn(o[d][3], al_b);
            }
            mma_pv<2, DT>(o, s, sv, LD, lane);
        }
    };
    // The split's warp states merged in index order through shared memory ([warp][slot][HD] as
    // warps 0-1 from o_lo and 2-3 from o_hi; ml [warp][slot][2]) into its partials.
    auto merge = [&](int split, int lo, float* o_lo, float* o_hi, float* sm_ml) {
        auto o_of = [&](int w, int slot) { return (w < 2 ? o_lo : o_hi) + ((w & 1) * 16 + slot) * HD; };
        l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 1));
        l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 2));
        l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 1));
        l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 2));

        __syncthreads();
        if (t == 0) {
            sm_ml[(warp * 16 + g) * 2] = m_a;
            sm_ml[(warp * 16 + g) * 2 + 1] = l_a;
            sm_ml[(warp * 16 + g + 8) * 2] = m_b;
            sm_ml[(warp * 16 + g + 8) * 2 + 1] = l_b;
        }
#pragma unroll
        for (int d = 0; d < DT; ++d) {
            float* ra = o_of(warp, g) + d * 8 + 2 * t;
            float* rb = o_of(warp, g + 8) + d * 8 + 2 * t;
            ra[0] = o[d][0];
            ra[1] = o[d][1];
            rb[0] = o[d][2];
            rb[1] = o[d][3];
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < 16 * HD; idx += DM_WARPS * 32) {
            const int i = idx / HD, d = idx % HD;
            const int len = s_len[i];
            // Only slots that are real rows with a split here write (the combine reads no others).
            if (len == 0 || lo >= len) continue;
            float mm = KILN_NEG_INF;
#pragma unroll
            for (int w = 0; w < DM_WARPS; ++w) mm = fmaxf(mm, sm_ml[(w * 16 + i) * 2]);
            float ll = 0.f, oo = 0.f;
#pragma unroll
            for (int w = 0; w < DM_WARPS; ++w) {
                const float mw = sm_ml[(w * 16 + i) * 2];
                const float sc = mw == KILN_NEG_INF ? 0.f : exp2f(__fsub_rn(mw, mm));
                ll = __fadd_rn(ll, __fmul_rn(sm_ml[(w * 16 + i) * 2 + 1], sc));
                oo = __fadd_rn(oo, __fmul_rn(o_of(w, i)[d], sc));
            }
            const int row = row0 + i / gc, h = hc0 + i % gc;
            const u64 pi = ((u64)row * n_q + h) * max_splits + split;
            part_o[pi * HD + d] = oo;
            if (d == 0) {
                part_ml[pi * 2] = mm;
                part_ml[pi * 2 + 1] = ll;
            }
        }
    };

    // KILN_DECODE_PREFETCH=1 (PF): the CTA's splits as one stream of tiles, the ring running
    // across split boundaries, so the next split's first tiles load while this one's last
    // computes and its warps merge. Flat tile f lives in stage f % NST, and the merge goes
    // through the stage computed last, which the stream refills only after it. Otherwise each
    // split fills the ring from empty and merges through it once drained. The same tiles,
    // states and merges either way: the same bits.
    // The stream's cursor: tile ii of split is's in (before the first split until the first
    // issue), `issued` tiles so far.
    int is = (int)blockIdx.x - (int)gridDim.x, ii = 0, in = 0, ilo, ihi, it_lo, issued = 0;
    bool ends = false;
    auto issue = [&]() {  // PF: the stream's next tile, if any, and a commit group either way
        while (!ends && ii == in) {
            is += gridDim.x;
            ii = 0;
            if (is >= max_splits || is * span >= max_len)
                ends = true;
            else
                in = split_tiles(is, ilo, ihi, it_lo);
        }
        if (!ends) {
            load(issued % NST, it_lo + ii * DM_TILE, ihi);
            ++ii;
            ++issued;
        }
        cp_async_commit();
    };
    if constexpr (PF) {
#pragma unroll
        for (int st = 0; st < NST - 1; ++st) issue();
    }
    int f = 0;  // PF: the flat index of the next tile to compute
    for (int split = blockIdx.x; split < max_splits; split += gridDim.x) {
        if (split * span >= max_len) break;
        int lo, hi, t_lo;
        const int n_tiles = split_tiles(split, lo, hi, t_lo);
        if constexpr (!PF) {
#pragma unroll
            for (int st = 0; st < NST - 1; ++st) {
                if (st < n_tiles) load(st, t_lo + st * DM_TILE, hi);
                cp_async_commit();
            }
        }
        __syncthreads();
        const int len_a = s_len[g], len_b = s_len[g + 8];
        const int first_a = window > 0 ? len_a - window : 0, first_b = window > 0 ? len_b - window : 0;
        reset();
        for (int it = 0; it < n_tiles; ++it) {
            // Keep NST - 1 tiles in flight: issue the one NST - 1 ahead into the stage freed
            // last round.
            if constexpr (PF) {
                issue();
            } else {
                const int nxt = it + NST - 1;
                if (nxt < n_tiles) load(nxt % NST, t_lo + nxt * DM_TILE, hi);
                cp_async_commit();
            }
            cp_async_wait<NST - 1>();
            __syncthreads();
            tile(PF ? f % NST : it % NST, t_lo + it * DM_TILE, len_a, len_b, first_a, first_b);
            __syncthreads();
            if constexpr (PF) ++f;
        }
        if constexpr (PF) {
            // Stage (f + NST - 1) % NST holds no tile in flight until the next issue.
            const int free_stage = (f + NST - 1) % NST;
            float* ko = reinterpret_cast<float*>(sk0 + free_stage * DM_TILE * LD);
            float* vo = reinterpret_cast<float*>(sv0 + free_stage * DM_TILE * LD);
            merge(split, lo, ko, vo, ko + 2 * 16 * HD);
        } else {
            cp_async_wait<0>();
            float* sm_o = reinterpret_cast<float*>(sk0);
            merge(split, lo, sm_o, sm_o + 2 * 16 * HD, sm_o + DM_WARPS * 16 * HD);
        }
        // The merge read shared memory the next tiles overwrite.
        __syncthreads();
    }
    cp_async_wait<0>();
}

// decode_mma_hd*: a CTA's splits one after the other; decode_mma_pf_hd* (KILN_DECODE_PREFETCH=1):
// as one stream of tiles (the same bits).
#define DM_ENTRY(NAME, HD, NST, MINB, PF)                                                               \
    extern "C" __global__ void __launch_bounds__(128, MINB) NAME(                                       \
        const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const int* positions, const int* token_seq, \
        const int* bt_start, const int* block_tables, float* part_o, float* part_ml, int n_q, int n_kv, \
        int block_size, int window, float scale_log2, int max_splits, int min_span) {                  \
        pdl_enter();                                                                                    \
        decode_mma_body<HD, NST, PF>(q, kc, vc, positions, token_seq, bt_start, block_tables, part_o,   \
                                     part_ml, n_q, n_kv, block_size, window, scale_log2, max_splits,    \
                                     min_span);                                                         \
    }
// Ring depth and CTAs per SM by head dim: about 100 KB of K/V in flight per SM or more.
DM_ENTRY(decode_mma_hd16, 16, 4, 4, false)
DM_ENTRY(decode_mma_pf_hd16, 16, 4, 4, true)
DM_ENTRY(decode_mma_hd32, 32, 4, 4, false)
DM_ENTRY(decode_mma_pf_hd32, 32, 4, 4, true)
DM_ENTRY(decode_mma_hd64, 64, 3, 3, false)
DM_ENTRY(decode_mma_pf_hd64, 64, 3, 3, true)
DM_ENTRY(decode_mma_hd128, 128, 3, 2, false)
DM_ENTRY(decode_mma_pf_hd128, 128, 3, 2, true)
DM_ENTRY(decode_mma_hd256, 256, 2, 1, false)
DM_ENTRY(decode_mma_pf_hd256, 256, 2, 1, true)

// out[row, h, :] = the row's splits merged in split order. Grid (n_q, rows), hd threads.
extern "C" __global__ void decode_mma_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                              const int* __restrict__ positions, bf16_t* __restrict__ out,
                                              int n_q, int hd, int max_splits, int min_span) {
    pdl_enter();
    __shared__ float sm_sc[DM_COMBINE_MAX_SPLITS];
    __shared__ float sm_l;
    const int h = blockIdx.x, row = blockIdx.y;
    const int len = positions[row] + 1;
    const int span = dm_span(len, max_splits, min_span);
    const int n_splits = (len + span - 1) / span;
    const u64 base = ((u64)row * n_q + h) * max_splits;
    // One warp finds the maximum and each split's scale; thread 0 sums the weights in order.
    if (threadIdx.x < 32) {
        float mm = KILN_NEG_INF;
        for (int s = threadIdx.x; s < n_splits; s += 32) mm = fmaxf(mm, part_ml[(base + s) * 2]);
        mm = warp_max(mm);
        for (int s = threadIdx.x; s < n_splits; s += 32) {
            const float ms = part_ml[(base + s) * 2];
            sm_sc[s] = ms == KILN_NEG_INF ? 0.f : exp2f(__fsub_rn(ms, mm));
        }
        __syncwarp();
        if (threadIdx.x == 0) {
            float ll = 0.f;
            for (int s = 0; s < n_splits; ++s) ll = __fadd_rn(ll, __fmul_rn(part_ml[(base + s) * 2 + 1], sm_sc[s]));
            sm_l = ll;
        }
    }
    __syncthreads();
    const float ll = sm_l;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float oo = 0.f;
#pragma unroll 16
        for (int s = 0; s < n_splits; ++s) oo = __fadd_rn(oo, __fmul_rn(part_o[(base + s) * hd + d], sm_sc[s]));
        out[((u64)row * n_q + h) * hd + d] = f32_to_bf16(ll > 0.f ? oo / ll : 0.f);
    }
}
