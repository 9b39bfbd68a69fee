//! The CPU kernels, one concept a file. Each works on f32 rows and keeps every reduction in
//! one fixed order per row, so a row's result does not depend on the rest of the batch.

pub mod attention;
pub mod geglu;
pub mod matmul;
mod matmul_input;
mod matmul_panels;
mod microkernel;
mod panel_store;
#[cfg(target_arch = "x86_64")]
mod quant_decode_avx2;
pub mod quant_panels;
pub mod reduce;
pub mod rmsnorm;
pub mod rope;
pub mod simd;
pub mod swiglu;

pub use attention::{
    paged_attention, paged_attention_rounding, paged_attention_with, AttentionShape, KvView,
    Queries, QueryRow, RoundProbs,
};
pub use geglu::{geglu, gelu_tanh};
pub use matmul::{matmul, matmul_with, PackedMatrix, RowBlock};
pub use panel_store::WeightFormat;
pub use quant_panels::{quantized_weights_allowed, QuantFormat};
pub use rmsnorm::{
    rmsnorm, rmsnorm_heads_in_place, rmsnorm_heads_unweighted_in_place, rmsnorm_row_in_place,
};
pub use rope::{apply_rope, RopeTable};
pub use simd::{isa, Isa};
pub use swiglu::{silu, swiglu};
