//! StreamDecoder on real vocabularies: multi-byte characters split over tokens (SentencePiece
//! byte fallback, byte-level BPE halves) never come out broken; from the start of a text the
//! stream adds up to `decode`, after a prompt it keeps the first token's space.

use super::common::{load, read_cases, VOCABS};
use kiln_tokenizer::StreamDecoder;

/// Streams `ids`; returns the chunks and how often a push held bytes back.
fn stream(tok: &kiln_tokenizer::Tokenizer, ids: &[u32]) -> (Vec<String>, usize) {
    let mut d = StreamDecoder::new(tok).from_text_start();
    let mut chunks = Vec::new();
    let mut held = 0;
    for &id in ids {
        chunks.push(d.push(id));
        held += usize::from(d.has_pending());
    }
    chunks.push(d.finish());
    (chunks, held)
}

#[test]
fn stream_adds_up_to_decode_without_broken_characters() {
    for &name in VOCABS {
        let tok = load(name);
        let mut held_total = 0;
        for (text, _) in read_cases(name) {
            let ids = tok.encode(&text, false).unwrap();
            let (chunks, held) = stream(&tok, &ids);
            held_total += held;
            assert_eq!(chunks.concat(), tok.decode(&ids, true), "{name}: {text:?}");
            for c in &chunks {
                assert!(
                    !c.contains('\u{FFFD}'),
                    "{name}: broken character in {c:?} of {text:?}"
                );
            }
        }
        // The cases hold emoji and Khmer, which every one of these vocabularies splits.
        assert!(
            held_total > 0,
            "{name}: no character was ever split over tokens"
        );
    }
}

#[test]
fn byte_fallback_emoji_waits_for_its_last_byte() {
    let tok = load("llama-spm");
    // llama.cpp: " this is 🦙.cpp" -> ... 243 162 169 156 (the four bytes of the llama) ...
    let ids = tok.encode(" this is 🦙.cpp", false).unwrap();
    let at = ids
        .iter()
        .position(|&id| id == 243)
        .expect("byte token <0xF0>");
    assert_eq!(&ids[at..at + 4], &[243, 162, 169, 156]);
    let mut d = StreamDecoder::new(&tok).from_text_start();
    let before: String = ids[..at].iter().map(|&id| d.push(id)).collect();
    assert_eq!(before, " this is "); // the encoder's extra space is dropped, the text's own kept
    for &id in &ids[at..at + 3] {
        assert_eq!(d.push(id), "");
    }
    assert_eq!(d.push(ids[at + 3]), "🦙");
    // A stream cut inside a character ends with one replacement character, as decode does.
    let mut d = StreamDecoder::new(&tok).from_text_start();
    let cut: String = ids[..at + 2]
        .iter()
        .map(|&id| d.push(id))
        .collect::<String>()
        + &d.finish();
    assert_eq!(cut, tok.decode(&ids[..at + 2], true));
    assert!(cut.ends_with('\u{FFFD}'));
}

#[test]
fn leading_space_and_specials() {
    // SentencePiece: the space the encoder put before the first word is not shown ...
    let spm = load("llama-spm");
    let ids = spm.encode("Hello world", true).unwrap();
    assert_eq!(stream(&spm, &ids).0.concat(), "Hello world");
    // ... but a generated "▁world" after the prompt "Hello" is " world".
    let prompt = spm.encode("Hello", true).unwrap();
    let generated = &ids[prompt.len()..];
    let mut d = StreamDecoder::new(&spm);
    let text: String = generated.iter().map(|&id| d.push(id)).collect::<String>() + &d.finish();
    assert_eq!(text, " world");

    let qwen = load("qwen2");
    let ids = qwen
        .encode("<|im_start|>assistant\nCafé ☕<|im_end|>", false)
        .unwrap();
    assert_eq!(stream(&qwen, &ids).0.concat(), "assistant\nCafé ☕");
    let mut d = StreamDecoder::new(&qwen).show_special(true);
    let all: String = ids.iter().map(|&id| d.push(id)).collect::<String>() + &d.finish();
    assert_eq!(all, "<|im_start|>assistant\nCafé ☕<|im_end|>");
}
