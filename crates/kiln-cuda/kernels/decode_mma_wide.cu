#line 1 "decode_mma_wide.cu"
// Decode attention on the tensor cores for heads too wide for decode_mma.cu's registers (Gemma 4's
// full-attention layers: head dim 512), the same family (KILN_DECODE_ATTN=mma): the 16 MMA rows are
// query slots (a GQA group's heads times rows of one sequence), splits of decode_mma.cu's power-of-two
// spans at absolute positions (decode_split.cuh), merged by its decode_mma_combine.
//
// A warp owns a quarter of the head instead of a quarter of the keys: for each tile of 32 keys it
// computes the scores over its 128 dimensions, the four partial scores are summed through shared
// memory in warp order (so every warp holds the same bits), every warp runs the same online softmax,
// and each accumulates P V for its own 128 output columns. The accumulators take 64 registers instead
// of a whole head's 256, K and V are read once per CTA, and no merge of the warps is needed. Tiles
// of 32 keys at absolute multiples of 32 stream through a three-stage cp.async ring; a tile no slot
// sees is skipped by every warp alike. Keys past a slot's length (or before its window) are masked.
// bf16 (tensor-core MMA).

#define DMW_WARPS 4
#define DMW_TILE 32
#define DMW_LDS 33  // row stride of the partial scores (floats)

template <int HD>
__device__ __forceinline__ void dmw_load_tile(bf16_t* sk, bf16_t* sv, const bf16_t* __restrict__ kc,
                                              const bf16_t* __restrict__ vc, const int* __restrict__ table,
                                              int k0, int kv_end, int kvh, int n_kv, int block_size) {
    constexpr int LD = HD + 8, CH = HD / 8;
    for (int idx = threadIdx.x; idx < DMW_TILE * CH; idx += DMW_WARPS * 32) {
        const int r = idx / CH, c = idx % CH;
        const int p = k0 + r;
        const bool ok = p < kv_end;
        const u64 off = ok ? (((u64)table[p / block_size] * n_kv + kvh) * block_size + p % block_size) * HD + c * 8 : 0;
        cp_async_16(sk + r * LD + c * 8, kc + off, ok ? 16 : 0);
        cp_async_16(sv + r * LD + c * 8, vc + off, ok ? 16 : 0);
    }
}

template <int HD, int NST>
__device__ __forceinline__ void decode_mma_wide_body(
    const bf16_t* __restrict__ q, const bf16_t* __restrict__ k_cache, const bf16_t* __restrict__ v_cache,
    const int* __restrict__ positions, const int* __restrict__ token_seq, const int* __restrict__ bt_start,
    const int* __restrict__ block_tables, float* __restrict__ part_o, float* __restrict__ part_ml,
    int n_q, int n_kv, int block_size, int window, float scale_log2, int max_splits, int min_span, int span_round) {
    constexpr int LD = HD + 8, DW = HD / DMW_WARPS, DT = DW / 8, NT = DMW_TILE / 8;
    extern __shared__ __align__(16) unsigned char dmw_smem[];
    bf16_t* sq = reinterpret_cast<bf16_t*>(dmw_smem);
    bf16_t* sk0 = sq + 16 * LD;
    bf16_t* sv0 = sk0 + NST * DMW_TILE * LD;
    float* sp = reinterpret_cast<float*>(sv0 + NST * DMW_TILE * LD);  // [warp][slot][DMW_LDS]
    __shared__ int s_len[16];

    const int split = blockIdx.x, row0 = blockIdx.z;
    // Runs of rows as decode_mma.cu forms them.
    DmRun run;
    if (!dm_run(run, token_seq, positions, n_q, n_kv, window, max_splits, min_span, span_round)) return;
    const int kvh = run.kvh, hc0 = run.hc0, nh = run.nh, gc = run.gc, nr = run.nr;
    const int max_len = run.max_len, min_first = run.min_first;
    const int span = dm_span(max_len, max_splits, min_span, span_round);
    const int lo = split * span;
    if (lo >= max_len) return;
    const int hi = min(max_len, lo + span);
    const int t_lo = max(lo, min_first / DMW_TILE * DMW_TILE);
    const int n_tiles = t_lo < hi ? (hi - t_lo + DMW_TILE - 1) / DMW_TILE : 0;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int col0 = warp * DW;  // this warp's quarter of the head
    const int* table = block_tables + bt_start[token_seq[row0]];
    if (threadIdx.x < 16) {
        const int r = threadIdx.x / gc, h = threadIdx.x % gc;
        s_len[threadIdx.x] = (r < nr && h < nh) ? positions[row0 + r] + 1 : 0;  // 0: an empty slot
    }
    dm_load_query<HD, DMW_WARPS * 32>(sq, LD, q, row0, nr, n_q, hc0, nh, gc);
#pragma unroll
    for (int st = 0; st < NST - 1; ++st) {
        if (st < n_tiles)
            dmw_load_tile<HD>(sk0 + st * DMW_TILE * LD, sv0 + st * DMW_TILE * LD, k_cache, v_cache, table,
                              t_lo + st * DMW_TILE, hi, kvh, n_kv, block_size);
        cp_async_commit();
    }
    __syncthreads();
    const int len_a = s_len[g], len_b = s_len[g + 8];
    const int first_a = window > 0 ? len_a - window : 0, first_b = window > 0 ? len_b - window : 0;

    float m_a = KILN_NEG_INF, m_b = KILN_NEG_INF, l_a = 0.f, l_b = 0.f;
    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    const int mi = lane >> 3;

    for (int it = 0; it < n_tiles; ++it) {
        const int nxt = it + NST - 1;
        if (nxt < n_tiles)
            dmw_load_tile<HD>(sk0 + (nxt % NST) * DMW_TILE * LD, sv0 + (nxt % NST) * DMW_TILE * LD, k_cache,
                              v_cache, table, t_lo + nxt * DMW_TILE, hi, kvh, n_kv, block_size);
        cp_async_commit();
        cp_async_wait<NST - 1>();
        __syncthreads();
        const int k0 = t_lo + it * DMW_TILE;
        // Does any slot see any key of this tile? The same answer in every thread.
        bool any = false;
#pragma unroll
        for (int i = 0; i < 16; ++i)
            any |= k0 < s_len[i] && (window <= 0 || k0 + DMW_TILE - 1 >= s_len[i] - window);
        if (any) {
            const bf16_t* sk = sk0 + (it % NST) * DMW_TILE * LD;
            const bf16_t* sv = sv0 + (it % NST) * DMW_TILE * LD;
            float s[NT][4];
#pragma unroll
            for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < DW / 16; ++kk) {
                u32 a[4];
                ldmatrix_x4(a, sq + ((mi & 1) * 8 + (lane & 7)) * LD + col0 + kk * 16 + (mi >> 1) * 8);
#pragma unroll
                for (int n = 0; n < NT; n += 2) {
                    u32 b[4];
                    ldmatrix_x4(b, sk + (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LD + col0 + kk * 16 + (mi & 1) * 8);
                    mma_bf16_16816(s[n], a, b);
                    mma_bf16_16816(s[n + 1], a, b + 2);
                }
            }
            // The four quarters' partial scores, summed in warp order.
            float* mine = sp + warp * 16 * DMW_LDS;
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) mine[(g + (e >> 1) * 8) * DMW_LDS + n * 8 + 2 * t + (e & 1)] = s[n][e];
            __syncthreads();
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int at = (g + (e >> 1) * 8) * DMW_LDS + n * 8 + 2 * t + (e & 1);
                    float v = sp[at];
#pragma unroll
                    for (int w = 1; w < DMW_WARPS; ++w) v = __fadd_rn(v, sp[w * 16 * DMW_LDS + at]);
                    s[n][e] = v;
                }
            dm_softmax_pv(s, o, m_a, m_b, l_a, l_b, sv + col0, LD, lane, k0, len_a, len_b, first_a, first_b,
                          scale_log2, false, false);
        }
        __syncthreads();
    }
    cp_async_wait<0>();
    l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 1));
    l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 2));
    l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 1));
    l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 2));

    // Every warp holds the same softmax state: each writes its own columns, warp 0 the state.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int i = g + half * 8;
        const int len = s_len[i];
        if (len == 0 || lo >= len) continue;
        const int row = row0 + i / gc, h = hc0 + i % gc;
        const u64 pi = ((u64)row * n_q + h) * max_splits + split;
        float* dst = part_o + pi * HD + col0 + 2 * t;
#pragma unroll
        for (int d = 0; d < DT; ++d) {
            dst[d * 8] = o[d][half * 2];
            dst[d * 8 + 1] = o[d][half * 2 + 1];
        }
        if (warp == 0 && t == 0) {
            part_ml[pi * 2] = half ? m_b : m_a;
            part_ml[pi * 2 + 1] = half ? l_b : l_a;
        }
    }
}

// Partial scores and a three-stage ring of 32-key K/V tiles: 224 KB of shared memory, one CTA per SM.
extern "C" __global__ void __launch_bounds__(128, 1) decode_mma_hd512(
    const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const int* positions, const int* token_seq,
    const int* bt_start, const int* block_tables, float* part_o, float* part_ml, int n_q, int n_kv,
    int block_size, int window, float scale_log2, int max_splits, int min_span, int span_round) {
    pdl_enter();
    decode_mma_wide_body<512, 3>(q, kc, vc, positions, token_seq, bt_start, block_tables, part_o, part_ml, n_q,
                                 n_kv, block_size, window, scale_log2, max_splits, min_span, span_round);
}
