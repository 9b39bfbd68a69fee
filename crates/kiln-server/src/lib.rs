//! kiln-server: the OpenAI-compatible HTTP API over the engine.
//!
//! `POST /v1/chat/completions`, `POST /v1/completions` (whole or streamed as server-sent
//! events), `GET /v1/models`, `POST /tokenize`, `POST /detokenize`, `GET /health` and
//! `GET /metrics` (Prometheus text). Each request becomes one engine request per choice,
//! admitted together; a dropped connection drops its engine streams, which cancels them. Bad
//! input gets an OpenAI-style JSON error with a 4xx status. Request bodies become prompts on a
//! bounded pool of threads, never on the async workers; connections have header and body
//! deadlines and a cap (docs/SERVER.md).

pub mod app;
pub mod auth;
pub mod connections;
pub mod error;
pub mod generation;
pub mod json_body;
pub mod metrics;
pub mod prompt;
pub mod prompt_pool;
pub mod protocol;
pub mod routes;
pub mod serve;
pub mod sse;
pub mod state;
pub mod tools;

#[cfg(test)]
#[path = "../../../tests/test_data.rs"]
mod test_data;

pub use app::router;
pub use connections::ConnectionLimits;
pub use error::ApiError;
pub use protocol::common::SamplingDefaults;
pub use serve::{
    bind, serve, serve_blocking, serve_on, serve_on_signals, shutdown_signal, ServeOptions,
};
pub use state::{Access, AppState, Limits, PromptRules};
