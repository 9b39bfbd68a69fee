//! Constrained decoding: a JSON schema, a regex or a Lark grammar compiled (by `llguidance`)
//! into the set of tokens allowed at each step of one generation.
//!
//! [`TokenSpace`] is built once per model from its tokenizer (the bytes of every token, the ids
//! that end a turn); [`TokenSpace::compile`] turns a [`Grammar`] into a [`Constraint`], one
//! per generated sequence, which gives the allowed set before each token and takes each token
//! chosen.

mod constraint;
mod grammar;
mod token_space;

pub use constraint::Constraint;
pub use grammar::Grammar;
pub use token_space::TokenSpace;

/// A grammar `llguidance` could not compile, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);
