//! The OpenAI wire format: request bodies as clients send them, their validation, and the
//! response and chunk shapes.

pub mod chat;
pub mod common;
pub mod completion;
pub mod logprobs;
pub mod plan;
pub mod refused;
pub mod structured;
