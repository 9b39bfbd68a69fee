//! kiln-grammar's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-grammar --test all MODULE::` runs one file's tests).

#[path = "../../../../tests/json_schema.rs"]
mod json_schema;
mod walks;
