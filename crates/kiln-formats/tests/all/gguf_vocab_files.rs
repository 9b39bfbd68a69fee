//! The real vocabulary files from llama.cpp (../shared/vocab) open and their tokenizer metadata
//! reads with consistent lengths.

use crate::support;

use kiln_formats::GgufFile;

fn vocab_files() -> Vec<std::path::PathBuf> {
    let dir = support::shared_dir().join("vocab");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_vocab_file_opens_with_consistent_tokenizer_metadata() {
    let files = vocab_files();
    assert!(
        files.len() >= 11,
        "expected the llama.cpp vocab files, found {files:?}"
    );
    for path in files {
        let g = GgufFile::open(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        assert!(!g.architecture().unwrap().is_empty(), "{name}");
        let model = g.get_str("tokenizer.ggml.model").unwrap();
        assert!(
            matches!(model, Some("llama" | "gpt2" | "bert" | "gemma4")),
            "{name}: {model:?}"
        );
        let tokens = g.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
        assert!(tokens.len() > 1000, "{name}: {} tokens", tokens.len());
        if let Some(types) = g.get_i64_array("tokenizer.ggml.token_type").unwrap() {
            assert_eq!(types.len(), tokens.len(), "{name}: token types");
        }
        if let Some(scores) = g.get_f32_array("tokenizer.ggml.scores").unwrap() {
            assert_eq!(scores.len(), tokens.len(), "{name}: scores");
        }
        if let Some(merges) = g.get_str_array("tokenizer.ggml.merges").unwrap() {
            assert!(
                merges.iter().all(|m| m.contains(' ')),
                "{name}: merges are 'a b' pairs"
            );
        }
        if let Some(bos) = g.get_u64("tokenizer.ggml.bos_token_id").unwrap() {
            assert!((bos as usize) < tokens.len(), "{name}: bos id {bos}");
        }
    }
}

#[test]
fn llama_bpe_vocab_has_known_values() {
    let g = GgufFile::open(support::shared_dir().join("vocab/ggml-vocab-llama-bpe.gguf")).unwrap();
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), Some("llama-bpe"));
    let tokens = g.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 128256);
    assert_eq!(tokens[128000], "<|begin_of_text|>");
    assert_eq!(
        g.get_u64("tokenizer.ggml.bos_token_id").unwrap(),
        Some(128000)
    );
}
