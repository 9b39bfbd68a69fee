//! Gemma 4's own call syntax: `<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`, where a string
//! is written between `<|"|>` quotes, object keys are bare, and numbers, booleans, arrays and
//! nested objects are written as in JSON. This file reads such a call back into JSON and writes
//! the Lark grammar that makes a forced call follow the function's schema in that syntax.

use serde_json::{Map, Number, Value};

use super::syntax::MarkerTokens;

pub const CALL_OPEN: &str = "<|tool_call>";
pub const CALL_CLOSE: &str = "<tool_call|>";
pub const QUOTE: &str = "<|\"|>";
/// Where the model hands over to the tool: the reply ends there.
pub const RESPONSE_OPEN: &str = "<|tool_response>";

const INTEGER: &str = r"/-?(0|[1-9][0-9]*)/";
const NUMBER: &str = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/";

/// The calls of `tail` (which starts at the first opener): `(name, arguments)` each; None
/// unless every block parses whole.
pub fn calls(tail: &str) -> Option<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for block in tail.split(CALL_OPEN).skip(1) {
        let body = block.strip_prefix("call:")?;
        let brace = body.find('{')?;
        let name = body[..brace].trim();
        if name.is_empty() {
            return None;
        }
        let (args, rest) = value(&body[brace..])?;
        if !args.is_object() {
            return None;
        }
        // The closer may be missing at the very end, where the reply stopped at the handover.
        let rest = rest.trim_start();
        if !(rest.is_empty() || rest.starts_with(CALL_CLOSE)) {
            return None;
        }
        out.push((name.to_string(), args));
    }
    Some(out)
}

/// The Gemma value at the start of `s` (after whitespace), and the rest.
fn value(s: &str) -> Option<(Value, &str)> {
    let s = s.trim_start();
    if let Some(rest) = s.strip_prefix(QUOTE) {
        let end = rest.find(QUOTE)?;
        return Some((
            Value::String(rest[..end].to_string()),
            &rest[end + QUOTE.len()..],
        ));
    }
    if let Some(mut rest) = s.strip_prefix('{') {
        let mut map = Map::new();
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Some((Value::Object(map), r));
        }
        loop {
            let (key, after) = key(rest)?;
            let after = after.trim_start().strip_prefix(':')?;
            let (v, after) = value(after)?;
            map.insert(key, v);
            let after = after.trim_start();
            if let Some(r) = after.strip_prefix(',') {
                rest = r.trim_start();
            } else {
                return Some((Value::Object(map), after.strip_prefix('}')?));
            }
        }
    }
    if let Some(mut rest) = s.strip_prefix('[') {
        let mut items = Vec::new();
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix(']') {
            return Some((Value::Array(items), r));
        }
        loop {
            let (v, after) = value(rest)?;
            items.push(v);
            let after = after.trim_start();
            if let Some(r) = after.strip_prefix(',') {
                rest = r;
            } else {
                return Some((Value::Array(items), after.strip_prefix(']')?));
            }
        }
    }
    // A bare word: a number, a boolean or null, up to the next delimiter.
    let end = s.find([',', '}', ']', '<']).unwrap_or(s.len());
    let word = s[..end].trim();
    let v = match word {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" | "none" | "None" => Value::Null,
        w => Value::Number(number(w)?),
    };
    Some((v, &s[end..]))
}

/// An object key: bare, or quoted as a string.
fn key(s: &str) -> Option<(String, &str)> {
    if let Some(rest) = s.strip_prefix(QUOTE) {
        let end = rest.find(QUOTE)?;
        return Some((rest[..end].to_string(), &rest[end + QUOTE.len()..]));
    }
    let end = s.find(':')?;
    let k = s[..end].trim();
    (!k.is_empty() && !k.contains([',', '{', '}'])).then(|| (k.to_string(), &s[end..]))
}

fn number(w: &str) -> Option<Number> {
    if let Ok(i) = w.parse::<i64>() {
        return Some(i.into());
    }
    Number::from_f64(w.parse::<f64>().ok()?)
}

/// The Lark rules of a forced call of one of `functions` (name, parameter schema), named
/// `call`. Schemas are followed in their structure: types, `properties` (keys in sorted
/// order, as the template writes them; `required` ones always, the others optional), `items`,
/// `enum`, `const`, `anyOf` / `oneOf`, nullable types, string lengths and integer ranges short
/// enough to list; other bounds (patterns, formats, number ranges) are not expressed. As text
/// (a vocabulary where the quote is not a control token) a string holds no `<`.
pub fn call_grammar(functions: &[(&str, &Value)], markers: &MarkerTokens) -> String {
    let mut g = GrammarWriter {
        rules: Vec::new(),
        quote: atom(QUOTE, markers),
        any_written: false,
    };
    let alternatives: Vec<String> = functions
        .iter()
        .map(|(name, schema)| {
            let args = g.object(schema);
            format!(
                "{} \"call:\" {} {args} {}",
                atom(CALL_OPEN, markers),
                Value::String(name.to_string()),
                atom(CALL_CLOSE, markers)
            )
        })
        .collect();
    let mut out = format!("call: {}\n", alternatives.join("\n    | "));
    for r in g.rules {
        out.push_str(&r);
        out.push('\n');
    }
    out
}

/// A marker as a Lark atom: by id when it is a control token, else as text.
pub fn atom(marker: &str, markers: &MarkerTokens) -> String {
    match markers.id(marker) {
        Some(id) => format!("<[{id}]>"),
        None => Value::String(marker.to_string()).to_string(),
    }
}

struct GrammarWriter {
    rules: Vec<String>,
    quote: String,
    any_written: bool,
}

/// The rest of an object's members: the rule, and whether it may be empty. None: no members
/// remain.
type Rest = Option<(String, bool)>;

/// `rest` where it follows something: nothing, optional, or required.
fn then(rest: &Rest) -> String {
    match rest {
        None => String::new(),
        Some((r, true)) => format!(" ({r})?"),
        Some((r, false)) => format!(" {r}"),
    }
}

impl GrammarWriter {
    /// A new rule with this body; its name.
    fn rule(&mut self, body: String) -> String {
        let name = format!("v{}", self.rules.len());
        self.rules.push(format!("{name}: {body}"));
        name
    }

    /// A string of any length (`schema` None) or within the schema's length bounds.
    fn string(&self, schema: Option<&Value>) -> String {
        let bound = |k: &str| schema.and_then(|s| s.get(k)).and_then(Value::as_u64);
        let (min, max) = (bound("minLength").unwrap_or(0), bound("maxLength"));
        let reps = match max {
            Some(max) => format!("{{{min},{max}}}"),
            None if min > 0 => format!("{{{min},}}"),
            None => "*".to_string(),
        };
        // The quote is one control token where the vocabulary has it, so no text spells it;
        // as text, a string stops at the first `<`.
        let char = if self.quote.starts_with("<[") {
            "(?s:.)"
        } else {
            "[^<]"
        };
        format!("{} /{char}{reps}/ {}", self.quote, self.quote)
    }

    /// An integer; within `minimum` / `maximum` when the range is small enough to list, and
    /// without a sign when `minimum` is not negative.
    fn integer(&self, schema: &Value) -> String {
        let bound = |k: &str| schema.get(k).and_then(Value::as_i64);
        match (bound("minimum"), bound("maximum")) {
            (Some(lo), Some(hi)) if lo <= hi && hi - lo < 256 => {
                let options: Vec<String> = (lo..=hi).map(|i| format!("\"{i}\"")).collect();
                format!("({})", options.join(" | "))
            }
            (Some(lo), _) if lo >= 0 => r"/(0|[1-9][0-9]*)/".to_string(),
            _ => INTEGER.to_string(),
        }
    }

    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) => {
                format!("{} {} {}", self.quote, Value::String(s.clone()), self.quote)
            }
            v => Value::String(v.to_string()).to_string(),
        }
    }

    /// An object's braces and members.
    fn object(&mut self, schema: &Value) -> String {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return self.any_object();
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut keys: Vec<&String> = props.keys().collect();
        keys.sort();
        // From the last member back: `first` writes the members from here on when none was
        // written before, `after` when one was (so it starts with a comma).
        let (mut first, mut after): (Rest, Rest) = (None, None);
        for k in keys.into_iter().rev() {
            let v = self.value(&props[k]);
            let member = self.rule(format!("{} {v}", Value::String(format!("{k}:"))));
            let f = format!("{member}{}", then(&after));
            let a = format!("\",\" {member}{}", then(&after));
            if required.contains(&k.as_str()) {
                first = Some((self.rule(f), false));
                after = Some((self.rule(a), false));
            } else {
                first = Some(match first {
                    None => (self.rule(f), true),
                    Some((r, empty)) => (self.rule(format!("{f} | {r}")), empty),
                });
                after = Some(match after {
                    None => (self.rule(a), true),
                    Some((r, empty)) => (self.rule(format!("{a} | {r}")), empty),
                });
            }
        }
        format!("\"{{\"{} \"}}\"", then(&first))
    }

    fn any_object(&mut self) -> String {
        let any = self.any();
        let member = self.rule(format!("/[A-Za-z_][A-Za-z0-9_]*/ \":\" {any}"));
        format!("\"{{\" ({member} (\",\" {member})*)? \"}}\"")
    }

    /// Any Gemma value.
    fn any(&mut self) -> String {
        if !self.any_written {
            self.any_written = true;
            let string = self.string(None);
            self.rules.push(format!(
                "any_value: {string} | {NUMBER} | \"true\" | \"false\" | \"null\" \
                 | \"[\" (any_value (\",\" any_value)*)? \"]\" \
                 | \"{{\" (any_member (\",\" any_member)*)? \"}}\"\n\
                 any_member: /[A-Za-z_][A-Za-z0-9_]*/ \":\" any_value"
            ));
        }
        "any_value".to_string()
    }

    fn value(&mut self, schema: &Value) -> String {
        if let Some(c) = schema.get("const") {
            return self.literal(c);
        }
        if let Some(e) = schema.get("enum").and_then(Value::as_array) {
            let options: Vec<String> = e.iter().map(|v| self.literal(v)).collect();
            return format!("({})", options.join(" | "));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = schema.get(key).and_then(Value::as_array) {
                let options: Vec<String> = options.iter().map(|o| self.value(o)).collect();
                return format!("({})", options.join(" | "));
            }
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if schema.get("properties").is_some() => vec!["object"],
            _ => return self.any(),
        };
        let mut options = Vec::new();
        for t in types {
            options.push(match t {
                "string" => self.string(Some(schema)),
                "integer" => self.integer(schema),
                "number" => NUMBER.to_string(),
                "boolean" => "(\"true\" | \"false\")".to_string(),
                "null" => "\"null\"".to_string(),
                "array" => {
                    let item = match schema.get("items") {
                        Some(items) => self.value(items),
                        None => self.any(),
                    };
                    let item = self.rule(item);
                    format!("\"[\" ({item} (\",\" {item})*)? \"]\"")
                }
                "object" => self.object(schema),
                _ => self.any(),
            });
        }
        if schema.get("nullable") == Some(&Value::Bool(true)) {
            options.push("\"null\"".to_string());
        }
        format!("({})", options.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_read_back_as_json() {
        let text =
            "<|tool_call>call:get_weather{city:<|\"|>Oslo, NO<|\"|>,days:3,opts:{metric:true,\
                    tags:[<|\"|>a<|\"|>,2.5,null]}}<tool_call|><|tool_call>call:now{}<tool_call|>";
        let got = calls(text).unwrap();
        assert_eq!(
            got,
            vec![
                (
                    "get_weather".to_string(),
                    json!({"city": "Oslo, NO", "days": 3, "opts": {"metric": true, "tags": ["a", 2.5, null]}})
                ),
                ("now".to_string(), json!({})),
            ]
        );
        // Stopped at the handover, before the closer.
        assert_eq!(
            calls("<|tool_call>call:now{}").unwrap(),
            vec![("now".to_string(), json!({}))]
        );
        for bad in [
            "<|tool_call>call:{}<tool_call|>",
            "<|tool_call>get{}<tool_call|>",
            "<|tool_call>call:f{a:<|\"|>open}<tool_call|>",
            "<|tool_call>call:f{a:1 b:2}<tool_call|>",
            "<|tool_call>call:f{a:1}x<tool_call|>",
            "<|tool_call>call:f[1]<tool_call|>",
        ] {
            assert_eq!(calls(bad), None, "{bad}");
        }
    }
}
