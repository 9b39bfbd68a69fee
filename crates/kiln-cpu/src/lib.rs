//! kiln-cpu: the CPU backend and exact reference.
//!
//! f32 weights and compute, parallel over cores (rayon), AVX2/FMA where the CPU has it. Every
//! reduction runs in one fixed order per row, so a sequence's logits are the same bits alone
//! or batched with others, prefilled whole or in chunks, or decoded token by token.
//! `KILN_CPU_SIMD=portable` turns off the AVX2 path.

mod backend;
mod draft_head;
mod forward;
pub mod kernels;
mod kv_cache;
pub mod rounding;
mod step_plan;
pub mod switches;
mod weights;

pub use backend::{CpuBackend, CpuOptions, Drafted};
pub use rounding::{Narrow, Rounding};
