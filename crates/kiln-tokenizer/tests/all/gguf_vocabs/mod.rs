//! Tests on llama.cpp's vocabulary files (../shared/vocab), in one binary so that each
//! vocabulary is loaded once.

mod api;
mod common;
mod hf_dir;
mod llama_cpp_cases;
mod stream;
