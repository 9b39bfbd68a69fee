//! kiln-cpu's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-cpu --test all MODULE::` runs one file's tests).

#[path = "../../../kiln-model/tests/all/support/assistant_fixture.rs"]
mod assistant_fixture;
#[path = "../../../kiln-model/tests/all/support/fixtures.rs"]
mod fixtures;
mod support;

mod bad_input;
mod batch_invariance;
mod chunked_prefill;
mod forward_reference;
mod fp8_projections;
mod kernel_attention;
mod kernel_geglu;
mod kernel_matmul;
mod kernel_rmsnorm;
mod kernel_rope;
mod kernel_swiglu;
mod kv_ring;
mod parity_assistant;
mod parity_fixtures;
mod quantized_weights;
mod rounding_emulation;
