//! What every handler shares: the engine, the tokenizer, the served model's name, limits and
//! metrics.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_engine::EngineHandle;
use kiln_tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::prompt_pool::PromptPool;
use crate::protocol::common::SamplingDefaults;

/// Server-side limits (the engine enforces its own: queue length, context, KV pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Time a request body may take to arrive once its headers have.
    pub body_timeout: Duration,
    /// Threads that turn request bodies into prompts (JSON, chat template, tokenizer).
    pub prompt_threads: usize,
    /// Requests that may wait for one of those threads; more get 429.
    pub prompt_queue: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 * 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            prompt_threads: default_prompt_threads(),
            prompt_queue: 256,
        }
    }
}

/// Half the cores: the rest stay for the engine and the HTTP workers.
pub fn default_prompt_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Who may call the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Requests must carry `Authorization: Bearer KEY` (`/health` never needs it).
    pub api_key: Option<String>,
    /// `/metrics` needs the key too.
    pub metrics_need_key: bool,
}

/// How message content becomes tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptRules {
    /// Read control-token text written in chat messages (`<|im_end|>`) as the control token,
    /// as kiln did before; off by default, since it lets a user end their turn.
    pub special_tokens_in_messages: bool,
}

pub struct AppState {
    pub engine: EngineHandle,
    pub tokenizer: Tokenizer,
    pub model_name: String,
    pub limits: Limits,
    pub access: Access,
    pub rules: PromptRules,
    pub metrics: Arc<Metrics>,
    /// Where request bodies are parsed, templated and tokenised.
    pub prompts: PromptPool,
    /// Unix time the server started, reported as the model's `created`.
    pub started: u64,
    /// What requests that leave sampling fields out get (the model's generation config).
    pub sampling_defaults: SamplingDefaults,
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
            access: Access::default(),
            rules: PromptRules::default(),
            metrics: Arc::new(Metrics::default()),
            prompts: PromptPool::new(limits.prompt_threads, limits.prompt_queue),
            started: unix_now(),
            sampling_defaults: SamplingDefaults::default(),
        }
    }

    pub fn with_access(mut self, access: Access) -> AppState {
        self.access = access;
        self
    }

    pub fn with_rules(mut self, rules: PromptRules) -> AppState {
        self.rules = rules;
        self
    }

    pub fn with_sampling_defaults(mut self, defaults: SamplingDefaults) -> AppState {
        self.sampling_defaults = defaults;
        self
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
