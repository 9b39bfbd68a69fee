//! What every handler shares: the engine, the tokenizer, the served model's name, limits and
//! metrics.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use kiln_engine::EngineHandle;
use kiln_tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// Server-side limits (the engine enforces its own: queue length, context, KV pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 * 1024 * 1024,
        }
    }
}

pub struct AppState {
    pub engine: EngineHandle,
    pub tokenizer: Tokenizer,
    pub model_name: String,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    /// Unix time the server started, reported as the model's `created`.
    pub started: u64,
}

impl AppState {
    pub fn new(
        engine: EngineHandle,
        tokenizer: Tokenizer,
        model_name: String,
        limits: Limits,
    ) -> AppState {
        AppState {
            engine,
            tokenizer,
            model_name,
            limits,
            metrics: Arc::new(Metrics::default()),
            started: unix_now(),
        }
    }

    /// A request may omit `model`; if it names one, it must be the served model.
    pub fn check_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested {
            None => Ok(()),
            Some(m) if m == self.model_name => Ok(()),
            Some(m) => Err(ApiError::model_not_found(m, &self.model_name)),
        }
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A response id: unique within the process and unlikely to repeat across restarts.
pub fn response_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}-{nanos:016x}{n:08x}")
}
