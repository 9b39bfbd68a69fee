//! Builds a [`Tokenizer`] from a GGUF file's `tokenizer.ggml.*` metadata. Defaults (BOS/EOS
//! ids, add_bos, the leading space) and per-model adjustments follow llama.cpp's vocabulary
//! loader, so that a GGUF tokenizes the same in kiln as in llama.cpp.

use anyhow::{anyhow, bail, Context, Result};
use kiln_formats::GgufFile;

use crate::bpe::GgufBpe;
use crate::byte_unicode::piece_to_bytes;
use crate::chat::ChatTemplate;
use crate::eog::end_of_generation_ids;
use crate::pretokenizer;
use crate::special_split::SpecialSplitter;
use crate::spm::Spm;
use crate::tokenizer::{Model, Parts, Tokenizer};
use crate::vocab::{parse_byte_piece, TokenAttr, Vocab};
use crate::wpm::Wpm;

/// How a kind of vocabulary spells the text of a normal token.
#[derive(Clone, Copy)]
enum Spelling {
    /// `▁` stands for a space (SentencePiece, Gemma 4).
    Metaspace,
    /// GPT-2's byte-to-character map.
    ByteLevel,
}

fn piece_bytes(spelling: Spelling) -> impl Fn(&str, TokenAttr) -> Vec<u8> {
    move |piece, attr| match attr {
        TokenAttr::Normal => match spelling {
            Spelling::Metaspace => piece.replace('\u{2581}', " ").into_bytes(),
            Spelling::ByteLevel => {
                piece_to_bytes(piece).unwrap_or_else(|| piece.as_bytes().to_vec())
            }
        },
        TokenAttr::Byte => parse_byte_piece(piece).map(|b| vec![b]).unwrap_or_default(),
        TokenAttr::Unused => Vec::new(),
        TokenAttr::Control | TokenAttr::UserDefined | TokenAttr::Unknown => {
            piece.as_bytes().to_vec()
        }
    }
}

/// A token id from metadata; out-of-range ids fall back to `default`, as llama.cpp does.
fn token_id(g: &GgufFile, key: &str, n: usize, default: Option<u32>) -> Result<Option<u32>> {
    Ok(match g.get_u64(key)? {
        Some(id) if (id as usize) < n => Some(id as u32),
        _ => default.filter(|&d| (d as usize) < n),
    })
}

pub fn load(g: &GgufFile) -> Result<Tokenizer> {
    let path = g.path().display().to_string();
    load_inner(g).with_context(|| format!("{path}: cannot build the tokenizer"))
}

fn load_inner(g: &GgufFile) -> Result<Tokenizer> {
    let model_name = g.get_str("tokenizer.ggml.model")?.ok_or_else(|| {
        anyhow!("metadata 'tokenizer.ggml.model' is missing (the file has no vocabulary)")
    })?;
    let tokens = g
        .get_str_array("tokenizer.ggml.tokens")?
        .ok_or_else(|| anyhow!("metadata 'tokenizer.ggml.tokens' is missing"))?;
    let n = tokens.len();
    if n == 0 {
        bail!("'tokenizer.ggml.tokens' is empty");
    }
    let pieces: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.to_string()
            }
        })
        .collect();
    let attrs: Vec<TokenAttr> = match g.get_i64_array("tokenizer.ggml.token_type")? {
        Some(t) if t.len() >= n => t[..n].iter().map(|&t| TokenAttr::from_gguf(t)).collect(),
        Some(t) => bail!(
            "'tokenizer.ggml.token_type' has {} entries for {n} tokens",
            t.len()
        ),
        None => vec![TokenAttr::Normal; n],
    };
    let scores = match g.get_f32_array("tokenizer.ggml.scores")? {
        Some(s) if s.len() >= n => Some(s),
        Some(s) => bail!(
            "'tokenizer.ggml.scores' has {} entries for {n} tokens",
            s.len()
        ),
        None => None,
    };
    let merges = g.get_str_array("tokenizer.ggml.merges")?;
    let pre_name = g.get_str("tokenizer.ggml.pre")?.unwrap_or("default");

    // Per kind: spelling, default ids and flags.
    let (spelling, default_bos, default_eos, default_unk, mut add_bos, mut add_space_prefix);
    let pre = match model_name {
        "llama" => {
            (spelling, default_bos, default_eos, default_unk) = (Spelling::Metaspace, Some(1), Some(2), Some(0));
            (add_bos, add_space_prefix) = (true, true);
            None
        }
        "gpt2" => {
            let pre = pretokenizer::by_name(pre_name).ok_or_else(|| {
                anyhow!("pre-tokenizer '{pre_name}' (tokenizer.ggml.pre) is not supported by kiln")
            })?;
            (spelling, default_bos, default_eos, default_unk) = (Spelling::ByteLevel, Some(11), Some(11), None);
            add_bos = matches!(pre.family, "llama-bpe" | "tekken");
            add_space_prefix = false;
            Some(pre)
        }
        "gemma4" => {
            (spelling, default_bos, default_eos, default_unk) = (Spelling::Metaspace, None, None, None);
            (add_bos, add_space_prefix) = (true, false);
            None
        }
        "bert" => {
            // [CLS] text [SEP], as llama.cpp frames a WordPiece input.
            (spelling, default_bos, default_eos, default_unk) = (Spelling::Metaspace, Some(101), Some(102), Some(100));
            (add_bos, add_space_prefix) = (true, false);
            None
        }
        other => bail!(
            "tokenizer model '{other}' is not supported (kiln reads 'llama' (SentencePiece), 'gpt2' (byte-level BPE), \
             'gemma4' and 'bert' (WordPiece))"
        ),
    };
    add_space_prefix = g
        .get_bool("tokenizer.ggml.add_space_prefix")?
        .unwrap_or(add_space_prefix);
    if let Some(b) = g.get_bool("tokenizer.ggml.add_bos_token")? {
        add_bos = b;
    }
    if model_name == "gemma4" {
        add_bos = true; // Gemma 4 needs BOS even where the file says otherwise (llama.cpp does this too).
    }
    let wpm = model_name == "bert";
    let add_eos = g.get_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(wpm);

    // WordPiece names its frame [CLS] and [SEP] (llama.cpp spells the key "seperator").
    let (bos_key, eos_key) = match wpm {
        true => (
            "tokenizer.ggml.cls_token_id",
            "tokenizer.ggml.seperator_token_id",
        ),
        false => ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"),
    };
    let bos = token_id(g, bos_key, n, default_bos)?;
    let eos = token_id(g, eos_key, n, default_eos)?;
    let eot = token_id(g, "tokenizer.ggml.eot_token_id", n, None)?;
    let eom = token_id(g, "tokenizer.ggml.eom_token_id", n, None)?;
    let unk = token_id(g, "tokenizer.ggml.unknown_token_id", n, default_unk)?;

    let decode = piece_bytes(spelling);
    let mut vocab = Vocab::new(pieces, attrs, &decode);
    // gpt-oss renders these channel markers as text.
    for p in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = vocab.id(p) {
            vocab.set_attr(id, TokenAttr::UserDefined, &decode);
        }
    }
    let named: Vec<u32> = [eos, eot, eom].into_iter().flatten().collect();
    let eos_ids = end_of_generation_ids(&vocab, &named);
    // Turn markers are control tokens even where the converter typed them otherwise.
    for &id in &eos_ids {
        vocab.set_attr(id, TokenAttr::Control, &decode);
    }
    if vocab.id("<|tool_response>").is_some() {
        if let Some(s) = vocab.id("</s>") {
            vocab.set_attr(s, TokenAttr::Normal, &decode);
        }
    }
    if let (Some(_), Some(_), Some(end)) = (
        vocab.id("<|return|>"),
        vocab.id("<|call|>"),
        vocab.id("<|end|>"),
    ) {
        vocab.set_attr(end, TokenAttr::UserDefined, &decode);
    }

    let phi3 = g
        .get_str("general.name")?
        .map(str::to_lowercase)
        .is_some_and(|n| n.contains("phi-3") || n.contains("phi3"));
    let splitter = SpecialSplitter::new(&vocab, |id| {
        if !phi3 {
            return (false, false);
        }
        // Phi-3's added tokens swallow the whitespace after them, except these three.
        let keep = matches!(vocab.piece(id), Some("<unk>" | "<s>" | "<|endoftext|>"));
        (false, !keep)
    });

    let (model, kind) = match (model_name, pre) {
        ("llama", _) => {
            let scores = scores.ok_or_else(|| {
                anyhow!("'tokenizer.ggml.scores' is missing (SentencePiece needs it)")
            })?;
            (
                Model::Spm {
                    spm: Spm::new(scores, unk),
                    add_space_prefix,
                },
                "gguf:llama".to_string(),
            )
        }
        ("bert", _) => (
            Model::Wpm(Wpm::new(&vocab, unk)),
            "gguf:bert (WordPiece)".to_string(),
        ),
        ("gpt2", Some(pre)) => {
            let merges = merges
                .ok_or_else(|| anyhow!("'tokenizer.ggml.merges' is missing (BPE needs it)"))?;
            (
                Model::Bpe(Box::new(GgufBpe::byte_level(&vocab, &merges, &pre)?)),
                format!("gguf:gpt2/{}", pre.family),
            )
        }
        _ => {
            let merges = merges
                .ok_or_else(|| anyhow!("'tokenizer.ggml.merges' is missing (BPE needs it)"))?;
            (
                Model::Bpe(Box::new(GgufBpe::spm_style(&vocab, &merges)?)),
                "gguf:gemma4".to_string(),
            )
        }
    };

    let chat_template = match g.get_str("tokenizer.chat_template")? {
        Some(src) => {
            let piece = |id: Option<u32>| id.and_then(|i| vocab.piece(i)).unwrap_or("").to_string();
            match ChatTemplate::new(src, &piece(bos), &piece(eos)) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(
                        "{}: the chat template does not compile, chat is off: {e:#}",
                        g.path().display()
                    );
                    None
                }
            }
        }
        None => None,
    };

    Ok(Tokenizer::from_parts(Parts {
        kind,
        strip_leading_space: matches!(
            model,
            Model::Spm {
                add_space_prefix: true,
                ..
            } | Model::Wpm(_)
        ),
        vocab,
        model,
        splitter,
        bos,
        eos,
        add_bos,
        add_eos,
        eos_ids,
        chat_template,
    }))
}
