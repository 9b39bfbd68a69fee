// Sampling and log-probabilities on the device, so only the chosen tokens reach the host.
//
// The arithmetic is kiln_step::sampling_weights', operation for operation: single IEEE f64
// operations through __d*_rn intrinsics (never contracted into FMAs), constants given by their
// bits, and fixed-point integer weights whose sums are exact in any order. So every row picks
// the token the host sampler picks, bit for bit (tests/contract_sampling.rs). One CTA of 1024
// threads per row; a grid smaller than the row count loops over rows.
//
// Per-row parameters, SMP_PARAM_WORDS words: temperature (f32 bits; <= 0 greedy), top_k (0:
// none), top_p (f32 bits), min_p (f32 bits), the uniform draw (f64 bits, low word first),
// logprobs (-1: none, else how many top tokens), the row's adjusted copy (-1: none, else its
// index in `adjusted`: the token is picked from that copy, log-probabilities stay the raw row's).
// Per-row result, SMP_OUT_WORDS words: id, status (0 ok, 1 no finite logit), logprob (f32
// bits), n_top, then SMP_MAX_TOP top ids and SMP_MAX_TOP top logprobs (f32 bits).

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)
#define SMP_BINS 2048
#define SMP_MAX_TOP 20
#define SMP_PARAM_WORDS 8
#define SMP_OUT_WORDS (4 + 2 * SMP_MAX_TOP)
#define SMP_NONE 0xffffffffu
// Loads each thread issues before using them: a pass over a row is otherwise one L2 round trip
// per element and thread.
#define SMP_U 8

// ---- the fixed-point weights (sampling_weights.rs) ----

__device__ __forceinline__ double bits_f64(u64 b) { return __longlong_as_double((long long)b); }

__constant__ u64 SMP_INV_FACTORIAL[13] = {
    0x3ff0000000000000ull, 0x3ff0000000000000ull, 0x3fe0000000000000ull, 0x3fc5555555555555ull,
    0x3fa5555555555555ull, 0x3f81111111111111ull, 0x3f56c16c16c16c17ull, 0x3f2a01a01a01a01aull,
    0x3efa01a01a01a01aull, 0x3ec71de3a556c734ull, 0x3e927e4fb7789f5cull, 0x3e5ae64567f544e4ull,
    0x3e21eed8eff8d898ull};

#define SMP_WEIGHT_ONE 17592186044416.0  // 2^44
#define SMP_CUTOFF (-32.0)

// round(exp(x) * 2^44) for x <= 0; 0 below the cut-off and for NaN.
__device__ u64 fixed_weight(double x) {
    if (isnan(x) || x < SMP_CUTOFF) return 0;
    const double k = rint(__dmul_rn(x, bits_f64(0x3ff71547652b82feull)));
    const double r = __dsub_rn(__dsub_rn(x, __dmul_rn(k, bits_f64(0x3fe62e42fee00000ull))),
                               __dmul_rn(k, bits_f64(0x3dea39ef35793c76ull)));
    double p = bits_f64(SMP_INV_FACTORIAL[12]);
#pragma unroll
    for (int n = 11; n >= 0; --n) p = __dadd_rn(__dmul_rn(p, r), bits_f64(SMP_INV_FACTORIAL[n]));
    const double scale = bits_f64((u64)(1023 + 44 + (long long)k) << 52);
    return (u64)floor(__dadd_rn(__dmul_rn(p, scale), 0.5));
}

__device__ __forceinline__ u64 token_weight(float l, float max, double inv_t) {
    if (!isfinite(l)) return 0;
    return fixed_weight(__dmul_rn(__dsub_rn((double)l, (double)max), inv_t));
}

// Unsigned order = logit order, NaN with -inf; larger key = more likely.
__device__ __forceinline__ u32 order_key(float l) {
    const u32 b = isnan(l) ? 0xff800000u : __float_as_uint(l);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_logit(u32 key) {
    return __uint_as_float((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}

// ---- block-wide reductions in a fixed order ----

struct SmpShared {
    union {
        u64 hist[SMP_BINS];  // weight per bin
        u32 count[SMP_BINS];  // tokens per bin
    };
    u64 red[SMP_WARPS];
    double redd[SMP_WARPS];
    float redf[SMP_WARPS];
    int redi[SMP_WARPS];
    u64 warp_a[SMP_WARPS];
    u64 warp_b[SMP_WARPS];
    u64 word[4];
    int top_ids[SMP_MAX_TOP];
    int n_top;
};

__device__ u64 block_sum_u64(u64 v, SmpShared& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.red[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 t = s.red[threadIdx.x & 31];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

// Same tree on every row whatever the grid: the row's lse does not depend on the batch.
__device__ double block_sum_f64(double v, SmpShared& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.redd[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = s.redd[threadIdx.x & 31];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t = __dadd_rn(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

// Sum of v over the threads before this one.
__device__ u64 block_excl_scan_u64(u64 v, SmpShared& s) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u64 n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += n;
    }
    __syncthreads();
    if (lane == 31) s.red[warp] = incl;
    __syncthreads();
    u64 base = 0;
    for (int w = 0; w < warp; ++w) base += s.red[w];
    return base + incl - v;
}

// This thread's SMP_U logits of a block-strided pass at `base`: ids base + u * SMP_THREADS + tid,
// `fill` past the end.
__device__ __forceinline__ void strided_load(const float* row, int vocab, int base, float fill, float* lv) {
#pragma unroll
    for (int u = 0; u < SMP_U; ++u) {
        const int i = base + u * SMP_THREADS + threadIdx.x;
        lv[u] = i < vocab ? row[i] : fill;
    }
}

// The row's argmax as the host defines it (+inf beats every finite value, NaN and -inf never
// win, the lowest id among equals; -1 if nothing qualifies), its largest finite logit, and
// whether it holds +inf.
__device__ void row_scan(const float* row, int vocab, SmpShared& s, int* arg, float* max_finite, bool* has_inf) {
    float best = KILN_NEG_INF, fin = KILN_NEG_INF;
    int bi = 0x7fffffff, inf = 0;
    for (int base = 0; base < vocab; base += SMP_THREADS * SMP_U) {
        float lv[SMP_U];
        strided_load(row, vocab, base, KILN_NEG_INF, lv);
#pragma unroll
        for (int u = 0; u < SMP_U; ++u) {
            const float v = lv[u];
            if (v > best) { best = v; bi = base + u * SMP_THREADS + threadIdx.x; }
            if (isfinite(v) && v > fin) fin = v;
            inf |= (v == __int_as_float(0x7f800000));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
        fin = fmaxf(fin, __shfl_xor_sync(0xffffffffu, fin, o));
    }
    inf = __syncthreads_or(inf);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { s.redf[warp] = best; s.redi[warp] = bi; s.red[warp] = __float_as_uint(fin); }
    __syncthreads();
    best = s.redf[0]; bi = s.redi[0]; fin = __uint_as_float((u32)s.red[0]);
    for (int w = 1; w < SMP_WARPS; ++w) {
        if (s.redf[w] > best || (s.redf[w] == best && s.redi[w] < bi)) { best = s.redf[w]; bi = s.redi[w]; }
        fin = fmaxf(fin, __uint_as_float((u32)s.red[w]));
    }
    __syncthreads();
    *arg = bi == 0x7fffffff ? -1 : bi;
    *max_finite = fin;
    *has_inf = inf != 0;
}

// ---- cuts of the sampler's order (key descending, lower id first) ----

// A prefix of the order: every token with a key above `key`, then the first `ties` tokens (by
// id) whose key equals it.
struct Cut {
    u32 key;
    u64 ties;
};

__device__ __forceinline__ bool shorter(Cut a, Cut b) { return a.key > b.key || (a.key == b.key && a.ties < b.ties); }

// Radix select over 11/11/10-bit digits of the key: the shortest prefix of the order whose
// running total reaches `need`, the total counting 1 per token (MASS false) or its weight.
// With MASS and top_p >= 0, `need` is computed from the row's total weight instead.
template <bool MASS>
__device__ Cut select_cut(const float* row, int vocab, u64 need, float top_p, float max, double inv_t, SmpShared& s) {
    const int lane = threadIdx.x & 31;
    u32 prefix = 0;
    int known = 0;
    for (int pass = 0; pass < 3; ++pass) {
        const int width = pass < 2 ? 11 : 10, shift = 32 - known - width;
        for (int b = threadIdx.x; b < SMP_BINS; b += SMP_THREADS) s.hist[b] = 0;
        __syncthreads();
        for (int base = 0; base < vocab; base += SMP_THREADS * SMP_U) {
            float lv[SMP_U];
            strided_load(row, vocab, base, 0.f, lv);
#pragma unroll
            for (int u = 0; u < SMP_U; ++u) {
                const int i = base + u * SMP_THREADS + threadIdx.x;
                u32 bin = SMP_NONE;
                u64 v = 0;
                if (i < vocab) {
                    const u32 key = order_key(lv[u]);
                    if (known == 0 || (key >> (32 - known)) == prefix) {
                        v = MASS ? token_weight(lv[u], max, inv_t) : 1;
                        if (v) bin = (key >> shift) & ((1u << width) - 1);
                    }
                }
                if (!MASS) {
                    // Counts: native 32-bit shared atomics.
                    if (bin != SMP_NONE) atomicAdd(&s.count[bin], 1u);
                    continue;
                }
                // A warp whose lanes share one bin (flat rows: most of them) adds once, summed
                // in 22-bit halves (weights are below 2^45: 32 halves fit 32 bits); otherwise
                // each lane adds its own. Warp matching costs more than either.
                const u32 b0 = __shfl_sync(0xffffffffu, bin, 0);
                if (__all_sync(0xffffffffu, bin == b0)) {
                    const u32 lo = __reduce_add_sync(0xffffffffu, (u32)(v & 0x3fffff));
                    const u32 hi = __reduce_add_sync(0xffffffffu, (u32)(v >> 22));
                    if (b0 != SMP_NONE && lane == 0) atomicAdd(&s.hist[b0], ((u64)hi << 22) + lo);
                } else if (bin != SMP_NONE) {
                    atomicAdd(&s.hist[bin], v);
                }
            }
        }
        __syncthreads();
        // Thread t owns bins 2047-2t and 2046-2t: a suffix scan from the top bin.
        const int hi_bin = SMP_BINS - 1 - 2 * (int)threadIdx.x, lo_bin = hi_bin - 1;
        const u64 vh = MASS ? s.hist[hi_bin] : s.count[hi_bin];
        const u64 vl = MASS ? s.hist[lo_bin] : s.count[lo_bin];
        if (MASS && pass == 0 && top_p >= 0.f) {
            const u64 total = block_sum_u64(vh + vl, s);
            need = (u64)ceil(__dmul_rn((double)top_p, __ull2double_rn(total)));
            need = need > 1 ? need : 1;
        }
        const u64 above = block_excl_scan_u64(vh + vl, s);
        if (threadIdx.x == 0) { s.word[0] = SMP_NONE; s.word[1] = 0; }
        __syncthreads();
        if (above < need && above + vh >= need) { s.word[0] = hi_bin; s.word[1] = need - above; }
        else if (above + vh < need && above + vh + vl >= need) { s.word[0] = lo_bin; s.word[1] = need - above - vh; }
        __syncthreads();
        if (s.word[0] == SMP_NONE) return Cut{0, ~0ull};  // unreachable for a valid need: keep all
        prefix = (prefix << width) | (u32)s.word[0];
        need = s.word[1];
        known += width;
        __syncthreads();
    }
    if (MASS) {
        // Every tie weighs the same: take as many as reach what is left of the need.
        const u64 w = token_weight(key_logit(prefix), max, inv_t);
        return Cut{prefix, (need + w - 1) / w};
    }
    return Cut{prefix, need};
}

// Warp ranges for walks in id order: warp w owns ids [w * span, (w + 1) * span).
__device__ __forceinline__ int walk_span(int vocab) {
    const int step = 32 * SMP_U;
    return ((vocab + SMP_WARPS - 1) / SMP_WARPS + step - 1) / step * step;
}

// This lane's SMP_U logits of the warp's walk at offset j: ids start + j + 32 u + lane.
__device__ __forceinline__ void walk_load(const float* row, int vocab, int first, float* lv) {
#pragma unroll
    for (int u = 0; u < SMP_U; ++u) {
        const int i = first + 32 * u + (threadIdx.x & 31);
        lv[u] = i < vocab ? row[i] : KILN_NEG_INF;
    }
}

__device__ __forceinline__ u32 lanes_below() { return (1u << (threadIdx.x & 31)) - 1; }

// For each warp, how many tokens with key == cut.key come before its range (s.warp_a).
__device__ void tie_bases(const float* row, int vocab, Cut cut, SmpShared& s) {
    const int warp = threadIdx.x >> 5, span = walk_span(vocab), start = warp * span;
    u64 n = 0;
    for (int j = 0; j < span; j += 32 * SMP_U) {
        float lv[SMP_U];
        walk_load(row, vocab, start + j, lv);
#pragma unroll
        for (int u = 0; u < SMP_U; ++u) {
            const int i = start + j + 32 * u + (threadIdx.x & 31);
            n += __popc(__ballot_sync(0xffffffffu, i < vocab && order_key(lv[u]) == cut.key));
        }
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.warp_b[warp] = n;
    __syncthreads();
    if (threadIdx.x < SMP_WARPS) {
        u64 b = 0;
        for (int w = 0; w < (int)threadIdx.x; ++w) b += s.warp_b[w];
        s.warp_a[threadIdx.x] = b;
    }
    __syncthreads();
}

// Weight of token i if the cut and the min-p floor keep it, else 0. `ties_before` counts the
// tokens with the cut's key before i; the ballot keeps it up to date for the warp.
__device__ __forceinline__ u64 kept_weight(float l, int vocab, int i, Cut cut, u64 floor_w, float max,
                                           double inv_t, u64& ties_before) {
    const u32 key = order_key(l);
    const bool tie = i < vocab && key == cut.key;
    const u32 ballot = __ballot_sync(0xffffffffu, tie);
    const u64 rank = ties_before + __popc(ballot & lanes_below());
    ties_before += __popc(ballot);
    if (i >= vocab || key < cut.key || (tie && rank >= cut.ties)) return 0;
    const u64 w = token_weight(l, max, inv_t);
    return w >= floor_w ? w : 0;
}

__device__ u64 warp_sum_u64(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Temperature, cuts, min-p, then the draw: the first kept token in id order whose running
// weight exceeds draw_target(u, kept weight).
__device__ int draw_token(const float* row, int vocab, const int* prm, float max, SmpShared& s) {
    const float temp = __int_as_float(prm[0]), top_p = __int_as_float(prm[2]), min_p = __int_as_float(prm[3]);
    const int top_k = prm[1];
    const double u = __hiloint2double(prm[5], prm[4]);
    const double inv_t = __ddiv_rn(1.0, (double)temp);
    Cut cut{0, ~0ull};
    if (top_k > 0 && top_k < vocab) cut = select_cut<false>(row, vocab, (u64)top_k, -1.f, max, inv_t, s);
    if (top_p < 1.f) {
        const Cut p = select_cut<true>(row, vocab, 0, top_p, max, inv_t, s);
        if (shorter(p, cut)) cut = p;
    }
    u64 floor_w = (u64)ceil(__dmul_rn((double)min_p, SMP_WEIGHT_ONE));
    floor_w = floor_w > 1 ? floor_w : 1;
    tie_bases(row, vocab, cut, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, span = walk_span(vocab), start = warp * span;
    u64 ties = s.warp_a[warp], mass = 0;
    for (int j = 0; j < span; j += 32 * SMP_U) {
        float lv[SMP_U];
        walk_load(row, vocab, start + j, lv);
#pragma unroll
        for (int u = 0; u < SMP_U; ++u)
            mass += kept_weight(lv[u], vocab, start + j + 32 * u + lane, cut, floor_w, max, inv_t, ties);
    }
    mass = warp_sum_u64(mass);
    __syncthreads();
    if (lane == 0) s.warp_b[warp] = mass;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 kept = 0;
        for (int w = 0; w < SMP_WARPS; ++w) kept += s.warp_b[w];
        u64 t = (u64)__dmul_rn(u, __ull2double_rn(kept));
        t = kept == 0 ? 0 : (t < kept - 1 ? t : kept - 1);
        int w = 0;
        while (w < SMP_WARPS - 1 && t >= s.warp_b[w]) t -= s.warp_b[w++];
        s.word[0] = (u64)w;
        s.word[1] = t;
        s.word[2] = SMP_NONE;
    }
    __syncthreads();
    if (warp == (int)s.word[0]) {
        const u64 target = s.word[1];
        u64 acc = 0;
        ties = s.warp_a[warp];
        bool found = false;
        for (int j = 0; j < span && !found; j += 32 * SMP_U) {
            float lv[SMP_U];
            walk_load(row, vocab, start + j, lv);
#pragma unroll
            for (int u = 0; u < SMP_U; ++u) {
                if (found) break;
                const int first = start + j + 32 * u;
                const u64 w = kept_weight(lv[u], vocab, first + lane, cut, floor_w, max, inv_t, ties);
                u64 incl = w;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const u64 n = __shfl_up_sync(0xffffffffu, incl, o);
                    if (lane >= o) incl += n;
                }
                const u32 over = __ballot_sync(0xffffffffu, acc + incl > target);
                if (over) {
                    if (lane == 0) s.word[2] = (u64)(first + __ffs(over) - 1);
                    found = true;
                }
                acc += __shfl_sync(0xffffffffu, incl, 31);
            }
        }
    }
    __syncthreads();
    return (int)s.word[2];
}

// log(sum(exp(l - max))) + max over the finite logits, each thread summing its strided tokens
// in order, then a fixed tree.
__device__ double row_lse(const float* row, int vocab, float max, SmpShared& s) {
    double sum = 0.0;
    for (int base = 0; base < vocab; base += SMP_THREADS * SMP_U) {
        float lv[SMP_U];
        strided_load(row, vocab, base, KILN_NEG_INF, lv);
        // In id order, as the loop without the batching would add them.
#pragma unroll
        for (int u = 0; u < SMP_U; ++u)
            if (isfinite(lv[u])) sum = __dadd_rn(sum, exp(__dsub_rn((double)lv[u], (double)max)));
    }
    sum = block_sum_f64(sum, s);
    return __dadd_rn((double)max, log(sum));
}

// The n most likely tokens, in the sampler's order, into s.top_ids.
__device__ void top_tokens(const float* row, int vocab, int n, SmpShared& s) {
    const Cut cut = select_cut<false>(row, vocab, (u64)n, -1.f, 0.f, 1.0, s);
    tie_bases(row, vocab, cut, s);
    if (threadIdx.x == 0) s.n_top = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, span = walk_span(vocab), start = warp * span;
    u64 ties = s.warp_a[warp];
    for (int j = 0; j < span; j += 32 * SMP_U) {
        float lv[SMP_U];
        walk_load(row, vocab, start + j, lv);
#pragma unroll
        for (int u = 0; u < SMP_U; ++u) {
            const int i = start + j + 32 * u + lane;
            const u32 key = i < vocab ? order_key(lv[u]) : 0;
            const bool tie = i < vocab && key == cut.key;
            const u32 ballot = __ballot_sync(0xffffffffu, tie);
            const u64 rank = ties + __popc(ballot & lanes_below());
            ties += __popc(ballot);
            if (i < vocab && (key > cut.key || (tie && rank < cut.ties))) {
                const int slot = atomicAdd(&s.n_top, 1);
                if (slot < SMP_MAX_TOP) s.top_ids[slot] = i;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        // At most SMP_MAX_TOP entries: an insertion sort, key descending, id ascending.
        s.n_top = s.n_top < SMP_MAX_TOP ? s.n_top : SMP_MAX_TOP;
        for (int a = 1; a < s.n_top; ++a) {
            const int t = s.top_ids[a];
            const u32 kt = order_key(row[t]);
            int b = a - 1;
            while (b >= 0) {
                const u32 kb = order_key(row[s.top_ids[b]]);
                if (kb > kt || (kb == kt && s.top_ids[b] < t)) break;
                s.top_ids[b + 1] = s.top_ids[b];
                --b;
            }
            s.top_ids[b + 1] = t;
        }
    }
    __syncthreads();
}

// ---- adjusted rows: penalties, a client's logit bias and a grammar's allowed tokens ----

// Per adjusted row, SMP_ADJ_WORDS words: its logits row, its mask (-1: none, else the index of
// its (vocab + 31) / 32 words in `masks`, bit i % 32 of word i / 32 = token i allowed), its first
// bias entry and how many, its first penalty entry and how many, and the repetition, presence and
// frequency penalties (f32 bits). Penalty entries are (token, times generated) pairs. As
// kiln_step::adjust_row: each penalised token gets Penalty::apply (the repetition penalty, one
// f32 division or multiplication, then one subtraction of presence + frequency * times), then
// each biased token its value added (one f32 addition), and each token outside the mask becomes
// -inf. Bias ids are distinct, penalty ids too.
#define SMP_ADJ_WORDS 9

extern "C" __global__ void __launch_bounds__(SMP_THREADS, 1)
    adjust_rows(const float* __restrict__ logits, float* __restrict__ adjusted, const int* __restrict__ plan,
                const u32* __restrict__ masks, const int* __restrict__ bias_ids, const float* __restrict__ bias_vals,
                const int* __restrict__ penalties, int n, int vocab) {
    pdl_enter();
    const int words = (vocab + 31) / 32;
    for (int r = blockIdx.x; r < n; r += gridDim.x) {
        const int* p = plan + r * SMP_ADJ_WORDS;
        const float* src = logits + (u64)p[0] * vocab;
        float* dst = adjusted + (u64)r * vocab;
        const u32* m = p[1] >= 0 ? masks + (u64)p[1] * words : nullptr;
        for (int i = threadIdx.x; i < vocab; i += SMP_THREADS) {
            const bool ok = m == nullptr || ((m[i >> 5] >> (i & 31)) & 1u);
            dst[i] = ok ? src[i] : KILN_NEG_INF;
        }
        __syncthreads();
        const float rep = __int_as_float(p[6]), pres = __int_as_float(p[7]), freq = __int_as_float(p[8]);
        for (int e = threadIdx.x; e < p[5]; e += SMP_THREADS) {
            const int id = penalties[2 * (p[4] + e)], times = penalties[2 * (p[4] + e) + 1];
            const bool ok = id >= 0 && id < vocab && (m == nullptr || ((m[id >> 5] >> (id & 31)) & 1u));
            if (!ok) continue;
            float l = src[id];
            if (rep != 1.f) l = l > 0.f ? __fdiv_rn(l, rep) : __fmul_rn(l, rep);
            if (times > 0 && (pres != 0.f || freq != 0.f))
                l = __fsub_rn(l, __fadd_rn(pres, __fmul_rn(freq, __int2float_rn(times))));
            dst[id] = l;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < p[3]; e += SMP_THREADS) {
            const int id = bias_ids[p[2] + e];
            const bool ok = id >= 0 && id < vocab && (m == nullptr || ((m[id >> 5] >> (id & 31)) & 1u));
            if (ok) dst[id] = __fadd_rn(dst[id], bias_vals[p[2] + e]);
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(SMP_THREADS, 1)
    sample_rows(const float* __restrict__ logits, const float* __restrict__ adjusted, const int* __restrict__ params,
                int* __restrict__ out, int rows, int vocab) {
    __shared__ SmpShared s;
    pdl_enter();
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = logits + (u64)r * vocab;
        const int* prm = params + r * SMP_PARAM_WORDS;
        // The token comes from the adjusted copy when there is one.
        const float* pick = prm[7] >= 0 ? adjusted + (u64)prm[7] * vocab : row;
        int* o = out + r * SMP_OUT_WORDS;
        int arg;
        float max;
        bool has_inf;
        row_scan(pick, vocab, s, &arg, &max, &has_inf);
        const int logprobs = prm[6];
        int id = arg;
        if (__int_as_float(prm[0]) > 0.f && max != KILN_NEG_INF && !has_inf) id = draw_token(pick, vocab, prm, max, s);
        if (pick != row && logprobs >= 0) {
            // Log-probabilities are the raw row's: its own largest finite logit.
            int raw_arg;
            row_scan(row, vocab, s, &raw_arg, &max, &has_inf);
        }
        const bool finite = max != KILN_NEG_INF;
        const bool failed = id < 0 || (logprobs >= 0 && !finite);
        float chosen = 0.f;
        int n_top = 0;
        if (!failed && logprobs >= 0) {
            const double lse = row_lse(row, vocab, max, s);
            chosen = (float)__dsub_rn((double)row[id], lse);
            n_top = logprobs < SMP_MAX_TOP ? logprobs : SMP_MAX_TOP;
            n_top = n_top < vocab ? n_top : vocab;
            if (n_top > 0) top_tokens(row, vocab, n_top, s);
            if ((int)threadIdx.x < n_top) {
                const int t = s.top_ids[threadIdx.x];
                o[4 + threadIdx.x] = t;
                o[4 + SMP_MAX_TOP + threadIdx.x] = __float_as_int((float)__dsub_rn((double)row[t], lse));
            }
        }
        if (threadIdx.x == 0) {
            o[0] = failed ? 0 : id;
            o[1] = failed ? 1 : 0;
            o[2] = __float_as_int(chosen);
            o[3] = failed ? 0 : n_top;
        }
        __syncthreads();
    }
}

// A step's decode tokens taken from the picks of the step before, where they lie, so that a step
// can be queued before the host has seen those picks: for each of n (flat token index, row)
// pairs, tokens[index] = picks[row * stride]. Queued between the step's input upload and its
// forward pass.
extern "C" __global__ void feed_tokens(int* __restrict__ tokens, const int* __restrict__ picks, int stride,
                                       const int* __restrict__ pairs, int n) {
    pdl_enter();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        tokens[pairs[2 * i]] = picks[(long long)pairs[2 * i + 1] * stride];
}
