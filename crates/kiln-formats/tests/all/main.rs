//! kiln-formats's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-formats --test all MODULE::` runs one file's tests).

mod support;
#[path = "../../../../tests/test_data.rs"]
mod test_data;

mod dequant_vectors;
mod gguf_corrupt;
mod gguf_py_sample;
mod gguf_roundtrip;
mod gguf_vocab_files;
mod safetensors_model;
