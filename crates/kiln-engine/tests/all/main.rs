//! kiln-engine's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-engine --test all MODULE::` runs one file's tests).

mod common;
#[path = "../../../../tests/json_schema.rs"]
mod json_schema;

mod constrained;
mod engine_exactness;
mod engine_requests;
mod kv_ring;
mod overlap;
mod prefix_cache;
mod speculative;
mod speculative_assistant;
