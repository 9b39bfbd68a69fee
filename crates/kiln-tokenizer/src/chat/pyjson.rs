//! Python's `json.dumps`, as the `tojson` filter of transformers' chat templates calls it:
//! `", "`/`": "` separators (`","` with an indent), no HTML escaping, non-ASCII kept, floats
//! written the way Python's `repr` writes them. minijinja's own `tojson` escapes `<`, `>` and
//! `'`, which would change the prompt text a model was trained on.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

pub struct DumpOptions {
    /// Spaces per level; None writes everything on one line.
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
    pub ensure_ascii: bool,
}

impl DumpOptions {
    pub fn new(indent: Option<String>) -> DumpOptions {
        let item_sep = if indent.is_some() { "," } else { ", " };
        DumpOptions {
            indent,
            item_sep: item_sep.into(),
            key_sep: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        }
    }
}

const MAX_DEPTH: usize = 128;

pub fn dumps(v: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, v, opts, 0)?;
    Ok(out)
}

fn newline(out: &mut String, opts: &DumpOptions, depth: usize) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn write_value(out: &mut String, v: &Value, opts: &DumpOptions, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => out.push_str(&py_float(f64::try_from(v.clone()).unwrap_or(f64::NAN))),
        ValueKind::String => write_str(out, v.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_list(out, &items, opts, depth)?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if opts.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(out, opts, depth + 1);
                match k.as_str() {
                    Some(s) => write_str(out, s, opts.ensure_ascii),
                    None => write_str(out, &k.to_string(), opts.ensure_ascii),
                }
                out.push_str(&opts.key_sep);
                write_value(out, &v.get_item(k)?, opts, depth + 1)?;
            }
            newline(out, opts, depth);
            out.push('}');
        }
        ValueKind::Bytes => write_str(
            out,
            &String::from_utf8_lossy(v.as_bytes().unwrap_or_default()),
            opts.ensure_ascii,
        ),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a value of kind {}", v.kind()),
            ))
        }
    }
    Ok(())
}

fn write_list(
    out: &mut String,
    items: &[Value],
    opts: &DumpOptions,
    depth: usize,
) -> Result<(), Error> {
    if items.is_empty() {
        out.push_str("[]");
        return Ok(());
    }
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&opts.item_sep);
        }
        newline(out, opts, depth + 1);
        write_value(out, item, opts, depth + 1)?;
    }
    newline(out, opts, depth);
    out.push(']');
    Ok(())
}

/// Python's float repr: shortest round-trip digits, `1.0` for integral values, exponent form
/// outside [1e-4, 1e16).
pub fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{f:e}");
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sample() -> Value {
        let mut inner = BTreeMap::new();
        inner.insert("x".to_string(), Value::from(1.5));
        inner.insert(
            "y".to_string(),
            Value::from(vec![Value::from(1), Value::from(2.0)]),
        );
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), Value::from("<é>\n\"'"));
        m.insert("b".to_string(), Value::from(inner));
        m.insert("c".to_string(), Value::from(()));
        Value::from(m)
    }

    #[test]
    fn matches_python_json_dumps() {
        // json.dumps({"a": "<é>\n\"'", "b": {"x": 1.5, "y": [1, 2.0]}, "c": None}, ensure_ascii=False)
        let one_line = dumps(&sample(), &DumpOptions::new(None)).unwrap();
        assert_eq!(
            one_line,
            r#"{"a": "<é>\n\"'", "b": {"x": 1.5, "y": [1, 2.0]}, "c": null}"#
        );
        // ... with indent=2
        let pretty = dumps(&sample(), &DumpOptions::new(Some("  ".into()))).unwrap();
        let want = "{\n  \"a\": \"<é>\\n\\\"'\",\n  \"b\": {\n    \"x\": 1.5,\n    \"y\": [\n      1,\n      2.0\n    ]\n  },\n  \"c\": null\n}";
        assert_eq!(pretty, want);
        let mut ascii = DumpOptions::new(None);
        ascii.ensure_ascii = true;
        assert_eq!(
            dumps(&Value::from("é😀"), &ascii).unwrap(),
            r#""\u00e9\ud83d\ude00""#
        );
    }

    #[test]
    fn floats_print_like_python_repr() {
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.1), "0.1");
        assert_eq!(py_float(1e20), "1e+20");
        assert_eq!(py_float(1.5e-5), "1.5e-05");
        assert_eq!(py_float(-2.5), "-2.5");
        assert_eq!(py_float(f64::INFINITY), "Infinity");
    }
}
