//! GPT-2's reversible byte <-> printable character table. Byte-level BPE vocabularies store
//! every token as a string of these characters, so a raw byte such as a space or a half of a
//! UTF-8 sequence has a visible, mergeable form (`Ġ` for 0x20).

use std::collections::HashMap;
use std::sync::OnceLock;

/// The character that stands for each byte: printable bytes stand for themselves, the others
/// take the code points from 256 up, in byte order.
fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut to_char = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        to_char[b as usize] = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or('\u{FFFD}')
        };
    }
    to_char
}

fn to_byte() -> &'static HashMap<char, u8> {
    static TABLE: OnceLock<HashMap<char, u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        byte_chars()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect()
    })
}

/// Raw bytes of a byte-level token piece, or None when a character is outside the table
/// (an added token written in plain text, for instance).
pub fn piece_to_bytes(piece: &str) -> Option<Vec<u8>> {
    let t = to_byte();
    piece.chars().map(|c| t.get(&c).copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_bijection_with_gpt2_landmarks() {
        let chars = byte_chars();
        assert_eq!(
            (
                chars[b' ' as usize],
                chars[b'\n' as usize],
                chars[b'a' as usize]
            ),
            ('Ġ', 'Ċ', 'a')
        );
        let all: Vec<u8> = (0..=255).collect();
        let spelled: String = all.iter().map(|&b| chars[b as usize]).collect();
        assert_eq!(piece_to_bytes(&spelled).unwrap(), all);
        assert_eq!(piece_to_bytes("a\u{4e00}"), None);
    }
}
