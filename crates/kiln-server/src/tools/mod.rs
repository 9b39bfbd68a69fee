//! Tool calling: the request's `tools` and `tool_choice`, how the conversation shows them to the
//! model (through its chat template when the template knows tools, else kiln's fallback: the tools
//! described in a system block and called in the Hermes / Qwen `<tool_call>` form), the grammar
//! that forces a call when `tool_choice` asks for one, and the parsing of the reply into
//! `tool_calls`.

mod gemma;
mod grammar;
mod parse;
mod render;
pub mod syntax;

pub use parse::{parse_reply, ParsedReply, ToolCallOut, ToolStreamer};
pub use render::{render_conversation, ControlFinder};
pub use syntax::ToolSyntax;

use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// A function the model may call, as the request declared it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionTool {
    pub name: String,
    pub description: Option<String>,
    /// Its arguments' JSON schema (an object schema; `{}` when the function takes none).
    pub parameters: Value,
    /// The tool as sent (`{"type": "function", "function": {...}}`), for templates.
    pub raw: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// The model decides; a reply in the call syntax becomes `tool_calls`.
    Auto,
    /// At least one call, arguments valid against their schema.
    Required,
    /// Exactly one call of this function.
    Named(String),
}

/// What a chat request asks of tools, validated. None of it when `tools` is absent or empty
/// or `tool_choice` is "none" (then the tools are not shown to the model either).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub tools: Vec<FunctionTool>,
    pub choice: ToolChoice,
    /// More than one call per reply (OpenAI's default).
    pub parallel: bool,
}

#[derive(Debug, Clone, Deserialize)]
struct ToolIn {
    #[serde(rename = "type")]
    kind: String,
    function: Option<FunctionIn>,
}

#[derive(Debug, Clone, Deserialize)]
struct FunctionIn {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
}

impl ToolRequest {
    /// Validates `tools`, `tool_choice` and `parallel_tool_calls` as a request sent them.
    pub fn from_fields(
        tools: Option<&[Value]>,
        tool_choice: Option<&Value>,
        parallel: Option<bool>,
    ) -> Result<Option<ToolRequest>, ApiError> {
        let tools = tools.unwrap_or_default();
        if tools.is_empty() {
            if tool_choice.is_some_and(|c| c != "none") {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "`tool_choice` needs `tools`: there is no tool to call.",
                ));
            }
            if parallel.is_some() {
                return Err(ApiError::invalid_param(
                    "parallel_tool_calls",
                    "`parallel_tool_calls` needs `tools`.",
                ));
            }
            return Ok(None);
        }
        let mut parsed = Vec::with_capacity(tools.len());
        for (i, raw) in tools.iter().enumerate() {
            parsed.push(function_tool(raw, i)?);
        }
        for (i, t) in parsed.iter().enumerate() {
            if parsed[..i].iter().any(|o| o.name == t.name) {
                return Err(ApiError::invalid_param(
                    &format!("tools[{i}].function.name"),
                    format!("Two tools are named `{}`.", t.name),
                ));
            }
        }
        let choice = match tool_choice {
            None => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                "none" => return Ok(None),
                other => {
                    return Err(ApiError::invalid_param(
                        "tool_choice",
                        format!("Unknown tool_choice `{other}`; expected none, auto, required or a function."),
                    ))
                }
            },
            Some(v) => {
                let name = v
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .filter(|_| v.get("type").and_then(Value::as_str) == Some("function"))
                    .ok_or_else(|| {
                        ApiError::invalid_param(
                            "tool_choice",
                            "`tool_choice` must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                        )
                    })?;
                if !parsed.iter().any(|t| t.name == name) {
                    return Err(ApiError::invalid_param(
                        "tool_choice",
                        format!("`tool_choice` names `{name}`, which is not among the tools."),
                    ));
                }
                ToolChoice::Named(name.to_string())
            }
        };
        Ok(Some(ToolRequest {
            tools: parsed,
            choice,
            parallel: parallel.unwrap_or(true),
        }))
    }

    /// The tools as templates take them.
    pub fn template_tools(&self) -> Value {
        Value::Array(self.tools.iter().map(|t| t.raw.clone()).collect())
    }
}

fn function_tool(raw: &Value, i: usize) -> Result<FunctionTool, ApiError> {
    let param = format!("tools[{i}]");
    let t: ToolIn = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::invalid_param(&param, format!("`{param}` is not a tool: {e}")))?;
    if t.kind != "function" {
        return Err(ApiError::invalid_param(
            &format!("{param}.type"),
            format!("Only function tools are supported, got `{}`.", t.kind),
        ));
    }
    let f = t.function.ok_or_else(|| {
        ApiError::invalid_param(
            &format!("{param}.function"),
            "A function tool needs `function`.",
        )
    })?;
    let valid_name = !f.name.is_empty()
        && f.name.len() <= 64
        && f.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if !valid_name {
        return Err(ApiError::invalid_param(
            &format!("{param}.function.name"),
            format!(
                "Function names are 1-64 letters, digits, `_`, `-` or `.`; got `{}`.",
                f.name
            ),
        ));
    }
    let parameters = f
        .parameters
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    if !parameters.is_object() {
        return Err(ApiError::invalid_param(
            &format!("{param}.function.parameters"),
            "`parameters` must be a JSON schema object.",
        ));
    }
    Ok(FunctionTool {
        name: f.name,
        description: f.description,
        parameters,
        raw: raw.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    #[test]
    fn tool_fields_are_validated() {
        let tools = vec![weather()];
        let r = ToolRequest::from_fields(Some(&tools), None, None)
            .unwrap()
            .unwrap();
        assert_eq!(r.choice, ToolChoice::Auto);
        assert!(r.parallel);
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let r = ToolRequest::from_fields(Some(&tools), Some(&named), Some(false))
            .unwrap()
            .unwrap();
        assert_eq!(r.choice, ToolChoice::Named("get_weather".into()));
        assert!(!r.parallel);
        assert!(
            ToolRequest::from_fields(Some(&tools), Some(&json!("none")), None)
                .unwrap()
                .is_none()
        );
        assert!(ToolRequest::from_fields(None, Some(&json!("none")), None)
            .unwrap()
            .is_none());
        let bad = [
            (None, Some(json!("required")), "tool_choice"),
            (
                Some(vec![weather()]),
                Some(json!({"type": "function", "function": {"name": "nope"}})),
                "tool_choice",
            ),
            (
                Some(vec![weather()]),
                Some(json!("sometimes")),
                "tool_choice",
            ),
            (
                Some(vec![json!({"type": "retrieval"})]),
                None,
                "tools[0].type",
            ),
            (
                Some(vec![
                    json!({"type": "function", "function": {"name": "a b"}}),
                ]),
                None,
                "tools[0].function.name",
            ),
            (
                Some(vec![weather(), weather()]),
                None,
                "tools[1].function.name",
            ),
        ];
        for (tools, choice, param) in bad {
            let e = ToolRequest::from_fields(tools.as_deref(), choice.as_ref(), None).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param));
        }
        let e = ToolRequest::from_fields(None, None, Some(true)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("parallel_tool_calls"));
    }
}
