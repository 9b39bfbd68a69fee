//! The grammar that makes a reply a tool call when `tool_choice` is "required" or names a
//! function: the model's own call syntax around JSON whose `name` is one of the functions and
//! whose arguments follow that function's schema, so that every forced call parses.

use kiln_engine::Grammar;
use serde_json::{json, Value};

use super::syntax::{MarkerTokens, ToolSyntax};
use super::{ToolChoice, ToolRequest};

/// kiln's JSON layout for schemas embedded in a Lark grammar (as for `response_format`).
fn layout(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(
            || json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

/// A marker as a Lark atom: by id when it is a control token, else as text.
fn atom(marker: &str, markers: &MarkerTokens) -> String {
    match markers.id(marker) {
        Some(id) => format!("<[{id}]>"),
        None => Value::String(marker.to_string()).to_string(),
    }
}

impl ToolRequest {
    /// None for "auto": the model may answer in text.
    pub fn forced_grammar(&self, syntax: ToolSyntax, markers: &MarkerTokens) -> Option<Grammar> {
        let (functions, many) = match &self.choice {
            ToolChoice::Auto => return None,
            ToolChoice::Required => (self.tools.iter().collect::<Vec<_>>(), self.parallel),
            ToolChoice::Named(n) => (self.tools.iter().filter(|t| &t.name == n).collect(), false),
        };
        let call = |args_key: &str| {
            let options: Vec<Value> = functions
                .iter()
                .map(|f| {
                    json!({"type": "object",
                        "properties": {"name": {"const": f.name}, args_key: f.parameters},
                        "required": ["name", args_key], "additionalProperties": false})
                })
                .collect();
            if options.len() == 1 {
                options.into_iter().next().unwrap_or_default()
            } else {
                json!({"anyOf": options})
            }
        };
        let repeat = if many { "+" } else { "" };
        Some(match syntax {
            ToolSyntax::Hermes => {
                let start = if many {
                    "start: call (\"\\n\" call)*"
                } else {
                    "start: call"
                };
                Grammar::Lark(format!(
                    "{start}\ncall: {} \"\\n\" %json {} \"\\n\" {}\n",
                    atom("<tool_call>", markers),
                    layout(call("arguments")),
                    atom("</tool_call>", markers)
                ))
            }
            // One call: the template writes no more than one.
            ToolSyntax::LlamaJson => Grammar::JsonSchema(call("parameters")),
            ToolSyntax::MistralList => {
                let mut list = json!({"type": "array", "items": call("arguments"), "minItems": 1});
                if !many {
                    list["maxItems"] = json!(1);
                }
                Grammar::Lark(format!(
                    "start: {} %json {}\n",
                    atom("[TOOL_CALLS]", markers),
                    layout(list)
                ))
            }
            ToolSyntax::MistralArgs => {
                let (tc, args) = (atom("[TOOL_CALLS]", markers), atom("[ARGS]", markers));
                let alternatives: Vec<String> = functions
                    .iter()
                    .map(|f| {
                        format!(
                            "{tc} {} {args} %json {}",
                            Value::String(f.name.clone()),
                            layout(f.parameters.clone())
                        )
                    })
                    .collect();
                Grammar::Lark(format!(
                    "start: call{repeat}\ncall: {}\n",
                    alternatives.join("\n    | ")
                ))
            }
        })
    }
}
