//! llama.cpp's own tokenizer cases (`ggml-vocab-NAME.gguf.inp` / `.out` in ../shared/vocab),
//! run the way its test-tokenizer-0 runs them: no BOS/EOS added, control tokens in the text left
//! as text. Prints each vocabulary's pass count and fails when one falls below its floor.

use std::path::PathBuf;

use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

/// (vocabulary, cases that must pass). The floors are the counts reached when they were
/// recorded; docs/TOKENIZERS.md lists them with the cause of every failing case.
const FLOORS: &[(&str, usize)] = &[
    ("llama-spm", 46),
    ("llama-bpe", 46),
    ("qwen2", 46),
    ("qwen35", 50),
    ("gemma-4", 46),
    ("phi-3", 46),
    ("gpt-2", 46),
    ("deepseek-llm", 46),
    ("deepseek-coder", 46),
    ("falcon", 46),
    ("starcoder", 46),
];

fn vocab_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/vocab")
}

/// Inputs separated by "\n__ggml_vocab_test__\n"; text after the last separator is one more
/// case only when non-empty (llama.cpp's read_tests).
fn read_cases(name: &str) -> Vec<(String, Vec<u32>)> {
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

fn load(name: &str) -> Tokenizer {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let g = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

fn preview(s: &str) -> String {
    let p: String = s.chars().take(60).collect();
    format!("{p:?}{}", if s.chars().count() > 60 { "..." } else { "" })
}

#[test]
fn llama_cpp_vocab_cases_pass() {
    let mut regressions = Vec::new();
    for &(name, floor) in FLOORS {
        let tok = load(name);
        let cases = read_cases(name);
        let mut passed = 0;
        for (text, want) in &cases {
            let got = tok
                .encode_with(text, false, false)
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
            if &got == want {
                passed += 1;
            } else {
                println!(
                    "  {name} FAIL {}\n    want {want:?}\n    got  {got:?}",
                    preview(text)
                );
            }
        }
        println!("{name:16} {passed:3}/{:3}  ({})", cases.len(), tok.kind());
        if passed < floor {
            regressions.push(format!("{name}: {passed} < floor {floor}"));
        }
    }
    assert!(
        regressions.is_empty(),
        "vocabularies below their floor: {regressions:?}"
    );
}
