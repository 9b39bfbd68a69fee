#line 1 "flash_attn.cu"
// Prefill attention on the tensor cores (FlashAttention-2 style, mma.sync m16n8k16 bf16).
// A CTA takes 64 query rows of one prefill chunk (a "tile": first flat token, row count,
// sequence, position of the first row) for HP query heads of one GQA group: 4 warps per head,
// each warp owns 16 rows of one head. K/V tiles of BN keys are read once per CTA for all its
// heads, through the block table with cp.async, two stages deep, and visited from the window's
// first tile to the tile of the last row, tiles aligned to absolute positions. Causal and window
// limits come from positions inside the kernel; a row meets tiles beyond its own limits only as
// fully masked tiles, which leave its accumulators exactly unchanged (a warp whose rows are all
// masked in a tile skips its math there, which is the same), so a row's result does not depend
// on the other rows or heads of its CTA, the chunking, or the batch. flash_attn_hd* take one
// head per CTA; flash_attn2_hd* two (an even GQA group): half the K/V traffic per row and twice
// the warps per SM. The tile and a warp's softmax, P V and store: flash_tile.cuh.

template <int HD, int BN>
__device__ __forceinline__ void fa_load_kv(bf16_t* sk, bf16_t* sv, const bf16_t* __restrict__ kc,
                                           const bf16_t* __restrict__ vc, const int* __restrict__ table,
                                           int kt, int kv_end, int kvh, int n_kv, int block_size) {
    constexpr int LD = HD + 8, CH = HD / 8;
    for (int idx = threadIdx.x; idx < BN * CH; idx += blockDim.x) {
        const int r = idx / CH, c = idx % CH;
        const int p = kt * BN + r;
        const bool ok = p < kv_end;
        const u64 off = ok ? (((u64)table[p / block_size] * n_kv + kvh) * block_size + p % block_size) * HD + c * 8 : 0;
        cp_async_16(sk + r * LD + c * 8, kc + off, ok ? 16 : 0);
        cp_async_16(sv + r * LD + c * 8, vc + off, ok ? 16 : 0);
    }
}

template <int HD, int BN, int HP>
__device__ __forceinline__ void flash_attn_body(const bf16_t* __restrict__ q, const bf16_t* __restrict__ kc,
                                                const bf16_t* __restrict__ vc, const AttnTile* __restrict__ tiles,
                                                const int* __restrict__ bt_start, const int* __restrict__ block_tables,
                                                bf16_t* __restrict__ out, int n_q, int n_kv, int block_size,
                                                int window, float scale_log2) {
    constexpr int BM = 64, LD = HD + 8, NT = BN / 8, DT = HD / 8;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    bf16_t* sq = reinterpret_cast<bf16_t*>(fa_smem);
    bf16_t* sk0 = sq + HP * BM * LD;
    bf16_t* sv0 = sk0 + 2 * BN * LD;

    // Later tiles of a chunk see more keys: hand them out first so the grid ends evenly.
    const AttnTile tile = tiles[gridDim.x - 1 - blockIdx.x];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h0 = blockIdx.y * HP, kvh = h0 / (n_q / n_kv);
    const int h = h0 + warp / 4;  // this warp's head
    const int* table = block_tables + bt_start[tile.seq];
    const int kv_end = tile.pos0 + tile.n_rows;  // keys past the last row are never needed
    const int first = window > 0 ? max(0, tile.pos0 + 1 - window) : 0;
    const int kt_lo = first / BN, kt_hi = (kv_end - 1) / BN;

    for (int idx = threadIdx.x; idx < HP * BM * DT; idx += blockDim.x) {
        const int hr = idx / DT, c = idx % DT, r = hr % BM;
        const bool ok = r < tile.n_rows;
        const bf16_t* src = q + ((u64)(tile.tok0 + (ok ? r : 0)) * n_q + h0 + hr / BM) * HD + c * 8;
        cp_async_16(sq + hr * LD + c * 8, src, ok ? 16 : 0);
    }
    fa_load_kv<HD, BN>(sk0, sv0, kc, vc, table, kt_lo, kv_end, kvh, n_kv, block_size);
    cp_async_commit();

    const int wr = (warp % 4) * 16;  // first row of this warp inside the tile
    const bf16_t* sqw = sq + (warp / 4) * BM * LD;
    // Positions of this warp's first and last real rows (a warp past the tile's rows is idle).
    const bool warp_live = wr < tile.n_rows;
    const int wq_lo = tile.pos0 + wr, wq_hi = tile.pos0 + min(wr + 15, tile.n_rows - 1);
    const int qa = wr + g < tile.n_rows ? tile.pos0 + wr + g : -1;  // -1 masks a padding row
    const int qb = wr + g + 8 < tile.n_rows ? tile.pos0 + wr + g + 8 : -1;
    RowState st = row_state_start();
    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;

    for (int kt = kt_lo; kt <= kt_hi; ++kt) {
        const int stage = (kt - kt_lo) & 1;
        if (kt < kt_hi) {
            fa_load_kv<HD, BN>(sk0 + (stage ^ 1) * BN * LD, sv0 + (stage ^ 1) * BN * LD, kc, vc, table, kt + 1,
                               kv_end, kvh, n_kv, block_size);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16_t* sk = sk0 + stage * BN * LD;
        const bf16_t* sv = sv0 + stage * BN * LD;
        const int k_lo = kt * BN, k_hi = kt * BN + BN - 1;
        // Every key of this tile masked for every row of the warp: its state would not change.
        const bool skip = !warp_live || k_lo > wq_hi || (window > 0 && wq_lo - k_hi >= window);
        if (!skip) {
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            u32 a[4];
            const int mi = lane >> 3;
            ldmatrix_x4(a, sqw + (wr + (mi & 1) * 8 + (lane & 7)) * LD + kk * 16 + (mi >> 1) * 8);
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                u32 b[4];
                ldmatrix_x4(b, sk + (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LD + kk * 16 + (mi & 1) * 8);
                mma_bf16_16816(s[n], a, b);
                mma_bf16_16816(s[n + 1], a, b + 2);
            }
        }
        fa_tile_softmax_pv<NT, DT>(s, o, st, sv, LD, kt * BN, lane, qa, qb, window, scale_log2,
                                   [&](int n, int e) { return s[n][e]; });
        }  // !skip
        __syncthreads();
    }
    fa_store_rows<DT>(o, st, out + ((u64)(tile.tok0 + wr + g) * n_q + h) * HD,
                      out + ((u64)(tile.tok0 + wr + g + 8) * n_q + h) * HD, t, qa, qb);
}

#define FA_ENTRY(NAME, HD, BN, HP, MINB)                                                                \
    extern "C" __global__ void __launch_bounds__(128 * HP, MINB) NAME(                                   \
        const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const AttnTile* tiles, const int* bt_start, \
        const int* block_tables, bf16_t* out, int n_q, int n_kv, int block_size, int window,            \
        float scale_log2) {                                                                             \
        pdl_enter();                                                                                    \
        flash_attn_body<HD, BN, HP>(q, kc, vc, tiles, bt_start, block_tables, out, n_q, n_kv, block_size, \
                                    window, scale_log2);                                                \
    }
FA_ENTRY(flash_attn_hd16, 16, 64, 1, 1)
FA_ENTRY(flash_attn_hd32, 32, 64, 1, 1)
FA_ENTRY(flash_attn_hd64, 64, 64, 1, 1)
FA_ENTRY(flash_attn_hd128, 128, 64, 1, 1)
FA_ENTRY(flash_attn_hd256, 256, 32, 1, 1)
FA_ENTRY(flash_attn2_hd16, 16, 64, 2, 2)
FA_ENTRY(flash_attn2_hd32, 32, 64, 2, 2)
FA_ENTRY(flash_attn2_hd64, 64, 64, 2, 2)
FA_ENTRY(flash_attn2_hd128, 128, 64, 2, 2)
FA_ENTRY(flash_attn2_hd256, 256, 32, 2, 1)
