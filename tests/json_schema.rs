//! A JSON Schema validator for the keywords the structured-output tests use, independent of
//! llguidance (which compiles the schemas into grammars): type, properties, required,
//! additionalProperties, items, enum, const, minItems/maxItems, minLength/maxLength (in
//! characters), minimum/maximum, pattern, and the annotations title and description. A keyword
//! outside that set panics, so a test cannot pass on a rule nothing checked. Included by the
//! tests that need it with `#[path]`.
#![allow(dead_code)] // each test crate uses a different subset

use serde_json::Value;

/// Whether `value` satisfies `schema`.
pub fn is_valid(schema: &Value, value: &Value) -> bool {
    check(schema, value).is_ok()
}

/// `Err` naming the first rule of `schema` that `value` breaks.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let Some(rules) = schema.as_object() else {
        return match schema {
            Value::Bool(true) => Ok(()),
            Value::Bool(false) => Err("the schema false".into()),
            other => panic!("not a schema: {other}"),
        };
    };
    let fail = |what: String| Err(format!("{value} breaks {what}"));
    for (key, rule) in rules {
        let ok = match key.as_str() {
            "title" | "description" => true,
            "type" => match rule {
                Value::String(t) => has_type(value, t),
                Value::Array(ts) => ts.iter().any(|t| has_type(value, t.as_str().unwrap())),
                other => panic!("type {other}"),
            },
            "enum" => rule.as_array().unwrap().contains(value),
            "const" => rule == value,
            "properties" | "additionalProperties" | "required" => {
                object_rules(key, rule, rules, value)?;
                true
            }
            "items" => match value.as_array() {
                Some(items) => {
                    for item in items {
                        check(rule, item)?;
                    }
                    true
                }
                None => true,
            },
            "minItems" => value
                .as_array()
                .is_none_or(|a| a.len() as u64 >= number(rule)),
            "maxItems" => value
                .as_array()
                .is_none_or(|a| a.len() as u64 <= number(rule)),
            "minLength" => value
                .as_str()
                .is_none_or(|s| s.chars().count() as u64 >= number(rule)),
            "maxLength" => value
                .as_str()
                .is_none_or(|s| s.chars().count() as u64 <= number(rule)),
            "minimum" => value.as_f64().is_none_or(|x| x >= rule.as_f64().unwrap()),
            "maximum" => value.as_f64().is_none_or(|x| x <= rule.as_f64().unwrap()),
            "pattern" => value.as_str().is_none_or(|s| {
                regex::Regex::new(rule.as_str().unwrap())
                    .unwrap_or_else(|e| panic!("pattern {rule}: {e}"))
                    .is_match(s)
            }),
            other => panic!("json_schema.rs does not check the keyword {other:?}"),
        };
        if !ok {
            return fail(format!("{key}: {rule}"));
        }
    }
    Ok(())
}

/// properties, required and additionalProperties on an object (other values pass them).
fn object_rules(
    key: &str,
    rule: &Value,
    rules: &serde_json::Map<String, Value>,
    value: &Value,
) -> Result<(), String> {
    let Some(fields) = value.as_object() else {
        return Ok(());
    };
    let declared = rules.get("properties").and_then(Value::as_object);
    match key {
        "properties" => {
            for (name, sub) in rule.as_object().unwrap() {
                if let Some(v) = fields.get(name) {
                    check(sub, v).map_err(|e| format!("{name}: {e}"))?;
                }
            }
        }
        "required" => {
            for name in rule.as_array().unwrap() {
                let name = name.as_str().unwrap();
                if !fields.contains_key(name) {
                    return Err(format!("{value} lacks the required {name}"));
                }
            }
        }
        _ => {
            for (name, v) in fields {
                if !declared.is_some_and(|d| d.contains_key(name)) {
                    check(rule, v).map_err(|e| format!("additional {name}: {e}"))?;
                }
            }
        }
    }
    Ok(())
}

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        // JSON Schema counts 2.0 as an integer: the value, not its spelling.
        "integer" => value.as_f64().is_some_and(|x| x.fract() == 0.0),
        other => panic!("type {other:?}"),
    }
}

fn number(rule: &Value) -> u64 {
    rule.as_u64()
        .unwrap_or_else(|| panic!("{rule} is not a count"))
}
