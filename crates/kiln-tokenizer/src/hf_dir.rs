//! Builds a [`Tokenizer`] from a Hugging Face folder. tokenizer.json runs through the
//! `tokenizers` crate; the settings transformers keeps beside it come from
//! tokenizer_config.json (chat template, BOS/EOS, add_bos_token/add_eos_token),
//! chat_template.jinja and generation_config.json (extra EOS ids).

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use crate::byte_unicode::piece_to_bytes;
use crate::chat::ChatTemplate;
use crate::eog::end_of_generation_ids;
use crate::special_split::SpecialSplitter;
use crate::tokenizer::{Model, Parts, Tokenizer};
use crate::vocab::{parse_byte_piece, TokenAttr, Vocab};

/// What the tokenizer.json decoder does to each piece, reduced to the steps LLM tokenizers use.
#[derive(Debug, Default, Clone, PartialEq)]
struct PieceDecoding {
    byte_level: bool,
    byte_fallback: bool,
    replacements: Vec<(String, String)>,
    /// Metaspace with a prepended space, or Strip(" ", 1, 0) after Fuse.
    strip_leading_space: bool,
}

impl PieceDecoding {
    fn from_decoder(dec: &Value) -> PieceDecoding {
        let mut d = PieceDecoding::default();
        d.scan(dec);
        d
    }

    fn scan(&mut self, dec: &Value) {
        match dec.get("type").and_then(Value::as_str) {
            Some("ByteLevel") => self.byte_level = true,
            Some("ByteFallback") => self.byte_fallback = true,
            Some("Metaspace") => {
                let rep = dec
                    .get("replacement")
                    .and_then(Value::as_str)
                    .unwrap_or("\u{2581}");
                self.replacements.push((rep.to_string(), " ".to_string()));
                let scheme = dec.get("prepend_scheme").and_then(Value::as_str);
                let legacy = dec.get("add_prefix_space").and_then(Value::as_bool);
                self.strip_leading_space = match scheme {
                    Some(s) => s != "never",
                    None => legacy.unwrap_or(true),
                };
            }
            Some("Replace") => {
                let from = dec.pointer("/pattern/String").and_then(Value::as_str);
                let to = dec.get("content").and_then(Value::as_str);
                if let (Some(from), Some(to)) = (from, to) {
                    self.replacements.push((from.to_string(), to.to_string()));
                }
            }
            Some("Strip") => {
                let space = dec.get("content").and_then(Value::as_str) == Some(" ");
                if space && dec.get("start").and_then(Value::as_u64).unwrap_or(0) >= 1 {
                    self.strip_leading_space = true;
                }
            }
            Some("Sequence") => {
                for d in dec
                    .get("decoders")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    self.scan(d);
                }
            }
            _ => {}
        }
    }

    fn bytes(&self, piece: &str) -> Vec<u8> {
        if self.byte_fallback {
            if let Some(b) = parse_byte_piece(piece) {
                return vec![b];
            }
        }
        if self.byte_level {
            return piece_to_bytes(piece).unwrap_or_else(|| piece.as_bytes().to_vec());
        }
        let mut s = piece.to_string();
        for (from, to) in &self.replacements {
            s = s.replace(from.as_str(), to);
        }
        s.into_bytes()
    }
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    Ok(Some(v))
}

/// A special-token entry: a plain string or an AddedToken object `{"content": ...}`.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// `chat_template` is a string or a list of `{name, template}`; the one named "default" wins.
fn config_template(cfg: &Value) -> Option<String> {
    match cfg.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(n))
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
            };
            named("default")
                .or_else(|| {
                    list.first()
                        .and_then(|t| t.get("template"))
                        .and_then(Value::as_str)
                })
                .map(str::to_string)
        }
        _ => None,
    }
}

fn id_list(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|x| x as u32)
            .collect(),
        _ => Vec::new(),
    }
}

pub fn load(dir: &Path) -> Result<Tokenizer> {
    load_inner(dir).with_context(|| format!("{}: cannot build the tokenizer", dir.display()))
}

fn load_inner(dir: &Path) -> Result<Tokenizer> {
    let tj_path = dir.join("tokenizer.json");
    let tj = read_json(&tj_path)?.ok_or_else(|| anyhow!("{} is missing", tj_path.display()))?;
    let mut hf = tokenizers::Tokenizer::from_file(&tj_path)
        .map_err(|e| anyhow!("{} cannot be loaded: {e}", tj_path.display()))?;
    hf.with_truncation(None).map_err(|e| anyhow!("{e}"))?;
    hf.with_padding(None);
    let cfg = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gen = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);

    // The vocabulary, with added tokens.
    let full = hf.get_vocab(true);
    let n = full.values().map(|&id| id as usize + 1).max().unwrap_or(0);
    let mut pieces = vec![String::new(); n];
    for (p, id) in full {
        pieces[id as usize] = p;
    }
    let added = hf.get_added_tokens_decoder();
    let decoding = PieceDecoding::from_decoder(tj.get("decoder").unwrap_or(&Value::Null));
    let unk = tj
        .pointer("/model/unk_token")
        .and_then(Value::as_str)
        .map(str::to_string);
    let attrs: Vec<TokenAttr> = pieces
        .iter()
        .enumerate()
        .map(|(id, p)| match added.get(&(id as u32)) {
            Some(t) if t.special => TokenAttr::Control,
            Some(_) => TokenAttr::UserDefined,
            None if p.is_empty() => TokenAttr::Unused,
            None if unk.as_deref() == Some(p.as_str()) => TokenAttr::Unknown,
            None if decoding.byte_fallback && parse_byte_piece(p).is_some() => TokenAttr::Byte,
            None => TokenAttr::Normal,
        })
        .collect();
    let vocab = Vocab::new(pieces, attrs, |p, a| match a {
        TokenAttr::Unused => Vec::new(),
        _ => decoding.bytes(p),
    });

    // BOS/EOS: tokenizer_config.json first, else what the post-processor adds.
    let (plain, with_special) = (
        hf.encode_fast("a", false)
            .map_err(|e| anyhow!("{e}"))?
            .get_ids()
            .to_vec(),
        hf.encode_fast("a", true)
            .map_err(|e| anyhow!("{e}"))?
            .get_ids()
            .to_vec(),
    );
    let (prefix, suffix) = match with_special
        .windows(plain.len().max(1))
        .position(|w| w == plain.as_slice())
    {
        Some(at) if !plain.is_empty() => (&with_special[..at], &with_special[at + plain.len()..]),
        _ => (&[][..], &[][..]),
    };
    let named_id = |key: &str| token_text(cfg.get(key)).and_then(|t| vocab.id(&t));
    let bos = named_id("bos_token")
        .or_else(|| prefix.first().copied())
        .or_else(|| id_list(gen.get("bos_token_id")).first().copied());
    let gen_eos = id_list(gen.get("eos_token_id"));
    let eos = named_id("eos_token")
        .or_else(|| suffix.last().copied())
        .or_else(|| gen_eos.first().copied());
    let add_bos = cfg
        .get("add_bos_token")
        .and_then(Value::as_bool)
        .unwrap_or(!prefix.is_empty())
        && bos.is_some();
    let add_eos = cfg
        .get("add_eos_token")
        .and_then(Value::as_bool)
        .unwrap_or(!suffix.is_empty())
        && eos.is_some();
    let named: Vec<u32> = eos.into_iter().chain(gen_eos).collect();
    let eos_ids = end_of_generation_ids(&vocab, &named);

    let template_src = match config_template(&cfg) {
        Some(t) => Some(t),
        None => {
            let jinja = dir.join("chat_template.jinja");
            let json = read_json(&dir.join("chat_template.json"))?;
            if jinja.is_file() {
                Some(
                    std::fs::read_to_string(&jinja)
                        .with_context(|| format!("cannot read {}", jinja.display()))?,
                )
            } else {
                json.as_ref().and_then(config_template)
            }
        }
    };
    let chat_template = match template_src {
        Some(src) => {
            let piece = |id: Option<u32>| id.and_then(|i| vocab.piece(i)).unwrap_or("").to_string();
            match ChatTemplate::new(&src, &piece(bos), &piece(eos)) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(
                        "{}: the chat template does not compile, chat is off: {e:#}",
                        dir.display()
                    );
                    None
                }
            }
        }
        None => None,
    };

    Ok(Tokenizer::from_parts(Parts {
        kind: "huggingface".to_string(),
        splitter: SpecialSplitter::default(),
        vocab,
        model: Model::Hf(Box::new(hf)),
        bos,
        eos,
        add_bos,
        add_eos,
        eos_ids,
        strip_leading_space: decoding.strip_leading_space,
        chat_template,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn llama2_decoder_chain_is_understood() {
        let dec = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]});
        let d = PieceDecoding::from_decoder(&dec);
        assert!(d.byte_fallback && d.strip_leading_space && !d.byte_level);
        assert_eq!(d.bytes("▁Hello▁you"), b" Hello you");
        assert_eq!(d.bytes("<0x0A>"), b"\n");
    }

    #[test]
    fn byte_level_and_metaspace_decoders() {
        let d = PieceDecoding::from_decoder(&json!({"type": "ByteLevel"}));
        assert_eq!(d.bytes("Ġhi"), b" hi");
        assert!(!d.strip_leading_space);
        let d = PieceDecoding::from_decoder(
            &json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}),
        );
        assert_eq!(d.bytes("▁a"), b" a");
        assert!(d.strip_leading_space);
    }

    #[test]
    fn config_fields_in_both_spellings() {
        let cfg = json!({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]});
        assert_eq!(token_text(cfg.get("bos_token")).as_deref(), Some("<s>"));
        assert_eq!(token_text(cfg.get("eos_token")).as_deref(), Some("</s>"));
        assert_eq!(config_template(&cfg).as_deref(), Some("D"));
        assert_eq!(id_list(Some(&json!([1, 2]))), vec![1, 2]);
        assert_eq!(id_list(Some(&json!(7))), vec![7]);
    }
}
