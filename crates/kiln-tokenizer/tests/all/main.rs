//! kiln-tokenizer's integration tests: one module per file, all in one test executable, so that a
//! build links it once (`cargo test -p kiln-tokenizer --test all MODULE::` runs one file's tests).

#[path = "../../../../tests/test_data.rs"]
mod test_data;

mod bad_vocab;
mod chat_templates;
mod gguf_vocabs;
