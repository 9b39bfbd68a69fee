//! CUDA backend: device memory, NVRTC-compiled kernels (kernels/*.cu), cuBLASLt for prefill
//! GEMMs, its own skinny GEMM for decode rows, paged KV, one host synchronisation per step.
//! See docs/CUDA.md for the design, the kernel list and how to test on a GPU machine.

mod attn_args;
pub mod attn_launch;
pub mod attn_wide;
pub mod backend;
pub mod chain_gemm;
pub mod device;
pub mod draft_graphs;
pub mod footprint;
pub mod forward;
pub mod fp8_rows;
pub mod fp8_skinny;
pub mod gemm_fp8;
pub mod gemm_lt;
pub mod gemm_tail;
pub mod graphs;
pub mod graphs_pad;
pub mod host_tier;
pub mod kernel_entries;
pub mod kernel_sources;
pub mod kernels;
pub mod kernels_attn;
pub mod kernels_draft;
pub mod kernels_gemma;
pub mod kv_cache;
mod lt_calls;
pub mod model_support;
pub mod nvrtc_build;
pub mod pipeline;
pub mod quant_gemm;
mod quant_halves;
pub mod quant_layout;
pub mod quant_order;
pub mod quant_prefill;
pub mod quant_weights;
pub mod sampling;
pub mod skinny;
pub mod skinny_fused;
pub mod skinny_tc;
pub mod skinny_tc_split;
pub mod skinny_wg;
pub mod skinny_wg_measured;
pub mod step_plan;
pub mod store;
pub mod switch_modes;
pub mod switches;
pub mod weights;
pub mod wg_rows;
pub mod wg_rows_choice;

pub use backend::{CudaBackend, CudaOptions};
pub use device::{cuda_available, memory_info, unavailable_reason};
pub use footprint::Footprint;
pub use store::StoreType;
