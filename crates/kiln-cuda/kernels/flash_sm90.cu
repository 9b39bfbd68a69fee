#line 1 "flash_sm90.cu"
// Prefill attention for sm_90 (H100/H200): wgmma from shared memory, a producer warpgroup
// streaming K/V tiles, two consumer warpgroups. Built for sm_90a only (kernel_sources.rs).
//
// A CTA takes one tile of up to 64 query rows (AttnTile, as flash_attn.cu) for two query
// heads of one GQA group: warpgroup 0 loads, through the block table, the K and V tiles both
// heads need (cp.async into the 128-byte swizzled layout wgmma reads, 2-4 stages each, full
// and empty mbarriers); warpgroups 1 and 2 each compute one head: S = Q K^T (wgmma, K from
// shared memory, Q from registers at hd 64 and 128 (QR below), else from shared memory), the
// online softmax in registers, O += P V (wgmma, P from registers, V transposed from shared
// memory). KV tiles of BN keys at absolute multiples of BN, visited in order from the window's
// first tile to the tile of the last row; causal and window masks from positions; a row meets
// keys outside its limits only in tiles that are then masked for it, and a wholly masked tile
// leaves its state exactly unchanged. So a row's result depends
// on its position and the keys only, not on the chunking, its neighbours or the batch.
// OVL = 1 overlaps the softmax of tile j with the P V product of tile j - 1 (the same
// operations on every accumulator in the same order, so the same bits); OVL = 2 also makes
// the two consumer warpgroups take turns issuing their products (named barriers), so one
// computes its softmax while the other's products run (the order of issue only: same bits).

// The wgmma, mbarrier and swizzle helpers and the products of each shape: wgmma.cuh (this
// module's first part).

__device__ __forceinline__ void cp_async_16s(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes));
}
// One of the barrier's expected arrivals, made when every earlier cp.async of this thread has
// landed.
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// 384 threads start with 168 registers each; the producer gives back some and the consumers
// take them: 72 x 128 + 216 x 256 = 168 x 384, or, where Q's fragments stay in the consumers'
// registers (hd up to 128: 32 more at hd 128), 56 x 128 + 224 x 256. No more: setmaxnreg.inc
// waits for registers the other warpgroup gave back, and never gets more than the CTA holds.
// The consumers use at most 200 at hd 256; at 40 the producer recomputed its lane's indices and
// spilled.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }

// ---- the kernel ----

struct AttnTile {
    int tok0, n_rows, seq, pos0;
};

// Shared memory (from a 1024-aligned base): Q of each head, NS K stages, NS V stages, then
// the mbarriers: full K, full V (the producer's 128 threads arrive as their copies land),
// empty K, empty V (the consumers' 8 warps arrive), NS of each.
template <int HD, int BN, int NS>
struct FsSmem {
    static constexpr u32 Q = 64 * HD * 2, KV = BN * HD * 2;
    __device__ static constexpr u32 q(int c) { return c * Q; }
    __device__ static constexpr u32 k(int st) { return 2 * Q + st * KV; }
    __device__ static constexpr u32 v(int st) { return 2 * Q + NS * KV + st * KV; }
    static constexpr u32 bar = 2 * Q + 2 * NS * KV;
    __device__ static constexpr u32 full_k(int st) { return bar + 8 * st; }
    __device__ static constexpr u32 full_v(int st) { return bar + 8 * NS + 8 * st; }
    __device__ static constexpr u32 empty_k(int st) { return bar + 16 * NS + 8 * st; }
    __device__ static constexpr u32 empty_v(int st) { return bar + 24 * NS + 8 * st; }
};

// The producer's 4 warps copy a tile's rows in 4 runs of BN / 4; lane l of warp w looks up
// row w * BN / 4 + l % (BN / 4) in the block table once per tile, for K and V both, and the copy
// loops take each row's index by shuffle: no division or dependent load per 16-byte copy.
// The cache row (block * n_kv + kv head) * block_size + offset; 0 (a valid address, not
// copied) for keys from kv_end on.
template <int BN>
__device__ __forceinline__ u32 fs_row(const int* __restrict__ table, int k0, int kv_end, int kvh, int n_kv,
                                      int block_size, int w, int lane) {
    const int p = k0 + w * (BN / 4) + lane % (BN / 4);
    if (p >= kv_end) return 0u;
    return ((u32)table[p / block_size] * (u32)n_kv + (u32)kvh) * (u32)block_size + (u32)(p % block_size);
}

// Each producer lane's offsets in the first 8 rows of its warp's run (32 / CH whole rows per
// copy instruction): rows 8 apart share a swizzle pattern, so the copies step 1 KB per 8 rows.
template <int HD, int BN>
struct FsLane {
    static constexpr int CH = HD / 8, RW = BN / 4, RPI = 32 / CH, NP = 8 / RPI;
    static_assert(CH <= 32 && RW % 8 == 0 && RW <= 32, "flash_sm90 tile shape");
    u32 off[NP];
    __device__ explicit FsLane(int w, int lane) {
#pragma unroll
        for (int t = 0; t < NP; ++t) off[t] = sw128(w * RW + t * RPI + lane / CH, lane % CH, BN);
    }
};

// One K or V tile into the swizzled stage at `dst`: warp w copies rows w * BN / 4 onwards,
// `row` from fs_row; rows from `lim` on (keys from kv_end on) are filled with zeros. `src` is
// the cache's address plus this lane's 16-byte chunk of a row. Few instructions a copy (the
// producer shares its schedulers with the consumers): the lane's NP destinations made once,
// the copies' constant 1 KB steps folded into their addressing, each source one wide
// multiply-add, and no size operand where the warp's rows all come before kv_end.
__device__ __forceinline__ void cp_async_16f(u32 dst, u64 src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src));
}
__device__ __forceinline__ u64 row_address(u32 row, u32 row_bytes, u64 base) {
    u64 a;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(a) : "r"(row), "r"(row_bytes), "l"(base));
    return a;
}
template <int HD, int BN>
__device__ __forceinline__ void fs_load(u32 dst, u64 src, u32 row, int lim, const FsLane<HD, BN>& ln, int lane) {
    using F = FsLane<HD, BN>;
    u32 d[F::NP];
#pragma unroll
    for (int t = 0; t < F::NP; ++t) d[t] = dst + ln.off[t];
    if (__all_sync(0xffffffffu, lim >= F::RW)) {  // a vote: uniform for the compiler too
#pragma unroll
        for (int j = 0; j < F::RW / F::RPI; ++j) {
            const u32 r = __shfl_sync(0xffffffffu, row, j * F::RPI + lane / F::CH);
            cp_async_16f(d[j % F::NP] + (j / F::NP) * 1024, row_address(r, HD * 2, src));
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < F::RW / F::RPI; ++j) {
        const int rl = j * F::RPI + lane / F::CH;
        const u32 r = __shfl_sync(0xffffffffu, row, rl);
        cp_async_16s(d[j % F::NP] + (j / F::NP) * 1024, reinterpret_cast<const void*>(row_address(r, HD * 2, src)),
                     rl < lim ? 16 : 0);
    }
}

// 2^x on the special function unit, results below 2^-126 flushed to zero (one instruction;
// exp2f adds a denormal fix-up around it).
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The largest of v[0..N), N a power of two, as a balanced tree.
template <int N>
__device__ __forceinline__ float tree_max(const float* v) {
    if constexpr (N == 1) return v[0];
    else return fmaxf(tree_max<N / 2>(v), tree_max<N / 2>(v + N / 2));
}

// The online softmax of one tile in base 2, in place: s (raw scores) becomes the tile's
// probabilities, al_* rescale the row's running sums. Masked keys are -inf; a tile that needs
// no mask runs the same arithmetic on the same values.
template <int BN>
__device__ __forceinline__ void fs_softmax(float (&s)[BN / 2], float& m_a, float& m_b, float& l_a, float& l_b,
                                           float& al_a, float& al_b, bool masked, int kt, int qa, int qb,
                                           int window, float scale_log2, int t) {
    if (masked) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
            const int kp = kt * BN + (i >> 2) * 8 + 2 * t + (i & 1);
            const int qp = (i & 2) ? qb : qa;
            const bool ok = kp <= qp && (window <= 0 || qp - kp < window);
            s[i] = ok ? s[i] : KILN_NEG_INF;
        }
    }
    // The row maxima as trees (depth log2 of the tile's columns a thread holds, not a chain
    // as long): a maximum is the same whatever the order, NaN aside, which fmaxf drops.
    float ta[BN / 8], tb[BN / 8];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        ta[j] = fmaxf(s[4 * j], s[4 * j + 1]);
        tb[j] = fmaxf(s[4 * j + 2], s[4 * j + 3]);
    }
    float mx_a = tree_max<BN / 8>(ta), mx_b = tree_max<BN / 8>(tb);
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    // The scale is positive, so the maximum of the scaled scores is the scaled maximum.
    const OnlineMax na = online_max(m_a, __fmul_rn(mx_a, scale_log2));
    const OnlineMax nb = online_max(m_b, __fmul_rn(mx_b, scale_log2));
    const float base_a = na.base, base_b = nb.base;
    al_a = ex2_ftz(na.shift);
    al_b = ex2_ftz(nb.shift);
    float ps_a = 0.f, ps_b = 0.f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        s[4 * j] = ex2_ftz(__fmaf_rn(s[4 * j], scale_log2, -base_a));
        s[4 * j + 1] = ex2_ftz(__fmaf_rn(s[4 * j + 1], scale_log2, -base_a));
        s[4 * j + 2] = ex2_ftz(__fmaf_rn(s[4 * j + 2], scale_log2, -base_b));
        s[4 * j + 3] = ex2_ftz(__fmaf_rn(s[4 * j + 3], scale_log2, -base_b));
        ps_a = __fadd_rn(ps_a, __fadd_rn(s[4 * j], s[4 * j + 1]));
        ps_b = __fadd_rn(ps_b, __fadd_rn(s[4 * j + 2], s[4 * j + 3]));
    }
    l_a = __fadd_rn(__fmul_rn(l_a, al_a), ps_a);
    l_b = __fadd_rn(__fmul_rn(l_b, al_b), ps_b);
}

// O *= the rows' factors, skipped where every factor of the warp's rows is exactly 1 (no
// row's maximum moved: x * 1 is x, so the same bits), as is usual once the maxima settle.
template <int HD>
__device__ __forceinline__ void fs_rescale(float (&o)[HD / 2], float al_a, float al_b) {
    if (__all_sync(0xffffffffu, al_a == 1.f && al_b == 1.f)) return;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
        o[4 * j] = __fmul_rn(o[4 * j], al_a);
        o[4 * j + 1] = __fmul_rn(o[4 * j + 1], al_a);
        o[4 * j + 2] = __fmul_rn(o[4 * j + 2], al_b);
        o[4 * j + 3] = __fmul_rn(o[4 * j + 3], al_b);
    }
}

// Probabilities as the bf16 A operand of P V: 16 keys per four registers, the accumulator's
// (row, key) layout being the A fragment's.
template <int BN>
__device__ __forceinline__ void fs_pack(u32 (&p)[BN / 4], const float (&s)[BN / 2]) {
#pragma unroll
    for (int i = 0; i < BN / 4; ++i) p[i] = pack_bf16x2(s[2 * i], s[2 * i + 1]);
}

// The CTA's tile and unit (a head pair, or a head at head dim 512) in the grid's order. Later
// tiles of a chunk see more keys: hand them out first, for every unit of a group before the next
// tile (CTAs start in the order of `item`, x fastest), so the grid ends evenly; the units of one
// tile read the same K/V at the same time. The units come in groups of `group` (a divisor of
// gridDim.y, whole KV heads), each group's tiles before the next group's: when the K/V of every
// head outgrows L2, the CTAs running at once then read the K/V of a few heads (group ==
// gridDim.y: one group, tile by tile).
__device__ __forceinline__ AttnTile fs_grid_tile(const AttnTile* __restrict__ tiles, int group, int& unit) {
    const int item = blockIdx.y * gridDim.x + blockIdx.x;
    const int per_group = gridDim.x * group, gi = item / per_group, r = item - gi * per_group;
    unit = gi * group + r % group;
    return tiles[gridDim.x - 1 - r / group];
}

// The tile's Q rows, chunks [c0, c0 + CH) of each HD-wide row, into the swizzled layout at `dst`
// (64-row panels), zeros past the tile's rows, by a warpgroup's 128 threads (`tid`); then the
// proxies fenced and the warpgroup met at named barrier `bar`, so wgmma may read them.
template <int HD, int CH>
__device__ __forceinline__ void fs_load_q(u32 dst, const bf16_t* __restrict__ q, const AttnTile& tile, int n_q, int h,
                                          int c0, int tid, int bar) {
    for (int idx = tid; idx < 64 * CH; idx += 128) {
        const int r = idx / CH, cc = c0 + idx % CH;
        const bool ok = r < tile.n_rows;
        const bf16_t* src = q + ((u64)(tile.tok0 + (ok ? r : 0)) * n_q + h) * HD + cc * 8;
        cp_async_16s(dst + sw128(r, cc, 64), src, ok ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_async_smem();
    named_sync(bar, 128);
}

// The rows' sums l over the quad, then O / l as bf16 into rows ra and rb of head h of the
// output (rows HD wide), N columns from col0 (o: the wgmma accumulator of those columns).
template <int HD, int N>
__device__ __forceinline__ void fs_store_out(const float (&o)[N / 2], float l_a, float l_b, bf16_t* __restrict__ out,
                                             const AttnTile& tile, int ra, int rb, int n_q, int h, int col0, int t) {
    l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 1));
    l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 2));
    l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 1));
    l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 2));
    const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
    if (ra < tile.n_rows) {
        u32* dst = reinterpret_cast<u32*>(out + ((u64)(tile.tok0 + ra) * n_q + h) * HD + col0);
#pragma unroll
        for (int j = 0; j < N / 8; ++j) dst[j * 4 + t] = pack_bf16x2(o[4 * j] * inv_a, o[4 * j + 1] * inv_a);
    }
    if (rb < tile.n_rows) {
        u32* dst = reinterpret_cast<u32*>(out + ((u64)(tile.tok0 + rb) * n_q + h) * HD + col0);
#pragma unroll
        for (int j = 0; j < N / 8; ++j) dst[j * 4 + t] = pack_bf16x2(o[4 * j + 2] * inv_b, o[4 * j + 3] * inv_b);
    }
}

template <int HD, int BN, int NS, int OVL>
__device__ __forceinline__ void flash_sm90_body(const bf16_t* __restrict__ q, const bf16_t* __restrict__ kc,
                                                const bf16_t* __restrict__ vc, const AttnTile* __restrict__ tiles,
                                                const int* __restrict__ bt_start, const int* __restrict__ block_tables,
                                                bf16_t* __restrict__ out, int n_q, int n_kv, int block_size,
                                                int window, float scale_log2, int group) {
    using L = FsSmem<HD, BN, NS>;
    // Q as register fragments (the A operand of Q K^T from registers: each product then reads
    // only K from shared memory, 4 KB instead of 6) where they fit beside S, O and P: hd 64 and
    // 128. The same operands and products as from shared memory, the same bits. Not in the
    // overlapped kernel without turns (OVL 1), which lost 5-6% with them at hd 128, 8k-32k
    // (H200, 2026-12-03), where the plain kernel and the one with turns gained 2-3%.
    constexpr bool QR = HD <= 128 && OVL != 1;
    constexpr int PRODUCER_REGS = QR ? 56 : 72, CONSUMER_REGS = QR ? 224 : 216;
    // The warpgroups can only trade the CTA's 168 x 384 registers: asking for more hangs.
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 256 <= 168 * 384, "flash_sm90 register budget");
    extern __shared__ __align__(1024) unsigned char fs_smem[];
    // The swizzle is a function of the address: align the base to 1024 bytes (the launcher
    // asks for 1 KB more).
    const u32 raw = smem_addr(fs_smem);
    const u32 base = (raw + 1023) & ~1023u;

    // The grid's units are head pairs (fs_grid_tile).
    int pair;
    const AttnTile tile = fs_grid_tile(tiles, group, pair);
    if (tile.n_rows == 0) return;
    const int wg = threadIdx.x >> 7;
    const int h0 = pair * 2, kvh = h0 / (n_q / n_kv);
    const int* table = block_tables + bt_start[tile.seq];
    const int kv_end = tile.pos0 + tile.n_rows;  // keys past the last row are never needed
    const int first = window > 0 ? max(0, tile.pos0 + 1 - window) : 0;
    const int kt_lo = first / BN, nt = (kv_end - 1) / BN - kt_lo + 1;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int st = 0; st < NS; ++st) {
            mbar_init(base + L::full_k(st), 128);
            mbar_init(base + L::full_v(st), 128);
            mbar_init(base + L::empty_k(st), 8);
            mbar_init(base + L::empty_v(st), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // Producer: K_i then V_i into stage i % NS once the consumers have released it. Each
        // thread's copies of a tile arrive on the tile's full barrier when they land, so the
        // producer never waits for its own copies and runs up to NS tiles ahead. The consumers
        // fence the proxies after the barrier, before wgmma reads what cp.async wrote.
        setmaxnreg_dec<PRODUCER_REGS>();
        const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const FsLane<HD, BN> ln(w, lane);
        const u64 chunk = (lane % FsLane<HD, BN>::CH) * 16;
        const u64 k_src = reinterpret_cast<u64>(kc) + chunk, v_src = reinterpret_cast<u64>(vc) + chunk;
        auto rows = [&](int i) { return fs_row<BN>(table, (kt_lo + i) * BN, kv_end, kvh, n_kv, block_size, w, lane); };
        u32 next = rows(0);
        // The stage and its parity as counters, and the stage's K offset (V's is NS tiles
        // on): one register for the copies' destinations, not i % NS recomputed in each.
        int st = 0;
        u32 freed = 1, koff = L::k(0);
        for (int i = 0; i < nt; ++i) {
            const int lim = kv_end - (kt_lo + i) * BN - w * (BN / 4);
            const u32 row = next;
            // The next tile's table entries load while this one waits for its stages.
            if (i + 1 < nt) next = rows(i + 1);
            // freed: the parity of the release of this stage's last use.
            if (i >= NS) mbar_wait(base + L::empty_k(st), freed);
            fs_load<HD, BN>(base + koff, k_src, row, lim, ln, lane);
            cp_async_arrive(base + L::full_k(st));
            if (i >= NS) mbar_wait(base + L::empty_v(st), freed);
            fs_load<HD, BN>(base + koff + NS * L::KV, v_src, row, lim, ln, lane);
            cp_async_arrive(base + L::full_v(st));
            const bool wrap = st == NS - 1;
            st = wrap ? 0 : st + 1;
            koff = wrap ? L::k(0) : koff + L::KV;
            freed ^= wrap;
        }
        cp_async_wait_all();  // no copy outlives its thread
        return;
    }

    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, h = h0 + c;
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const u32 sq = base + L::q(c);
    const int ra = warp * 16 + g, rb = ra + 8;
    // Q's fragments: rows ra and rb, columns 16 kk + 2 t (+1) and 16 kk + 8 + 2 t (+1) of
    // slice kk, zeros for rows past the tile's.
    u32 qf[QR ? HD / 4 : 1];
    if constexpr (QR) {
        const u32* row_a = reinterpret_cast<const u32*>(q + ((u64)(tile.tok0 + ra) * n_q + h) * HD);
        const u32* row_b = reinterpret_cast<const u32*>(q + ((u64)(tile.tok0 + rb) * n_q + h) * HD);
        const bool ok_a = ra < tile.n_rows, ok_b = rb < tile.n_rows;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            qf[4 * kk] = ok_a ? row_a[8 * kk + t] : 0u;
            qf[4 * kk + 1] = ok_b ? row_b[8 * kk + t] : 0u;
            qf[4 * kk + 2] = ok_a ? row_a[8 * kk + 4 + t] : 0u;
            qf[4 * kk + 3] = ok_b ? row_b[8 * kk + 4 + t] : 0u;
        }
    } else {
        fs_load_q<HD, HD / 8>(sq, q, tile, n_q, h, 0, tid, 1 + c);
    }
    const int qa = tile.pos0 + ra, qb = tile.pos0 + rb;
    const int q_last = kv_end - 1;
    float s[BN / 2], o[HD / 2];
    u32 p[BN / 4];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
    float m_a = KILN_NEG_INF, m_b = KILN_NEG_INF, l_a = 0.f, l_b = 0.f;

    // The descriptors of Q and of stage 0's K and V, made once: a stage's and a k-slice's are
    // the same with the byte offset / 16 added to the low word's address field (shared
    // addresses stay under 256 KB, so the 14-bit field never carries into the next one). Same
    // descriptors as gdesc() of each address, in one add instead of a mask and shifts each.
    // The high word (stride 1024, the 128-byte swizzle) is the same for all three.
    const u32 dq = (u32)gdesc(sq, 16, 1024), dk = (u32)gdesc(base + L::k(0), 16, 1024);
    const u32 dv = (u32)gdesc(base + L::v(0), BN * 128, 1024);
    const u32 hi = (u32)(gdesc(0, 16, 1024) >> 32);
    auto desc = [](u32 lo, u32 hi_word) { return ((u64)hi_word << 32) | lo; };
    auto issue_s = [&](int st) {
        reg_fence(s);
        wgmma_fence();
        const u32 k_st = dk + (u32)st * (L::KV >> 4);
        if constexpr (QR) reg_fence(qf);
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const u64 db = desc(k_st + (((kk >> 2) * BN * 128 + (kk & 3) * 32) >> 4), hi);
            if constexpr (QR) {
                wgmma_rk<BN>(s, &qf[4 * kk], db, kk > 0);
            } else {
                const u64 da = desc(dq + (((kk >> 2) * 64 * 128 + (kk & 3) * 32) >> 4), hi);
                wgmma_ss<BN>(s, da, db, kk > 0);
            }
        }
        wgmma_commit();
    };
    auto issue_pv = [&](int st) {
        reg_fence(o);
        reg_fence(p);
        wgmma_fence();
        const u32 v_st = dv + (u32)st * (L::KV >> 4);
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) wgmma_rs<HD>(o, &p[4 * ks], desc(v_st + ((ks * 2048) >> 4), hi));
        wgmma_commit();
    };
    // This warp's release of a stage, once its wgmma reads of it are complete.
    auto release = [&](u32 bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    };
    // Tiles reaching past the first row or before the last row's window need the mask.
    auto masked = [&](int kt) {
        return kt * BN + BN - 1 > tile.pos0 || (window > 0 && kt * BN <= q_last - window);
    };

    // OVL == 2: warpgroup c issues its products only in its turn (barrier 3 + c), then hands
    // the turn over; consumer 1 gives consumer 0 the first turn.
    auto my_turn = [&] {
        if constexpr (OVL == 2) named_sync(3 + c, 256);
    };
    auto your_turn = [&] {
        if constexpr (OVL == 2) named_arrive(4 - c, 256);
    };
    if constexpr (OVL == 2) {
        if (c == 1) named_arrive(3, 256);
    }

    float al_a, al_b;
    if constexpr (OVL) {
        mbar_wait(base + L::full_k(0), 0);
        fence_async_smem();
        my_turn();
        issue_s(0);
        your_turn();
        wgmma_wait<0>();
        reg_fence(s);
        release(base + L::empty_k(0));
        fs_softmax<BN>(s, m_a, m_b, l_a, l_b, al_a, al_b, masked(kt_lo), kt_lo, qa, qb, window, scale_log2, t);
        fs_pack<BN>(p, s);
        // O's rescale by tile i - 1's factors waits until S of tile i is issued, so it runs
        // beside that product instead of between products (O is free: P V of tile i - 2 is
        // done, that of i - 1 not yet issued); the same multiplies before the same P V.
        for (int i = 1; i < nt; ++i) {
            const int st = i % NS, pst = (i - 1) % NS, kt = kt_lo + i;
            mbar_wait(base + L::full_k(st), (i / NS) & 1);
            mbar_wait(base + L::full_v(pst), ((i - 1) / NS) & 1);
            fence_async_smem();
            my_turn();
            issue_s(st);
            fs_rescale<HD>(o, al_a, al_b);
            issue_pv(pst);
            your_turn();
            wgmma_wait<1>();  // S of tile i is done; P V of tile i - 1 may still run
            reg_fence(s);
            release(base + L::empty_k(st));
            fs_softmax<BN>(s, m_a, m_b, l_a, l_b, al_a, al_b, masked(kt), kt, qa, qb, window, scale_log2, t);
#ifndef KILN_FLASH_NO_SCHED_FENCE
            // A block boundary ptxas keeps: without it, it put the wait for P V of tile i - 1
            // ahead of this softmax, so the softmax never ran beside its own P V (the SASS of
            // flash_sm90o/p, NVRTC 13.0: no MUFU.EX2 between the loop's two wgmma waits; 66
            // with it). The branch is never taken (a tile has rows); its store keeps it from
            // being folded away. KILN_FLASH_FENCE=0 builds the module without it.
            if (tile.n_rows < 0) out[tid] = bf16_t{};
#endif
            wgmma_wait<0>();
            reg_fence(o);
            reg_fence(p);
            release(base + L::empty_v(pst));
            fs_pack<BN>(p, s);
        }
        const int lst = (nt - 1) % NS;
        mbar_wait(base + L::full_v(lst), ((nt - 1) / NS) & 1);
        fence_async_smem();
        my_turn();
        fs_rescale<HD>(o, al_a, al_b);
        issue_pv(lst);
        if (c == 0) your_turn();  // consumer 1 takes the last turn: nobody waits for another
        wgmma_wait<0>();
        reg_fence(o);
        release(base + L::empty_v(lst));
    } else {
        for (int i = 0; i < nt; ++i) {
            const int st = i % NS, kt = kt_lo + i;
            mbar_wait(base + L::full_k(st), (i / NS) & 1);
            fence_async_smem();
            issue_s(st);
            wgmma_wait<0>();
            reg_fence(s);
            release(base + L::empty_k(st));
            fs_softmax<BN>(s, m_a, m_b, l_a, l_b, al_a, al_b, masked(kt), kt, qa, qb, window, scale_log2, t);
            fs_rescale<HD>(o, al_a, al_b);
            fs_pack<BN>(p, s);
            mbar_wait(base + L::full_v(st), (i / NS) & 1);
            fence_async_smem();
            issue_pv(st);
            wgmma_wait<0>();
            reg_fence(o);
            release(base + L::empty_v(st));
        }
    }

    fs_store_out<HD, HD>(o, l_a, l_b, out, tile, ra, rb, n_q, h, 0, t);
}

// Two query heads of an even GQA group per CTA; 384 threads: a producer warpgroup (72
// registers) and two consumer warpgroups (216). NS K/V stages: as many as 227 KB hold
// (flash_sm90_stages in attn_launch.rs says the same).
#define FS_ENTRY(NAME, HD, BN, NS, OVL)                                                                  \
    extern "C" __global__ void __launch_bounds__(384, 1) NAME(                                           \
        const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const AttnTile* tiles, const int* bt_start, \
        const int* block_tables, bf16_t* out, int n_q, int n_kv, int block_size, int window,            \
        float scale_log2, int group) {                                                                  \
        pdl_enter();                                                                                    \
        flash_sm90_body<HD, BN, NS, OVL>(q, kc, vc, tiles, bt_start, block_tables, out, n_q, n_kv,      \
                                         block_size, window, scale_log2, group);                        \
    }
FS_ENTRY(flash_sm90_hd64, 64, 128, 4, 0)
FS_ENTRY(flash_sm90_hd128, 128, 128, 3, 0)
FS_ENTRY(flash_sm90_hd256, 256, 64, 2, 0)
FS_ENTRY(flash_sm90o_hd64, 64, 128, 4, 1)
FS_ENTRY(flash_sm90o_hd128, 128, 128, 3, 1)
FS_ENTRY(flash_sm90o_hd256, 256, 64, 2, 1)
FS_ENTRY(flash_sm90p_hd64, 64, 128, 4, 2)
FS_ENTRY(flash_sm90p_hd128, 128, 128, 3, 2)
FS_ENTRY(flash_sm90p_hd256, 256, 64, 2, 2)
