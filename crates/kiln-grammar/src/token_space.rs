//! A model's tokens as llguidance sees them: each id's bytes in a trie (control tokens marked
//! so that no text can spell them), the ids that end a turn, and the parser factory that
//! compiles grammars against them. Built once per model: the trie and the factory's token
//! slices take a moment for a large vocabulary.

use std::sync::Arc;

use anyhow::Result;
use kiln_tokenizer::Tokenizer;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

use crate::{CompileError, Constraint, Grammar};

/// The tokenizer and the trie, as llguidance's tokenizer environment.
struct Env {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Plain text to ids (control-token text stays text); bytes that are not UTF-8 fall back
    /// to the trie's greedy split.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => self
                .tokenizer
                .encode_with(text, false, false)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// Everything needed to compile grammars for one model.
pub struct TokenSpace {
    factory: Arc<ParserFactory>,
    vocab: usize,
}

impl TokenSpace {
    /// `vocab`: the width of the model's logits rows (at least the tokenizer's vocabulary;
    /// ids past it have no bytes and are never allowed).
    pub fn new(tokenizer: &Tokenizer, vocab: usize) -> Result<TokenSpace> {
        let vocab = vocab.max(tokenizer.vocab_size());
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .map(|id| {
                if id as usize >= tokenizer.vocab_size() {
                    Vec::new()
                } else if tokenizer.is_special(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend(tokenizer.token_bytes(id));
                    w
                } else {
                    tokenizer.token_bytes(id)
                }
            })
            .collect();
        let eos = tokenizer.eos_ids();
        let first = eos.first().copied().unwrap_or(0);
        let trie = TokTrie::from(&TokRxInfo::new(vocab as u32, first), &words).with_eos_tokens(eos);
        let env: TokEnv = Arc::new(Env {
            trie,
            tokenizer: tokenizer.clone(),
        });
        let mut factory = ParserFactory::new_simple(&env)?;
        factory.quiet();
        Ok(TokenSpace {
            factory: Arc::new(factory),
            vocab,
        })
    }

    /// Width of the allowed sets this space's constraints give.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// A fresh constraint for one sequence; the error says what in the grammar is wrong.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, CompileError> {
        let parser = self
            .factory
            .create_parser(grammar.top_level())
            .map_err(|e| CompileError(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(CompileError(e));
        }
        Ok(Constraint::new(matcher, self.vocab))
    }
}
