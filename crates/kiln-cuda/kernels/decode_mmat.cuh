#line 1 "decode_mmat.cuh"
// decode_mma's transposed step (the decode_mmat_* entries, KILN_DECODE_TRANSPOSE=1): keys in
// the MMA's 16 rows and up to 8 query slots in its 8 columns, S^T = K Q^T and O^T += V^T P^T.
// A decode row of a GQA-4 model fills 4 of the first form's 16 slot rows, so half of its MMAs,
// score registers, exponentials and O rescales work on empty slots; here a step of 16 keys
// takes one m16n8k16 a 16-dim slice for the scores and one a 16-dim slice of V, half as many.
// Lane (g, t) holds S^T[key g (+8)][slots 2t, 2t + 1]; P^T goes to the B operand through
// movmatrix's 8 x 8 transpose. Each slot's column is computed on its own (an MMA's columns do
// not mix), so a slot's bits depend on its own query and keys only, as in the first form.

// The 8 x 8 b16 matrix of the warp's fragments (lane (g, t): row g, columns 2t, 2t + 1),
// transposed.
__device__ __forceinline__ u32 movmatrix_trans(u32 x) {
    u32 y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// Q^T's B fragments of 8 slots (sq rows 0-7, stride ld): qb[2 kk], qb[2 kk + 1] for dims 16 kk on.
template <int HD>
__device__ __forceinline__ void dmt_query(u32 (&qb)[HD / 8], const bf16_t* sq, int ld, int lane) {
    static_assert(HD % 32 == 0 || HD == 16, "dmt_query: whole pairs of 16-dim slices");
    if constexpr (HD == 16) {
        u32 r[4];
        ldmatrix_x4(r, sq + (lane & 7) * ld + ((lane >> 3) & 1) * 8);
        qb[0] = r[0];
        qb[1] = r[1];
    } else {
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk += 2) ldmatrix_x4(&qb[2 * kk], sq + (lane & 7) * ld + kk * 16 + (lane >> 3) * 8);
    }
}

// The scores of one step: the step's 16 keys (sk, stride ld) against Q^T's fragments.
template <int HD>
__device__ __forceinline__ void dmt_scores(float (&sc)[4], const u32 (&qb)[HD / 8], const bf16_t* sk, int ld,
                                           int lane) {
    sc[0] = sc[1] = sc[2] = sc[3] = 0.f;
    const int mi = lane >> 3;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        u32 a[4];
        ldmatrix_x4(a, sk + ((mi & 1) * 8 + (lane & 7)) * ld + kk * 16 + (mi >> 1) * 8);
        mma_bf16_16816(sc, a, &qb[2 * kk]);
    }
}

// One step of a split's online softmax in the transposed form: the scores masked to each
// slot's keys [first, len) (slots 2t and 2t + 1: len_0, len_1), scaled, folded into the running
// maxima m (the whole column's, the same in every lane of it), this lane's share of the sums l
// (keys g and g + 8), and O^T (o[d]: dims 16 d + g (+8) of slots 2t, 2t + 1), then P V from sv.
// `lazy` and `interior` as dm_softmax_pv's.
template <int HD>
__device__ __forceinline__ void dmt_softmax_pv(float (&s)[4], float (&o)[HD / 16][4], float& m_0, float& m_1,
                                               float& l_0, float& l_1, const bf16_t* sv, int ldv, int lane, int k0,
                                               int len_0, int len_1, int first_0, int first_1, float scale_log2,
                                               bool lazy, bool interior) {
    const int g = lane >> 2;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        bool ok = true;
        if (!interior) {
            const int kp = k0 + g + (e & 2) * 4;
            ok = (e & 1) ? (kp < len_1 && kp >= first_1) : (kp < len_0 && kp >= first_0);
        }
        s[e] = ok ? __fmul_rn(s[e], scale_log2) : KILN_NEG_INF;
    }
    float mx_0 = fmaxf(s[0], s[2]), mx_1 = fmaxf(s[1], s[3]);
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) {
        mx_0 = fmaxf(mx_0, __shfl_xor_sync(0xffffffffu, mx_0, x));
        mx_1 = fmaxf(mx_1, __shfl_xor_sync(0xffffffffu, mx_1, x));
    }
    const OnlineMax n0 = online_max(m_0, mx_0), n1 = online_max(m_1, mx_1);
    const float base_0 = n0.base, base_1 = n1.base;
    const float al_0 = exp2f(n0.shift), al_1 = exp2f(n1.shift);
    s[0] = exp2f(__fsub_rn(s[0], base_0));
    s[1] = exp2f(__fsub_rn(s[1], base_1));
    s[2] = exp2f(__fsub_rn(s[2], base_0));
    s[3] = exp2f(__fsub_rn(s[3], base_1));
    l_0 = __fadd_rn(__fmul_rn(l_0, al_0), __fadd_rn(s[0], s[2]));
    l_1 = __fadd_rn(__fmul_rn(l_1, al_1), __fadd_rn(s[1], s[3]));
    if (!lazy || __any_sync(0xffffffffu, al_0 != 1.f || al_1 != 1.f)) {
#pragma unroll
        for (int d = 0; d < HD / 16; ++d) {
            o[d][0] = __fmul_rn(o[d][0], al_0);
            o[d][1] = __fmul_rn(o[d][1], al_1);
            o[d][2] = __fmul_rn(o[d][2], al_0);
            o[d][3] = __fmul_rn(o[d][3], al_1);
        }
    }
    // P^T as the B operand: keys 2t, 2t + 1 (and + 8) of slot g.
    const u32 pb[2] = {movmatrix_trans(pack_bf16x2(s[0], s[1])), movmatrix_trans(pack_bf16x2(s[2], s[3]))};
    const int mi = lane >> 3;
#pragma unroll
    for (int d = 0; d < HD / 16; ++d) {
        u32 a[4];
        ldmatrix_x4_trans(a, sv + ((mi >> 1) * 8 + (lane & 7)) * ldv + d * 16 + (mi & 1) * 8);
        mma_bf16_16816(o[d], a, pb);
    }
}
