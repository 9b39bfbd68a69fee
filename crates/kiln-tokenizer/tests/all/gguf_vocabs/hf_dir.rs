//! Hugging Face folders, written from the vocabularies of llama.cpp's files in the layout the
//! original models ship (GPT-2: byte-level BPE; Llama 2: SentencePiece-converted BPE with byte
//! fallback), loaded with `Tokenizer::from_hf_dir` and checked against llama.cpp's cases. The
//! tokenizer.json pipeline is the `tokenizers` crate's own, so this checks the folder loading
//! (config files, BOS/EOS, decoding), not the GGUF code.

use std::path::PathBuf;

use kiln_formats::GgufFile;
use kiln_tokenizer::{ChatMessage, Tokenizer};
use serde_json::{json, Value};

use super::common::{read_cases, vocab_dir};

/// A scratch folder removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str, files: &[(&str, &Value)]) -> Folder {
        let dir = std::env::temp_dir().join(format!("kiln-hf-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, v) in files {
            std::fs::write(dir.join(file), serde_json::to_string(v).unwrap()).unwrap();
        }
        Folder(dir)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct GgufVocab {
    tokens: Vec<String>,
    types: Vec<i64>,
    scores: Vec<f32>,
    merges: Vec<String>,
}

fn read_vocab(name: &str) -> GgufVocab {
    let g = GgufFile::open(vocab_dir().join(format!("ggml-vocab-{name}.gguf"))).unwrap();
    let strings = |k: &str| {
        g.get_str_array(k)
            .unwrap()
            .unwrap_or_default()
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    GgufVocab {
        tokens: strings("tokenizer.ggml.tokens"),
        types: g
            .get_i64_array("tokenizer.ggml.token_type")
            .unwrap()
            .unwrap_or_default(),
        scores: g
            .get_f32_array("tokenizer.ggml.scores")
            .unwrap()
            .unwrap_or_default(),
        merges: strings("tokenizer.ggml.merges"),
    }
}

fn added(id: usize, content: &str) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": true})
}

fn check_cases(name: &str, tok: &Tokenizer) {
    for (text, want) in read_cases(name) {
        assert_eq!(tok.encode(&text, false).unwrap(), want, "{name}: {text:?}");
        assert_eq!(tok.decode(&want, false), text, "{name}: decode {want:?}");
    }
}

#[test]
fn gpt2_folder() {
    let v = read_vocab("gpt-2");
    let vocab: serde_json::Map<String, Value> = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(50256, "<|endoftext|>")],
        "normalizer": null, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "vocab": vocab,
                  "merges": v.merges},
    });
    let chatml =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    let config = json!({
        "bos_token": {"content": "<|endoftext|>", "lstrip": false, "normalized": true, "rstrip": false},
        "eos_token": "<|endoftext|>",
        "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": chatml}],
    });
    let generation = json!({"eos_token_id": [50256, 13]});
    let dir = Folder::new(
        "gpt2",
        &[
            ("tokenizer.json", &tokenizer),
            ("tokenizer_config.json", &config),
            ("generation_config.json", &generation),
        ],
    );
    let tok = Tokenizer::from_hf_dir(&dir.0).unwrap();
    assert_eq!((tok.kind(), tok.vocab_size()), ("huggingface", 50257));
    check_cases("gpt-2", &tok);
    assert_eq!(tok.bos_id(), Some(50256));
    assert!(!tok.adds_bos(), "GPT-2's post-processor adds nothing");
    assert_eq!(tok.eos_ids(), &[50256, 13]);
    assert!(tok.is_special(50256) && !tok.is_special(13));
    let text = tok
        .chat_template()
        .unwrap()
        .render(&[ChatMessage::new("user", "hi")], false)
        .unwrap();
    assert_eq!(text, "<|im_start|>user\nhi<|im_end|>\n");
}

/// transformers' SentencePieceExtractor: every split of a piece into two pieces is a merge,
/// ranked by the joined piece's score (higher first, then longer left, then longer right).
fn merges_from_scores(v: &GgufVocab) -> Vec<String> {
    let normal = |i: usize| v.types.get(i) == Some(&1);
    let id: std::collections::HashMap<&str, usize> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|&(i, _)| normal(i))
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut by_score: Vec<usize> = (0..v.tokens.len()).filter(|&i| normal(i)).collect();
    by_score.sort_by(|&a, &b| v.scores[b].total_cmp(&v.scores[a]));
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    for &i in &by_score {
        let piece = v.tokens[i].as_str();
        let mut local: Vec<(&str, &str, f32)> = piece
            .char_indices()
            .skip(1)
            .map(|(at, _)| piece.split_at(at))
            .filter(|(l, r)| id.contains_key(l) && id.contains_key(r))
            .map(|(l, r)| (l, r, v.scores[i]))
            .collect();
        local.sort_by_key(|&(l, r, _)| (id[l], id[r]));
        merges.extend(local);
    }
    let len = |s: &str| s.chars().count();
    merges.sort_by(|a, b| {
        b.2.total_cmp(&a.2)
            .then(len(b.0).cmp(&len(a.0)))
            .then(len(b.1).cmp(&len(a.1)))
    });
    merges
        .into_iter()
        .map(|(l, r, _)| format!("{l} {r}"))
        .collect()
}

#[test]
fn llama2_folder() {
    let v = read_vocab("llama-spm");
    let vocab: serde_json::Map<String, Value> = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": null,
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "vocab": vocab,
                  "merges": merges_from_scores(&v)},
    });
    let config = json!({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"});
    let dir = Folder::new(
        "llama2",
        &[
            ("tokenizer.json", &tokenizer),
            ("tokenizer_config.json", &config),
        ],
    );
    let tok = Tokenizer::from_hf_dir(&dir.0).unwrap();
    check_cases("llama-spm", &tok);
    assert!(
        tok.adds_bos(),
        "the TemplateProcessing post-processor adds <s>"
    );
    assert_eq!(tok.encode("Hello", true).unwrap(), vec![1, 15043]);
    assert_eq!(tok.eos_ids().first(), Some(&2));
    assert_eq!(tok.decode(&[1, 15043, 2], true), "Hello");
    assert_eq!(
        tok.token_bytes(13),
        b"\n",
        "<0x0A> is a byte-fallback token"
    );
}
