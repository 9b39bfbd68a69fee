//! Drafters for speculative decoding: cheap guesses of the next few tokens of a sequence, which
//! the target model then checks all at once (one step, a decode row per guess). A guess only
//! decides how many tokens a step may yield, never which: the target's own choice at every
//! position is what is kept, so a bad drafter costs speed, not output.

use crate::sequence::SeqId;

/// How far the engine drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftConfig {
    /// Most tokens one verify step checks for a greedy request (sampled ones get half: their
    /// drafts are accepted less often).
    pub max_tokens: usize,
    /// No drafting while more sequences than this decode at once: a step of that many rows is
    /// no longer bound by reading the weights, so extra rows cost as much as they save (on the
    /// 8B shape a step of 48 rows costs ~2.4x one of 8: 8 drafting sequences need 2.4 tokens
    /// a pass to break even; docs/BENCH.md).
    pub max_batch: usize,
}

impl Default for DraftConfig {
    fn default() -> Self {
        DraftConfig {
            max_tokens: 5,
            max_batch: 8,
        }
    }
}

/// `KILN_SPEC=0` turns drafting off whatever the command line says (for A/B runs).
pub fn enabled_by_env() -> bool {
    std::env::var("KILN_SPEC").map_or(true, |v| v != "0")
}

/// Proposes tokens to verify.
pub trait Drafter: Send {
    /// Up to `k` tokens likely to follow `tokens` (the sequence's prompt and output so far).
    fn propose(&mut self, seq: SeqId, tokens: &[u32], k: usize) -> Vec<u32>;

    /// `seq` is gone; a drafter with state per sequence lets go of it.
    fn forget(&mut self, _seq: SeqId) {}

    /// The drafts come from the target's backend itself (its draft model reads the target's
    /// KV cache: [`kiln_step::Backend::draft`]); the engine asks it for every decoding
    /// sequence at once and never calls `propose`.
    fn in_backend(&self) -> bool {
        false
    }
}

/// The target backend's own draft model (Gemma 4's assistant): no state here, no cache of
/// its own; each sequence drafts from the hidden state of the row that chose its last token.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackendDrafter;

impl Drafter for BackendDrafter {
    fn propose(&mut self, _seq: SeqId, _tokens: &[u32], _k: usize) -> Vec<u32> {
        Vec::new()
    }

    fn in_backend(&self) -> bool {
        true
    }
}

/// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
/// `n` tokens, for the longest `n` (up to `max_n`) that occurs. Free to run, and right whenever
/// the output repeats its context (code edits, quoting, summaries of a document).
#[derive(Debug, Clone)]
pub struct NgramDrafter {
    pub max_n: usize,
}

impl Default for NgramDrafter {
    fn default() -> Self {
        NgramDrafter { max_n: 3 }
    }
}

impl Drafter for NgramDrafter {
    fn propose(&mut self, _seq: SeqId, tokens: &[u32], k: usize) -> Vec<u32> {
        let len = tokens.len();
        if k == 0 || len < 2 {
            return Vec::new();
        }
        for n in (1..=self.max_n.min(len - 1)).rev() {
            let suffix = &tokens[len - n..];
            // The latest start i < len - n whose n tokens equal the suffix and are followed by
            // at least one token.
            let found = (0..len - n).rev().find(|&i| &tokens[i..i + n] == suffix);
            if let Some(i) = found {
                let from = i + n;
                return tokens[from..(from + k).min(len)].to_vec();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_takes_the_longest_latest_match() {
        let mut d = NgramDrafter::default();
        // "5 6 7" occurred earlier, followed by 8 9; the suffix 6 7 also after 1: longest wins.
        let t = [1, 6, 7, 2, 5, 6, 7, 8, 9, 4, 5, 6, 7];
        assert_eq!(d.propose(0, &t, 2), vec![8, 9]);
        assert_eq!(d.propose(0, &t, 9), vec![8, 9, 4, 5, 6, 7]);
        // Only a one-token match: the latest one.
        let t = [3, 1, 4, 1, 5, 9, 2, 6, 1];
        assert_eq!(d.propose(0, &t, 3), vec![5, 9, 2]);
        // Nothing repeats: no draft.
        assert!(d.propose(0, &[1, 2, 3, 4], 4).is_empty());
        assert!(d.propose(0, &[1], 4).is_empty());
        assert!(d.propose(0, &t, 0).is_empty());
    }
}
