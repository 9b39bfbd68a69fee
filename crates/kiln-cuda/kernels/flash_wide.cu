#line 1 "flash_wide.cu"
// Prefill attention for heads too wide for the register tiles of flash_attn.cu (Gemma 4's
// full-attention layers: head dim 512), with its contracts: causal and sliding-window limits
// from positions inside the kernel, K/V read through the block table, tiles aligned to absolute
// positions and visited in order, so a row's result does not depend on the other rows, the
// chunking or the batch. A CTA takes 64 query rows of one prefill tile for one head and DV of
// the head's HD output columns (blockIdx.z picks which). Scores use the whole head; each column
// slice recomputes them (the same bits in every slice, so the softmax state is the same), which
// keeps the output accumulators within the registers of a 256-wide head. K tiles hold the
// whole head, V tiles only the CTA's columns, two cp.async stages. bf16 (tensor-core MMA). The
// tile and a warp's softmax, P V and store: flash_tile.cuh.

template <int HD, int DV, int BN>
__device__ __forceinline__ void wide_load_kv(bf16_t* sk, bf16_t* sv, const bf16_t* __restrict__ kc,
                                             const bf16_t* __restrict__ vc, const int* __restrict__ table,
                                             int kt, int kv_end, int kvh, int n_kv, int block_size, int col0) {
    constexpr int LDK = HD + 8, LDV = DV + 8, CK = HD / 8, CV = DV / 8;
    for (int idx = threadIdx.x; idx < BN * (CK + CV); idx += blockDim.x) {
        const bool is_k = idx < BN * CK;
        const int j = is_k ? idx : idx - BN * CK;
        const int ch = is_k ? CK : CV;
        const int r = j / ch, c = j % ch;
        const int p = kt * BN + r;
        const bool ok = p < kv_end;
        const u64 head = ok ? (((u64)table[p / block_size] * n_kv + kvh) * block_size + p % block_size) * HD : 0;
        if (is_k)
            cp_async_16(sk + r * LDK + c * 8, kc + head + (ok ? c * 8 : 0), ok ? 16 : 0);
        else
            cp_async_16(sv + r * LDV + c * 8, vc + head + (ok ? col0 + c * 8 : 0), ok ? 16 : 0);
    }
}

template <int HD, int DV, int BN>
__device__ __forceinline__ void flash_wide_body(const bf16_t* __restrict__ q, const bf16_t* __restrict__ kc,
                                                const bf16_t* __restrict__ vc, const AttnTile* __restrict__ tiles,
                                                const int* __restrict__ bt_start, const int* __restrict__ block_tables,
                                                bf16_t* __restrict__ out, int n_q, int n_kv, int block_size,
                                                int window, float scale_log2) {
    constexpr int BM = 64, LDK = HD + 8, LDV = DV + 8, NT = BN / 8, DO = DV / 8, CQ = HD / 8;
    extern __shared__ __align__(16) unsigned char fw_smem[];
    bf16_t* sq = reinterpret_cast<bf16_t*>(fw_smem);
    bf16_t* sk0 = sq + BM * LDK;
    bf16_t* sv0 = sk0 + 2 * BN * LDK;

    // Later tiles of a chunk see more keys: hand them out first so the grid ends evenly.
    const AttnTile tile = tiles[gridDim.x - 1 - blockIdx.x];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, kvh = h / (n_q / n_kv);
    const int col0 = blockIdx.z * DV;
    const int* table = block_tables + bt_start[tile.seq];
    const int kv_end = tile.pos0 + tile.n_rows;
    const int first = window > 0 ? max(0, tile.pos0 + 1 - window) : 0;
    const int kt_lo = first / BN, kt_hi = (kv_end - 1) / BN;

    for (int idx = threadIdx.x; idx < BM * CQ; idx += blockDim.x) {
        const int r = idx / CQ, c = idx % CQ;
        const bool ok = r < tile.n_rows;
        const bf16_t* src = q + ((u64)(tile.tok0 + (ok ? r : 0)) * n_q + h) * HD + c * 8;
        cp_async_16(sq + r * LDK + c * 8, src, ok ? 16 : 0);
    }
    wide_load_kv<HD, DV, BN>(sk0, sv0, kc, vc, table, kt_lo, kv_end, kvh, n_kv, block_size, col0);
    cp_async_commit();

    const int wr = warp * 16;  // first row of this warp inside the tile
    const bool warp_live = wr < tile.n_rows;
    const int wq_lo = tile.pos0 + wr, wq_hi = tile.pos0 + min(wr + 15, tile.n_rows - 1);
    const int qa = wr + g < tile.n_rows ? tile.pos0 + wr + g : -1;  // -1 masks a padding row
    const int qb = wr + g + 8 < tile.n_rows ? tile.pos0 + wr + g + 8 : -1;
    RowState st = row_state_start();
    float o[DO][4];
#pragma unroll
    for (int d = 0; d < DO; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;

    for (int kt = kt_lo; kt <= kt_hi; ++kt) {
        const int stage = (kt - kt_lo) & 1;
        if (kt < kt_hi) {
            wide_load_kv<HD, DV, BN>(sk0 + (stage ^ 1) * BN * LDK, sv0 + (stage ^ 1) * BN * LDV, kc, vc, table,
                                     kt + 1, kv_end, kvh, n_kv, block_size, col0);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16_t* sk = sk0 + stage * BN * LDK;
        const bf16_t* sv = sv0 + stage * BN * LDV;
        const int k_lo = kt * BN, k_hi = kt * BN + BN - 1;
        // Every key of this tile masked for every row of the warp: its state would not change.
        const bool skip = !warp_live || k_lo > wq_hi || (window > 0 && wq_lo - k_hi >= window);
        if (!skip) {
            float s[NT][4];
#pragma unroll
            for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            const int mi = lane >> 3;
#pragma unroll 8
            for (int kk = 0; kk < HD / 16; ++kk) {
                u32 a[4];
                ldmatrix_x4(a, sq + (wr + (mi & 1) * 8 + (lane & 7)) * LDK + kk * 16 + (mi >> 1) * 8);
#pragma unroll
                for (int n = 0; n < NT; n += 2) {
                    u32 b[4];
                    ldmatrix_x4(b, sk + (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LDK + kk * 16 + (mi & 1) * 8);
                    mma_bf16_16816(s[n], a, b);
                    mma_bf16_16816(s[n + 1], a, b + 2);
                }
            }
            fa_tile_softmax_pv<NT, DO>(s, o, st, sv, LDV, kt * BN, lane, qa, qb, window, scale_log2,
                                       [&](int n, int e) { return s[n][e]; });
        }
        __syncthreads();
    }
    fa_store_rows<DO>(o, st, out + ((u64)(tile.tok0 + wr + g) * n_q + h) * HD + col0,
                      out + ((u64)(tile.tok0 + wr + g + 8) * n_q + h) * HD + col0, t, qa, qb);
}

#define FW_ENTRY(NAME, HD, DV, BN)                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 1) NAME(                                            \
        const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const AttnTile* tiles, const int* bt_start,  \
        const int* block_tables, bf16_t* out, int n_q, int n_kv, int block_size, int window,             \
        float scale_log2) {                                                                              \
        pdl_enter();                                                                                     \
        flash_wide_body<HD, DV, BN>(q, kc, vc, tiles, bt_start, block_tables, out, n_q, n_kv, block_size, \
                                    window, scale_log2);                                                 \
    }
FW_ENTRY(flash_attn_wide_hd512, 512, 256, 32)

// KILN_FLASH_WIDE=split: the same tiles, masks and order, 8 warps per CTA holding the whole head.
// Warps w and w + 4 share 16 query rows: warp w takes the head's first half, w + 4 the second, for
// the scores (each a partial sum over its half, the two summed through shared memory first half
// first, so both hold the same bits) and for the output columns. No score is computed twice and
// each K/V tile is read once per 64 rows; 216 KB of shared memory, one CTA per SM.
#define FWS_LDS 33  // row stride of the partial scores (floats)

template <int HD, int BN>
__device__ __forceinline__ void flash_wide_split_body(const bf16_t* __restrict__ q, const bf16_t* __restrict__ kc,
                                                      const bf16_t* __restrict__ vc, const AttnTile* __restrict__ tiles,
                                                      const int* __restrict__ bt_start,
                                                      const int* __restrict__ block_tables, bf16_t* __restrict__ out,
                                                      int n_q, int n_kv, int block_size, int window, float scale_log2) {
    constexpr int BM = 64, LD = HD + 8, NT = BN / 8, DH = HD / 2, DO = DH / 8, CQ = HD / 8;
    extern __shared__ __align__(16) unsigned char fws_smem[];
    bf16_t* sq = reinterpret_cast<bf16_t*>(fws_smem);
    bf16_t* sk0 = sq + BM * LD;
    bf16_t* sv0 = sk0 + 2 * BN * LD;
    float* sp = reinterpret_cast<float*>(sv0 + 2 * BN * LD);  // [warp][16][FWS_LDS]

    const AttnTile tile = tiles[gridDim.x - 1 - blockIdx.x];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int half = warp >> 2, col0 = half * DH;
    const int h = blockIdx.y, kvh = h / (n_q / n_kv);
    const int* table = block_tables + bt_start[tile.seq];
    const int kv_end = tile.pos0 + tile.n_rows;
    const int first = window > 0 ? max(0, tile.pos0 + 1 - window) : 0;
    const int kt_lo = first / BN, kt_hi = (kv_end - 1) / BN;

    for (int idx = threadIdx.x; idx < BM * CQ; idx += blockDim.x) {
        const int r = idx / CQ, c = idx % CQ;
        const bool ok = r < tile.n_rows;
        const bf16_t* src = q + ((u64)(tile.tok0 + (ok ? r : 0)) * n_q + h) * HD + c * 8;
        cp_async_16(sq + r * LD + c * 8, src, ok ? 16 : 0);
    }
    // K and V tiles of the whole head (wide_load_kv with the V slice as wide as the head).
    wide_load_kv<HD, HD, BN>(sk0, sv0, kc, vc, table, kt_lo, kv_end, kvh, n_kv, block_size, 0);
    cp_async_commit();

    const int wr = (warp & 3) * 16;  // first row of this warp's pair inside the tile
    const bool warp_live = wr < tile.n_rows;
    const int wq_lo = tile.pos0 + wr, wq_hi = tile.pos0 + min(wr + 15, tile.n_rows - 1);
    const int qa = wr + g < tile.n_rows ? tile.pos0 + wr + g : -1;
    const int qb = wr + g + 8 < tile.n_rows ? tile.pos0 + wr + g + 8 : -1;
    RowState st = row_state_start();
    float o[DO][4];
#pragma unroll
    for (int d = 0; d < DO; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    const int mi = lane >> 3;
    float* mine = sp + warp * 16 * FWS_LDS;
    const float* first_half = sp + (warp & 3) * 16 * FWS_LDS;
    const float* second_half = sp + ((warp & 3) + 4) * 16 * FWS_LDS;

    for (int kt = kt_lo; kt <= kt_hi; ++kt) {
        const int stage = (kt - kt_lo) & 1;
        if (kt < kt_hi) {
            wide_load_kv<HD, HD, BN>(sk0 + (stage ^ 1) * BN * LD, sv0 + (stage ^ 1) * BN * LD, kc, vc, table, kt + 1,
                                     kv_end, kvh, n_kv, block_size, 0);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16_t* sk = sk0 + stage * BN * LD;
        const bf16_t* sv = sv0 + stage * BN * LD;
        const int k_lo = kt * BN, k_hi = kt * BN + BN - 1;
        // The same answer for both warps of a pair (it depends on their rows only).
        const bool skip = !warp_live || k_lo > wq_hi || (window > 0 && wq_lo - k_hi >= window);
        float s[NT][4];
        if (!skip) {
#pragma unroll
            for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll 8
            for (int kk = 0; kk < DH / 16; ++kk) {
                u32 a[4];
                ldmatrix_x4(a, sq + (wr + (mi & 1) * 8 + (lane & 7)) * LD + col0 + kk * 16 + (mi >> 1) * 8);
#pragma unroll
                for (int n = 0; n < NT; n += 2) {
                    u32 b[4];
                    ldmatrix_x4(b, sk + (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LD + col0 + kk * 16 + (mi & 1) * 8);
                    mma_bf16_16816(s[n], a, b);
                    mma_bf16_16816(s[n + 1], a, b + 2);
                }
            }
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) mine[(g + (e >> 1) * 8) * FWS_LDS + n * 8 + 2 * t + (e & 1)] = s[n][e];
        }
        __syncthreads();
        if (!skip) {
            // The two halves' partial sums, first half first: the same bits in both warps.
            fa_tile_softmax_pv<NT, DO>(s, o, st, sv + col0, LD, kt * BN, lane, qa, qb, window, scale_log2,
                                       [&](int n, int e) {
                                           const int at = (g + (e >> 1) * 8) * FWS_LDS + n * 8 + 2 * t + (e & 1);
                                           return __fadd_rn(first_half[at], second_half[at]);
                                       });
        }
        __syncthreads();
    }
    fa_store_rows<DO>(o, st, out + ((u64)(tile.tok0 + wr + g) * n_q + h) * HD + col0,
                      out + ((u64)(tile.tok0 + wr + g + 8) * n_q + h) * HD + col0, t, qa, qb);
}

extern "C" __global__ void __launch_bounds__(256, 1) flash_attn_wide_split_hd512(
    const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const AttnTile* tiles, const int* bt_start,
    const int* block_tables, bf16_t* out, int n_q, int n_kv, int block_size, int window, float scale_log2) {
    pdl_enter();
    flash_wide_split_body<512, 32>(q, kc, vc, tiles, bt_start, block_tables, out, n_q, n_kv, block_size, window,
                                   scale_log2);
}
