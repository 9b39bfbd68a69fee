//! One sequence's place in its grammar: which tokens may come next, and the tokens taken so far.

use kiln_step::TokenSet;
use llguidance::Matcher;

/// A compiled grammar following one sequence.
pub struct Constraint {
    /// Boxed: a matcher is large, and requests carrying one move between threads.
    matcher: Box<Matcher>,
    vocab: usize,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("vocab", &self.vocab)
            .field("finished", &self.matcher.is_stopped())
            .finish()
    }
}

/// A copy follows its own sequence from where the original stands.
impl Clone for Constraint {
    fn clone(&self) -> Constraint {
        Constraint {
            matcher: Box::new(self.matcher.deep_clone()),
            vocab: self.vocab,
        }
    }
}

impl Constraint {
    pub(crate) fn new(matcher: Matcher, vocab: usize) -> Constraint {
        Constraint {
            matcher: Box::new(matcher),
            vocab,
        }
    }

    /// The tokens that may come next: once the grammar is complete, only the ids that end a
    /// turn. An error when the grammar allows nothing (or has failed).
    pub fn allowed(&mut self) -> Result<TokenSet, String> {
        let vob = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        let set = TokenSet::from_words(vob.as_slice().to_vec(), self.vocab);
        if set.is_empty() {
            return Err("the grammar allows no next token".into());
        }
        Ok(set)
    }

    /// Takes the chosen token.
    pub fn commit(&mut self, token: u32) -> Result<(), String> {
        self.matcher
            .consume_token(token)
            .map_err(|e| format!("the grammar rejected token {token}: {e}"))
    }

    /// How many of `tokens`, from the first, the grammar would take (nothing is taken).
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> usize {
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }

    /// The allowed set before each of `rows` tokens, where the first follows what was taken
    /// and each later one follows `tokens[..j]` too (a draft's verify rows); the grammar is
    /// left where it was. Rows past a token the grammar refuses get an error.
    pub fn allowed_along(&mut self, tokens: &[u32], rows: usize) -> Vec<Result<TokenSet, String>> {
        let mut out = Vec::with_capacity(rows);
        let mut taken = 0;
        for j in 0..rows {
            if j > 0 {
                let ok = tokens
                    .get(j - 1)
                    .is_some_and(|&t| self.matcher.try_consume_tokens(&[t]).is_ok_and(|n| n == 1));
                if !ok {
                    out.resize(rows, Err("the draft left the grammar".into()));
                    break;
                }
                taken += 1;
            }
            out.push(self.allowed());
        }
        if taken > 0 {
            if let Err(e) = self.matcher.rollback(taken) {
                // The state cannot be trusted: every later call reports this.
                let msg = format!("the grammar could not step back over a draft: {e}");
                out.iter_mut().for_each(|r| *r = Err(msg.clone()));
            }
        }
        out
    }

    /// The grammar is complete and can take nothing more: the sequence should end here.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Why the grammar stopped working, if it did.
    pub fn error(&self) -> Option<String> {
        self.matcher.get_error()
    }
}
