#line 1 "flash_tile.cuh"
// What the mma.sync prefill attention kernels (flash_attn.cu, flash_wide.cu and its split
// variant) share, written once: the tile a CTA takes, and a warp's work on one K/V tile after
// its scores are summed (the mask, the online softmax in base 2, P V) and at the end (the rows'
// normalisation and store). A warp owns 16 query rows; lane (g, t) holds rows g and g + 8 (the
// `a` and `b` rows) and key columns 2t, 2t + 1 of each 8-key MMA tile. Concatenated before each
// of those modules' own text (kernel_sources.rs).

// 64 query rows of one prefill chunk: first flat token, row count, sequence, position of the
// first row.
struct AttnTile {
    int tok0, n_rows, seq, pos0;
};

// The online softmax state of a lane's two rows.
struct RowState {
    float m_a, m_b, l_a, l_b;
};

__device__ __forceinline__ RowState row_state_start() {
    return RowState{KILN_NEG_INF, KILN_NEG_INF, 0.f, 0.f};
}

// One K/V tile of NT 8-key columns starting at key k0, for a warp whose rows are at positions qa
// and qb (-1: a padding row): s[n][e] = score(n, e) (the raw sum of Q K) masked by the causal
// and window limits and scaled to base 2, folded into the running max; o and l rescaled; s left
// as the tile's unnormalised probabilities, then P V added into o from the V tile `sv` (rows of
// ldv elements, the warp's DO output columns starting at its first element).
template <int NT, int DO, typename Score>
__device__ __forceinline__ void fa_tile_softmax_pv(float (&s)[NT][4], float (&o)[DO][4], RowState& st,
                                                   const bf16_t* sv, int ldv, int k0, int lane, int qa, int qb,
                                                   int window, float scale_log2, Score score) {
    const int t = lane & 3;
    float mx_a = KILN_NEG_INF, mx_b = KILN_NEG_INF;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float v = score(n, e);
            const int kp = k0 + n * 8 + 2 * t + (e & 1);
            const int qp = e < 2 ? qa : qb;
            const bool ok = kp <= qp && (window <= 0 || qp - kp < window);
            s[n][e] = ok ? v * scale_log2 : KILN_NEG_INF;
        }
        mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const OnlineMax na = online_max(st.m_a, mx_a), nb = online_max(st.m_b, mx_b);
    const float base_a = na.base, base_b = nb.base;
    const float al_a = exp2f(na.shift), al_b = exp2f(nb.shift);
    float ps_a = 0.f, ps_b = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        s[n][0] = exp2f(s[n][0] - base_a);
        s[n][1] = exp2f(s[n][1] - base_a);
        s[n][2] = exp2f(s[n][2] - base_b);
        s[n][3] = exp2f(s[n][3] - base_b);
        ps_a += s[n][0] + s[n][1];
        ps_b += s[n][2] + s[n][3];
    }
    st.l_a = st.l_a * al_a + ps_a;
    st.l_b = st.l_b * al_b + ps_b;
#pragma unroll
    for (int d = 0; d < DO; ++d) {
        o[d][0] *= al_a;
        o[d][1] *= al_a;
        o[d][2] *= al_b;
        o[d][3] *= al_b;
    }
    mma_pv<NT, DO>(o, s, sv, ldv, lane);
}

// The rows' outputs o / l, as bf16, at row_a and row_b (the warp's DO output columns of rows g
// and g + 8); a padding row (q -1) writes nothing.
template <int DO>
__device__ __forceinline__ void fa_store_rows(float (&o)[DO][4], RowState st, bf16_t* row_a, bf16_t* row_b, int t,
                                              int qa, int qb) {
    float l_a = st.l_a, l_b = st.l_b;
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
    if (qa >= 0) {
        u32* dst = reinterpret_cast<u32*>(row_a);
#pragma unroll
        for (int d = 0; d < DO; ++d) dst[d * 4 + t] = pack_bf16x2(o[d][0] * inv_a, o[d][1] * inv_a);
    }
    if (qb >= 0) {
        u32* dst = reinterpret_cast<u32*>(row_b);
#pragma unroll
        for (int d = 0; d < DO; ++d) dst[d * 4 + t] = pack_bf16x2(o[d][2] * inv_b, o[d][3] * inv_b);
    }
}
