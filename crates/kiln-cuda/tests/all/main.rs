//! kiln-cuda's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-cuda --test all MODULE::` runs one file's tests).

mod common;

mod availability;
mod backend_invariance;
mod backend_parity;
mod contract_adjust;
mod contract_attention;
mod contract_chain;
mod contract_decode_fused;
mod contract_draft;
mod contract_fp8;
mod contract_fp8_fused;
mod contract_fp8_skinny;
mod contract_gemm;
mod contract_gemma;
mod contract_quant;
mod contract_quant_fused;
mod contract_rows;
mod contract_sampling;
mod contract_typed;
mod contract_wg_rows;
mod draft_assistant;
mod draft_graphs;
mod footprint;
mod graphs_counts;
mod graphs_parity;
mod kernels_compile;
mod kv_ring;
mod pipelined_steps;
mod precision_budget;
mod prefix_reuse;
mod quant_layout;
mod quant_parity;
mod sass_order;
mod verify_rows;
