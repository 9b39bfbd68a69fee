//! The HTTP handlers, one file per endpoint family.

pub mod chat;
pub mod completions;
pub mod meta;
pub mod tokenize;
