//! The tokenizer of models with dummy weights: one token per byte, ChatML specials, padding.
//! Random weights produce arbitrary ids, so every id must decode to something harmless.

use crate::chat::ChatTemplate;
use crate::eog::end_of_generation_ids;
use crate::special_split::SpecialSplitter;
use crate::tokenizer::{Model, Parts, Tokenizer};
use crate::vocab::{TokenAttr, Vocab};

pub const BOS: &str = "<|begin_of_text|>";
pub const EOS: &str = "<|end_of_text|>";
const SPECIALS: [&str; 4] = [BOS, EOS, "<|im_start|>", "<|im_end|>"];

/// ChatML, as Qwen and many fine-tunes use it.
const CHATML: &str =
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

pub fn build(vocab_size: usize) -> Tokenizer {
    let n = vocab_size.max(256 + SPECIALS.len());
    let mut pieces: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
    let mut attrs = vec![TokenAttr::Byte; 256];
    for s in SPECIALS {
        pieces.push(s.to_string());
        attrs.push(TokenAttr::Control);
    }
    for i in pieces.len()..n {
        pieces.push(format!("<|pad_{i}|>"));
        attrs.push(TokenAttr::Unused);
    }
    let vocab = Vocab::new(pieces, attrs, |p, a| match a {
        TokenAttr::Byte => crate::vocab::parse_byte_piece(p)
            .map(|b| vec![b])
            .unwrap_or_default(),
        TokenAttr::Control => p.as_bytes().to_vec(),
        _ => Vec::new(),
    });
    let splitter = SpecialSplitter::new(&vocab, |_| (false, false));
    let (bos, eos) = (vocab.id(BOS), vocab.id(EOS));
    let eos_ids = end_of_generation_ids(&vocab, &eos.into_iter().collect::<Vec<_>>());
    let chat_template = ChatTemplate::new(CHATML, BOS, EOS).ok();
    Tokenizer::from_parts(Parts {
        kind: "byte-level".to_string(),
        vocab,
        model: Model::Bytes,
        splitter,
        bos,
        eos,
        add_bos: true,
        add_eos: false,
        eos_ids,
        strip_leading_space: false,
        chat_template,
    })
}
