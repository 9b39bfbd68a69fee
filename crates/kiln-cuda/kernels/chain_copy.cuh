#line 1 "chain_copy.cuh"
// chain_gemm.cu's stage copy: a stage holds rows of CHAIN_BK k (128 bytes), 16-byte chunk c of a
// row at slot c ^ (row & 7), the 128-byte swizzle that ldmatrix reads without bank conflicts.
#define CHAIN_BK 64

// Chunk c (k = k0 + 8c) of row mr of the row-major bf16 matrix m (`rows` rows, K columns) into row
// sr of `stage`; zeros past the matrix's rows or its K.
__device__ __forceinline__ void chain_copy_chunk(bf16_t* stage, int sr, const bf16_t* m, int mr, int rows,
                                                 int K, int c, int k0) {
    const int k = k0 + c * 8;
    const bool ok = mr < rows && k < K;
    cp_async_16(stage + sr * CHAIN_BK + ((c ^ (sr & 7)) << 3), ok ? m + (u64)mr * K + k : m, ok ? 16 : 0);
}

