//! Constrained output as requests ask for it: OpenAI's `response_format` (`json_object`,
//! `json_schema`), vLLM's `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`
//! (a Lark grammar in llguidance's syntax), and `logit_bias`. At most one constraint per
//! request; each becomes a [`Grammar`] the engine compiles.

use kiln_engine::Grammar;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    pub json_schema: Option<JsonSchemaFormat>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub description: Option<String>,
    pub schema: Option<Value>,
    /// Output always validates whatever this says (kiln constrains every token).
    pub strict: Option<bool>,
}

/// The constraint fields of a request, as sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuidedFields<'a> {
    pub response_format: Option<&'a ResponseFormat>,
    pub guided_json: Option<&'a Value>,
    pub guided_regex: Option<&'a str>,
    pub guided_choice: Option<&'a [String]>,
    pub guided_grammar: Option<&'a str>,
}

impl GuidedFields<'_> {
    /// The one grammar the request asks for, if any; a field that is malformed, or a second
    /// constraint beside the first, is refused by name.
    pub fn grammar(&self) -> Result<Option<Grammar>, ApiError> {
        let mut found: Vec<(&str, Grammar)> = Vec::new();
        if let Some(f) = self.response_format {
            if let Some(g) = response_format_grammar(f)? {
                found.push(("response_format", g));
            }
        }
        if let Some(v) = self.guided_json {
            found.push((
                "guided_json",
                Grammar::JsonSchema(schema_value(v, "guided_json")?),
            ));
        }
        if let Some(rx) = self.guided_regex {
            found.push(("guided_regex", Grammar::Regex(rx.to_string())));
        }
        if let Some(choices) = self.guided_choice {
            found.push(("guided_choice", choice_grammar(choices)?));
        }
        if let Some(src) = self.guided_grammar {
            found.push(("guided_grammar", Grammar::Lark(src.to_string())));
        }
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop().map(|f| f.1)),
            _ => Err(ApiError::invalid_param(
                found[1].0,
                format!(
                    "Only one output constraint per request: `{}` and `{}` were both given.",
                    found[0].0, found[1].0
                ),
            )),
        }
    }
}

fn response_format_grammar(f: &ResponseFormat) -> Result<Option<Grammar>, ApiError> {
    match f.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(Grammar::JsonObject)),
        "json_schema" => {
            let schema = f
                .json_schema
                .as_ref()
                .and_then(|j| j.schema.as_ref())
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "response_format.json_schema.schema",
                        "`response_format` of type `json_schema` needs `json_schema.schema`.",
                    )
                })?;
            Ok(Some(Grammar::JsonSchema(schema_value(
                schema,
                "response_format.json_schema.schema",
            )?)))
        }
        other => Err(ApiError::invalid_param(
            "response_format.type",
            format!("Unknown response_format type `{other}`; expected text, json_object or json_schema."),
        )),
    }
}

/// A schema given as an object (or `true`), or as a string holding one (vLLM accepts both).
fn schema_value(v: &Value, param: &str) -> Result<Value, ApiError> {
    let v = match v {
        Value::String(s) => serde_json::from_str(s).map_err(|e| {
            ApiError::invalid_param(param, format!("`{param}` is not a JSON schema: {e}"))
        })?,
        v => v.clone(),
    };
    if v.is_object() || v == Value::Bool(true) {
        Ok(v)
    } else {
        Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be a JSON schema object."),
        ))
    }
}

/// Exactly one of the strings.
fn choice_grammar(choices: &[String]) -> Result<Grammar, ApiError> {
    if choices.is_empty() {
        return Err(ApiError::invalid_param(
            "guided_choice",
            "`guided_choice` must list at least one string.",
        ));
    }
    let alternatives: Vec<String> = choices.iter().map(|c| escape_regex(c)).collect();
    Ok(Grammar::Regex(format!("({})", alternatives.join("|"))))
}

/// `s` as a regex that matches it literally (the meta characters Rust's `regex::escape`
/// escapes).
fn escape_regex(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `logit_bias` (token id as a string, to a value in [-100, 100]) as the engine takes it:
/// distinct ids in ascending order.
pub fn logit_bias(
    map: Option<&serde_json::Map<String, Value>>,
    vocab_size: usize,
) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(map) = map else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let id: u32 = key
            .trim()
            .parse()
            .ok()
            .filter(|&id: &u32| (id as usize) < vocab_size)
            .ok_or_else(|| {
                ApiError::invalid_param(
                    "logit_bias",
                    format!("`logit_bias` key `{key}` is not a token id below {vocab_size}."),
                )
            })?;
        let bias = value
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                ApiError::invalid_param(
                    "logit_bias",
                    format!("`logit_bias` for token {key} must be a number in [-100, 100], got {value}."),
                )
            })?;
        out.push((id, bias as f32));
    }
    out.sort_by_key(|b| b.0);
    if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(ApiError::invalid_param(
            "logit_bias",
            format!("`logit_bias` names token {} twice.", w[0].0),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn format(v: Value) -> ResponseFormat {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn response_formats_become_grammars() {
        let g = |v: Value| {
            let f = format(v);
            GuidedFields {
                response_format: Some(&f),
                ..Default::default()
            }
            .grammar()
        };
        assert_eq!(g(json!({"type": "text"})).unwrap(), None);
        assert_eq!(
            g(json!({"type": "json_object"})).unwrap(),
            Some(Grammar::JsonObject)
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            g(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}))
                .unwrap(),
            Some(Grammar::JsonSchema(schema))
        );
        let e = g(json!({"type": "json_schema", "json_schema": {"name": "x"}})).unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("response_format.json_schema.schema")
        );
        let e = g(json!({"type": "yaml"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("response_format.type"));
    }

    #[test]
    fn guided_fields_and_their_conflicts() {
        let schema_text = Value::String(r#"{"type": "object"}"#.into());
        let f = GuidedFields {
            guided_json: Some(&schema_text),
            ..Default::default()
        };
        assert_eq!(
            f.grammar().unwrap(),
            Some(Grammar::JsonSchema(json!({"type": "object"})))
        );
        let choices = vec!["yes".to_string(), "no (maybe)".to_string()];
        let f = GuidedFields {
            guided_choice: Some(&choices),
            ..Default::default()
        };
        assert_eq!(
            f.grammar().unwrap(),
            Some(Grammar::Regex("(yes|no \\(maybe\\))".into()))
        );
        let f = GuidedFields {
            guided_choice: Some(&choices),
            guided_regex: Some("a+"),
            ..Default::default()
        };
        assert_eq!(
            f.grammar().unwrap_err().param.as_deref(),
            Some("guided_choice")
        );
        let bad = json!(5);
        let f = GuidedFields {
            guided_json: Some(&bad),
            ..Default::default()
        };
        assert_eq!(
            f.grammar().unwrap_err().param.as_deref(),
            Some("guided_json")
        );
    }

    #[test]
    fn logit_bias_is_checked_and_sorted() {
        let m = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            logit_bias(Some(&m(json!({"7": 1.5, "2": -100}))), 10).unwrap(),
            vec![(2, -100.0), (7, 1.5)]
        );
        assert!(logit_bias(None, 10).unwrap().is_empty());
        for bad in [
            json!({"10": 1}),
            json!({"x": 1}),
            json!({"1": 101}),
            json!({"1": "a"}),
            json!({"1": 1, "01": 2}),
        ] {
            let e = logit_bias(Some(&m(bad.clone())), 10).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("logit_bias"), "{bad}");
        }
    }
}
