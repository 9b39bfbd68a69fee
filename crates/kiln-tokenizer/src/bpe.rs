//! BPE for GGUF vocabularies, built as a Hugging Face `tokenizers` pipeline from the file's
//! tokens and merges. Two flavours:
//! - byte-level (`tokenizer.ggml.model = gpt2`): regex word splitting, then GPT-2's byte map,
//!   then merges (Llama 3, Qwen, GPT-2, DeepSeek, Falcon, StarCoder ...);
//! - SentencePiece-style (`gemma4`): spaces written as `▁`, merges over raw UTF-8 with `<0xXX>`
//!   byte fallback, the text split only at newline runs, and a newline run that is itself a
//!   token kept whole (llama.cpp does the same for Gemma 4).
//!
//! Added tokens are cut out beforehand by [`crate::special_split`], so the pipeline here holds
//! only the model and the pre-tokenizer.

use anyhow::{anyhow, Context, Result};
use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::pretokenizer::PreTokenizer;
use crate::vocab::Vocab;

pub struct GgufBpe {
    hf: tokenizers::Tokenizer,
    spm_style: bool,
}

/// Splits a GGUF merge line "left right" at the first space after the first byte, as llama.cpp
/// does (so a left part that is itself a space survives).
fn split_merge(line: &str) -> Option<(&str, &str)> {
    // Byte search: a space byte is always a character boundary, the first byte may not end one.
    let pos = line.as_bytes().iter().skip(1).position(|&b| b == b' ')? + 1;
    Some((&line[..pos], &line[pos + 1..]))
}

/// Merges whose parts or result are missing from the vocabulary can never fire; the
/// `tokenizers` crate rejects them, so they are dropped here.
fn usable_merges(vocab: &Vocab, merges: &[&str]) -> Vec<(String, String)> {
    let mut joined = String::new();
    merges
        .iter()
        .filter_map(|m| split_merge(m))
        .filter(|(a, b)| {
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            vocab.id(a).is_some() && vocab.id(b).is_some() && vocab.id(&joined).is_some()
        })
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn bpe_model(
    vocab: &Vocab,
    merges: &[&str],
    byte_fallback: bool,
    ignore_merges: bool,
) -> Result<BPE> {
    let map: BpeVocab = vocab
        .iter_pieces()
        .map(|(id, p)| (p.to_string(), id))
        .collect();
    BPE::builder()
        .vocab_and_merges(map, usable_merges(vocab, merges))
        .byte_fallback(byte_fallback)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| anyhow!("cannot build the BPE model: {e}"))
}

impl GgufBpe {
    /// GPT-2 style byte-level BPE with the given word-splitting rules.
    pub fn byte_level(vocab: &Vocab, merges: &[&str], pre: &PreTokenizer) -> Result<GgufBpe> {
        let model = bpe_model(vocab, merges, false, pre.ignore_merges)?;
        let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
        for r in pre.regexes {
            let split = Split::new(
                SplitPattern::Regex(r.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| anyhow!("pre-tokenizer regex {r:?} does not compile: {e}"))?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());
        let mut hf = tokenizers::Tokenizer::new(model);
        hf.with_pre_tokenizer(Some(Sequence::new(steps)));
        Ok(GgufBpe {
            hf,
            spm_style: false,
        })
    }

    /// Gemma 4 style: `▁` for spaces, raw UTF-8 pieces, byte fallback.
    pub fn spm_style(vocab: &Vocab, merges: &[&str]) -> Result<GgufBpe> {
        let model = bpe_model(vocab, merges, true, false)?;
        Ok(GgufBpe {
            hf: tokenizers::Tokenizer::new(model),
            spm_style: true,
        })
    }

    /// Appends the ids of one text fragment (no added tokens inside).
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if !self.spm_style {
            return self.encode_words(text, out);
        }
        let escaped = text.replace(' ', "\u{2581}");
        for run in newline_runs(&escaped) {
            match (run.starts_with('\n'), vocab.id(run)) {
                (true, Some(id)) => out.push(id),
                _ => self.encode_words(run, out)?,
            }
        }
        Ok(())
    }

    fn encode_words(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let enc = self
            .hf
            .encode_fast(text, false)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("BPE failed on {:?}", truncate(text)))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }
}

/// Alternating runs of newlines and of everything else.
fn newline_runs(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let is_nl = first == '\n';
        let end = rest
            .find(|c: char| (c == '\n') != is_nl)
            .unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        rest = tail;
        Some(run)
    })
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_lines_split_after_the_first_byte() {
        assert_eq!(split_merge("Ġ t"), Some(("Ġ", "t")));
        assert_eq!(split_merge("  x"), Some((" ", "x")));
        assert_eq!(split_merge("ab"), None);
        assert_eq!(split_merge("▁▁ ▁"), Some(("▁▁", "▁")));
    }

    #[test]
    fn newline_runs_alternate() {
        let runs: Vec<&str> = newline_runs("a▁b\n\nc\n").collect();
        assert_eq!(runs, vec!["a▁b", "\n\n", "c", "\n"]);
        assert_eq!(newline_runs("").count(), 0);
    }
}
