//! A minijinja environment that behaves like the Jinja2 sandbox transformers renders chat
//! templates in: `trim_blocks` and `lstrip_blocks`, loop controls, Python string and dict methods,
//! and the globals transformers adds (`raise_exception`, `strftime_now`, its own `tojson`).

use minijinja::value::{Kwargs, Rest, Value};
use minijinja::{Environment, Error, ErrorKind};

use super::pyjson::{dumps, DumpOptions};
use super::strftime::Civil;

/// The name under which the template is stored in its environment.
pub const TEMPLATE_NAME: &str = "chat";

/// `fixed_now` (seconds since the epoch) pins the clock `strftime_now` reads.
pub fn build(source: &str, fixed_now: Option<i64>) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| Error::new(ErrorKind::SyntaxError, e.to_string()))?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    minijinja_contrib::add_to_environment(&mut env);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", move |fmt: String| {
        fixed_now
            .map(Civil::from_unix)
            .unwrap_or_else(Civil::now)
            .format(&fmt)
    });
    env.add_filter("tojson", tojson);
    env.add_test("iterable", is_iterable);
    env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(source))?;
    Ok(env)
}

/// Python's notion: None and numbers are not iterable (minijinja iterates None as empty), an
/// undefined value is (Jinja2's Undefined iterates as empty).
fn is_iterable(v: &Value) -> bool {
    use minijinja::value::ValueKind as K;
    match v.kind() {
        K::Undefined => true,
        K::None | K::Bool | K::Number | K::Invalid => false,
        _ => v.try_iter().is_ok(),
    }
}

/// The error a template raises on purpose (wrong roles, unsupported features).
pub const RAISED: &str = "template raised an exception";

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}: {msg}"),
    ))
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match args.first() {
        Some(v) => Some(v.clone()),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(v.as_usize().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be a number or a string",
                )
            })?)),
        },
    };
    let mut opts = DumpOptions::new(indent);
    if let Some(seps) = kwargs.get::<Option<Value>>("separators")? {
        if !seps.is_none() {
            let parts: Vec<Value> = seps.try_iter()?.collect();
            match (
                parts.first().and_then(Value::as_str),
                parts.get(1).and_then(Value::as_str),
            ) {
                (Some(item), Some(key)) => {
                    (opts.item_sep, opts.key_sep) = (item.to_string(), key.to_string())
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ))
                }
            }
        }
    }
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    opts.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    // Marked safe: the text goes into a prompt, never through HTML escaping.
    Ok(Value::from_safe_string(dumps(value, &opts)?))
}

/// transformers' `{% generation %}` ... `{% endgeneration %}` only marks assistant text for
/// training masks; for rendering the tags are dropped and their content kept.
fn strip_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        let after = &rest[start + 2..];
        let inner = after.trim_start_matches(['-', '+']).trim_start();
        let word_len = inner
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(inner.len());
        let word = &inner[..word_len];
        let close = inner[word_len..]
            .trim_start()
            .trim_start_matches(['-', '+']);
        if (word == "generation" || word == "endgeneration") && close.starts_with("%}") {
            out.push_str(&rest[..start]);
            // `close` is a suffix of `rest`; continue after its "%}".
            rest = &rest[rest.len() - close.len() + 2..];
        } else {
            out.push_str(&rest[..start + 2]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// JSON (request bodies, extra template variables) to a template value.
pub fn json_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (_, Some(u), _) => Value::from(u),
            (_, _, Some(f)) => Value::from(f),
            _ => Value::from(()),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => a.iter().map(json_value).collect(),
        serde_json::Value::Object(o) => Value::from(
            o.iter()
                .map(|(k, v)| (k.clone(), json_value(v)))
                .collect::<std::collections::BTreeMap<_, _>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_are_dropped_and_content_kept() {
        let src = "a{% generation %}b{%- endgeneration -%}c{% if x %}d{% endif %}";
        assert_eq!(strip_generation_tags(src), "abc{% if x %}d{% endif %}");
        assert_eq!(strip_generation_tags("{{ '{%' }}"), "{{ '{%' }}");
    }

    #[test]
    fn python_flavoured_helpers_work_in_templates() {
        let src = "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ ' x '.strip() }}|{{ d.items()|list|length }}\
                   |{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}\
                   |{% set ns = namespace(n=0) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}\
                   |{{ none is iterable }}{{ 'ab' is iterable }}{{ nope is iterable }}";
        let env = build(src, None).unwrap();
        let d = json_value(&serde_json::json!({"k": [1, "<v>"]}));
        let out = env
            .get_template(TEMPLATE_NAME)
            .unwrap()
            .render(minijinja::context! { d => d })
            .unwrap();
        assert_eq!(
            out,
            "{\"k\": [1, \"<v>\"]}|{\n  \"k\": [\n    1,\n    \"<v>\"\n  ]\n}|x|1|01|1|FalseTrueTrue"
        );
    }

    #[test]
    fn a_fixed_clock_pins_strftime_now() {
        let env = build("{{ strftime_now('%d %b %Y') }}", Some(1_721_999_109)).unwrap();
        assert_eq!(
            env.get_template(TEMPLATE_NAME).unwrap().render(()).unwrap(),
            "26 Jul 2024"
        );
    }

    #[test]
    fn raise_exception_becomes_an_error_with_the_message() {
        let env = build("{{ raise_exception('roles must alternate') }}", None).unwrap();
        let err = env
            .get_template(TEMPLATE_NAME)
            .unwrap()
            .render(())
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("roles must alternate"),
            "{err:#}"
        );
    }
}
