//! The engine's public face: start it on a backend, submit requests from any thread or task,
//! read each request's events from its stream, watch stats, shut it down.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc as events;

use kiln_step::{Backend, StepCapacity};

use crate::draft::{DraftConfig, Drafter};
use crate::engine::Engine;
use crate::grammar_space::GrammarSpace;
use crate::request::{GenEvent, GenerateRequest};
use crate::shared::{Command, Shared, Submission};
pub use crate::shared::{EngineConfig, EngineStats};

/// Why a request was refused at submission; nothing was queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("too many requests in flight (limit {limit}); retry later")]
    QueueFull { limit: usize },
    /// More sequences at once than the engine ever holds in flight: retrying cannot help.
    #[error("the request needs {requested} sequences at once, but the engine holds at most {limit} in flight (--max-num-seqs plus --max-queue)")]
    NeverFits { requested: usize, limit: usize },
    #[error("{}", too_long_message(*.prompt_tokens, *.max_tokens, *.max_context, *.limited_by_kv_cache))]
    PromptTooLong {
        prompt_tokens: usize,
        /// The request's max_tokens (0: none given).
        max_tokens: usize,
        max_context: usize,
        /// The context limit is the KV cache's size, smaller than the configured context.
        limited_by_kv_cache: bool,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the engine is shutting down")]
    ShuttingDown,
}

fn too_long_message(prompt: usize, max_tokens: usize, context: usize, by_kv: bool) -> String {
    let what = if by_kv {
        "the KV cache holds"
    } else {
        "the context is"
    };
    if max_tokens == 0 || prompt >= context {
        format!("the prompt has {prompt} tokens but {what} {context} tokens, leaving no room to generate")
    } else {
        format!(
            "the prompt has {prompt} tokens and max_tokens is {max_tokens}, {} in all, but {what} {context} tokens",
            prompt + max_tokens
        )
    }
}

/// A cheap, clonable handle to a running engine.
#[derive(Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    max_context: usize,
    kv_capacity: usize,
    max_in_flight: usize,
    vocab_size: usize,
    grammars: Arc<GrammarSpace>,
}

/// Starts the engine loop on its own OS thread.
pub fn start(
    backend: Box<dyn Backend>,
    tokenizer: kiln_tokenizer::Tokenizer,
    cfg: EngineConfig,
) -> EngineHandle {
    start_with_drafter(backend, tokenizer, cfg, None)
}

/// [`start`], with speculative decoding when `drafting` names a drafter (`KILN_SPEC=0` turns
/// it off): each decoding sequence's next tokens are drafted and verified in one step.
pub fn start_with_drafter(
    backend: Box<dyn Backend>,
    tokenizer: kiln_tokenizer::Tokenizer,
    cfg: EngineConfig,
    drafting: Option<(Box<dyn Drafter>, DraftConfig)>,
) -> EngineHandle {
    let cfg = fit_to_backend(cfg, backend.step_capacity());
    let geometry = backend.kv_geometry();
    // With a KV ring one sequence holds its ring and the blocks outside it.
    let kv_blocks = match backend.kv_ring() {
        None => geometry.num_blocks,
        Some(r) => r.blocks.min(r.capable) + geometry.num_blocks.saturating_sub(r.capable),
    };
    let kv_capacity = kv_blocks * geometry.block_size;
    let max_context = cfg.max_context.min(kv_capacity);
    let vocab_size = tokenizer.vocab_size();
    let grammars = GrammarSpace::new(tokenizer.clone());
    let shared = Arc::new(Shared::default());
    let (tx, rx) = mpsc::channel();
    let engine = Engine::new(
        backend,
        tokenizer,
        cfg,
        max_context,
        rx,
        shared.clone(),
        drafting,
    );
    let thread = std::thread::Builder::new()
        .name("kiln-engine".into())
        .spawn(move || engine.run())
        .expect("the OS refused to start the engine thread");
    EngineHandle {
        commands: tx,
        shared,
        thread: Arc::new(Mutex::new(Some(thread))),
        max_context,
        kv_capacity,
        max_in_flight: cfg.max_num_seqs.max(1).saturating_add(cfg.max_queue),
        vocab_size,
        grammars,
    }
}

/// Lowers the engine's per-step limits to what the backend's step buffers hold, so that no
/// step is ever scheduled that the backend must refuse.
pub(crate) fn fit_to_backend(mut cfg: EngineConfig, cap: Option<StepCapacity>) -> EngineConfig {
    let Some(cap) = cap else { return cfg };
    lower(
        &mut cfg.max_num_seqs,
        cap.max_seqs,
        "max_num_seqs",
        "sequences",
    );
    lower(
        &mut cfg.max_batched_tokens,
        cap.max_tokens,
        "max_batched_tokens",
        "tokens",
    );
    cfg.prefill_chunk = cfg.prefill_chunk.min(cfg.max_batched_tokens);
    cfg
}

/// `*value = min(*value, cap)`, saying so when it lowers it.
fn lower(value: &mut usize, cap: usize, name: &str, what: &str) {
    if *value > cap {
        tracing::warn!(
            "{name} {value} lowered to {cap}: the backend's step buffers hold no more {what}"
        );
        *value = cap;
    }
}

impl EngineHandle {
    /// Validates and queues a request. Its events arrive on the returned stream; dropping the
    /// stream cancels the request.
    pub fn submit(&self, req: GenerateRequest) -> Result<RequestStream, SubmitError> {
        let mut streams = self.submit_all(vec![req])?;
        streams.pop().ok_or(SubmitError::ShuttingDown)
    }

    /// Validates every request, then queues all of them or none: the slots they need are
    /// reserved together, so a request of many choices that cannot be admitted takes nothing
    /// from anyone else, not even for a moment. More requests than the engine ever holds is
    /// [`SubmitError::NeverFits`].
    pub fn submit_all(
        &self,
        reqs: Vec<GenerateRequest>,
    ) -> Result<Vec<RequestStream>, SubmitError> {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return Err(SubmitError::ShuttingDown);
        }
        for req in &reqs {
            self.validate(req)?;
        }
        let n = reqs.len();
        if n > self.max_in_flight {
            return Err(SubmitError::NeverFits {
                requested: n,
                limit: self.max_in_flight,
            });
        }
        let reserved =
            self.shared
                .in_flight
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                    (cur + n <= self.max_in_flight).then_some(cur + n)
                });
        if reserved.is_err() {
            return Err(SubmitError::QueueFull {
                limit: self.max_in_flight,
            });
        }
        let mut streams = Vec::with_capacity(n);
        let mut unsent = n;
        for req in reqs {
            let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = events::unbounded_channel();
            let prompt_tokens = req.prompt.len();
            let submission = Submission {
                id,
                req,
                events: tx,
                submitted: Instant::now(),
            };
            if self
                .commands
                .send(Command::Submit(Box::new(submission)))
                .is_err()
            {
                // The engine is gone: what was not sent is given back here; the streams
                // already sent are dropped, which the engine would have cancelled.
                self.shared.in_flight.fetch_sub(unsent, Ordering::SeqCst);
                return Err(SubmitError::ShuttingDown);
            }
            unsent -= 1;
            streams.push(RequestStream {
                id,
                prompt_tokens,
                events: rx,
            });
        }
        Ok(streams)
    }

    /// Most sequences the engine holds at once, running and waiting.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    fn validate(&self, req: &GenerateRequest) -> Result<(), SubmitError> {
        if req.prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        if let Some(&t) = req.prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return Err(SubmitError::Invalid(format!(
                "prompt token {t} is outside the vocabulary of {} tokens",
                self.vocab_size
            )));
        }
        req.sampling.validate().map_err(SubmitError::Invalid)?;
        if let Some(&(t, _)) = req
            .sampling
            .logit_bias
            .last()
            .filter(|b| b.0 as usize >= self.vocab_size)
        {
            return Err(SubmitError::Invalid(format!(
                "logit_bias names token {t}, outside the vocabulary of {} tokens",
                self.vocab_size
            )));
        }
        if let Some(n) = req.logprobs {
            if n > self.vocab_size {
                return Err(SubmitError::Invalid(format!(
                    "{n} top log-probabilities asked for, the vocabulary has {}",
                    self.vocab_size
                )));
            }
        }
        let needed = req.prompt.len().saturating_add(req.max_tokens.max(1));
        if needed > self.max_context {
            return Err(SubmitError::PromptTooLong {
                prompt_tokens: req.prompt.len(),
                max_tokens: req.max_tokens,
                max_context: self.max_context,
                limited_by_kv_cache: self.max_context == self.kv_capacity,
            });
        }
        Ok(())
    }

    /// Compiles `grammar` (a JSON schema, a regex ...) for [`GenerateRequest::constraint`].
    /// Blocks while compiling: on an async runtime, call it from a blocking thread. A grammar
    /// that does not compile is `Invalid`, with llguidance's reason.
    pub fn compile(
        &self,
        grammar: &kiln_grammar::Grammar,
    ) -> Result<kiln_grammar::Constraint, SubmitError> {
        self.grammars.compile(grammar)
    }

    /// Where the engine's steps spent their time, per phase, since the start.
    pub fn step_timings(&self) -> crate::step_timing::StepTimingSnapshot {
        self.shared
            .timings
            .snapshot(self.shared.overlap.load(Ordering::Relaxed))
    }

    pub fn stats(&self) -> EngineStats {
        self.shared
            .stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Longest sequence a request may reach: the configured context or the KV pool, whichever
    /// is smaller.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// Tokens the backend's KV pool holds in all.
    pub fn kv_capacity(&self) -> usize {
        self.kv_capacity
    }

    /// Stops admitting requests, cancels those in flight (each gets a final `Done` with
    /// `Cancelled`) and waits for the loop to end, at most one step. Safe to call repeatedly.
    pub fn shutdown(&self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        let _ = self.commands.send(Command::Shutdown);
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            if thread.join().is_err() {
                tracing::error!("the engine thread panicked");
            }
        }
    }
}

/// The events of one request, in order: tokens, then `Done` or `Error`. Dropping it cancels
/// the request; the engine frees its KV blocks at the next step.
#[derive(Debug)]
pub struct RequestStream {
    id: u64,
    prompt_tokens: usize,
    events: events::UnboundedReceiver<GenEvent>,
}

impl RequestStream {
    /// The next event; `None` once the request is over.
    pub async fn next(&mut self) -> Option<GenEvent> {
        self.events.recv().await
    }

    /// The next event, blocking the thread. Not for use inside an async runtime.
    pub fn blocking_next(&mut self) -> Option<GenEvent> {
        self.events.blocking_recv()
    }

    /// The engine's id for this request (for logs).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }
}
