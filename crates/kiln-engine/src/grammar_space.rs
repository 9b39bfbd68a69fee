//! Compiling a request's grammar against the model's tokens: the token space is built once, on
//! the first grammar asked for (it takes a moment for a large vocabulary), and shared by every
//! handle.

use std::sync::{Arc, OnceLock};

use kiln_grammar::{Constraint, Grammar, TokenSpace};
use kiln_tokenizer::Tokenizer;

use crate::handle::SubmitError;

pub(crate) struct GrammarSpace {
    tokenizer: Tokenizer,
    space: OnceLock<Result<TokenSpace, String>>,
}

impl GrammarSpace {
    pub fn new(tokenizer: Tokenizer) -> Arc<GrammarSpace> {
        Arc::new(GrammarSpace {
            tokenizer,
            space: OnceLock::new(),
        })
    }

    /// A constraint for one sequence; blocks while compiling (callers on an async runtime
    /// should run it on a blocking thread). The error names what is wrong with the grammar.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, SubmitError> {
        let space = self.space.get_or_init(|| {
            let vocab = self.tokenizer.vocab_size();
            TokenSpace::new(&self.tokenizer, vocab).map_err(|e| format!("{e:#}"))
        });
        let space = space.as_ref().map_err(|e| {
            SubmitError::Invalid(format!(
                "constrained output is unavailable for this model: {e}"
            ))
        })?;
        space
            .compile(grammar)
            .map_err(|e| SubmitError::Invalid(format!("the grammar does not compile: {e}")))
    }
}
