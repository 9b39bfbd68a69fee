//! The Tokenizer API on real vocabularies: BOS/EOS and the turn markers, added tokens parsed in
//! text, decoding back to the input, per-token bytes, the embedded chat template.

use super::common::{load, read_cases};
use kiln_tokenizer::{ChatMessage, Tokenizer};

/// The ids llama.cpp's .out file gives for one input of a vocabulary.
fn expected(name: &str, text: &str) -> Vec<u32> {
    read_cases(name)
        .into_iter()
        .find(|(t, _)| t == text)
        .map(|(_, ids)| ids)
        .expect("case present")
}

#[test]
fn bos_is_added_as_each_model_says() {
    // (vocabulary, BOS id from the file, whether BOS is added)
    for (name, bos, adds) in [
        ("llama-spm", 1, true),
        ("phi-3", 1, true),
        ("llama-bpe", 128000, true),
        ("qwen2", 151643, false),
        ("gemma-4", 2, true),
        ("deepseek-llm", 100000, true),
        ("gpt-2", 50256, false),
    ] {
        let tok = load(name);
        assert_eq!(tok.bos_id(), Some(bos), "{name}");
        let plain = expected(name, "Hello world");
        let mut want = if adds { vec![bos] } else { vec![] };
        want.extend(&plain);
        assert_eq!(tok.encode("Hello world", true).unwrap(), want, "{name}");
        assert_eq!(tok.encode("Hello world", false).unwrap(), plain, "{name}");
        assert!(!tok.adds_eos(), "{name}");
    }
}

#[test]
fn turn_markers_end_generation() {
    let piece_ids = |tok: &Tokenizer, pieces: &[&str]| -> Vec<u32> {
        pieces
            .iter()
            .map(|p| tok.token_id(p).unwrap_or_else(|| panic!("{p} missing")))
            .collect()
    };
    for (name, eos, markers) in [
        ("llama-bpe", "<|end_of_text|>", &["<|eot_id|>"][..]),
        ("qwen2", "<|endoftext|>", &["<|im_end|>"][..]),
        ("phi-3", "<|endoftext|>", &["<|end|>"][..]),
        ("gemma-4", "<eos>", &["<turn|>", "<|tool_response>"][..]),
        ("deepseek-llm", "<｜end▁of▁sentence｜>", &[][..]),
    ] {
        let tok = load(name);
        let ids = tok.eos_ids();
        assert_eq!(
            ids.first().copied(),
            tok.token_id(eos),
            "{name}: EOS comes first"
        );
        for id in piece_ids(&tok, markers) {
            assert!(
                ids.contains(&id),
                "{name}: {id} should end a turn ({ids:?})"
            );
            assert!(tok.is_special(id), "{name}: {id} should be special");
        }
        assert!(!ids.contains(&tok.token_id("Hello").unwrap_or(u32::MAX)));
    }
    // Gemma 4's </s> is an ordinary piece.
    let g = load("gemma-4");
    if let Some(s) = g.token_id("</s>") {
        assert!(!g.eos_ids().contains(&s) && !g.is_special(s));
    }
}

#[test]
fn added_tokens_in_text_become_their_ids() {
    let tok = load("qwen2");
    let text = "<|im_start|>user\nHello world<|im_end|>\n";
    let ids = tok.encode(text, false).unwrap();
    let (start, end) = (
        tok.token_id("<|im_start|>").unwrap(),
        tok.token_id("<|im_end|>").unwrap(),
    );
    assert_eq!(ids.first(), Some(&start));
    assert!(ids.contains(&end));
    assert_eq!(tok.decode(&ids, false), text);
    assert_eq!(tok.decode(&ids, true), "user\nHello world\n");
    // Not parsed: the marker is spelled out as ordinary pieces.
    let literal = tok.encode_with("<|im_end|>", false, false).unwrap();
    assert!(literal.len() > 1 && !literal.contains(&end));

    // SentencePiece puts the leading space back after an added token, as llama.cpp does.
    let spm = load("llama-spm");
    let ids = spm.encode("<s>Hello", false).unwrap();
    assert_eq!(ids, vec![1, expected("llama-spm", "Hello")[0]]);
}

#[test]
fn token_bytes_are_raw_bytes() {
    let spm = load("llama-spm");
    assert_eq!(spm.token_bytes(spm.token_id("<0x0A>").unwrap()), b"\n");
    assert_eq!(
        spm.token_bytes(spm.token_id("\u{2581}Hello").unwrap()),
        b" Hello"
    );
    assert_eq!(spm.token_bytes(1), b"<s>");
    let gpt2 = load("gpt-2");
    assert_eq!(
        gpt2.token_bytes(gpt2.token_id("\u{120}world").unwrap()),
        b" world"
    );
    // Half of "é" (0xC3 0xA9) is a token of its own in byte-level BPE.
    assert_eq!(gpt2.token_bytes(gpt2.token_id("\u{c3}").unwrap()), [0xC3]);
    assert!(gpt2.token_bytes(u32::MAX).is_empty());
    assert_eq!(gpt2.vocab_size(), 50257);
}

#[test]
fn gguf_chat_template_renders() {
    let tok = load("qwen2");
    let t = tok.chat_template().expect("qwen2 vocab ships a template");
    let text = t.render(&[ChatMessage::new("user", "Hi")], true).unwrap();
    assert!(
        text.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        "{text}"
    );
    assert_eq!(tok.kind(), "gguf:gpt2/qwen2");
    assert!(load("llama-spm").chat_template().is_none());

    // The other embedded templates render a full conversation, and the prompt they produce
    // tokenizes with the turn markers as single tokens.
    let conv = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello."),
        ChatMessage::new("user", "Bye"),
    ];
    for (name, marker) in [
        ("gemma-4", "<turn|>"),
        ("phi-3", "<|end|>"),
        ("qwen35", "<|im_end|>"),
    ] {
        let tok = load(name);
        let text = tok
            .chat_template()
            .unwrap()
            .render(&conv, true)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(text.contains("Bye"), "{name}: {text}");
        let ids = tok.encode(&text, false).unwrap();
        let id = tok.token_id(marker).unwrap();
        assert!(
            ids.contains(&id) && tok.eos_ids().contains(&id),
            "{name}: {marker} in {text:?}"
        );
    }
}

#[test]
fn byte_level_tokenizer_for_dummy_models() {
    let tok = Tokenizer::byte_level(512);
    assert_eq!((tok.vocab_size(), tok.kind()), (512, "byte-level"));
    let bos = tok.bos_id().unwrap();
    assert_eq!(
        tok.encode("hé", true).unwrap(),
        vec![bos, b'h' as u32, 0xC3, 0xA9]
    );
    let im_end = tok.token_id("<|im_end|>").unwrap();
    assert!(
        tok.eos_ids().contains(&im_end)
            && tok
                .eos_ids()
                .contains(&tok.token_id("<|end_of_text|>").unwrap())
    );
    let prompt = tok
        .chat_template()
        .unwrap()
        .render(&[ChatMessage::new("user", "hi")], true)
        .unwrap();
    assert_eq!(
        prompt,
        "<|begin_of_text|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = tok.encode(&prompt, false).unwrap();
    assert_eq!(ids.first(), Some(&bos));
    assert_eq!(tok.decode(&ids, false), prompt);
    // Any id a random model may sample decodes without panicking; padding decodes to nothing.
    assert_eq!(tok.decode(&[300, 511, 9999], true), "");
    assert_eq!(Tokenizer::byte_level(10).vocab_size(), 260);
}
