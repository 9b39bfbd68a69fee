//! Server-sent events: engine events in, `data: {chunk}\n\n` ... `data: [DONE]\n\n` out. The
//! endpoint-specific chunk shapes come from a [`ChunkWriter`]; this file owns the order
//! (opening chunks, tokens, finishes, usage, DONE), errors inside a stream, and the metrics.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, StreamExt};
use kiln_engine::{FinishReason, GenEvent, TokenEvent};
use serde_json::Value;

use crate::generation::{cancelled_error, finish_reason, ChoiceClock};
use crate::metrics::Metrics;
use crate::protocol::common::{cached_prompt_tokens, Usage};
use crate::ApiError;

/// The chunk shapes of one endpoint.
pub trait ChunkWriter: Send + 'static {
    /// A chunk that opens choice `index` before any token (chat's assistant role, an echoed prompt).
    fn open(&mut self, index: usize) -> Option<Value>;
    /// A chunk for one token; None when there is nothing to send (text held back, no logprobs).
    fn token(&mut self, index: usize, ev: &TokenEvent) -> Option<Value>;
    /// The last chunk of a choice: any held-back text, then the finish reason.
    fn finish(&mut self, index: usize, trailing_text: &str, reason: &'static str) -> Vec<Value>;
    /// The extra chunk with usage that `stream_options.include_usage` asks for.
    fn usage(&mut self, usage: Usage) -> Value;
}

/// What the driver needs besides the events.
pub struct StreamSetup {
    pub choices: usize,
    /// Choices per prompt.
    pub n: usize,
    pub prompt_tokens: usize,
    pub include_usage: bool,
    pub arrived: Instant,
    pub metrics: Arc<Metrics>,
}

impl StreamSetup {
    /// The setup of a stream that serves `plan`'s choices.
    pub fn for_plan(
        plan: &crate::protocol::plan::GenerationPlan,
        arrived: Instant,
        metrics: &Arc<Metrics>,
    ) -> StreamSetup {
        StreamSetup {
            choices: plan.num_choices(),
            n: plan.n,
            prompt_tokens: plan.prompt_tokens(),
            include_usage: plan.include_usage,
            arrived,
            metrics: metrics.clone(),
        }
    }
}

struct Driver<W> {
    writer: W,
    events: BoxStream<'static, (usize, GenEvent)>,
    setup: StreamSetup,
    clock: ChoiceClock,
    completion_tokens: usize,
    /// Each finished choice's cached prompt tokens, by choice index.
    cached: Vec<(usize, usize)>,
    pending: VecDeque<Event>,
    done: bool,
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

impl<W: ChunkWriter> Driver<W> {
    fn handle(&mut self, index: usize, ev: GenEvent) {
        match ev {
            GenEvent::Token(t) => {
                self.clock.on_token(index);
                if let Some(chunk) = self.writer.token(index, &t) {
                    self.pending.push_back(data(&chunk));
                }
            }
            GenEvent::Done(f) => {
                self.clock.on_done(index, &f);
                self.completion_tokens += f.completion_tokens;
                self.cached.push((index, f.cached_tokens));
                if f.reason == FinishReason::Cancelled {
                    self.fail(cancelled_error());
                } else {
                    for chunk in
                        self.writer
                            .finish(index, &f.trailing_text, finish_reason(f.reason))
                    {
                        self.pending.push_back(data(&chunk));
                    }
                }
            }
            GenEvent::Error(msg) => {
                tracing::error!("generation failed mid-stream: {msg}");
                self.fail(ApiError::internal(format!("Generation failed: {msg}")));
            }
        }
    }

    /// An error ends the whole stream: the error object, then DONE (as OpenAI-style servers do).
    fn fail(&mut self, e: ApiError) {
        self.pending.push_back(data(&e.body()));
        self.pending.push_back(Event::default().data("[DONE]"));
        self.done = true;
    }

    fn end(&mut self) {
        self.clock.on_request_end();
        if self.setup.include_usage {
            let cached = cached_prompt_tokens(self.cached.drain(..), self.setup.n);
            let usage = Usage::new(self.setup.prompt_tokens, self.completion_tokens, cached);
            let chunk = self.writer.usage(usage);
            self.pending.push_back(data(&chunk));
        }
        self.pending.push_back(Event::default().data("[DONE]"));
        self.done = true;
    }
}

/// The SSE response for a stream of engine events. Dropping the body (client gone) drops the
/// engine streams, which cancels their sequences.
pub fn sse_response<W: ChunkWriter>(
    mut writer: W,
    events: BoxStream<'static, (usize, GenEvent)>,
    setup: StreamSetup,
) -> Response {
    let pending: VecDeque<Event> = (0..setup.choices)
        .filter_map(|i| writer.open(i))
        .map(|v| data(&v))
        .collect();
    let clock = ChoiceClock::new(setup.arrived, setup.choices, setup.metrics.clone());
    let driver = Driver {
        writer,
        events,
        setup,
        clock,
        completion_tokens: 0,
        cached: Vec::new(),
        pending,
        done: false,
    };
    let body = stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(ev) = d.pending.pop_front() {
                return Some((Ok::<_, Infallible>(ev), d));
            }
            if d.done {
                return None;
            }
            match d.events.next().await {
                Some((i, ev)) => d.handle(i, ev),
                None => d.end(),
            }
        }
    });
    // Comments while a request waits in the queue: a closed connection is noticed and freed.
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}
