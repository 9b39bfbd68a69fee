//! kiln-model's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-model --test all MODULE::` runs one file's tests).

mod support;
#[path = "../../../../tests/test_data.rs"]
mod test_data;

mod assistant_config;
mod config_parsing;
mod fixture_sources;
