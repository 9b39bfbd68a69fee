// Generated weights for `dummy:` models, computed where they live. The formula is
// kiln_model::dummy::dummy_value, bit for bit (see its documentation):
//   bits = splitmix64(seed + (index + 1) * 0x9E3779B97F4A7C15)
//   u    = (bits >> 40) * 2^-24,  value = (2u - 1) * 0.034641016f
// then rounded to the storage type (store_t, common.cuh) like any other weight.

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float dummy_value(u64 seed, u64 index) {
    const u64 bits = splitmix64(seed + (index + 1ull) * 0x9E3779B97F4A7C15ull);
    const float u = __fmul_rn((float)(bits >> 40), 1.0f / 16777216.0f);
    return __fmul_rn(__fsub_rn(__fmul_rn(2.0f, u), 1.0f), 0.034641016f);
}

// dst[i] = store(dummy_value(seed, i)) for i < n.
extern "C" __global__ void dummy_fill(store_t* __restrict__ dst, u64 n, u64 seed) {
    pdl_enter();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = to_store(dummy_value(seed, i));
}

// dst[i] = store(value) for i < n (norm weights are 1.0).
extern "C" __global__ void fill_store(store_t* __restrict__ dst, u64 n, float value) {
    pdl_enter();
    const store_t v = to_store(value);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) dst[i] = v;
}
