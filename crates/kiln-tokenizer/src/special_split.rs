//! Cuts the input text around added tokens (control and user-defined pieces such as
//! `<|im_start|>`) before the model's own algorithm sees it, as llama.cpp does: longest pieces
//! first, each one split out of every remaining text fragment.

use std::ops::Range;

use crate::vocab::{TokenAttr, Vocab};

/// A piece of the input: text still to be tokenized, or an added token already recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

#[derive(Debug, Clone)]
struct Entry {
    piece: String,
    id: u32,
    control: bool,
    /// Swallow whitespace to the left / right of the token (Phi-3's added tokens do).
    lstrip: bool,
    rstrip: bool,
}

#[derive(Debug, Clone, Default)]
pub struct SpecialSplitter {
    entries: Vec<Entry>,
}

impl SpecialSplitter {
    /// `strip(id)` gives the (lstrip, rstrip) flags of an added token.
    pub fn new(vocab: &Vocab, strip: impl Fn(u32) -> (bool, bool)) -> SpecialSplitter {
        let mut entries: Vec<Entry> = vocab
            .added_ids()
            .filter_map(|id| {
                let piece = vocab.piece(id)?;
                if piece.is_empty() {
                    return None;
                }
                let (lstrip, rstrip) = strip(id);
                let control = vocab.attr(id) != Some(TokenAttr::UserDefined);
                Some(Entry {
                    piece: piece.to_string(),
                    id,
                    control,
                    lstrip,
                    rstrip,
                })
            })
            .collect();
        entries.sort_by(|a, b| b.piece.len().cmp(&a.piece.len()).then(a.id.cmp(&b.id)));
        SpecialSplitter { entries }
    }

    /// Splits `text`. Control and unknown tokens are recognised only when `parse_control`;
    /// user-defined tokens always are.
    pub fn split<'a>(&self, text: &'a str, parse_control: bool) -> Vec<Fragment<'a>> {
        self.split_guarded(text, parse_control, &[])
    }

    /// [`SpecialSplitter::split`], except that a control token overlapping one of the `plain`
    /// byte ranges of `text` stays text (message content that spells `<|im_end|>`).
    pub fn split_guarded<'a>(
        &self,
        text: &'a str,
        parse_control: bool,
        plain: &[Range<usize>],
    ) -> Vec<Fragment<'a>> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(text));
        for e in &self.entries {
            if e.control && !parse_control {
                continue;
            }
            if !text.contains(e.piece.as_str()) {
                continue;
            }
            let guard = if e.control { plain } else { &[] };
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(t) => split_one(text, t, e, guard, &mut next),
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// The byte ranges of `text` that spell control tokens, longest piece first, not
    /// overlapping.
    pub fn control_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut found: Vec<Range<usize>> = Vec::new();
        for e in self.entries.iter().filter(|e| e.control) {
            for (at, _) in text.match_indices(e.piece.as_str()) {
                let r = at..at + e.piece.len();
                if !found.iter().any(|f| f.start < r.end && r.start < f.end) {
                    found.push(r);
                }
            }
        }
        found.sort_by_key(|r| r.start);
        found
    }
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Splits fragment `frag` (a slice of `text`) at every occurrence of `e` that overlaps no
/// `guard` range.
fn split_one<'a>(
    text: &'a str,
    frag: &'a str,
    e: &Entry,
    guard: &[Range<usize>],
    out: &mut Vec<Fragment<'a>>,
) {
    let offset = frag.as_ptr() as usize - text.as_ptr() as usize;
    let mut rest = frag;
    let mut from = 0;
    while let Some(found) = rest[from..].find(e.piece.as_str()) {
        let pos = from + found;
        let at = offset + (frag.len() - rest.len()) + pos;
        let span = at..at + e.piece.len();
        if guard
            .iter()
            .any(|g| g.start < span.end && span.start < g.end)
        {
            // Inside plain text: skip this occurrence, keep searching after its first char.
            from = pos + rest[pos..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let mut left = &rest[..pos];
        if e.lstrip {
            left = left.trim_end_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
        }
        if !left.is_empty() {
            out.push(Fragment::Text(left));
        }
        out.push(Fragment::Token(e.id));
        rest = &rest[pos + e.piece.len()..];
        if e.rstrip {
            rest = rest.trim_start_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
        }
        from = 0;
    }
    if !rest.is_empty() {
        out.push(Fragment::Text(rest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocab {
        let pieces = ["a", "<s>", "<|im_start|>", "<|im_end|>", "<x>", "<|im"];
        let attrs = [
            TokenAttr::Normal,
            TokenAttr::Control,
            TokenAttr::Control,
            TokenAttr::Control,
            TokenAttr::UserDefined,
            TokenAttr::UserDefined,
        ];
        Vocab::new(
            pieces.iter().map(|s| s.to_string()).collect(),
            attrs.to_vec(),
            |p, _| p.as_bytes().to_vec(),
        )
    }

    #[test]
    fn longest_piece_wins_and_text_between_is_kept() {
        let v = vocab();
        let s = SpecialSplitter::new(&v, |_| (false, false));
        let f = s.split("<|im_start|>user\nhi<|im_end|><x>", true);
        assert_eq!(
            f,
            vec![
                Fragment::Token(2),
                Fragment::Text("user\nhi"),
                Fragment::Token(3),
                Fragment::Token(4)
            ]
        );
    }

    #[test]
    fn control_tokens_stay_text_unless_parsed() {
        let v = vocab();
        let s = SpecialSplitter::new(&v, |_| (false, false));
        // The user-defined "<|im" still matches inside the unparsed control piece.
        assert_eq!(
            s.split("<s>b<|im_end|>", false),
            vec![
                Fragment::Text("<s>b"),
                Fragment::Token(5),
                Fragment::Text("_end|>")
            ]
        );
        assert!(s.split("", true).is_empty());
    }

    #[test]
    fn strip_flags_eat_neighbouring_whitespace() {
        let v = vocab();
        let s = SpecialSplitter::new(&v, |id| (id == 3, id == 3));
        assert_eq!(
            s.split("a \n<|im_end|>\n b", true),
            vec![Fragment::Text("a"), Fragment::Token(3), Fragment::Text("b")]
        );
    }

    #[test]
    fn guarded_control_text_stays_text_and_merges_with_its_neighbours() {
        let v = vocab();
        let s = SpecialSplitter::new(&v, |_| (false, false));
        let text = "<|im_start|>user\nhi<|im_end|>x<|im_end|>";
        // The first <|im_end|> (bytes 19..29) is message content; the second is the template's.
        let guard = [std::ops::Range { start: 19, end: 29 }];
        assert_eq!(
            s.split_guarded(text, true, &guard),
            vec![
                Fragment::Token(2),
                Fragment::Text("user\nhi"),
                Fragment::Token(5),
                Fragment::Text("_end|>x"),
                Fragment::Token(3)
            ]
        );
        assert_eq!(s.control_ranges(text), vec![0..12, 19..29, 30..40]);
    }
}
