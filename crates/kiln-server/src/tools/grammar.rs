//! The grammar that makes a reply a tool call when `tool_choice` is "required" or names a
//! function: the model's own call syntax around JSON whose `name` is one of the functions and
//! whose arguments follow that function's schema, so that every forced call parses.

use kiln_engine::Grammar;
use serde_json::{json, Value};

use super::gemma::{self, atom};
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
            ToolSyntax::Gemma4 => {
                let functions: Vec<(&str, &Value)> = functions
                    .iter()
                    .map(|f| (f.name.as_str(), &f.parameters))
                    .collect();
                Grammar::Lark(format!(
                    "start: call{repeat}\n{}",
                    gemma::call_grammar(&functions, markers)
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::parse_reply;
    use kiln_grammar::TokenSpace;
    use kiln_tokenizer::Tokenizer;

    fn request(choice: Value, parallel: bool) -> ToolRequest {
        let tools = vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city", "days"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}),
        ];
        ToolRequest::from_fields(Some(&tools), Some(&choice), Some(parallel))
            .unwrap()
            .unwrap()
    }

    /// Random walks through each syntax's forced grammar (byte tokens, every token drawn from
    /// the allowed set) always give replies the syntax's parser reads as calls of the tools;
    /// markers as text, and as control tokens named by id (two of the vocabulary's control
    /// tokens standing in for Mistral's).
    #[test]
    fn forced_replies_parse_in_every_syntax() {
        let tok = Tokenizer::byte_level(300);
        let control = |piece: &str| tok.token_id(piece).unwrap();
        let as_tokens = MarkerTokens {
            ids: vec![
                (control("<|im_start|>"), "[TOOL_CALLS]".to_string()),
                (control("<|begin_of_text|>"), "[ARGS]".to_string()),
            ],
        };
        for (syntax, markers) in [
            (ToolSyntax::MistralList, &as_tokens),
            (ToolSyntax::MistralArgs, &as_tokens),
        ] {
            walks(&tok, syntax, markers);
        }
        for syntax in [
            ToolSyntax::Hermes,
            ToolSyntax::LlamaJson,
            ToolSyntax::MistralList,
            ToolSyntax::MistralArgs,
            ToolSyntax::Gemma4,
        ] {
            walks(&tok, syntax, &MarkerTokens::default());
        }
    }

    /// In Gemma 4's own vocabulary (where its markers are single tokens), the call its template
    /// writes for a tool call, tokenised as a prompt would be, is a reply the forced grammar
    /// allows to its end; and a call of an unknown function or with a missing argument is not.
    #[test]
    fn gemma_calls_as_the_template_writes_them_pass_the_forced_grammar() {
        let path = crate::test_data::vocab("gemma-4");
        let tok = Tokenizer::from_gguf(&kiln_formats::GgufFile::open(&path).unwrap()).unwrap();
        for m in ToolSyntax::Gemma4.markers() {
            assert_eq!(tok.encode(m, false).unwrap().len(), 1, "{m} is one token");
        }
        let markers = MarkerTokens::new(&tok, ToolSyntax::Gemma4);
        let space = TokenSpace::new(&tok, tok.vocab_size()).unwrap();
        let grammar = request(json!("required"), true)
            .forced_grammar(ToolSyntax::Gemma4, &markers)
            .unwrap();
        let accepts = |text: &str| {
            let mut c = space.compile(&grammar).unwrap();
            let ids = tok.encode(text, false).unwrap();
            ids.iter().all(|&t| c.commit(t).is_ok())
                && (c.is_finished()
                    || c.allowed()
                        .is_ok_and(|a| tok.eos_ids().iter().any(|&e| a.contains(e))))
        };
        let q = gemma::QUOTE;
        let good = format!(
            "<|tool_call>call:get_weather{{city:{q}Oslo{q},days:3}}<tool_call|>\
             <|tool_call>call:now{{}}<tool_call|>"
        );
        assert!(accepts(&good), "{good}");
        for bad in [
            "<|tool_call>call:get_time{}<tool_call|>".to_string(),
            format!("<|tool_call>call:get_weather{{city:{q}Oslo{q}}}<tool_call|>"),
            format!("<|tool_call>call:get_weather{{city:{q}Oslo{q},days:9}}<tool_call|>"),
        ] {
            assert!(!accepts(&bad), "{bad}");
        }
        assert!(!parse_reply(ToolSyntax::Gemma4, &good).calls.is_empty());
    }

    fn walks(tok: &Tokenizer, syntax: ToolSyntax, markers: &MarkerTokens) {
        let space = TokenSpace::new(tok, 300).unwrap();
        {
            for (choice, parallel) in [
                (json!("required"), true),
                (json!("required"), false),
                (
                    json!({"type": "function", "function": {"name": "get_weather"}}),
                    true,
                ),
            ] {
                let req = request(choice.clone(), parallel);
                let grammar = req.forced_grammar(syntax, markers).unwrap();
                let mut finished = 0;
                for seed in 0..20u64 {
                    let mut c = space
                        .compile(&grammar)
                        .unwrap_or_else(|e| panic!("{syntax:?}: {e}"));
                    let mut rng = seed * 7919 + 1;
                    let mut ids = Vec::new();
                    for _ in 0..400 {
                        if c.is_finished() {
                            break;
                        }
                        let allowed = c.allowed().unwrap();
                        let may_end = tok.eos_ids().iter().any(|&e| allowed.contains(e));
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if may_end && rng % 2 == 0 {
                            break;
                        }
                        let options: Vec<u32> = (0..300)
                            .filter(|&t| allowed.contains(t) && !tok.eos_ids().contains(&t))
                            .collect();
                        if options.is_empty() {
                            break;
                        }
                        let t = options[(rng % options.len() as u64) as usize];
                        c.commit(t).unwrap();
                        ids.push(t);
                    }
                    let allowed_end = c.is_finished()
                        || c.allowed()
                            .is_ok_and(|a| tok.eos_ids().iter().any(|&e| a.contains(e)));
                    if !allowed_end {
                        continue;
                    }
                    finished += 1;
                    let text: String = ids
                        .iter()
                        .map(|&t| markers.text(t, &tok.decode(&[t], true)).to_string())
                        .collect();
                    let reply = parse_reply(syntax, &text);
                    assert!(!reply.calls.is_empty(), "{syntax:?} {choice}: {text}");
                    if !parallel || choice.is_object() {
                        assert_eq!(reply.calls.len(), 1, "{syntax:?} {choice}: {text}");
                    }
                    for call in &reply.calls {
                        let name = call.function.name.as_str();
                        assert!(
                            name == "get_weather" || (name == "now" && !choice.is_object()),
                            "{text}"
                        );
                        let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
                        assert!(args.is_object(), "{text}");
                        if name == "get_weather" {
                            assert!(args["city"].is_string() && args["days"].is_u64(), "{text}");
                        }
                    }
                }
                assert!(
                    finished >= 10,
                    "{syntax:?} {choice}: {finished} walks ended"
                );
            }
        }
    }
}
