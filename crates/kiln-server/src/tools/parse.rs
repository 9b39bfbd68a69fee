//! A reply in a model's tool-call syntax, read back into OpenAI's `tool_calls`: whole (the
//! non-streaming answer) or as it streams (text before the first call streams as content; from
//! the call's opening marker on, the rest is held and parsed when the reply ends). Both read the
//! same text the same way, so streamed and whole answers agree.

use serde::Serialize;
use serde_json::Value;

use super::gemma;
use super::syntax::ToolSyntax;

/// One call, as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionCallOut {
    pub name: String,
    /// The arguments as JSON text (OpenAI's shape).
    pub arguments: String,
}

/// A reply split into its text and its calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedReply {
    /// None when the reply holds only calls (or whitespace before them).
    pub content: Option<String>,
    pub calls: Vec<ToolCallOut>,
}

/// A fresh call id: `call_` and 24 letters and digits (Mistral's syntax takes 9 alone).
fn call_id(syntax: ToolSyntax) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = crate::state::unix_now() ^ NEXT.fetch_add(1, Ordering::Relaxed).rotate_left(32);
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15 ^ (std::process::id() as u64).rotate_left(17);
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let len = if syntax == ToolSyntax::MistralArgs {
        9
    } else {
        24
    };
    let body: String = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % alphabet.len() as u64) as usize] as char
        })
        .collect();
    if syntax == ToolSyntax::MistralArgs {
        body
    } else {
        format!("call_{body}")
    }
}

fn call(syntax: ToolSyntax, name: &str, args: &Value) -> Option<ToolCallOut> {
    let arguments = match args {
        Value::Object(_) => args.to_string(),
        // Some models write the arguments as a JSON string.
        Value::String(s) if serde_json::from_str::<Value>(s).is_ok_and(|v| v.is_object()) => {
            s.clone()
        }
        Value::Null => "{}".to_string(),
        _ => return None,
    };
    Some(ToolCallOut {
        id: call_id(syntax),
        kind: "function",
        function: FunctionCallOut {
            name: name.to_string(),
            arguments,
        },
    })
}

/// `{"name": ..., "arguments" | "parameters": {...}}` as a call.
fn object_call(syntax: ToolSyntax, v: &Value) -> Option<ToolCallOut> {
    let name = v.get("name")?.as_str()?;
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .unwrap_or(&Value::Null);
    call(syntax, name, args)
}

/// The first JSON value at the start of `s` (after whitespace), and the rest.
fn leading_json(s: &str) -> Option<(Value, &str)> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    let v = it.next()?.ok()?;
    Some((v, &s[it.byte_offset()..]))
}

/// The calls of the text from the syntax's opener on; None unless every call parses.
fn calls_of(syntax: ToolSyntax, tail: &str) -> Option<Vec<ToolCallOut>> {
    let mut calls = Vec::new();
    match syntax {
        ToolSyntax::Hermes => {
            for block in tail.split("<tool_call>").skip(1) {
                let body = block.split("</tool_call>").next().unwrap_or("");
                let v: Value = serde_json::from_str(body.trim()).ok()?;
                calls.push(object_call(syntax, &v)?);
            }
        }
        ToolSyntax::LlamaJson => {
            let mut rest = tail
                .trim_start()
                .strip_prefix("<|python_tag|>")
                .unwrap_or(tail);
            loop {
                let (v, after) = leading_json(rest)?;
                calls.push(object_call(syntax, &v)?);
                rest = after.trim_start();
                match rest.strip_prefix(';') {
                    Some(r) => rest = r,
                    None if rest.is_empty() => break,
                    None => return None,
                }
            }
        }
        ToolSyntax::MistralList => {
            for segment in tail.split("[TOOL_CALLS]").skip(1) {
                let (v, _) = leading_json(segment)?;
                match v {
                    Value::Array(items) => {
                        for item in &items {
                            calls.push(object_call(syntax, item)?);
                        }
                    }
                    v => calls.push(object_call(syntax, &v)?),
                }
            }
        }
        ToolSyntax::Gemma4 => {
            for (name, args) in gemma::calls(tail)? {
                calls.push(call(syntax, &name, &args)?);
            }
        }
        ToolSyntax::MistralArgs => {
            for segment in tail.split("[TOOL_CALLS]").skip(1) {
                let (head, args) = segment.split_once("[ARGS]")?;
                let name = head.split("[CALL_ID]").next().unwrap_or("").trim();
                let (v, _) = leading_json(args)?;
                if name.is_empty() {
                    return None;
                }
                calls.push(call(syntax, name, &v)?);
            }
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// Where the calls begin in `text`: the opener, or for Llama's bare JSON the first character
/// when the reply starts (after whitespace) with `{` or the python tag.
fn opener_at(syntax: ToolSyntax, text: &str) -> Option<usize> {
    match syntax {
        ToolSyntax::LlamaJson => {
            let start = text.len() - text.trim_start().len();
            let t = &text[start..];
            (t.starts_with('{') || t.starts_with("<|python_tag|>")).then_some(start)
        }
        s => text.find(s.opener()),
    }
}

/// Splits a whole reply. Text that fails to parse as calls stays content.
pub fn parse_reply(syntax: ToolSyntax, text: &str) -> ParsedReply {
    let content = |t: &str| (!t.trim().is_empty()).then(|| t.to_string());
    if let Some(at) = opener_at(syntax, text) {
        if let Some(calls) = calls_of(syntax, &text[at..]) {
            return ParsedReply {
                content: content(&text[..at]),
                calls,
            };
        }
    }
    ParsedReply {
        content: content(text),
        calls: Vec::new(),
    }
}

/// A reply being streamed: what may go out as content now, and the calls at the end.
#[derive(Debug)]
pub struct ToolStreamer {
    syntax: ToolSyntax,
    /// Everything so far.
    text: String,
    /// Bytes of `text` already sent as content.
    sent: usize,
}

impl ToolStreamer {
    pub fn new(syntax: ToolSyntax) -> ToolStreamer {
        ToolStreamer {
            syntax,
            text: String::new(),
            sent: 0,
        }
    }

    /// Takes more of the reply; returns the content that can go out now. Held back: anything
    /// from a call's opener on, text that may be the start of an opener, and leading whitespace
    /// (a reply that is only calls has no content).
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        let safe = self.safe_end();
        if safe <= self.sent || self.text[..safe].trim().is_empty() {
            return String::new();
        }
        let out = self.text[self.sent..safe].to_string();
        self.sent = safe;
        out
    }

    /// How much of the text is content for sure.
    fn safe_end(&self) -> usize {
        let text = &self.text;
        if let Some(at) = opener_at(self.syntax, text) {
            return at;
        }
        if self.syntax == ToolSyntax::LlamaJson {
            // Only a reply that starts with `{` is a call; until something else shows, wait.
            let t = text.trim_start();
            return if t.is_empty() || "<|python_tag|>".starts_with(t) {
                0
            } else {
                text.len()
            };
        }
        // Keep back a tail that could begin the opener.
        let opener = self.syntax.opener();
        let mut end = text.len();
        for k in (1..opener.len()).rev() {
            if text.len() >= k
                && text.is_char_boundary(text.len() - k)
                && opener.starts_with(&text[text.len() - k..])
            {
                end = text.len() - k;
                break;
            }
        }
        end
    }

    /// The reply is over: the content not yet sent and the calls, as [`parse_reply`] reads the
    /// whole text.
    pub fn finish(&mut self) -> (String, Vec<ToolCallOut>) {
        let parsed = parse_reply(self.syntax, &self.text);
        let content_end = if parsed.calls.is_empty() {
            self.text.len()
        } else {
            opener_at(self.syntax, &self.text).unwrap_or(self.text.len())
        };
        let rest = if self.text[..content_end].trim().is_empty() {
            String::new()
        } else {
            self.text[self.sent.min(content_end)..content_end].to_string()
        };
        self.sent = content_end;
        (rest, parsed.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: &ParsedReply) -> Vec<(String, Value)> {
        r.calls
            .iter()
            .map(|c| {
                (
                    c.function.name.clone(),
                    serde_json::from_str(&c.function.arguments).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn each_syntax_parses() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let cases = [
            (ToolSyntax::Hermes, "Let me check.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", \"arguments\": {}}\n</tool_call>",
                Some("Let me check.\n"), vec![("w", v(r#"{"c":"Oslo"}"#)), ("t", v("{}"))]),
            (ToolSyntax::LlamaJson, " {\"name\": \"w\", \"parameters\": {\"c\": 1}}", None, vec![("w", v(r#"{"c":1}"#))]),
            (ToolSyntax::LlamaJson, "<|python_tag|>{\"name\": \"w\", \"parameters\": {}}; {\"name\": \"t\", \"parameters\": {}}", None,
                vec![("w", v("{}")), ("t", v("{}"))]),
            (ToolSyntax::MistralList, "[TOOL_CALLS][{\"name\": \"w\", \"arguments\": {\"c\": 2}}, {\"name\": \"t\", \"arguments\": \"{}\"}]", None,
                vec![("w", v(r#"{"c":2}"#)), ("t", v("{}"))]),
            (ToolSyntax::MistralArgs, "ok[TOOL_CALLS]w[ARGS]{\"c\": 3}[TOOL_CALLS]t[CALL_ID]abc123XYZ[ARGS]{}", Some("ok"),
                vec![("w", v(r#"{"c":3}"#)), ("t", v("{}"))]),
            (ToolSyntax::Gemma4, "Checking.<|tool_call>call:w{c:<|\"|>Oslo<|\"|>,n:[1,2]}<tool_call|><|tool_call>call:t{}<tool_call|>", Some("Checking."),
                vec![("w", v(r#"{"c":"Oslo","n":[1,2]}"#)), ("t", v("{}"))]),
        ];
        for (syntax, text, content, want) in cases {
            let r = parse_reply(syntax, text);
            assert_eq!(r.content.as_deref(), content, "{syntax:?}: {text}");
            let want: Vec<(String, Value)> =
                want.into_iter().map(|(n, a)| (n.to_string(), a)).collect();
            assert_eq!(names(&r), want, "{syntax:?}: {text}");
            assert!(r
                .calls
                .iter()
                .all(|c| c.kind == "function" && !c.id.is_empty()));
        }
    }

    #[test]
    fn what_does_not_parse_stays_text() {
        for (syntax, text) in [
            (ToolSyntax::Hermes, "<tool_call>\n{\"name\": \"w\", \"argu"),
            (ToolSyntax::Hermes, "plain words"),
            (ToolSyntax::LlamaJson, "{\"x\": 1} and more"),
            (
                ToolSyntax::LlamaJson,
                "Sure: {\"name\": \"w\", \"parameters\": {}}",
            ),
            (ToolSyntax::MistralArgs, "[TOOL_CALLS][ARGS]{}"),
            (
                ToolSyntax::Gemma4,
                "<|tool_call>call:w{c:<|\"|>Oslo}<tool_call|>",
            ),
        ] {
            let r = parse_reply(syntax, text);
            assert!(r.calls.is_empty(), "{text}");
            assert_eq!(r.content.as_deref(), Some(text));
        }
    }

    /// Streamed in every split of the text, content plus calls equal the whole parse.
    #[test]
    fn streaming_agrees_with_the_whole_reply() {
        let texts = [
            (ToolSyntax::Hermes, "Checking <tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"é\"}}\n</tool_call>"),
            (ToolSyntax::Hermes, "no calls here, just <tool talk"),
            (ToolSyntax::Hermes, "\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>"),
            (ToolSyntax::LlamaJson, "{\"name\": \"w\", \"parameters\": {}}"),
            (ToolSyntax::LlamaJson, "Hello {there}"),
            (ToolSyntax::MistralArgs, "hi[TOOL_CALLS]w[ARGS]{\"a\": [1, 2]}"),
            (ToolSyntax::Gemma4, "So <|tool_call>call:w{a:<|\"|>é<|\"|>}<tool_call|>"),
            (ToolSyntax::Gemma4, "a <|tool no call"),
        ];
        for (syntax, text) in texts {
            let whole = parse_reply(syntax, text);
            let chars: Vec<char> = text.chars().collect();
            for step in [1, 2, 3, 7, chars.len()] {
                let mut s = ToolStreamer::new(syntax);
                let mut content = String::new();
                for piece in chars.chunks(step) {
                    content += &s.push(&piece.iter().collect::<String>());
                }
                let (rest, calls) = s.finish();
                content += &rest;
                assert_eq!(
                    (!content.is_empty()).then_some(content.clone()),
                    whole.content,
                    "{syntax:?} step {step}: {text}"
                );
                let strip =
                    |c: &[ToolCallOut]| c.iter().map(|c| c.function.clone()).collect::<Vec<_>>();
                assert_eq!(strip(&calls), strip(&whole.calls), "{syntax:?} step {step}");
            }
        }
    }
}
