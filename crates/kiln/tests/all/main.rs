//! kiln's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln --test all MODULE::` runs one file's tests).

#[path = "../../../../tests/test_data.rs"]
mod test_data;

mod cli;
mod cli_bench;
mod cli_dtype;
mod cli_header;
mod cli_quantize;
mod serve_cli;
mod shipped_model;
mod support;
