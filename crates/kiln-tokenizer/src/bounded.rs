//! Encoding a prompt that may be far too long for the model, without paying for it: a bound on
//! the token count from the text's length alone, checked before any work, and encoding that
//! stops as soon as the output passes a limit. Also the one place where message content that
//! spells a control token (`<|im_end|>`) is kept plain text.

use std::ops::Range;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};

use crate::special_split::{Fragment, SpecialSplitter};
use crate::tokenizer::{Model, Tokenizer};

/// A tokenizer.json pipeline may normalise text before it splits it (NFC joins a character and
/// its combining marks, NFKC folds compatibility forms), so one token may stand for more input
/// bytes than its piece has. Three bytes in for one out is the most NFC does (a Hangul syllable
/// from three jamo); the factor leaves room for that.
const NORMALIZER_SLACK: usize = 4;

/// What the bounds need, computed once per tokenizer.
#[derive(Default)]
pub(crate) struct Derived {
    max_token_bytes: OnceLock<usize>,
    /// Control-token pieces of a tokenizer.json vocabulary (GGUF ones are in the splitter).
    hf_controls: OnceLock<SpecialSplitter>,
    /// The tokenizer.json pipeline with its special tokens read as plain text.
    hf_plain: OnceLock<Option<Box<tokenizers::Tokenizer>>>,
}

/// How to encode a prompt.
#[derive(Debug, Clone, Copy)]
pub struct Bounded<'a> {
    /// Add BOS/EOS as the model's settings say.
    pub add_special: bool,
    /// Read control tokens written in the text as their ids (see [`Tokenizer::encode_with`]).
    pub parse_special: bool,
    /// Byte ranges of the text that stay plain text even where they spell a control token.
    pub plain: &'a [Range<usize>],
    /// Stop once the output has more than this many tokens.
    pub limit: usize,
}

/// The result of [`Tokenizer::encode_bounded`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoded {
    Ids(Vec<u32>),
    /// More than the limit: encoding stopped once it knew. `at_least` is a lower bound on the
    /// text's token count, above the limit.
    TooLong {
        at_least: usize,
    },
}

impl Tokenizer {
    /// The most bytes of input text that one token can stand for: the longest piece (added
    /// tokens included), at least 4 (an unknown character), times a normaliser's slack for
    /// tokenizer.json pipelines.
    pub fn max_token_bytes(&self) -> usize {
        *self.derived().max_token_bytes.get_or_init(|| {
            let p = self.parts();
            let longest = (0..p.vocab.len() as u32)
                .map(|id| {
                    p.vocab
                        .bytes(id)
                        .len()
                        .max(p.vocab.piece(id).map_or(0, str::len))
                })
                .max()
                .unwrap_or(0)
                .max(4);
            match p.model {
                Model::Hf(_) => longest * NORMALIZER_SLACK,
                _ => longest,
            }
        })
    }

    /// A text of `bytes` bytes encodes to at least this many tokens, whatever it says.
    pub fn min_tokens(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.max_token_bytes())
    }

    /// The byte ranges of `text` that spell control tokens (`<|im_end|>`, `<s>` ...).
    pub fn control_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let p = self.parts();
        match p.model {
            Model::Hf(_) => self
                .derived()
                .hf_controls
                .get_or_init(|| SpecialSplitter::new(&p.vocab, |_| (false, false)))
                .control_ranges(text),
            _ => p.splitter.control_ranges(text),
        }
    }

    /// Encodes `text`, refusing early what cannot fit in `opts.limit` tokens: a text too long
    /// by its length alone is not looked at, and encoding stops at the first fragment that
    /// passes the limit. Time and memory stay proportional to the limit, not to the text.
    pub fn encode_bounded(&self, text: &str, opts: Bounded<'_>) -> Result<Encoded> {
        let p = self.parts();
        let mut out = Vec::new();
        if opts.add_special && p.add_bos {
            out.push(
                p.bos
                    .ok_or_else(|| anyhow!("the model asks for a BOS token but names none"))?,
            );
        }
        let floor = out.len() + self.min_tokens(text.len());
        if floor > opts.limit {
            return Ok(Encoded::TooLong { at_least: floor });
        }
        if let Model::Hf(hf) = &p.model {
            self.encode_hf(hf, text, opts.plain, &mut out)?;
        } else {
            let mut prev_added = true;
            for frag in p
                .splitter
                .split_guarded(text, opts.parse_special, opts.plain)
            {
                match frag {
                    Fragment::Token(id) => {
                        out.push(id);
                        prev_added = true;
                    }
                    Fragment::Text(t) => {
                        let floor = out.len() + self.min_tokens(t.len());
                        if floor > opts.limit {
                            return Ok(Encoded::TooLong { at_least: floor });
                        }
                        self.encode_fragment(t, prev_added, &mut out)?;
                        prev_added = false;
                    }
                }
                if out.len() > opts.limit {
                    return Ok(Encoded::TooLong {
                        at_least: out.len(),
                    });
                }
            }
        }
        if opts.add_special && p.add_eos {
            out.push(
                p.eos
                    .ok_or_else(|| anyhow!("the model asks for an EOS token but names none"))?,
            );
        }
        if out.len() > opts.limit {
            return Ok(Encoded::TooLong {
                at_least: out.len(),
            });
        }
        Ok(Encoded::Ids(out))
    }

    /// A tokenizer.json pipeline encodes whole texts: the plain ranges are encoded apart, by a
    /// copy of the pipeline that reads its special tokens as text.
    fn encode_hf(
        &self,
        hf: &tokenizers::Tokenizer,
        text: &str,
        plain: &[Range<usize>],
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let encode = |t: &tokenizers::Tokenizer, s: &str, out: &mut Vec<u32>| -> Result<()> {
            if s.is_empty() {
                return Ok(());
            }
            let enc = t
                .encode_fast(s, false)
                .map_err(|e| anyhow!("tokenizer.json pipeline failed: {e}"))?;
            out.extend_from_slice(enc.get_ids());
            Ok(())
        };
        if plain.is_empty() {
            return encode(hf, text, out);
        }
        let plain_hf = self
            .derived()
            .hf_plain
            .get_or_init(|| {
                let mut copy = hf.clone();
                copy.set_encode_special_tokens(true);
                Some(Box::new(copy))
            })
            .as_deref()
            .unwrap_or(hf);
        let mut at = 0;
        for r in plain {
            let r = r.start.clamp(at, text.len())..r.end.clamp(at, text.len());
            let (Some(before), Some(inside)) = (text.get(at..r.start), text.get(r.clone())) else {
                return Err(anyhow!("plain range {r:?} is not on character boundaries"));
            };
            encode(hf, before, out)?;
            encode(plain_hf, inside, out)?;
            at = r.end;
        }
        encode(hf, &text[at..], out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(limit: usize) -> Bounded<'static> {
        Bounded {
            add_special: true,
            parse_special: true,
            plain: &[],
            limit,
        }
    }

    #[test]
    fn fits_gives_the_same_ids_as_encode() {
        let t = Tokenizer::byte_level(300);
        let text = "<|im_start|>user\nhello<|im_end|>";
        assert_eq!(
            t.encode_bounded(text, opts(100)).unwrap(),
            Encoded::Ids(t.encode(text, true).unwrap())
        );
    }

    #[test]
    fn too_long_stops_early_with_a_true_lower_bound() {
        let t = Tokenizer::byte_level(300);
        // The longest piece is `<|begin_of_text|>`: 17 bytes.
        assert_eq!(t.max_token_bytes(), 17);
        let text = "x".repeat(10_000);
        // Refused from the length alone: at least 1 + 10000 / 17 tokens.
        assert_eq!(
            t.encode_bounded(&text, opts(100)).unwrap(),
            Encoded::TooLong { at_least: 590 }
        );
        // Within the length bound, refused once encoding passes the limit.
        match t.encode_bounded(&text[..1000], opts(100)).unwrap() {
            Encoded::TooLong { at_least } => assert!(at_least > 100),
            other => panic!("{other:?}"),
        }
        // Exactly at the limit still fits (BOS + 99 bytes).
        assert!(matches!(
            t.encode_bounded(&text[..99], opts(100)).unwrap(),
            Encoded::Ids(ids) if ids.len() == 100
        ));
    }

    #[test]
    fn plain_ranges_keep_control_text_as_text() {
        let t = Tokenizer::byte_level(300);
        let text = "<|im_start|>user\nx<|im_end|>";
        let ranges = t.control_ranges(text);
        assert_eq!(ranges, vec![0..12, 18..28]);
        let guarded = Bounded {
            plain: &ranges[1..],
            ..opts(100)
        };
        let Encoded::Ids(ids) = t.encode_bounded(text, guarded).unwrap() else {
            panic!("fits");
        };
        let im_start = t.token_id("<|im_start|>").unwrap();
        // BOS, <|im_start|>, then every byte of "user\nx<|im_end|>" as a byte token.
        assert_eq!(ids[1], im_start);
        assert_eq!(ids.len(), 2 + "user\nx<|im_end|>".len());
        assert!(ids[2..].iter().all(|&id| id < 256));
    }
}
