//! WordPiece (BERT) as llama.cpp's `llm_tokenizer_wpm` runs it on a GGUF vocabulary: each
//! character replaced by the first of its NFD decomposition (llama.cpp's one-to-one NFD map,
//! which drops the accents of composed letters), lowercased, control characters dropped, split at whitespace, with each punctuation
//! mark, ASCII symbol and CJK ideograph a word of its own; then each word, a `▁` before it,
//! cut greedily into the longest pieces of the vocabulary (llama.cpp's converter writes word
//! starts with `▁` and continuations without BERT's `##`). A word with a part no piece covers
//! becomes the unknown token.

use unicode_categories::UnicodeCategories;

use crate::vocab::Vocab;

pub(crate) struct Wpm {
    unk: Option<u32>,
    /// The longest piece, in bytes: no match is tried past it.
    max_piece: usize,
}

impl Wpm {
    pub fn new(vocab: &Vocab, unk: Option<u32>) -> Wpm {
        let max_piece = vocab.iter_pieces().map(|(_, p)| p.len()).max().unwrap_or(1);
        Wpm { unk, max_piece }
    }

    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        for word in words(text) {
            let word = format!("\u{2581}{word}");
            let bytes = word.as_bytes();
            let start = out.len();
            let mut i = 0;
            while i < bytes.len() {
                let longest = (i + 1..=bytes.len().min(i + self.max_piece))
                    .rev()
                    .find_map(|j| {
                        let piece = std::str::from_utf8(&bytes[i..j]).ok()?;
                        Some((j, vocab.id(piece)?))
                    });
                match longest {
                    Some((j, id)) => {
                        out.push(id);
                        i = j;
                    }
                    None => {
                        out.truncate(start);
                        break;
                    }
                }
            }
            if out.len() == start {
                out.extend(self.unk);
            }
        }
    }
}

/// llama.cpp's WPM pre-processing: the words of `text`.
fn words(text: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars().map(base) {
        if c.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        let control = c.is_other_control() || c.is_other_format() || c.is_other_private_use();
        if c == '\0' || c == '\u{FFFD}' || control {
            continue;
        }
        // llama.cpp's lowercase table is the simple (one character) mapping.
        let lower = c.to_lowercase().next().unwrap_or(c);
        if c.is_punctuation() || (c < '\u{7F}' && c.is_symbol()) || is_chinese(c) {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            if let Some(w) = words.last_mut() {
                w.push(lower);
            }
            words.push(String::new());
        } else if let Some(w) = words.last_mut() {
            w.push(lower);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// The first character of `c`'s canonical decomposition (`c` itself for ASCII and for what
/// does not decompose).
fn base(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let mut nfd = tokenizers::NormalizedString::from(c.to_string().as_str());
    nfd.nfd();
    nfd.get().chars().next().unwrap_or(c)
}

/// The CJK ideograph blocks BERT splits one by one (llama.cpp's `is_chinese_char`).
fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_and_punctuation_stands_alone() {
        assert_eq!(words("Hello, World!"), ["hello", ",", "world", "!"]);
        assert_eq!(words("  a\tb\n"), ["a", "b"]);
        assert_eq!(
            words("x+y=\u{4E2D}\u{6587}"),
            ["x", "+", "y", "=", "\u{4E2D}", "\u{6587}"]
        );
        // A composed letter loses its accent; a combining mark written apart stays.
        assert_eq!(words("Caf\u{E9} \u{C4}pfel"), ["cafe", "apfel"]);
        assert_eq!(words("e\u{301}"), ["e\u{301}"]);
        assert!(
            words(" \u{200B} ").is_empty(),
            "a format character alone is no word"
        );
    }
}
