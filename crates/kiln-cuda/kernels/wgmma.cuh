#line 1 "wgmma.cuh"
// wgmma, mbarrier and swizzle helpers of the sm_90a modules (flash_sm90.cu, skinny_wg.cu).

// Shared-memory matrix descriptor, 128-byte swizzle. lbo/sbo in bytes.
__device__ __forceinline__ u64 gdesc(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3ffff) >> 4) | ((u64)((lbo >> 4) & 0x3fff) << 16) |
           ((u64)((sbo >> 4) & 0x3fff) << 32) | (1ull << 62);
}

// Byte offset of 16-byte chunk c (of a row of hd elements) in row r of a tile of `rows` rows:
// 64-element panels of rows x 128 bytes, chunk index XOR (row % 8) inside each 128-byte row,
// as wgmma's 128-byte swizzle reads it (the tile starts 1024-aligned).
__device__ __forceinline__ u32 sw128(int r, int c, int rows) {
    return (u32)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void mbar_init(u32 bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
// Shared memory written through the generic proxy (cp.async, stores), read next by wgmma.
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// Keeps the compiler from moving accesses to wgmma's registers across the issue or the wait.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(u32 (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i]) :: "memory");
}

