//! [`Tokenizer`]: one type over every vocabulary kind kiln loads. Loading lives in
//! `gguf_load.rs`, `hf_dir.rs` and `byte_level.rs`; this file holds what is common: added-token
//! splitting, BOS/EOS, decoding from per-token bytes.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Result};

use crate::bounded::Derived;
use crate::bpe::GgufBpe;
use crate::chat::ChatTemplate;
use crate::special_split::{Fragment, SpecialSplitter};
use crate::spm::Spm;
use crate::vocab::Vocab;
use crate::wpm::Wpm;

/// The algorithm that turns a text fragment (no added tokens inside) into ids.
pub(crate) enum Model {
    /// SentencePiece scores; `add_space_prefix` puts a space before text that starts the input
    /// or follows an added token.
    Spm {
        spm: Spm,
        add_space_prefix: bool,
    },
    Bpe(Box<GgufBpe>),
    /// WordPiece (BERT vocabularies).
    Wpm(Wpm),
    /// A tokenizer.json pipeline; it cuts out its own added tokens.
    Hf(Box<tokenizers::Tokenizer>),
    /// Id = byte value.
    Bytes,
}

/// Everything a loader fills in.
pub(crate) struct Parts {
    pub kind: String,
    pub vocab: Vocab,
    pub model: Model,
    pub splitter: SpecialSplitter,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// Every id that ends a turn, the EOS id first.
    pub eos_ids: Vec<u32>,
    /// Decoding drops one leading space of the first piece (the encoder added it).
    pub strip_leading_space: bool,
    pub chat_template: Option<ChatTemplate>,
}

/// A tokenizer: text to ids and back. Cheap to clone; shareable across threads.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Parts>,
    derived: Arc<Derived>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.inner.kind)
            .field("vocab_size", &self.inner.vocab.len())
            .field("bos", &self.inner.bos)
            .field("eos_ids", &self.inner.eos_ids)
            .finish()
    }
}

impl Tokenizer {
    pub(crate) fn from_parts(parts: Parts) -> Tokenizer {
        Tokenizer {
            inner: Arc::new(parts),
            derived: Arc::default(),
        }
    }

    pub(crate) fn parts(&self) -> &Parts {
        &self.inner
    }

    pub(crate) fn derived(&self) -> &Derived {
        &self.derived
    }

    /// The vocabulary embedded in a GGUF file (`tokenizer.ggml.*`).
    pub fn from_gguf(g: &kiln_formats::GgufFile) -> Result<Tokenizer> {
        crate::gguf_load::load(g)
    }

    /// A Hugging Face folder: tokenizer.json, plus tokenizer_config.json (chat template, special
    /// tokens, add_bos/add_eos) and generation_config.json (extra EOS ids) when present.
    pub fn from_hf_dir(dir: &Path) -> Result<Tokenizer> {
        crate::hf_dir::load(dir)
    }

    /// 256 byte tokens, four ChatML-style specials and padding up to `vocab_size` (at least 260),
    /// with a ChatML chat template; for models with dummy weights.
    pub fn byte_level(vocab_size: usize) -> Tokenizer {
        crate::byte_level::build(vocab_size)
    }

    /// Text to ids. Added tokens written in the text (`<|im_start|>` ...) become their ids.
    /// With `add_special`, BOS and EOS are added as the model's settings say.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.encode_with(text, add_special, true)
    }

    /// Like [`Tokenizer::encode`]; with `parse_special = false` control tokens written in the text
    /// stay plain text (llama.cpp's `parse_special`). Tokenizer.json pipelines always parse them.
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let p = &*self.inner;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && p.add_bos {
            out.push(
                p.bos
                    .ok_or_else(|| anyhow!("the model asks for a BOS token but names none"))?,
            );
        }
        if let Model::Hf(hf) = &p.model {
            let enc = hf
                .encode_fast(text, false)
                .map_err(|e| anyhow!("tokenizer.json pipeline failed: {e}"))?;
            out.extend_from_slice(enc.get_ids());
        } else {
            let mut prev_added = true;
            for frag in p.splitter.split(text, parse_special) {
                match frag {
                    Fragment::Token(id) => {
                        out.push(id);
                        prev_added = true;
                    }
                    Fragment::Text(t) => {
                        self.encode_fragment(t, prev_added, &mut out)?;
                        prev_added = false;
                    }
                }
            }
        }
        if add_special && p.add_eos {
            out.push(
                p.eos
                    .ok_or_else(|| anyhow!("the model asks for an EOS token but names none"))?,
            );
        }
        Ok(out)
    }

    pub(crate) fn encode_fragment(
        &self,
        text: &str,
        prev_added: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let p = &*self.inner;
        match &p.model {
            Model::Spm {
                spm,
                add_space_prefix,
            } => {
                let mut s = String::with_capacity(text.len() + 4);
                if *add_space_prefix && prev_added {
                    s.push(' ');
                }
                s.push_str(text);
                spm.encode(&p.vocab, &s.replace(' ', "\u{2581}"), out);
                Ok(())
            }
            Model::Bpe(bpe) => bpe.encode(&p.vocab, text, out),
            Model::Wpm(wpm) => {
                wpm.encode(&p.vocab, text, out);
                Ok(())
            }
            Model::Bytes => {
                out.extend(text.bytes().map(u32::from));
                Ok(())
            }
            Model::Hf(_) => Err(anyhow!(
                "tokenizer.json pipelines encode whole texts, not fragments"
            )),
        }
    }

    /// Ids to text. Invalid UTF-8 (a sequence cut short) becomes U+FFFD; unknown ids are skipped.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        let mut first = true;
        for &id in ids {
            if let Some(piece) = self.visible_bytes(id, skip_special) {
                bytes.extend_from_slice(self.strip_first(piece, first));
                first = false;
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The bytes `id` adds to decoded text, or None when it is skipped (special, out of range).
    pub(crate) fn visible_bytes(&self, id: u32, skip_special: bool) -> Option<&[u8]> {
        let p = &*self.inner;
        if (id as usize) >= p.vocab.len() || (skip_special && p.vocab.is_special(id)) {
            return None;
        }
        Some(p.vocab.bytes(id))
    }

    /// Drops the space the encoder put before the first word (SentencePiece vocabularies).
    pub(crate) fn strip_first<'a>(&self, piece: &'a [u8], first: bool) -> &'a [u8] {
        if first && self.inner.strip_leading_space {
            piece.strip_prefix(b" ").unwrap_or(piece)
        } else {
            piece
        }
    }

    /// The raw bytes of one token's piece (a special token's text, a byte token's byte);
    /// empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.inner.vocab.bytes(id).to_vec()
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.vocab.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.inner.bos
    }

    /// Every id that ends a turn: the EOS id first, then turn markers (`<|eot_id|>`, `<|im_end|>`,
    /// `<end_of_turn>` ...).
    pub fn eos_ids(&self) -> &[u32] {
        &self.inner.eos_ids
    }

    /// Whether `encode(_, true)` puts BOS first.
    pub fn adds_bos(&self) -> bool {
        self.inner.add_bos
    }

    /// Whether `encode(_, true)` puts EOS last.
    pub fn adds_eos(&self) -> bool {
        self.inner.add_eos
    }

    /// Control and unknown tokens: the ones `decode(_, true)` drops.
    pub fn is_special(&self, id: u32) -> bool {
        self.inner.vocab.is_special(id)
    }

    /// The id of a piece exactly as the vocabulary spells it (`"<|im_end|>"`, `"Ġthe"`).
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.inner.vocab.id(piece)
    }

    /// The piece of an id exactly as the vocabulary spells it.
    pub fn token_piece(&self, id: u32) -> Option<&str> {
        self.inner.vocab.piece(id)
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.inner.chat_template.as_ref()
    }

    /// Which loader and algorithm: "gguf:llama", "gguf:gpt2/llama-bpe", "gguf:gemma4",
    /// "huggingface", "byte-level".
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }
}
