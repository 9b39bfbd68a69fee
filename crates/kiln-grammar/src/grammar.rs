//! What a client may constrain output to, and how each becomes an `llguidance` grammar.

use llguidance::api::TopLevelGrammar;
use llguidance::JsonCompileOptions;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this schema (`json_schema`, a tool's parameters).
    JsonSchema(Value),
    /// Text the whole of which matches this regex (Rust `regex` syntax).
    Regex(String),
    /// A grammar in llguidance's Lark syntax (may embed JSON schemas with `%json`).
    Lark(String),
}

impl Grammar {
    /// The llguidance form. JSON is written compactly with one space after `:` and `,` unless
    /// the schema says otherwise (`x-guidance`): free whitespace lets a model pad forever.
    pub(crate) fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(with_layout(json!({"type": "object"})))
            }
            Grammar::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_layout(schema.clone()))
            }
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Grammar::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        }
    }
}

/// The schema with kiln's JSON layout, unless it names its own. A schema that is `true` or
/// not an object is left as it is (llguidance judges it).
fn with_layout(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        if !obj.contains_key("x-guidance") {
            let opts = JsonCompileOptions {
                whitespace_flexible: false,
                item_separator: ", ".into(),
                key_separator: ": ".into(),
                ..JsonCompileOptions::default()
            };
            if let Ok(v) = serde_json::to_value(&opts) {
                obj.insert("x-guidance".into(), v);
            }
        }
    }
    schema
}
