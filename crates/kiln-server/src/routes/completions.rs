//! `POST /v1/completions`: plain prompts (text or token ids, one or many), answered whole or
//! streamed.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_engine::TokenEvent;
use kiln_tokenizer::Tokenizer;
use serde_json::Value;

use crate::error::ApiError;
use crate::generation::{
    collect_all, compile_grammar, finish_reason, merge, submit_all, ChoiceOutcome,
};
use crate::json_body::{parse_strict, read_limited};
use crate::prompt::encode_prompt;
use crate::protocol::common::{choices_per_prompt, include_usage, max_tokens, top_logprobs, Usage};
use crate::protocol::completion::{Completion, CompletionChoice, CompletionRequest, PromptInput};
use crate::protocol::logprobs::CompletionLogprobs;
use crate::protocol::plan::GenerationPlan;
use crate::protocol::refused::INERT_COMPLETION_FIELDS;
use crate::sse::{sse_response, ChunkWriter, StreamSetup};
use crate::state::{response_id, unix_now, AppState};

/// The legacy API's default when `max_tokens` is absent.
const DEFAULT_MAX_TOKENS: usize = 16;

pub async fn completions(
    State(st): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let bytes = read_limited(req, st.limits.max_body_bytes, st.limits.body_timeout).await?;
    let job = st.clone();
    let (plan, echoes) = st
        .prompts
        .run(bytes.len(), move || {
            let body: CompletionRequest = parse_strict(&bytes, INERT_COMPLETION_FIELDS)?;
            let plan = compile_grammar(&job.engine, plan(&job, &body)?)?;
            let echoes: Vec<String> = if body.echo() {
                let decode = |p: &Vec<u32>| job.tokenizer.decode(p, true);
                plan.prompts.iter().map(decode).collect()
            } else {
                Vec::new()
            };
            Ok((plan, echoes))
        })
        .await?;
    let streams = submit_all(&st.engine, &plan)?;
    st.metrics.add_prompt_tokens(plan.prompt_tokens());
    let id = response_id("cmpl");
    let created = unix_now();
    // The echoed prompt of each choice (choices are prompt-major).
    let echo_of = |choice: usize| echoes.get(choice / plan.n).cloned().unwrap_or_default();
    if plan.stream {
        let writer = CompletionChunks {
            id,
            created,
            model: st.model_name.clone(),
            include_usage: plan.include_usage,
            tokenizer: st.tokenizer.clone(),
            echo: (0..plan.num_choices()).map(echo_of).collect(),
            offsets: vec![0; plan.num_choices()],
        };
        let setup = StreamSetup::for_plan(&plan, arrived, &st.metrics);
        return Ok(sse_response(writer, merge(streams), setup));
    }
    let outcomes = collect_all(streams, arrived, &st.metrics).await?;
    let completion_tokens = outcomes.iter().map(|o| o.finish.completion_tokens).sum();
    let cached = ChoiceOutcome::cached_prompt_tokens(&outcomes, plan.n);
    let choices = outcomes
        .into_iter()
        .enumerate()
        .map(|(index, o)| {
            let text = echo_of(index) + &o.text;
            let logprobs = plan.logprobs.map(|_| {
                let mut lp = CompletionLogprobs::default();
                let mut offset = 0;
                for t in &o.tokens {
                    lp.push(&st.tokenizer, t, offset);
                    offset += t.text.chars().count();
                }
                lp
            });
            CompletionChoice {
                index,
                text,
                logprobs,
                finish_reason: Some(finish_reason(o.finish.reason)),
            }
        })
        .collect();
    let response = Completion {
        id,
        object: "text_completion",
        created,
        model: st.model_name.clone(),
        choices,
        usage: Some(Some(Usage::new(
            plan.prompt_tokens(),
            completion_tokens,
            cached,
        ))),
    };
    Ok(Json(response).into_response())
}

/// Validates the request and tokenises its prompts. Runs on the prompt pool.
fn plan(st: &AppState, body: &CompletionRequest) -> Result<GenerationPlan, ApiError> {
    st.check_model(body.model.as_deref())?;
    let n = choices_per_prompt(body.n)?;
    body.check_unsupported(n)?;
    let sampling = body
        .sampling_fields()
        .with_defaults(&st.sampling_defaults)
        .validate(st.tokenizer.vocab_size())?;
    let max_tokens = max_tokens("max_tokens", body.max_tokens)?.unwrap_or(DEFAULT_MAX_TOKENS);
    let logprobs = body
        .logprobs
        .map(|k| top_logprobs("logprobs", k))
        .transpose()?;
    let include_usage = include_usage(body.stream(), body.stream_options.as_ref())?;
    let max_context = st.engine.max_context();
    // A completion prompt is the caller's whole text, template markers and all: control
    // tokens written in it are read as control tokens.
    let prompts = body
        .prompt
        .inputs(st.tokenizer.vocab_size())?
        .into_iter()
        .map(|p| match p {
            PromptInput::Text(t) => encode_prompt(&st.tokenizer, &t, "prompt", max_context, &[]),
            PromptInput::Tokens(ids) => Ok(ids),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GenerationPlan {
        constraint: None,
        prompts,
        n,
        sampling,
        max_tokens: Some(max_tokens),
        max_tokens_param: "max_tokens",
        prompt_param: "prompt",
        logprobs,
        stream: body.stream(),
        include_usage,
    })
}

/// The completions chunk shape: `text_completion` objects with a text piece per choice.
struct CompletionChunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    tokenizer: Tokenizer,
    /// Echoed prompt per choice (empty when not echoing).
    echo: Vec<String>,
    /// Characters sent so far per choice, for `text_offset`.
    offsets: Vec<usize>,
}

impl CompletionChunks {
    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> Value {
        let chunk = Completion {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        };
        serde_json::to_value(chunk).unwrap_or_default()
    }

    fn text_chunk(
        &mut self,
        index: usize,
        text: String,
        logprobs: Option<CompletionLogprobs>,
    ) -> Value {
        if let Some(o) = self.offsets.get_mut(index) {
            *o += text.chars().count();
        }
        self.chunk(
            vec![CompletionChoice {
                index,
                text,
                logprobs,
                finish_reason: None,
            }],
            None,
        )
    }
}

impl ChunkWriter for CompletionChunks {
    fn open(&mut self, index: usize) -> Option<Value> {
        let echo = self.echo.get(index).filter(|e| !e.is_empty())?.clone();
        Some(self.text_chunk(index, echo, None))
    }

    fn token(&mut self, index: usize, ev: &TokenEvent) -> Option<Value> {
        let logprobs = ev.logprob.map(|_| {
            let mut lp = CompletionLogprobs::default();
            lp.push(
                &self.tokenizer,
                ev,
                self.offsets.get(index).copied().unwrap_or(0),
            );
            lp
        });
        if ev.text.is_empty() && logprobs.is_none() {
            return None;
        }
        Some(self.text_chunk(index, ev.text.clone(), logprobs))
    }

    fn finish(&mut self, index: usize, trailing_text: &str, reason: &'static str) -> Vec<Value> {
        let choice = CompletionChoice {
            index,
            text: trailing_text.to_string(),
            logprobs: None,
            finish_reason: Some(reason),
        };
        vec![self.chunk(vec![choice], None)]
    }

    fn usage(&mut self, usage: Usage) -> Value {
        self.chunk(Vec::new(), Some(usage))
    }
}
