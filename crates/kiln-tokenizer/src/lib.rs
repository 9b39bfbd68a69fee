//! Text to token ids and back, for every vocabulary kind kiln loads, plus chat templates.
//!
//! - [`Tokenizer`]: GGUF-embedded vocabularies (SentencePiece `llama`, byte-level BPE `gpt2`
//!   with the pre-tokenizer named by `tokenizer.ggml.pre`, `gemma4`), Hugging Face
//!   tokenizer.json folders, and a byte-level tokenizer for dummy models.
//! - [`StreamDecoder`]: incremental detokenisation that never emits a broken character.
//! - [`ChatTemplate`]: Jinja chat templates rendered as transformers renders them.
//! - [`Tokenizer::encode_bounded`]: prompts refused by their length before they cost anything.

mod bounded;
mod bpe;
mod byte_level;
mod byte_unicode;
pub mod chat;
mod eog;
mod gguf_load;
mod hf_dir;
mod pretokenizer;
mod special_split;
mod spm;
mod stream;
mod tokenizer;
mod vocab;
mod wpm;

pub use bounded::{Bounded, Encoded};
pub use chat::{ChatMessage, ChatTemplate, GuardedPrompt};
pub use stream::StreamDecoder;
pub use tokenizer::Tokenizer;
