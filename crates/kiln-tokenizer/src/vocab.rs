//! The token table every tokenizer kind shares: each id's piece as stored in the model file, the
//! raw bytes it stands for when decoded, and its type (normal, control, byte ...).

use std::collections::HashMap;

/// What a token is, with GGUF's `tokenizer.ggml.token_type` numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenAttr {
    Normal,
    /// `<unk>`: special, never produced from text except as a last resort.
    Unknown,
    /// BOS, EOS, turn markers: special; matched in text only when specials are parsed.
    Control,
    /// Added tokens that are ordinary text (always matched whole in the input, never skipped).
    UserDefined,
    /// Reserved slots that decode to nothing.
    Unused,
    /// `<0xXX>` byte-fallback tokens.
    Byte,
}

impl TokenAttr {
    /// GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    /// Anything else is treated as unused, as llama.cpp does (it decodes to nothing).
    pub fn from_gguf(t: i64) -> TokenAttr {
        match t {
            1 => TokenAttr::Normal,
            2 => TokenAttr::Unknown,
            3 => TokenAttr::Control,
            4 => TokenAttr::UserDefined,
            6 => TokenAttr::Byte,
            _ => TokenAttr::Unused,
        }
    }

    /// Special tokens are the ones `skip_special` drops when decoding.
    pub fn is_special(self) -> bool {
        matches!(self, TokenAttr::Control | TokenAttr::Unknown)
    }
}

/// Parses a `<0xXX>` byte-fallback piece.
pub fn parse_byte_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

pub struct Vocab {
    pieces: Vec<String>,
    attrs: Vec<TokenAttr>,
    bytes: Vec<Vec<u8>>,
    index: HashMap<String, u32>,
}

impl Vocab {
    /// `decode` gives the raw bytes a piece stands for (how depends on the tokenizer kind).
    pub fn new(
        pieces: Vec<String>,
        attrs: Vec<TokenAttr>,
        decode: impl Fn(&str, TokenAttr) -> Vec<u8>,
    ) -> Vocab {
        debug_assert_eq!(pieces.len(), attrs.len());
        let bytes = pieces
            .iter()
            .zip(&attrs)
            .map(|(p, &a)| decode(p, a))
            .collect();
        // A later duplicate wins, as in llama.cpp's token_to_id map.
        let index = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i as u32))
            .collect();
        Vocab {
            pieces,
            attrs,
            bytes,
            index,
        }
    }

    /// Changes a token's type after loading; its bytes follow the new type.
    pub fn set_attr(
        &mut self,
        id: u32,
        attr: TokenAttr,
        decode: impl Fn(&str, TokenAttr) -> Vec<u8>,
    ) {
        let i = id as usize;
        if i < self.attrs.len() {
            self.attrs[i] = attr;
            self.bytes[i] = decode(&self.pieces[i], attr);
        }
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn id(&self, piece: &str) -> Option<u32> {
        self.index.get(piece).copied()
    }

    pub fn piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(String::as_str)
    }

    pub fn attr(&self, id: u32) -> Option<TokenAttr> {
        self.attrs.get(id as usize).copied()
    }

    pub fn bytes(&self, id: u32) -> &[u8] {
        self.bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.attr(id).is_some_and(TokenAttr::is_special)
    }

    /// Ids of every token matched whole in the input before the model's own algorithm runs.
    pub fn added_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.attrs.iter().enumerate().filter_map(|(i, a)| {
            matches!(
                a,
                TokenAttr::Control | TokenAttr::UserDefined | TokenAttr::Unknown
            )
            .then_some(i as u32)
        })
    }

    /// The token for one raw byte: `<0xXX>` when the vocabulary has byte fallback.
    pub fn byte_token(&self, b: u8) -> Option<u32> {
        self.id(&format!("<0x{b:02X}>"))
    }

    pub fn iter_pieces(&self) -> impl Iterator<Item = (u32, &str)> {
        self.pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u32, p.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_pieces_parse_only_in_the_exact_form() {
        assert_eq!(parse_byte_piece("<0x0A>"), Some(10));
        assert_eq!(parse_byte_piece("<0xff>"), Some(255));
        assert_eq!(parse_byte_piece("<0x0A"), None);
        assert_eq!(parse_byte_piece("<0x100>"), None);
        assert_eq!(parse_byte_piece("0x0A"), None);
    }
}
