//! llama.cpp's vocabulary files and their cases.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

use crate::test_data;

/// ../shared/vocab (or where tests/test_data.rs finds the vocabularies).
pub fn vocab_dir() -> PathBuf {
    test_data::vocab_dir()
}

/// Inputs separated by "\n__ggml_vocab_test__\n"; text after the last separator is one more
/// case only when non-empty (llama.cpp's read_tests).
pub fn read_cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let base = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let inp = std::fs::read_to_string(base.with_extension("gguf.inp")).expect("read .inp");
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).expect("read .out");
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(i) => {
                inputs.push(rest[..i].to_string());
                rest = &rest[i + sep.len()..];
            }
            None => {
                inputs.push(rest.to_string());
                rest = "";
            }
        }
    }
    let expected: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("token id"))
                .collect()
        })
        .collect();
    assert_eq!(
        inputs.len(),
        expected.len(),
        "{name}: .inp and .out disagree on the case count"
    );
    inputs.into_iter().zip(expected).collect()
}

/// The tokenizer of `ggml-vocab-NAME.gguf`, loaded once per test binary (tests running at the
/// same time wait for one load).
pub fn load(name: &str) -> Tokenizer {
    type Cells = Mutex<HashMap<String, Arc<OnceLock<Tokenizer>>>>;
    static CACHE: OnceLock<Cells> = OnceLock::new();
    let cell = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
        let g = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{name}: {e:#}"))
    })
    .clone()
}

pub fn preview(s: &str) -> String {
    let p: String = s.chars().take(60).collect();
    format!("{p:?}{}", if s.chars().count() > 60 { "..." } else { "" })
}

/// Every vocabulary the tests cover.
pub const VOCABS: &[&str] = &[
    "llama-spm",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gemma-4",
    "phi-3",
    "gpt-2",
    "deepseek-llm",
    "deepseek-coder",
    "falcon",
    "starcoder",
];
