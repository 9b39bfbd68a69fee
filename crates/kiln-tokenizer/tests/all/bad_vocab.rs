//! GGUF vocabularies that are missing pieces or contradict themselves give an error that names
//! the problem, never a panic; small hand-made vocabularies check the SentencePiece details.

use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

/// Metadata values for a minimal GGUF v3 image (no tensors).
enum V {
    Str(&'static str),
    U32(u32),
    Bool(bool),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn gguf(kvs: &[(&str, V)]) -> GgufFile {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut b, k);
        match v {
            V::Str(s) => {
                b.extend(8u32.to_le_bytes());
                put_str(&mut b, s);
            }
            V::U32(x) => {
                b.extend(4u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            V::Bool(x) => {
                b.extend(7u32.to_le_bytes());
                b.push(u8::from(*x));
            }
            V::Strs(items) => {
                b.extend(9u32.to_le_bytes());
                b.extend(8u32.to_le_bytes());
                b.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|s| put_str(&mut b, s));
            }
            V::I32s(items) => {
                b.extend(9u32.to_le_bytes());
                b.extend(5u32.to_le_bytes());
                b.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
            V::F32s(items) => {
                b.extend(9u32.to_le_bytes());
                b.extend(6u32.to_le_bytes());
                b.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
        }
    }
    GgufFile::from_bytes(b).expect("well-formed GGUF")
}

/// A tiny SentencePiece vocabulary: specials, the two bytes "a" needs none of, pieces.
fn spm_tokens() -> Vec<String> {
    [
        "<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab", "▁a", "▁ab",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn spm(extra: Vec<(&'static str, V)>) -> Vec<(&'static str, V)> {
    let mut kvs = vec![
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(spm_tokens())),
        (
            "tokenizer.ggml.token_type",
            V::I32s(vec![2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1]),
        ),
        (
            "tokenizer.ggml.scores",
            V::F32s(vec![
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0,
            ]),
        ),
    ];
    kvs.extend(extra);
    kvs
}

fn err(kvs: &[(&str, V)]) -> String {
    format!(
        "{:#}",
        Tokenizer::from_gguf(&gguf(kvs)).expect_err("should be rejected")
    )
}

#[test]
fn malformed_vocabularies_are_rejected_with_the_reason() {
    assert!(err(&[]).contains("tokenizer.ggml.model"));
    let e = err(&[
        ("tokenizer.ggml.model", V::Str("ugm")),
        ("tokenizer.ggml.tokens", V::Strs(spm_tokens())),
    ]);
    assert!(e.contains("'ugm' is not supported"), "{e}");
    assert!(err(&[("tokenizer.ggml.model", V::Str("llama"))]).contains("tokenizer.ggml.tokens"));
    let e = err(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(vec![])),
    ]);
    assert!(e.contains("empty"), "{e}");
    let e = err(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(spm_tokens())),
    ]);
    assert!(e.contains("scores"), "{e}");
    let mut short = spm(vec![]);
    short[2] = ("tokenizer.ggml.token_type", V::I32s(vec![1, 1]));
    assert!(err(&short).contains("2 entries for 12 tokens"));
    let gpt2 = |pre: &'static str| {
        vec![
            ("tokenizer.ggml.model", V::Str("gpt2")),
            ("tokenizer.ggml.pre", V::Str(pre)),
            (
                "tokenizer.ggml.tokens",
                V::Strs(vec!["a".into(), "b".into()]),
            ),
        ]
    };
    assert!(err(&gpt2("no-such-pre")).contains("pre-tokenizer 'no-such-pre'"));
    assert!(err(&gpt2("gpt-2")).contains("tokenizer.ggml.merges"));
    let e = err(&[("tokenizer.ggml.model", V::U32(3))]);
    assert!(e.contains("should be a string"), "{e}");
}

#[test]
fn sentencepiece_details() {
    let tok = Tokenizer::from_gguf(&gguf(&spm(vec![]))).unwrap();
    assert_eq!(tok.kind(), "gguf:llama");
    // The higher-scoring pair merges first: "ab" (-4) before "▁a" (-5), then "▁" + "ab".
    assert_eq!(tok.encode("ab", false).unwrap(), vec![11]);
    // Characters outside the vocabulary fall back to their bytes; a byte with no token to <unk>.
    assert_eq!(tok.encode("é", false).unwrap(), vec![6, 4, 5]);
    assert_eq!(tok.encode("\u{1}", false).unwrap(), vec![6, 0]);
    assert_eq!(tok.decode(&[6, 4, 5], true), "é");
    assert_eq!(
        tok.encode("a", true).unwrap(),
        vec![1, 10],
        "BOS by default for SentencePiece"
    );

    // Settings from the file: no BOS, EOS added, no leading space; out-of-range ids ignored.
    let tok = Tokenizer::from_gguf(&gguf(&spm(vec![
        ("tokenizer.ggml.add_bos_token", V::Bool(false)),
        ("tokenizer.ggml.add_eos_token", V::Bool(true)),
        ("tokenizer.ggml.add_space_prefix", V::Bool(false)),
        ("tokenizer.ggml.bos_token_id", V::U32(999)),
    ])))
    .unwrap();
    assert_eq!(tok.encode("ab", true).unwrap(), vec![9, 2]);
    assert_eq!(
        tok.bos_id(),
        Some(1),
        "an out-of-range BOS id falls back to the default"
    );
    assert_eq!(tok.decode(&[10], true), " a", "no leading space to strip");
}

#[test]
fn tokenizers_are_shareable() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Tokenizer>();
    shareable::<kiln_tokenizer::ChatTemplate>();
    shareable::<kiln_tokenizer::StreamDecoder>();
}
