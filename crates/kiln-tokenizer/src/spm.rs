//! SentencePiece-style merging for GGUF `llama` vocabularies (Llama 2, Mistral v0.1, Phi-3):
//! start from single characters and repeatedly join the adjacent pair whose joined piece has the
//! highest score; characters left outside the vocabulary fall back to `<0xXX>` byte tokens.
//! Same algorithm and tie-breaking as llama.cpp's `llm_tokenizer_spm`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::vocab::Vocab;

pub struct Spm {
    scores: Vec<f32>,
    unk: Option<u32>,
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Highest score first; on a tie, the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

impl Spm {
    pub fn new(scores: Vec<f32>, unk: Option<u32>) -> Spm {
        Spm { scores, unk }
    }

    /// Tokenizes text whose spaces are already written as `▁`.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        let n_chars = text.chars().count();
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (i + 1 < n_chars).then_some(i + 1),
            });
        }
        if symbols.is_empty() {
            return;
        }

        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_bigram(vocab, text, &symbols, Some(i - 1), Some(i), &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Skip pairs whose symbols changed since the pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            self.push_bigram(vocab, text, &symbols, l.prev, Some(b.left), &mut queue);
            self.push_bigram(
                vocab,
                text,
                &symbols,
                Some(b.left),
                symbols[b.left].next,
                &mut queue,
            );
        }

        let mut i = Some(0);
        while let Some(idx) = i {
            let s = symbols[idx];
            let piece = &text[s.start..s.start + s.len];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        if let Some(id) = vocab.byte_token(b).or(self.unk) {
                            out.push(id);
                        }
                    }
                }
            }
            i = s.next;
        }
    }

    fn push_bigram(
        &self,
        vocab: &Vocab,
        text: &str,
        symbols: &[Symbol],
        left: Option<usize>,
        right: Option<usize>,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (symbols[left], symbols[right]);
        let joined = &text[l.start..r.start + r.len];
        if let Some(id) = vocab.id(joined) {
            let score = self.scores.get(id as usize).copied().unwrap_or(0.0);
            queue.push(Bigram {
                left,
                right,
                score,
                len: joined.len(),
            });
        }
    }
}
