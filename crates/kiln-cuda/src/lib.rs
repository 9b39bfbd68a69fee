//! CUDA backend: device memory, NVRTC-compiled kernels (kernels/*.cu), cuBLASLt for prefill
//! GEMMs, its own skinny GEMM for decode rows, paged KV, one host synchronisation per step.

pub mod kernel_sources;
pub mod nvrtc_build;
