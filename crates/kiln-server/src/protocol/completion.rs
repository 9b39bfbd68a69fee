//! `POST /v1/completions` (the legacy text API): request, prompt forms, response shapes.

use serde::{Deserialize, Serialize};

use super::common::{request_with_sampling, StreamOptions, Usage};
use super::logprobs::CompletionLogprobs;
use crate::error::ApiError;

/// Most prompts one request may batch.
pub const MAX_PROMPTS: usize = 128;

request_with_sampling! {
    /// The body as sent; the macro adds the sampling and stopping fields (`temperature`...).
    #[derive(Debug, Clone, Deserialize)]
    pub struct CompletionRequest {
        pub model: Option<String>,
        pub prompt: Prompt,
        pub max_tokens: Option<i64>,
        pub n: Option<i64>,
        pub best_of: Option<i64>,
        pub stream: Option<bool>,
        pub stream_options: Option<StreamOptions>,
        /// Number of alternatives per token to report (0 reports only the chosen token's).
        pub logprobs: Option<i64>,
        /// Return the prompt text before the completion.
        pub echo: Option<bool>,
        pub suffix: Option<String>,
    }
}

/// The four prompt forms OpenAI accepts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

/// One prompt, before or after tokenisation.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

impl Prompt {
    /// The prompts as a list, token ids checked against the vocabulary.
    pub fn inputs(&self, vocab_size: usize) -> Result<Vec<PromptInput>, ApiError> {
        let out: Vec<PromptInput> = match self {
            Prompt::Text(t) => vec![PromptInput::Text(t.clone())],
            Prompt::Texts(ts) => ts.iter().cloned().map(PromptInput::Text).collect(),
            Prompt::Tokens(ids) => vec![PromptInput::Tokens(check_ids(ids, vocab_size, "prompt")?)],
            Prompt::TokenLists(lists) => lists
                .iter()
                .enumerate()
                .map(|(i, ids)| {
                    check_ids(ids, vocab_size, &format!("prompt[{i}]")).map(PromptInput::Tokens)
                })
                .collect::<Result<_, _>>()?,
        };
        if out.is_empty() {
            return Err(ApiError::invalid_param(
                "prompt",
                "`prompt` must not be an empty list.",
            ));
        }
        if out.len() > MAX_PROMPTS {
            return Err(ApiError::invalid_param(
                "prompt",
                format!(
                    "At most {MAX_PROMPTS} prompts per request, got {}.",
                    out.len()
                ),
            ));
        }
        Ok(out)
    }
}

fn check_ids(ids: &[i64], vocab_size: usize, param: &str) -> Result<Vec<u32>, ApiError> {
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            param,
            "A token prompt must not be empty.",
        ));
    }
    ids.iter()
        .map(|&id| match u32::try_from(id) {
            Ok(v) if (v as usize) < vocab_size => Ok(v),
            _ => Err(ApiError::invalid_param(
                param,
                format!("Token id {id} is outside the vocabulary (size {vocab_size})."),
            )),
        })
        .collect()
}

impl CompletionRequest {
    /// Refuses features kiln does not implement, rather than silently ignoring them.
    pub fn check_unsupported(&self, n: usize) -> Result<(), ApiError> {
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid_param(
                "suffix",
                "`suffix` (insertion) is not supported by this server.",
            ));
        }
        if self.best_of.is_some_and(|b| b != n as i64) {
            return Err(ApiError::invalid_param(
                "best_of",
                "`best_of` is not supported; leave it unset or equal to `n`.",
            ));
        }
        if self.echo() && self.logprobs.is_some() {
            return Err(ApiError::invalid_param(
                "echo",
                "`echo` together with `logprobs` (prompt logprobs) is not supported.",
            ));
        }
        Ok(())
    }

    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn echo(&self) -> bool {
        self.echo.unwrap_or(false)
    }
}

/// The non-streaming response; streamed chunks have the same shape.
#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    /// Always present in a full response; in a stream, present (null until the last chunk) only
    /// when the client asked for usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_body::parse;

    fn req(body: &str) -> CompletionRequest {
        parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn all_prompt_forms_parse() {
        let cases = [
            (r#"{"prompt": "hi"}"#, vec![PromptInput::Text("hi".into())]),
            (
                r#"{"prompt": ["a", "b"]}"#,
                vec![PromptInput::Text("a".into()), PromptInput::Text("b".into())],
            ),
            (
                r#"{"prompt": [1, 2]}"#,
                vec![PromptInput::Tokens(vec![1, 2])],
            ),
            (
                r#"{"prompt": [[1], [2, 3]]}"#,
                vec![
                    PromptInput::Tokens(vec![1]),
                    PromptInput::Tokens(vec![2, 3]),
                ],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(req(body).prompt.inputs(10).unwrap(), want, "{body}");
        }
    }

    #[test]
    fn bad_prompts_are_refused() {
        assert!(parse::<CompletionRequest>(br#"{"prompt": 5}"#).is_err());
        assert!(parse::<CompletionRequest>(br#"{"prompt": [1, "a"]}"#).is_err());
        let e = req(r#"{"prompt": [1, 99]}"#).prompt.inputs(10).unwrap_err();
        assert!(e.message.contains("99"), "{}", e.message);
        let e = req(r#"{"prompt": [[1], []]}"#)
            .prompt
            .inputs(10)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt[1]"));
        assert!(req(r#"{"prompt": []}"#).prompt.inputs(10).is_err());
        assert!(req(r#"{"prompt": [-3]}"#).prompt.inputs(10).is_err());
    }

    #[test]
    fn unsupported_features_are_refused() {
        assert!(req(r#"{"prompt": "x", "best_of": 2}"#)
            .check_unsupported(2)
            .is_ok());
        for (body, param) in [
            (r#"{"prompt": "x", "suffix": "y"}"#, "suffix"),
            (r#"{"prompt": "x", "best_of": 3}"#, "best_of"),
            (r#"{"prompt": "x", "echo": true, "logprobs": 1}"#, "echo"),
        ] {
            assert_eq!(
                req(body).check_unsupported(1).unwrap_err().param.as_deref(),
                Some(param)
            );
        }
    }
}
