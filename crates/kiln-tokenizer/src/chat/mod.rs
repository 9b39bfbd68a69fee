//! Chat templates: the Jinja program a model ships to turn a conversation into its prompt text,
//! rendered the way transformers' `apply_chat_template` renders it.

mod environment;
mod guard;
mod pyjson;
mod strftime;

use std::sync::Arc;

use anyhow::{anyhow, Result};
use minijinja::value::Value;
use minijinja::Environment;
use serde::{Deserialize, Serialize};

pub use environment::json_value;
use environment::{build, TEMPLATE_NAME};
pub use guard::GuardedPrompt;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template. Cheap to clone; shareable across threads.
#[derive(Clone)]
pub struct ChatTemplate {
    inner: Arc<Inner>,
}

struct Inner {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.inner.source.len())
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` / `eos_token` are the texts templates print for them.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        ChatTemplate::compile(source, bos_token, eos_token, None)
    }

    /// The same template with `strftime_now` reading a fixed time (seconds since the epoch, UTC)
    /// instead of the clock, for reproducible prompts.
    pub fn with_fixed_time(&self, unix_secs: i64) -> Result<ChatTemplate> {
        let i = &self.inner;
        ChatTemplate::compile(&i.source, &i.bos_token, &i.eos_token, Some(unix_secs))
    }

    fn compile(source: &str, bos: &str, eos: &str, fixed_now: Option<i64>) -> Result<ChatTemplate> {
        let env = build(source, fixed_now)
            .map_err(|e| anyhow!("chat template does not compile: {}", describe(&e)))?;
        Ok(ChatTemplate {
            inner: Arc::new(Inner {
                env,
                source: source.to_string(),
                bos_token: bos.to_string(),
                eos_token: eos.to_string(),
            }),
        })
    }

    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// Renders a conversation. With `add_generation_prompt` the text ends where the assistant's
    /// reply begins.
    ///
    /// Some templates reject a system message (Gemma 2 raises "System role not supported"); then
    /// the system text is put before the first user message, separated by a blank line, and the
    /// template is rendered again, as llama.cpp does for such models.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let json: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect();
        self.render_with(&json, add_generation_prompt, &serde_json::Map::new())
    }

    /// Renders messages given as JSON objects (with `tool_calls`, content parts ...) and extra
    /// template variables (`tools`, `documents`, `enable_thinking`, `date_string` ...).
    pub fn render_with(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        match self.render_once(messages, add_generation_prompt, extra) {
            Ok(s) => Ok(s),
            Err(first) => match merge_system(messages) {
                Some(merged) => self
                    .render_once(&merged, add_generation_prompt, extra)
                    .map_err(|_| first),
                None => Err(first),
            },
        }
    }

    fn render_once(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let mut ctx: std::collections::BTreeMap<String, Value> = std::collections::BTreeMap::new();
        // transformers passes these always; `tools` and `documents` are None unless given.
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert(
            "bos_token".into(),
            Value::from(self.inner.bos_token.as_str()),
        );
        ctx.insert(
            "eos_token".into(),
            Value::from(self.inner.eos_token.as_str()),
        );
        for (k, v) in extra {
            ctx.insert(k.clone(), json_value(v));
        }
        ctx.insert("messages".into(), messages.iter().map(json_value).collect());
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        let tmpl = self
            .inner
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| anyhow!("{}", describe(&e)))?;
        tmpl.render(Value::from(ctx))
            .map_err(|e| anyhow!("chat template failed: {}", describe(&e)))
    }
}

/// A leading system message folded into the first user message; None when there is nothing to
/// fold (no system message, no user message after it, or non-text content).
fn merge_system(messages: &[serde_json::Value]) -> Option<Vec<serde_json::Value>> {
    let role = |m: &serde_json::Value| m.get("role").and_then(|r| r.as_str()).map(str::to_string);
    let first = messages.first()?;
    if role(first).as_deref() != Some("system") {
        return None;
    }
    let system = first.get("content")?.as_str()?;
    let mut rest: Vec<serde_json::Value> = messages[1..].to_vec();
    let user = rest
        .iter_mut()
        .find(|m| role(m).as_deref() == Some("user"))?;
    let content = user.get("content")?.as_str()?;
    user["content"] = serde_json::Value::String(format!("{system}\n\n{content}"));
    Some(rest)
}

/// minijinja errors with their cause chain and the template line.
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_message_is_folded_when_the_template_rejects_it() {
        let src = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
                   {% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let msgs = [
            ChatMessage::new("system", "S"),
            ChatMessage::new("user", "U"),
        ];
        assert_eq!(t.render(&msgs, false).unwrap(), "[user:S\n\nU]");
        let bad = ChatTemplate::new("{{ raise_exception('nope') }}", "", "").unwrap();
        let err = bad.render(&msgs, false).unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn context_has_transformers_defaults() {
        let src = "{{ bos_token }}{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ x }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let mut extra = serde_json::Map::new();
        extra.insert("x".into(), serde_json::json!(3));
        assert_eq!(
            t.render_with(&[], true, &extra).unwrap(),
            "<s>TrueTrueTrue3"
        );
        assert!(ChatTemplate::new("{% if %}", "", "").is_err());
    }
}
