#line 1 "flash_sm90_wide.cu"
// Prefill attention of 512-wide heads (Gemma 4's full layers) for sm_90, built into the
// flash_sm90 module after flash_sm90.cu, whose tiles, copies, softmax and products it uses.
//
// A CTA takes one tile of up to 64 query rows for one query head. A 64 x 512 output block
// needs 256 float registers a thread in one warpgroup, so two consumer warpgroups split the
// head: warpgroup c (0 or 1) holds output columns 256 c to 256 c + 255 and computes the
// partial scores over head dims 256 c to 256 c + 255 (Q and K from shared memory). The two
// partial score tiles meet in shared memory and each warpgroup adds them (the same sum in
// both: addition commutes exactly), so both run the same softmax on the same scores, then
// O_c += P V[:, c half] (P from registers). The producer warpgroup copies each K and V tile
// (64 keys x the whole head, 64 KB each) through the block table into the 128-byte swizzled
// layout, one stage each: K of tile i + 1 loads while tile i's softmax and P V run, V of tile
// i while its scores do. Tiles at absolute multiples of 64 keys, visited in order, masks from
// positions, so a row's result depends on its position and the keys only (flash_sm90.cu).

constexpr int FW_HD = 512, FW_BN = 64, FW_HALF = FW_HD / 2;

// Shared memory from the 1024-aligned base: Q (8 panels of 64 rows x 64 columns), one K and
// one V stage (8 panels of 64 keys each), each warpgroup's partial scores (64 x 64 floats),
// then the barriers full K, full V, empty K, empty V.
struct FwSmem {
    static constexpr u32 TILE = 64 * FW_HD * 2;
    static constexpr u32 q = 0, k = TILE, v = 2 * TILE, part = 3 * TILE, PART = 64 * FW_BN * 4;
    static constexpr u32 bar = part + 2 * PART;
    static constexpr u32 full_k = bar, full_v = bar + 8, empty_k = bar + 16, empty_v = bar + 24;
    static constexpr u32 bytes = bar + 32;
};

// One K or V tile (64 keys x 512) into the swizzled stage at `dst`. Warp w copies keys
// 16 w to 16 w + 15, two 16-byte chunks of each a lane (chunks `lane` and 32 + `lane`, the
// second 4 panels on); `row` holds key 16 w + lane % 16's cache row (fs_row), keys from
// `lim` on (past kv_end) are filled with zeros. `off[j]`: the lane's first chunk in key
// 16 w + j (j < 8); keys 8 on share its swizzle, 1 KB further.
__device__ __forceinline__ void fw_load(u32 dst, u64 src, u32 row, int lim, const u32 (&off)[8], int lane) {
    constexpr u32 SECOND = 4 * FW_BN * 128;
    if (__all_sync(0xffffffffu, lim >= 16)) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const u64 a = row_address(__shfl_sync(0xffffffffu, row, j), FW_HD * 2, src);
            const u32 d = dst + off[j & 7] + (j >> 3) * 1024;
            cp_async_16f(d, a);
            cp_async_16f(d + SECOND, a + 512);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const u64 a = row_address(__shfl_sync(0xffffffffu, row, j), FW_HD * 2, src);
        const u32 d = dst + off[j & 7] + (j >> 3) * 1024;
        const int n = j < lim ? 16 : 0;
        cp_async_16s(d, reinterpret_cast<const void*>(a), n);
        cp_async_16s(d + SECOND, reinterpret_cast<const void*>(a + 512), n);
    }
}

__device__ __forceinline__ void flash_sm90_wide_body(const bf16_t* __restrict__ q, const bf16_t* __restrict__ kc,
                                                     const bf16_t* __restrict__ vc,
                                                     const AttnTile* __restrict__ tiles,
                                                     const int* __restrict__ bt_start,
                                                     const int* __restrict__ block_tables, bf16_t* __restrict__ out,
                                                     int n_q, int n_kv, int block_size, int window,
                                                     float scale_log2, int group) {
    using L = FwSmem;
    constexpr int BN = FW_BN;
    constexpr int PRODUCER_REGS = 72, CONSUMER_REGS = 216;
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 256 <= 168 * 384, "flash_sm90_wide register budget");
    extern __shared__ __align__(1024) unsigned char fw_smem[];
    const u32 base = (smem_addr(fw_smem) + 1023) & ~1023u;

    // flash_sm90.cu's grid order with one head a CTA: the grid's units are heads.
    int h;
    const AttnTile tile = fs_grid_tile(tiles, group, h);
    if (tile.n_rows == 0) return;
    const int wg = threadIdx.x >> 7;
    const int kvh = h / (n_q / n_kv);
    const int* table = block_tables + bt_start[tile.seq];
    const int kv_end = tile.pos0 + tile.n_rows;
    const int first = window > 0 ? max(0, tile.pos0 + 1 - window) : 0;
    const int kt_lo = first / BN, nt = (kv_end - 1) / BN - kt_lo + 1;

    if (threadIdx.x == 0) {
        mbar_init(base + L::full_k, 128);
        mbar_init(base + L::full_v, 128);
        mbar_init(base + L::empty_k, 8);
        mbar_init(base + L::empty_v, 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // Producer: K_i once both consumers' scores of tile i - 1 are done, V_i once their
        // P V of tile i - 1 is; each thread's copies arrive on the full barrier as they land.
        setmaxnreg_dec<PRODUCER_REGS>();
        const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
        u32 off[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) off[j] = sw128(w * 16 + j, lane, BN);
        const u64 chunk = (u64)lane * 16;
        const u64 k_src = reinterpret_cast<u64>(kc) + chunk, v_src = reinterpret_cast<u64>(vc) + chunk;
        auto rows = [&](int i) { return fs_row<BN>(table, (kt_lo + i) * BN, kv_end, kvh, n_kv, block_size, w, lane); };
        u32 next = rows(0);
        for (int i = 0; i < nt; ++i) {
            const int lim = kv_end - (kt_lo + i) * BN - w * (BN / 4);
            const u32 row = next;
            if (i + 1 < nt) next = rows(i + 1);
            if (i > 0) mbar_wait(base + L::empty_k, (i - 1) & 1);
            fw_load(base + L::k, k_src, row, lim, off, lane);
            cp_async_arrive(base + L::full_k);
            if (i > 0) mbar_wait(base + L::empty_v, (i - 1) & 1);
            fw_load(base + L::v, v_src, row, lim, off, lane);
            cp_async_arrive(base + L::full_v);
        }
        cp_async_wait_all();
        return;
    }

    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, t = lane & 3;
    const int ra = warp * 16 + (lane >> 2), rb = ra + 8;
    // Q's half of this warpgroup: columns 256 c on, panels 4 c to 4 c + 3.
    fs_load_q<FW_HD, 32>(base + L::q, q, tile, n_q, h, 32 * c, tid, 4 + c);

    const int qa = tile.pos0 + ra, qb = tile.pos0 + rb;
    const int q_last = kv_end - 1;
    float s[BN / 2], o[FW_HALF / 2];
    u32 p[BN / 4];
#pragma unroll
    for (int i = 0; i < FW_HALF / 2; ++i) o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
    float m_a = KILN_NEG_INF, m_b = KILN_NEG_INF, l_a = 0.f, l_b = 0.f, al_a, al_b;

    // Descriptors as flash_sm90.cu's: Q and K K-major (stride 16), V MN-major (panels BN
    // rows apart), this warpgroup's panels 4 c on.
    const u32 dq = (u32)gdesc(base + L::q + c * 4 * 64 * 128, 16, 1024);
    const u32 dk = (u32)gdesc(base + L::k + c * 4 * BN * 128, 16, 1024);
    const u32 dv = (u32)gdesc(base + L::v + c * 4 * BN * 128, BN * 128, 1024);
    const u32 hi = (u32)(gdesc(0, 16, 1024) >> 32);
    auto desc = [](u32 lo, u32 hi_word) { return ((u64)hi_word << 32) | lo; };
    auto release = [&](u32 bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    };
    auto masked = [&](int kt) {
        return kt * BN + BN - 1 > tile.pos0 || (window > 0 && kt * BN <= q_last - window);
    };
    // Partial scores: thread tid's float4 j at (j x 128 + tid) x 16 bytes of its warpgroup's
    // buffer; the same thread of the other warpgroup holds the same (row, key) elements.
    float4* mine = reinterpret_cast<float4*>(fw_smem + (base - smem_addr(fw_smem)) + L::part + c * L::PART);
    const float4* other =
        reinterpret_cast<const float4*>(fw_smem + (base - smem_addr(fw_smem)) + L::part + (1 - c) * L::PART);

    for (int i = 0; i < nt; ++i) {
        const int kt = kt_lo + i;
        mbar_wait(base + L::full_k, i & 1);
        fence_async_smem();
        reg_fence(s);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < FW_HALF / 16; ++kk) {
            const u32 at = ((kk >> 2) * 64 * 128 + (kk & 3) * 32) >> 4;
            wgmma_ss_n64(s, desc(dq + at, hi), desc(dk + at, hi), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(s);
        release(base + L::empty_k);

        // The two halves' scores: wait until the other warpgroup has read this one's buffer
        // (barrier 2 + c), write, meet (barrier 1), add, and say this one has read (none after
        // the last tile: nobody waits for it).
        if (i > 0) named_sync(2 + c, 256);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) mine[j * 128 + tid] = make_float4(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
        named_sync(1, 256);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const float4 x = other[j * 128 + tid];
            s[4 * j] = __fadd_rn(s[4 * j], x.x);
            s[4 * j + 1] = __fadd_rn(s[4 * j + 1], x.y);
            s[4 * j + 2] = __fadd_rn(s[4 * j + 2], x.z);
            s[4 * j + 3] = __fadd_rn(s[4 * j + 3], x.w);
        }
        if (i + 1 < nt) named_arrive(3 - c, 256);

        fs_softmax<BN>(s, m_a, m_b, l_a, l_b, al_a, al_b, masked(kt), kt, qa, qb, window, scale_log2, t);
        fs_rescale<FW_HALF>(o, al_a, al_b);
        fs_pack<BN>(p, s);

        mbar_wait(base + L::full_v, i & 1);
        fence_async_smem();
        reg_fence(o);
        reg_fence(p);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) wgmma_rs_n256(o, &p[4 * ks], desc(dv + ((ks * 2048) >> 4), hi));
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(o);
        release(base + L::empty_v);
    }

    fs_store_out<FW_HD, FW_HALF>(o, l_a, l_b, out, tile, ra, rb, n_q, h, c * FW_HALF, t);
}

// One query head per CTA; 384 threads: a producer warpgroup and two consumer warpgroups, each
// half of the head. 225 KB of shared memory (attn_launch.rs, flash_sm90_wide_smem_bytes).
extern "C" __global__ void __launch_bounds__(384, 1)
    flash_sm90_hd512(const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const AttnTile* tiles, const int* bt_start,
                     const int* block_tables, bf16_t* out, int n_q, int n_kv, int block_size, int window,
                     float scale_log2, int group) {
    pdl_enter();
    flash_sm90_wide_body(q, kc, vc, tiles, bt_start, block_tables, out, n_q, n_kv, block_size, window, scale_log2,
                         group);
}
