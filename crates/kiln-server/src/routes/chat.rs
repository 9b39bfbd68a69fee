//! `POST /v1/chat/completions`: template the conversation, generate, answer whole or streamed.

use std::collections::HashMap;
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
use crate::protocol::chat::{
    AssistantMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatCompletion,
    ChatCompletionRequest, Delta, ToolCallDelta,
};
use crate::protocol::common::{choices_per_prompt, include_usage, max_tokens, top_logprobs, Usage};
use crate::protocol::logprobs::{ChatLogprobs, ChatTokenLogprob};
use crate::protocol::plan::GenerationPlan;
use crate::protocol::refused::{check_modalities, INERT_CHAT_FIELDS};
use crate::sse::{sse_response, ChunkWriter, StreamSetup};
use crate::state::{response_id, unix_now, AppState};

use crate::tools::syntax::{MarkerTokens, TemplateTools};
use crate::tools::{
    parse_reply, render_conversation, ControlFinder, ParsedReply, ToolRequest, ToolStreamer,
    ToolSyntax,
};

pub async fn chat_completions(
    State(st): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let bytes = read_limited(req, st.limits.max_body_bytes, st.limits.body_timeout).await?;
    let job = st.clone();
    let (plan, tools) = st
        .prompts
        .run(bytes.len(), move || {
            let body: ChatCompletionRequest = parse_strict(&bytes, INERT_CHAT_FIELDS)?;
            let (plan, tools) = plan(&job, &body)?;
            Ok((compile_grammar(&job.engine, plan)?, tools))
        })
        .await?;
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
            tools,
            streamers: HashMap::new(),
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
            let mut finish = finish_reason(o.finish.reason);
            let message = match &tools {
                Some(t) => {
                    let parsed = t.parse(&o);
                    if !parsed.calls.is_empty() {
                        finish = "tool_calls";
                    }
                    AssistantMessage {
                        role: "assistant",
                        content: parsed.content,
                        tool_calls: (!parsed.calls.is_empty()).then_some(parsed.calls),
                    }
                }
                None => AssistantMessage {
                    role: "assistant",
                    content: Some(o.text.clone()),
                    tool_calls: None,
                },
            };
            ChatChoice {
                index,
                message,
                logprobs: plan.logprobs.map(|_| ChatLogprobs {
                    content: o
                        .tokens
                        .iter()
                        .filter_map(|t| ChatTokenLogprob::from_event(&st.tokenizer, t))
                        .collect(),
                }),
                finish_reason: Some(finish),
            }
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

/// Validates the request and renders the conversation into prompt tokens; with tools, how the
/// reply's calls are read back. Runs on the prompt pool.
fn plan(
    st: &AppState,
    body: &ChatCompletionRequest,
) -> Result<(GenerationPlan, Option<ToolReplies>), ApiError> {
    st.check_model(body.model.as_deref())?;
    check_modalities(body.modalities.as_deref())?;
    let mut sampling = body
        .sampling_fields()
        .with_defaults(&st.sampling_defaults)
        .validate(st.tokenizer.vocab_size())?;
    let tools = ToolRequest::from_fields(
        body.tools.as_deref(),
        body.tool_choice.as_ref(),
        body.parallel_tool_calls,
    )?;
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
    let messages = body.template_messages()?;
    let template = st.tokenizer.chat_template().ok_or_else(|| {
        ApiError::invalid(
            "This model has no chat template; use /v1/completions with a plain prompt.",
        )
    })?;
    let prompt = render_and_encode(st, messages, tools.as_ref())?;
    let replies = match tools {
        Some(t) => {
            let syntax = TemplateTools::of(Some(template.source())).syntax;
            let markers = MarkerTokens::new(&st.tokenizer, syntax);
            if let Some(g) = t.forced_grammar(syntax, &markers) {
                if sampling.grammar.is_some() {
                    return Err(ApiError::invalid_param(
                        "tool_choice",
                        "A forced tool call cannot be combined with `response_format` or `guided_*`.",
                    ));
                }
                sampling.grammar = Some(g);
            }
            // A model that opens the tool's response itself must stop there.
            let handover = syntax.handover().and_then(|m| st.tokenizer.token_id(m));
            if let Some(id) = handover.filter(|id| !sampling.stop_token_ids.contains(id)) {
                sampling.stop_token_ids.push(id);
            }
            Some(ToolReplies { syntax, markers })
        }
        None => None,
    };
    let plan = GenerationPlan {
        constraint: None,
        prompts: vec![prompt],
        n,
        sampling,
        max_tokens,
        max_tokens_param: param,
        prompt_param: "messages",
        logprobs,
        stream: body.stream(),
        include_usage,
    };
    Ok((plan, replies))
}

/// The conversation rendered by the model's chat template and tokenised, with control-token
/// text in message content kept plain unless `--special-tokens-in-messages`. Runs on the
/// prompt pool; /tokenize counts a conversation with it too.
pub fn render_and_encode(
    st: &AppState,
    messages: Vec<Value>,
    tools: Option<&ToolRequest>,
) -> Result<Vec<u32>, ApiError> {
    let template = st.tokenizer.chat_template().ok_or_else(|| {
        ApiError::invalid(
            "This model has no chat template; use /v1/completions with a plain prompt.",
        )
    })?;
    let tok = &st.tokenizer;
    let controls = |s: &str| tok.control_ranges(s);
    let guard: Option<ControlFinder> = (!st.rules.special_tokens_in_messages).then_some(&controls);
    let rendered = render_conversation(template, messages, tools, guard)?;
    encode_prompt(
        tok,
        &rendered.text,
        "messages",
        st.engine.max_context(),
        &rendered.plain,
    )
}

/// How a chat with tools reads its replies.
struct ToolReplies {
    syntax: ToolSyntax,
    markers: MarkerTokens,
}

impl ToolReplies {
    /// The reply's text with the syntax's control tokens written back in.
    fn text(&self, tokens: &[TokenEvent], trailing: &str) -> String {
        let mut s: String = tokens
            .iter()
            .map(|t| self.markers.text(t.id, &t.text))
            .collect();
        s.push_str(trailing);
        s
    }

    fn parse(&self, o: &ChoiceOutcome) -> ParsedReply {
        parse_reply(self.syntax, &self.text(&o.tokens, &o.finish.trailing_text))
    }
}

/// Chat's chunk shapes: `chat.completion.chunk` with deltas.
struct ChatChunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    tokenizer: Tokenizer,
    tools: Option<ToolReplies>,
    /// Per choice, with tools: its reply so far.
    streamers: HashMap<usize, ToolStreamer>,
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
            ..Delta::default()
        };
        Some(self.chunk(vec![Self::choice(index, delta, None, None)], None))
    }

    fn token(&mut self, index: usize, ev: &TokenEvent) -> Option<Value> {
        let logprobs = ChatTokenLogprob::from_event(&self.tokenizer, ev)
            .map(|lp| ChatLogprobs { content: vec![lp] });
        let text = match &self.tools {
            Some(t) => {
                let piece = t.markers.text(ev.id, &ev.text).to_string();
                let syntax = t.syntax;
                self.streamers
                    .entry(index)
                    .or_insert_with(|| ToolStreamer::new(syntax))
                    .push(&piece)
            }
            None => ev.text.clone(),
        };
        if text.is_empty() && logprobs.is_none() {
            return None;
        }
        let delta = Delta {
            content: Some(text),
            ..Delta::default()
        };
        Some(self.chunk(vec![Self::choice(index, delta, logprobs, None)], None))
    }

    fn finish(&mut self, index: usize, trailing_text: &str, reason: &'static str) -> Vec<Value> {
        let mut out = Vec::new();
        let (text, calls) = match &self.tools {
            Some(t) => {
                let mut s = self
                    .streamers
                    .remove(&index)
                    .unwrap_or_else(|| ToolStreamer::new(t.syntax));
                let mut text = s.push(trailing_text);
                let (rest, calls) = s.finish();
                text.push_str(&rest);
                (text, calls)
            }
            None => (trailing_text.to_string(), Vec::new()),
        };
        if !text.is_empty() {
            let delta = Delta {
                content: Some(text),
                ..Delta::default()
            };
            out.push(self.chunk(vec![Self::choice(index, delta, None, None)], None));
        }
        let reason = if calls.is_empty() {
            reason
        } else {
            "tool_calls"
        };
        if !calls.is_empty() {
            let delta = Delta {
                tool_calls: Some(
                    calls
                        .into_iter()
                        .enumerate()
                        .map(|(index, call)| ToolCallDelta { index, call })
                        .collect(),
                ),
                ..Delta::default()
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
