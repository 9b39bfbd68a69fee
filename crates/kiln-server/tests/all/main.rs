//! kiln-server's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-server --test all MODULE::` runs one file's tests).
//! tests/prompt_memory.rs stays apart: its counting allocator measures the whole process.

#[path = "../../../../tests/json_schema.rs"]
mod json_schema;
mod support;

mod chat;
mod completions;
mod connections;
mod control_tokens;
mod endpoints;
mod errors;
mod fields;
mod isolation;
mod lifecycle;
mod prefix_cache;
mod speculative;
mod structured;
mod tools;
