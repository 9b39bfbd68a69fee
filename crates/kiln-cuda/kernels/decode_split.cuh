#line 1 "decode_split.cuh"
// The split of a decode row's keys that decode_mma.cu and decode_mma_wide.cu share, written once
// (their splits are merged by the one decode_mma_combine, so they must agree): concatenated
// before each of them (kernel_sources.rs).

// The fewest keys a split may cover (decode_mma.cu's tile): min_span, the launch's floor, is a
// power of two at least this.
#define DECODE_MIN_SPAN 64

// Keys per split for a row of length `len`: a power of two, at least min_span, at most
// pow2ceil(len) / max_splits, so no row has more than max_splits splits.
__device__ __forceinline__ int dm_span(int len, int max_splits, int min_span) {
    const int p2 = len <= 1 ? 1 : 1 << (32 - __clz(len - 1));
    return max(min_span, p2 / max_splits);
}

// Rows a and b (a < b, adjacent) may share a CTA: one sequence (one block table) and one span.
__device__ __forceinline__ bool dm_same(const int* token_seq, const int* positions, int a, int b,
                                        int max_splits, int min_span) {
    return token_seq[a] == token_seq[b] &&
           dm_span(positions[a] + 1, max_splits, min_span) == dm_span(positions[b] + 1, max_splits, min_span);
}
