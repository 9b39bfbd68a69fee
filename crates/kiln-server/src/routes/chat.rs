//! `POST /v1/chat/completions`: template the conversation, generate, answer whole or streamed.

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
use crate::json_body::{parse, read_limited};
use crate::prompt::encode_prompt;
use crate::protocol::chat::{
    AssistantMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatCompletion,
    ChatCompletionRequest, Delta,
};
use crate::protocol::common::{choices_per_prompt, include_usage, max_tokens, top_logprobs, Usage};
use crate::protocol::logprobs::{ChatLogprobs, ChatTokenLogprob};
use crate::protocol::plan::GenerationPlan;
use crate::sse::{sse_response, ChunkWriter, StreamSetup};
use crate::state::{response_id, unix_now, AppState};

pub async fn chat_completions(
    State(st): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let body: ChatCompletionRequest = parse(&read_limited(req, st.limits.max_body_bytes).await?)?;
    let plan = compile_grammar(&st.engine, plan(&st, &body)?).await?;
    let streams = submit_all(&st.engine, &plan)?;
    st.metrics.add_prompt_tokens(plan.prompt_tokens());
    let id = response_id("chatcmpl");
    let created = unix_now();
    if plan.stream {
        let writer = ChatChunks {
            id,
            created,
            model: st.model_name.clone(),
            include_usage: plan.include_usage,
            tokenizer: st.tokenizer.clone(),
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
        .map(|(index, o)| ChatChoice {
            index,
            message: AssistantMessage {
                role: "assistant",
                content: o.text,
            },
            logprobs: plan.logprobs.map(|_| ChatLogprobs {
                content: o
                    .tokens
                    .iter()
                    .filter_map(|t| ChatTokenLogprob::from_event(&st.tokenizer, t))
                    .collect(),
            }),
            finish_reason: Some(finish_reason(o.finish.reason)),
        })
        .collect();
    let response = ChatCompletion {
        id,
        object: "chat.completion",
        created,
        model: st.model_name.clone(),
        choices,
        usage: Usage::new(plan.prompt_tokens(), completion_tokens, cached),
    };
    Ok(Json(response).into_response())
}

/// Validates the request and renders the conversation into prompt tokens.
fn plan(st: &AppState, body: &ChatCompletionRequest) -> Result<GenerationPlan, ApiError> {
    st.check_model(body.model.as_deref())?;
    body.check_unsupported()?;
    let sampling = body.sampling_fields().validate(st.tokenizer.vocab_size())?;
    let n = choices_per_prompt(body.n)?;
    let (limit, param) = match body.max_completion_tokens {
        Some(m) => (Some(m), "max_completion_tokens"),
        None => (body.max_tokens, "max_tokens"),
    };
    let max_tokens = max_tokens(param, limit)?;
    let logprobs = match (body.logprobs.unwrap_or(false), body.top_logprobs) {
        (true, k) => Some(top_logprobs("top_logprobs", k.unwrap_or(0))?),
        (false, None) => None,
        (false, Some(_)) => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "`top_logprobs` requires `logprobs: true`.",
            ))
        }
    };
    let include_usage = include_usage(body.stream(), body.stream_options.as_ref())?;
    let messages = body.chat_messages()?;
    let template = st.tokenizer.chat_template().ok_or_else(|| {
        ApiError::invalid(
            "This model has no chat template; use /v1/completions with a plain prompt.",
        )
    })?;
    let text = template.render(&messages, true).map_err(|e| {
        ApiError::invalid_param(
            "messages",
            format!("The chat template rejected the conversation: {e:#}"),
        )
    })?;
    let prompt = encode_prompt(&st.tokenizer, &text, "messages")?;
    Ok(GenerationPlan {
        constraint: None,
        prompts: vec![prompt],
        n,
        sampling,
        max_tokens,
        max_tokens_param: param,
        logprobs,
        stream: body.stream(),
        include_usage,
    })
}

/// Chat's chunk shapes: `chat.completion.chunk` with deltas.
struct ChatChunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    tokenizer: Tokenizer,
}

impl ChatChunks {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> Value {
        let chunk = ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        };
        serde_json::to_value(chunk).unwrap_or_default()
    }

    fn choice(
        index: usize,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        finish: Option<&'static str>,
    ) -> ChatChunkChoice {
        ChatChunkChoice {
            index,
            delta,
            logprobs,
            finish_reason: finish,
        }
    }
}

impl ChunkWriter for ChatChunks {
    fn open(&mut self, index: usize) -> Option<Value> {
        let delta = Delta {
            role: Some("assistant"),
            content: Some(String::new()),
        };
        Some(self.chunk(vec![Self::choice(index, delta, None, None)], None))
    }

    fn token(&mut self, index: usize, ev: &TokenEvent) -> Option<Value> {
        let logprobs = ChatTokenLogprob::from_event(&self.tokenizer, ev)
            .map(|lp| ChatLogprobs { content: vec![lp] });
        if ev.text.is_empty() && logprobs.is_none() {
            return None;
        }
        let delta = Delta {
            role: None,
            content: Some(ev.text.clone()),
        };
        Some(self.chunk(vec![Self::choice(index, delta, logprobs, None)], None))
    }

    fn finish(&mut self, index: usize, trailing_text: &str, reason: &'static str) -> Vec<Value> {
        let mut out = Vec::new();
        if !trailing_text.is_empty() {
            let delta = Delta {
                role: None,
                content: Some(trailing_text.to_string()),
            };
            out.push(self.chunk(vec![Self::choice(index, delta, None, None)], None));
        }
        out.push(self.chunk(
            vec![Self::choice(index, Delta::default(), None, Some(reason))],
            None,
        ));
        out
    }

    fn usage(&mut self, usage: Usage) -> Value {
        self.chunk(Vec::new(), Some(usage))
    }
}
