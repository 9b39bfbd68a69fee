//! The conversation as the chat template takes it when tools are involved. A template that knows
//! tools gets them as its `tools` variable and the messages as sent (assistant `tool_calls`
//! with their arguments as objects, `tool` results with their ids). A template that knows none
//! gets kiln's fallback: the tools described in the system message, past calls written into the
//! assistant turns as `<tool_call>` blocks and results given back in user turns as
//! `<tool_response>` blocks, the Hermes / Qwen form the fallback asks the model to answer in.

use kiln_tokenizer::{ChatTemplate, GuardedPrompt};
use serde_json::{json, Map, Value};

use super::syntax::TemplateTools;
use super::ToolRequest;
use crate::error::ApiError;

/// What kiln's fallback tells a model about its tools (Qwen 2.5's wording).
const PREAMBLE: &str =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const POSTAMBLE: &str =
    "</tools>\n\nFor each function call, return a json object with function name and \
arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \
\"arguments\": <args-json-object>}\n</tool_call>";

/// Finds the byte ranges of a text that spell control tokens.
pub type ControlFinder<'a> = &'a dyn Fn(&str) -> Vec<std::ops::Range<usize>>;

/// Renders `messages` (JSON objects) ready for the assistant's reply. With `guard`, message text
/// that spells a control token (the ranges `guard` finds) is reported as plain text.
pub fn render_conversation(
    template: &ChatTemplate,
    messages: Vec<Value>,
    tools: Option<&ToolRequest>,
    guard: Option<ControlFinder>,
) -> Result<GuardedPrompt, ApiError> {
    let how = TemplateTools::of(Some(template.source()));
    let mut extra = Map::new();
    let messages = if how.native {
        if let Some(t) = tools {
            extra.insert("tools".into(), t.template_tools());
        }
        messages
    } else {
        fallback_messages(messages, tools)
    };
    let rendered = match guard {
        Some(controls) => template.render_guarded(&messages, true, &extra, controls),
        None => template
            .render_with(&messages, true, &extra)
            .map(|text| GuardedPrompt {
                text,
                plain: Vec::new(),
            }),
    };
    rendered.map_err(|e| {
        ApiError::invalid_param(
            "messages",
            format!("The chat template rejected the conversation: {e:#}"),
        )
    })
}

/// The conversation rewritten for a template that knows no tools.
fn fallback_messages(messages: Vec<Value>, tools: Option<&ToolRequest>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        let role = m["role"].as_str().unwrap_or("").to_string();
        let content = m["content"].as_str().unwrap_or("").to_string();
        match role.as_str() {
            "assistant" if m.get("tool_calls").is_some_and(Value::is_array) => {
                let mut text = content;
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let f = &call["function"];
                    // Name first, as the model is asked to write it.
                    let body = format!(
                        "{{\"name\": {}, \"arguments\": {}}}",
                        f["name"], f["arguments"]
                    );
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&format!("<tool_call>\n{body}\n</tool_call>"));
                }
                out.push(json!({"role": "assistant", "content": text}));
            }
            "tool" => {
                let block = format!("<tool_response>\n{content}\n</tool_response>");
                // Results of one turn's calls share one user turn.
                match out.last_mut() {
                    Some(last) if last["role"] == "user" && last["tool_results"] == true => {
                        let joined = format!("{}\n{block}", last["content"].as_str().unwrap_or(""));
                        last["content"] = Value::String(joined);
                    }
                    _ => out.push(json!({"role": "user", "content": block, "tool_results": true})),
                }
            }
            _ => out.push(json!({"role": role, "content": content})),
        }
    }
    for m in &mut out {
        if let Some(o) = m.as_object_mut() {
            o.remove("tool_results");
        }
    }
    if let Some(t) = tools {
        let lines: Vec<String> = t.tools.iter().map(|f| f.raw.to_string()).collect();
        let block = format!("{PREAMBLE}\n{}\n{POSTAMBLE}", lines.join("\n"));
        match out.first_mut() {
            Some(first) if first["role"] == "system" => {
                let text = format!("{}\n\n{block}", first["content"].as_str().unwrap_or(""));
                first["content"] = Value::String(text);
            }
            _ => out.insert(0, json!({"role": "system", "content": block})),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    fn tools() -> ToolRequest {
        let t = vec![
            json!({"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}),
        ];
        ToolRequest::from_fields(Some(&t), None, None)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_fallback_describes_tools_and_replays_calls() {
        let tpl = ChatTemplate::new(CHATML, "", "").unwrap();
        let msgs = vec![
            json!({"role": "user", "content": "2+3?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "5"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "6"}),
        ];
        let text = render_conversation(&tpl, msgs, Some(&tools()), None)
            .unwrap()
            .text;
        assert!(text.starts_with("<|im_start|>system\n# Tools"), "{text}");
        assert!(
            text.contains(r#"{"type":"function","function":{"name":"add""#),
            "{text}"
        );
        assert!(text.contains("<|im_start|>assistant\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\":2,\"b\":3}}\n</tool_call><|im_end|>"), "{text}");
        assert!(text.contains("<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n6\n</tool_response><|im_end|>"), "{text}");
        assert!(text.ends_with("<|im_start|>assistant\n"));
    }

    fn template(name: &str) -> String {
        let path = crate::test_data::templates_dir().join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Gemma 4's template writes the tools, a past call in its own syntax (arguments from the
    /// call's JSON) and the tool's result as its response block, inside the model's turn.
    #[test]
    fn gemma_4_writes_calls_and_results_in_its_syntax() {
        let src = template("google-gemma-4-31B-it.jinja");
        let tpl = ChatTemplate::new(&src, "<bos>", "<turn|>").unwrap();
        let msgs = vec![
            json!({"role": "user", "content": "2+3?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}),
        ];
        let text = render_conversation(&tpl, msgs, Some(&tools()), None)
            .unwrap()
            .text;
        assert!(text.contains("<|tool>declaration:add{"), "{text}");
        assert!(
            text.contains("<|tool_call>call:add{a:2,b:3}<tool_call|>"),
            "{text}"
        );
        // The model's turn goes on after the tool's response: the reply continues it.
        assert!(
            text.ends_with("<|tool_response>response:add{value:<|\"|>5<|\"|>}<tool_response|>"),
            "{text}"
        );
        let reply = super::super::parse_reply(
            super::super::ToolSyntax::Gemma4,
            "<|tool_call>call:add{a:2,b:3}<tool_call|>",
        );
        assert_eq!(reply.calls[0].function.arguments, r#"{"a":2,"b":3}"#);
    }

    #[test]
    fn a_template_that_knows_tools_gets_them() {
        let src = template("Qwen-Qwen2.5-7B-Instruct.jinja");
        let tpl = ChatTemplate::new(&src, "", "<|im_end|>").unwrap();
        let msgs = vec![json!({"role": "user", "content": "2+3?"})];
        let text = render_conversation(&tpl, msgs, Some(&tools()), None)
            .unwrap()
            .text;
        assert!(
            text.contains("<tools>") && text.contains("\"name\": \"add\""),
            "{text}"
        );
    }
}
