//! From a validated plan to engine streams and back: submitting one engine request per choice,
//! merging their events, timing them for the metrics, and collecting whole answers.

use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{self, BoxStream, StreamExt};
use kiln_engine::{
    EngineHandle, Finish, FinishReason, GenEvent, RequestStream, SubmitError, TokenEvent,
};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::protocol::plan::GenerationPlan;

/// OpenAI's `finish_reason`.
pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "abort",
    }
}

/// The API error for an engine refusal; `prompt_param` names where the prompts came from.
pub fn submit_error(e: SubmitError, prompt_param: &str) -> ApiError {
    match e {
        SubmitError::QueueFull { .. } => ApiError::queue_full(e.to_string()),
        SubmitError::NeverFits { requested, limit } => ApiError::invalid_param(
            "n",
            format!(
                "This request asks for {requested} generations at once (prompts times `n`), \
                 more than this server ever holds at once ({limit}). Lower `n` or send fewer \
                 prompts per request."
            ),
        )
        .with_code("too_many_choices"),
        SubmitError::ShuttingDown => ApiError::unavailable("The server is shutting down."),
        SubmitError::PromptTooLong { .. } => {
            ApiError::context_length(e.to_string()).with_param(prompt_param)
        }
        SubmitError::Invalid(msg) => ApiError::invalid(msg),
    }
}

/// Compiles the plan's grammar, if it has one. Blocks (a large schema takes milliseconds): call
/// it on the prompt pool, never on the async workers.
pub fn compile_grammar(
    engine: &EngineHandle,
    mut plan: GenerationPlan,
) -> Result<GenerationPlan, ApiError> {
    let Some(grammar) = plan.sampling.grammar.clone() else {
        return Ok(plan);
    };
    let compiled = engine.compile(&grammar);
    plan.constraint = Some(compiled.map_err(|e| submit_error(e, plan.prompt_param))?);
    Ok(plan)
}

/// The error a choice cancelled by the engine (server shutdown) reports.
pub fn cancelled_error() -> ApiError {
    ApiError::unavailable("The request was cancelled because the server is shutting down.")
}

/// Submits every choice of the plan together: the engine admits the request whole or not at
/// all, before any choice takes a slot.
pub fn submit_all(
    engine: &EngineHandle,
    plan: &GenerationPlan,
) -> Result<Vec<RequestStream>, ApiError> {
    let requests = plan.requests(engine.max_context())?;
    engine
        .submit_all(requests)
        .map_err(|e| submit_error(e, plan.prompt_param))
}

/// All choices' events as one stream of `(choice index, event)`, in arrival order. Dropping it
/// drops every [`RequestStream`], which cancels what is still running.
pub fn merge(streams: Vec<RequestStream>) -> BoxStream<'static, (usize, GenEvent)> {
    let per_choice = streams.into_iter().enumerate().map(|(i, rs)| {
        stream::unfold(
            rs,
            |mut rs| async move { rs.next().await.map(|ev| (ev, rs)) },
        )
        .map(move |ev| (i, ev))
        .boxed()
    });
    stream::select_all(per_choice).boxed()
}

/// Per-choice token timing, fed into the latency histograms. A choice that never finished
/// when the clock is dropped (its client went away, or another choice failed) is counted as
/// finished with `abort`.
pub struct ChoiceClock {
    arrived: Instant,
    last_token: Vec<Option<Instant>>,
    finished: Vec<bool>,
    metrics: Arc<Metrics>,
}

impl ChoiceClock {
    pub fn new(arrived: Instant, choices: usize, metrics: Arc<Metrics>) -> ChoiceClock {
        ChoiceClock {
            arrived,
            last_token: vec![None; choices],
            finished: vec![false; choices],
            metrics,
        }
    }

    pub fn on_token(&mut self, index: usize) {
        let now = Instant::now();
        let metrics = &self.metrics;
        match self.last_token.get_mut(index) {
            Some(slot @ None) => {
                metrics.time_to_first_token.observe(now - self.arrived);
                *slot = Some(now);
            }
            Some(Some(last)) => {
                metrics.inter_token_latency.observe(now - *last);
                *last = now;
            }
            None => {}
        }
        metrics.add_generation_tokens(1);
    }

    pub fn on_done(&mut self, index: usize, finish: &Finish) {
        if let Some(done) = self.finished.get_mut(index) {
            *done = true;
        }
        self.metrics.record_finish(finish_reason(finish.reason));
    }

    /// Call once when the whole request has finished.
    pub fn on_request_end(&self) {
        self.metrics
            .request_duration
            .observe(self.arrived.elapsed());
    }
}

impl Drop for ChoiceClock {
    fn drop(&mut self) {
        for done in &self.finished {
            if !done {
                self.metrics
                    .record_finish(finish_reason(FinishReason::Cancelled));
            }
        }
    }
}

impl ChoiceOutcome {
    /// The cached prompt tokens the usage of a request with these choices reports (`n`
    /// choices per prompt, prompt-major).
    pub fn cached_prompt_tokens(outcomes: &[ChoiceOutcome], n: usize) -> usize {
        crate::protocol::common::cached_prompt_tokens(
            outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| (i, o.finish.cached_tokens)),
            n,
        )
    }
}

/// One finished choice of a non-streaming request.
#[derive(Debug, Clone)]
pub struct ChoiceOutcome {
    pub text: String,
    /// Every token event (kept for logprobs).
    pub tokens: Vec<TokenEvent>,
    pub finish: Finish,
}

/// Runs every stream to its end. Any error or cancellation fails the whole request.
pub async fn collect_all(
    streams: Vec<RequestStream>,
    arrived: Instant,
    metrics: &Arc<Metrics>,
) -> Result<Vec<ChoiceOutcome>, ApiError> {
    let n = streams.len();
    let mut clock = ChoiceClock::new(arrived, n, metrics.clone());
    let mut texts = vec![String::new(); n];
    let mut tokens: Vec<Vec<TokenEvent>> = vec![Vec::new(); n];
    let mut finishes: Vec<Option<Finish>> = vec![None; n];
    let mut events = merge(streams);
    while let Some((i, ev)) = events.next().await {
        match ev {
            GenEvent::Token(t) => {
                clock.on_token(i);
                texts[i].push_str(&t.text);
                tokens[i].push(t);
            }
            GenEvent::Done(f) => {
                clock.on_done(i, &f);
                if f.reason == FinishReason::Cancelled {
                    return Err(cancelled_error());
                }
                texts[i].push_str(&f.trailing_text);
                finishes[i] = Some(f);
            }
            GenEvent::Error(msg) => {
                tracing::error!("generation failed: {msg}");
                return Err(ApiError::internal(format!("Generation failed: {msg}")));
            }
        }
    }
    clock.on_request_end();
    texts
        .into_iter()
        .zip(tokens)
        .zip(finishes)
        .map(|((text, tokens), finish)| match finish {
            Some(finish) => Ok(ChoiceOutcome {
                text,
                tokens,
                finish,
            }),
            None => Err(ApiError::internal(
                "The engine ended a generation without finishing it.",
            )),
        })
        .collect()
}
