//! llama.cpp's own tokenizer cases (`ggml-vocab-NAME.gguf.inp` / `.out` in ../shared/vocab),
//! run the way its test-tokenizer-0 runs them: no BOS/EOS added, control tokens in the text left
//! as text. Prints each vocabulary's pass count and fails when one falls below its floor.

use super::common::{load, preview, read_cases, VOCABS};

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
    ("bert-bge", 46),
];

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

#[test]
fn decode_gives_back_the_input() {
    for &name in VOCABS {
        let tok = load(name);
        for (text, _) in read_cases(name) {
            let ids = tok.encode(&text, false).unwrap();
            assert_eq!(tok.decode(&ids, false), text, "{name}: {text:?} -> {ids:?}");
        }
    }
}
