//! `POST /tokenize` and `POST /detokenize`, accepting both llama-server's bodies
//! (`{"content": ...}`, `{"tokens": [...]}`) and vLLM's (`{"prompt": ...}` or
//! `{"messages": [...]}`, `{"tokens": [...]}`). Each answers in the shape of the dialect it
//! was asked in. Tokenising is bounded by the context like every prompt, and runs on the
//! prompt pool.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::Json;
use kiln_tokenizer::{Bounded, Encoded};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::json_body::{parse_strict, read_limited};
use crate::protocol::chat::{template_messages, MessageIn};
use crate::routes::chat::render_and_encode;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    model: Option<String>,
    /// llama-server: the text, `add_special` (default false), `parse_special` (default true),
    /// `with_pieces`.
    content: Option<String>,
    add_special: Option<bool>,
    parse_special: Option<bool>,
    with_pieces: Option<bool>,
    /// vLLM: `prompt` with `add_special_tokens` (default true), or `messages` (counted as chat
    /// runs them: `add_generation_prompt` must stay true); `return_token_strs`.
    prompt: Option<String>,
    messages: Option<Vec<MessageIn>>,
    add_special_tokens: Option<bool>,
    add_generation_prompt: Option<bool>,
    return_token_strs: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    model: Option<String>,
    tokens: Vec<i64>,
}

pub async fn tokenize(
    State(st): State<Arc<AppState>>,
    req: Request,
) -> Result<Json<Value>, ApiError> {
    let bytes = read_limited(req, st.limits.max_body_bytes, st.limits.body_timeout).await?;
    let job = st.clone();
    let answer = st
        .prompts
        .run(bytes.len(), move || {
            answer_tokenize(&job, parse_strict(&bytes, &[])?)
        })
        .await?;
    Ok(Json(answer))
}

fn answer_tokenize(st: &AppState, body: TokenizeRequest) -> Result<Value, ApiError> {
    st.check_model(body.model.as_deref())?;
    let max_context = st.engine.max_context();
    let tok = &st.tokenizer;
    let given = [
        body.content.is_some(),
        body.prompt.is_some(),
        body.messages.is_some(),
    ];
    if given.iter().filter(|&&g| g).count() != 1 {
        return Err(ApiError::invalid(
            "Send exactly one of `content` (llama-server), `prompt` or `messages` (vLLM).",
        ));
    }
    let pieces = |ids: &[u32]| -> Vec<String> {
        ids.iter()
            .map(|&id| String::from_utf8_lossy(&tok.token_bytes(id)).into_owned())
            .collect()
    };
    if let Some(text) = &body.content {
        let ids = bounded(
            st,
            text,
            "content",
            body.add_special.unwrap_or(false),
            body.parse_special.unwrap_or(true),
        )?;
        if body.with_pieces.unwrap_or(false) {
            let with: Vec<Value> = ids
                .iter()
                .zip(pieces(&ids))
                .map(|(id, piece)| json!({"id": id, "piece": piece}))
                .collect();
            return Ok(json!({ "tokens": with }));
        }
        return Ok(json!({ "tokens": ids }));
    }
    let ids = match (&body.prompt, &body.messages) {
        (Some(text), _) => bounded(
            st,
            text,
            "prompt",
            body.add_special_tokens.unwrap_or(true),
            true,
        )?,
        (_, Some(messages)) => {
            if body.add_special_tokens == Some(true) {
                return Err(ApiError::invalid_param(
                    "add_special_tokens",
                    "With `messages`, tokens are counted as /v1/chat/completions counts them; \
                     `add_special_tokens: true` is not supported.",
                ));
            }
            if body.add_generation_prompt == Some(false) {
                return Err(ApiError::invalid_param(
                    "add_generation_prompt",
                    "Conversations are counted with the assistant's turn opened, as \
                     /v1/chat/completions runs them; `false` is not supported.",
                ));
            }
            render_and_encode(st, template_messages(messages)?, None)?
        }
        _ => unreachable!("exactly one input was checked above"),
    };
    let token_strs = body
        .return_token_strs
        .unwrap_or(false)
        .then(|| pieces(&ids));
    Ok(json!({
        "count": ids.len(),
        "max_model_len": max_context,
        "tokens": ids,
        "token_strs": token_strs,
    }))
}

/// Text to ids, refused past the context.
fn bounded(
    st: &AppState,
    text: &str,
    param: &str,
    add_special: bool,
    parse_special: bool,
) -> Result<Vec<u32>, ApiError> {
    let max_context = st.engine.max_context();
    let opts = Bounded {
        add_special,
        parse_special,
        plain: &[],
        limit: max_context,
    };
    match st.tokenizer.encode_bounded(text, opts) {
        Ok(Encoded::Ids(ids)) => Ok(ids),
        Ok(Encoded::TooLong { at_least }) => Err(ApiError::context_length(format!(
            "This model's maximum context length is {max_context} tokens. However, the text \
             has at least {at_least} tokens."
        ))
        .with_param(param)),
        Err(e) => Err(ApiError::invalid_param(
            param,
            format!("Could not tokenize the text: {e:#}"),
        )),
    }
}

pub async fn detokenize(
    State(st): State<Arc<AppState>>,
    req: Request,
) -> Result<Json<Value>, ApiError> {
    let bytes = read_limited(req, st.limits.max_body_bytes, st.limits.body_timeout).await?;
    let job = st.clone();
    st.prompts
        .run(bytes.len(), move || {
            let body: DetokenizeRequest = parse_strict(&bytes, &[])?;
            job.check_model(body.model.as_deref())?;
            let vocab = job.tokenizer.vocab_size();
            let ids = body
                .tokens
                .iter()
                .map(|&id| match u32::try_from(id) {
                    Ok(v) if (v as usize) < vocab => Ok(v),
                    _ => Err(ApiError::invalid_param(
                        "tokens",
                        format!("Token id {id} is outside the vocabulary (size {vocab})."),
                    )),
                })
                .collect::<Result<Vec<u32>, _>>()?;
            let text = job.tokenizer.decode(&ids, false);
            // llama-server reads `content`, vLLM `prompt`.
            Ok(Json(json!({ "content": text, "prompt": text })))
        })
        .await
}
