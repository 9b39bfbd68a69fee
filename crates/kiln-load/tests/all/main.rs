//! kiln-load's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-load --test all MODULE::` runs one file's tests).

#[path = "../../../kiln-model/tests/all/support/fixtures.rs"]
mod fixtures;
#[path = "../../../../tests/test_data.rs"]
mod test_data;

mod load_spec;
