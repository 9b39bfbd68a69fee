//! What changes a row's logits before it is sampled, beyond the sampler's own cuts: penalties
//! over the sequence's history, a client's `logit_bias` and a grammar's set of allowed tokens.
//! The host applies them with [`adjust_row`]; a device must produce the same adjusted row bit for
//! bit (each penalty and each bias one f32 operation as written here, `-inf` for every token the
//! set leaves out), so its picks equal the host's. Log-probabilities stay those of the raw
//! logits.

use std::sync::{Arc, OnceLock};

/// A set of token ids as bits: bit `i % 32` of word `i / 32` is token `i`. The layout a device
/// reads as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSet {
    words: Vec<u32>,
    len: usize,
}

impl TokenSet {
    /// The set over ids `0..len` holding none of them.
    pub fn empty(len: usize) -> TokenSet {
        TokenSet {
            words: vec![0; len.div_ceil(32)],
            len,
        }
    }

    /// A set over `0..len` from its words (bits at or past `len` are cleared).
    pub fn from_words(mut words: Vec<u32>, len: usize) -> TokenSet {
        words.resize(len.div_ceil(32), 0);
        if !len.is_multiple_of(32) {
            if let Some(last) = words.last_mut() {
                *last &= (1u32 << (len % 32)) - 1;
            }
        }
        TokenSet { words, len }
    }

    pub fn insert(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.words[id as usize / 32] |= 1 << (id % 32);
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        (id as usize) < self.len && self.words[id as usize / 32] & (1 << (id % 32)) != 0
    }

    /// Ids the set ranges over (the vocabulary it was made for).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn words(&self) -> &[u32] {
        &self.words
    }
}

/// Penalties over a sequence's history (Hugging Face's and vLLM's repetition penalty over the
/// prompt and the generated tokens; OpenAI's presence and frequency penalties over the generated
/// ones).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Penalty {
    /// 1.0: none. Divides a seen token's positive logit, multiplies a negative one.
    pub repetition: f32,
    /// Subtracted once from the logit of each generated token.
    pub presence: f32,
    /// Subtracted per occurrence from the logit of each generated token.
    pub frequency: f32,
    /// Every distinct token of the history, ascending, with how often it was generated (0: only
    /// in the prompt).
    pub tokens: Vec<(u32, u32)>,
}

impl Penalty {
    /// The penalties of `prompt` then `generated`.
    pub fn of_history(
        repetition: f32,
        presence: f32,
        frequency: f32,
        prompt: &[u32],
        generated: &[u32],
    ) -> Penalty {
        let mut counts = std::collections::BTreeMap::<u32, u32>::new();
        for &t in prompt {
            counts.entry(t).or_default();
        }
        for &t in generated {
            *counts.entry(t).or_default() += 1;
        }
        Penalty {
            repetition,
            presence,
            frequency,
            tokens: counts.into_iter().collect(),
        }
    }

    /// Records one more generated token.
    pub fn push_generated(&mut self, t: u32) {
        match self.tokens.binary_search_by_key(&t, |e| e.0) {
            Ok(i) => self.tokens[i].1 += 1,
            Err(i) => self.tokens.insert(i, (t, 1)),
        }
    }

    /// The penalised value of one logit, `generated` being its token's count.
    pub fn apply(&self, l: f32, generated: u32) -> f32 {
        let l = if self.repetition == 1.0 {
            l
        } else if l > 0.0 {
            l / self.repetition
        } else {
            l * self.repetition
        };
        if generated > 0 && (self.presence != 0.0 || self.frequency != 0.0) {
            l - (self.presence + self.frequency * generated as f32)
        } else {
            l
        }
    }
}

/// One row's adjustments. `bias` holds distinct ids in ascending order, each with a finite
/// value; `allowed`: None allows every token; `penalty`: None, no penalties.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowAdjust {
    pub bias: Arc<[(u32, f32)]>,
    pub allowed: Option<Arc<TokenSet>>,
    pub penalty: Option<Arc<Penalty>>,
}

impl RowAdjust {
    /// Whether the row's logits come out unchanged.
    pub fn is_identity(&self) -> bool {
        self.bias.is_empty() && self.allowed.is_none() && self.penalty.is_none()
    }
}

/// Writes `logits` adjusted by `adj` into `out`: each penalised id gets its penalty
/// ([`Penalty::apply`]), then each biased id its value added (f32), then each id outside
/// `allowed` becomes `-inf`. Ids outside the row are ignored; an allowed set narrower than the
/// row leaves the ids past it out.
pub fn adjust_row(logits: &[f32], adj: &RowAdjust, out: &mut Vec<f32>) {
    out.clear();
    out.extend_from_slice(logits);
    if let Some(p) = &adj.penalty {
        for &(id, generated) in &p.tokens {
            if let Some(l) = out.get_mut(id as usize) {
                *l = p.apply(*l, generated);
            }
        }
    }
    for &(id, b) in adj.bias.iter() {
        if let Some(l) = out.get_mut(id as usize) {
            *l += b;
        }
    }
    if let Some(set) = &adj.allowed {
        for (i, l) in out.iter_mut().enumerate() {
            if !set.contains(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// The adjustments of a step's rows, one entry per logits row (None: unchanged), which may
/// still be being computed while the step runs: grammar masks come from worker threads that
/// start before the step and finish while the device computes the logits. A backend calls
/// [`StepAdjust::wait`] only when it needs them, just before sampling.
#[derive(Debug, Default)]
pub struct StepAdjust {
    rows: OnceLock<Vec<Option<RowAdjust>>>,
}

impl StepAdjust {
    pub fn new() -> StepAdjust {
        StepAdjust::default()
    }
}

/// Two step adjustments are equal when they are the same one (what `Want`'s equality needs).
impl PartialEq for StepAdjust {
    fn eq(&self, other: &StepAdjust) -> bool {
        std::ptr::eq(self, other)
    }
}

impl StepAdjust {
    /// Already known adjustments.
    pub fn ready(rows: Vec<Option<RowAdjust>>) -> StepAdjust {
        let s = StepAdjust::new();
        s.fill(rows);
        s
    }

    /// Sets the rows; the first call wins. The producer must call it exactly once, whatever
    /// happens, or [`StepAdjust::wait`] never returns.
    pub fn fill(&self, rows: Vec<Option<RowAdjust>>) {
        let _ = self.rows.set(rows);
    }

    /// The rows, once filled.
    pub fn wait(&self) -> &[Option<RowAdjust>] {
        self.rows.wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_set_bits_follow_the_documented_layout() {
        let mut s = TokenSet::empty(70);
        for id in [0, 31, 32, 69, 70, 1000] {
            s.insert(id);
        }
        assert_eq!(s.words(), &[1 | 1 << 31, 1, 1 << 5]);
        assert!(s.contains(69) && !s.contains(70) && !s.contains(1));
        assert_eq!(s.count(), 4);
        let t = TokenSet::from_words(vec![u32::MAX; 3], 70);
        assert_eq!(t.count(), 70);
        assert!(!TokenSet::empty(5).contains(0) && TokenSet::empty(5).is_empty());
    }

    #[test]
    fn adjust_adds_bias_then_masks() {
        let logits = [1.0f32, 2.0, 3.0, 4.0];
        let mut allowed = TokenSet::empty(4);
        allowed.insert(0);
        allowed.insert(2);
        let adj = RowAdjust {
            bias: vec![(0, 0.5), (1, 10.0), (9, 1.0)].into(),
            allowed: Some(Arc::new(allowed)),
            penalty: None,
        };
        let mut out = Vec::new();
        adjust_row(&logits, &adj, &mut out);
        assert_eq!(out, [1.5, f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY]);
        adjust_row(&logits, &RowAdjust::default(), &mut out);
        assert_eq!(out, logits);
    }

    #[test]
    fn penalties_come_before_the_bias_and_the_mask() {
        let logits = [2.0f32, -2.0, 3.0, 4.0, 1.0];
        let p = Penalty::of_history(2.0, 0.5, 0.25, &[0, 1, 4], &[1, 2, 2, 9]);
        assert_eq!(p.tokens, [(0, 0), (1, 1), (2, 2), (4, 0), (9, 1)]);
        let mut allowed = TokenSet::empty(5);
        for id in [0, 1, 2] {
            allowed.insert(id);
        }
        let adj = RowAdjust {
            bias: vec![(2, 1.0)].into(),
            allowed: Some(Arc::new(allowed)),
            penalty: Some(Arc::new(p.clone())),
        };
        let mut out = Vec::new();
        adjust_row(&logits, &adj, &mut out);
        // 0: 2 / 2; 1: -2 * 2 - (0.5 + 0.25); 2: 3 / 2 - (0.5 + 0.5) + 1; 3 and 4 masked.
        assert_eq!(out, [1.0, -4.75, 1.5, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        let mut q = Penalty::of_history(2.0, 0.5, 0.25, &[0, 1, 4], &[1, 2, 2]);
        q.push_generated(9);
        assert_eq!(q, p, "pushing a token is taking it into the history");
    }

    #[test]
    fn wait_returns_what_another_thread_filled() {
        let s = StepAdjust::new();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                s.fill(vec![None, Some(RowAdjust::default())]);
            });
            assert_eq!(s.wait().len(), 2);
        });
        s.fill(Vec::new());
        assert_eq!(s.wait().len(), 2, "the first fill wins");
    }
}
