//! `POST /v1/chat/completions`: the request as sent, its validation, and the response shapes.

use kiln_tokenizer::ChatMessage;
use serde::{Deserialize, Serialize};

use super::common::{request_with_sampling, StreamOptions, Usage};
use super::logprobs::ChatLogprobs;
use crate::error::ApiError;

request_with_sampling! {
    /// The body as sent; the macro adds the sampling and stopping fields (`temperature`...).
    #[derive(Debug, Clone, Deserialize)]
    pub struct ChatCompletionRequest {
        /// Optional here (some clients omit it); when given it must name the served model.
        pub model: Option<String>,
        pub messages: Vec<MessageIn>,
        pub max_tokens: Option<i64>,
        pub max_completion_tokens: Option<i64>,
        pub n: Option<i64>,
        pub stream: Option<bool>,
        pub stream_options: Option<StreamOptions>,
        pub logprobs: Option<bool>,
        pub top_logprobs: Option<i64>,
        pub tools: Option<Vec<serde_json::Value>>,
        pub tool_choice: Option<serde_json::Value>,
        pub parallel_tool_calls: Option<bool>,
        /// Only `["text"]` is honoured (protocol::refused).
        pub modalities: Option<Vec<String>>,
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct MessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// An assistant turn's calls (`{"id", "type": "function", "function": {"name", "arguments"}}`).
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A tool result's call.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

/// A message's content: a string, or a list of parts of which kiln reads the text ones.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

impl ChatCompletionRequest {
    /// The conversation as the chat template takes it (see [`template_messages`]).
    pub fn template_messages(&self) -> Result<Vec<serde_json::Value>, ApiError> {
        template_messages(&self.messages)
    }

    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }
}

/// The conversation's roles and text. `developer` is OpenAI's new name for `system`, which is
/// what templates know.
fn chat_messages(messages: &[MessageIn]) -> Result<Vec<ChatMessage>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "`messages` must contain at least one message.",
        ));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if !ROLES.contains(&m.role.as_str()) {
            return Err(ApiError::invalid_param(
                &format!("messages[{i}].role"),
                format!(
                    "Unknown role `{}`; expected one of {}.",
                    m.role,
                    ROLES.join(", ")
                ),
            ));
        }
        let content = match &m.content {
            None if m.role == "assistant" => String::new(),
            None => {
                return Err(ApiError::invalid_param(
                    &format!("messages[{i}].content"),
                    format!("A `{}` message needs `content`.", m.role),
                ))
            }
            Some(MessageContent::Text(t)) => t.clone(),
            Some(MessageContent::Parts(parts)) => text_of_parts(parts, i)?,
        };
        let role = if m.role == "developer" {
            "system"
        } else {
            m.role.as_str()
        };
        out.push(ChatMessage {
            role: role.to_string(),
            content,
        });
    }
    Ok(out)
}

/// The conversation as JSON objects for the template, with assistant `tool_calls` (their
/// arguments as objects, as templates index them) and tool results' ids.
pub fn template_messages(messages: &[MessageIn]) -> Result<Vec<serde_json::Value>, ApiError> {
    let plain = chat_messages(messages)?;
    let mut out = Vec::with_capacity(plain.len());
    for (i, (m, p)) in messages.iter().zip(plain).enumerate() {
        let mut v = serde_json::json!({"role": p.role, "content": p.content});
        if let Some(calls) = &m.tool_calls {
            if m.role != "assistant" {
                return Err(ApiError::invalid_param(
                    &format!("messages[{i}].tool_calls"),
                    "Only assistant messages carry `tool_calls`.",
                ));
            }
            let calls: Vec<serde_json::Value> = calls
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    let args = &mut c["function"]["arguments"];
                    if let Some(parsed) = args.as_str().and_then(|a| serde_json::from_str(a).ok()) {
                        *args = parsed;
                    }
                    c
                })
                .collect();
            v["tool_calls"] = serde_json::Value::Array(calls);
            if m.content.is_none() {
                v["content"] = serde_json::Value::Null;
            }
        }
        if let Some(id) = &m.tool_call_id {
            v["tool_call_id"] = serde_json::Value::String(id.clone());
        }
        if let Some(name) = &m.name {
            v["name"] = serde_json::Value::String(name.clone());
        }
        out.push(v);
    }
    Ok(out)
}

fn text_of_parts(parts: &[ContentPart], message: usize) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, p) in parts.iter().enumerate() {
        let param = format!("messages[{message}].content[{j}]");
        match (p.kind.as_str(), &p.text) {
            ("text", Some(t)) => text.push_str(t),
            ("text", None) => {
                return Err(ApiError::invalid_param(&param, "A text part needs `text`."))
            }
            (kind, _) => {
                return Err(ApiError::invalid_param(
                    &param,
                    format!("Content parts of type `{kind}` are not supported; only `text` is."),
                ))
            }
        }
    }
    Ok(text)
}

/// The non-streaming response.
#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// Null when the reply is only tool calls.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<crate::tools::ToolCallOut>>,
}

/// One streamed chunk.
#[derive(Debug, Clone, Serialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    /// Present (null until the last chunk) only when the client asked for usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A streamed call: each arrives whole, in one chunk.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(flatten)]
    pub call: crate::tools::ToolCallOut,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_body::parse;

    fn req(body: &str) -> ChatCompletionRequest {
        parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn messages_become_template_input() {
        let r = req(r#"{"model": "m", "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": null}]}"#);
        let m = chat_messages(&r.messages).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].role.as_str(), m[0].content.as_str()),
            ("system", "be brief")
        );
        assert_eq!(m[1].content, "hi there");
        assert_eq!(m[2].content, "");
    }

    #[test]
    fn bad_messages_are_refused() {
        let e = chat_messages(&req(r#"{"messages": []}"#).messages).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = req(r#"{"messages": [{"role": "wizard", "content": "x"}]}"#)
            .template_messages()
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = req(r#"{"messages": [{"role": "user"}]}"#)
            .template_messages()
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"));
        let e = req(r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#)
            .template_messages()
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[0]"));
    }

    #[test]
    fn chunk_usage_field_follows_include_usage() {
        let mut c = ChatChunk {
            id: "x".into(),
            object: "chat.completion.chunk",
            created: 0,
            model: "m".into(),
            choices: vec![],
            usage: None,
        };
        assert!(serde_json::to_value(&c).unwrap().get("usage").is_none());
        c.usage = Some(None);
        assert!(serde_json::to_value(&c).unwrap()["usage"].is_null());
        c.usage = Some(Some(Usage::new(3, 4, 2)));
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["usage"]["total_tokens"], 7);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
    }
}
