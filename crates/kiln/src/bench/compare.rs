//! kiln's figures beside the reference engines' of the same call: one line per case any of
//! them measured, with kiln / llama.cpp and kiln / transformers, as scripts/bench/combine.py
//! prints them.

use serde_json::{json, Value};

use super::versus::RefRow;

/// The engines in column order.
const ENGINES: [&str; 3] = ["kiln", "llama.cpp", "transformers"];

/// One case: its key and each engine's median tok/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub test: String,
    pub tokens: usize,
    pub concurrency: usize,
    /// tok/s of kiln, llama.cpp, transformers (None: not measured).
    pub tok_s: [Option<f64>; 3],
}

impl Line {
    /// kiln's figure over `engine`'s.
    pub fn ratio(&self, engine: usize) -> Option<f64> {
        match (self.tok_s[0], self.tok_s[engine]) {
            (Some(k), Some(r)) if r > 0.0 => Some(k / r),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "test": self.test,
            "tokens": self.tokens,
            "concurrency": self.concurrency,
        });
        for (i, e) in ENGINES.iter().enumerate() {
            v[*e] = json!(self.tok_s[i]);
        }
        v["kiln_vs_llama.cpp"] = json!(self.ratio(1));
        v["kiln_vs_transformers"] = json!(self.ratio(2));
        v
    }
}

/// Joins kiln's rows (as `Row::to_json` writes them; drafted rows are left out) with the
/// references' by (test, tokens, streams): prefill first, then by tokens and streams.
pub fn compare(kiln: &[Value], refs: &[RefRow]) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    let mut put = |test: &str, tokens: usize, c: usize, engine: usize, tok_s: f64| match lines
        .iter_mut()
        .find(|l| l.test == test && l.tokens == tokens && l.concurrency == c)
    {
        Some(l) => l.tok_s[engine] = Some(tok_s),
        None => {
            let mut l = Line {
                test: test.to_string(),
                tokens,
                concurrency: c,
                tok_s: [None; 3],
            };
            l.tok_s[engine] = Some(tok_s);
            lines.push(l);
        }
    };
    for r in kiln {
        let test = r["test"].as_str().unwrap_or("");
        if !matches!(test, "prefill" | "decode") || r.get("draft").is_some() {
            continue;
        }
        let (Some(tokens), Some(c), Some(t)) = (
            r["tokens"].as_u64(),
            r["concurrency"].as_u64(),
            r["tok_s"].as_f64(),
        ) else {
            continue;
        };
        put(test, tokens as usize, c as usize, 0, t);
    }
    for r in refs {
        let engine = ENGINES.iter().position(|&e| e == r.engine).unwrap_or(0);
        put(r.test, r.tokens, r.concurrency, engine, r.tok_s);
    }
    lines.sort_by_key(|l| (l.test != "prefill", l.tokens, l.concurrency));
    lines
}

/// The side-by-side table (columns only for the engines measured), with the references'
/// versions and notes under it.
pub fn table(lines: &[Line], versions: &[String], notes: &[String]) -> String {
    let present: Vec<usize> = (0..3)
        .filter(|&e| lines.iter().any(|l| l.tok_s[e].is_some()))
        .collect();
    let mut head: Vec<String> = vec!["test".into(), "tokens".into(), "streams".into()];
    head.extend(present.iter().map(|&e| format!("{} tok/s", ENGINES[e])));
    head.extend(
        present
            .iter()
            .filter(|&&e| e > 0)
            .map(|&e| format!("kiln/{}", ENGINES[e])),
    );
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            let mut cells = vec![
                l.test.clone(),
                l.tokens.to_string(),
                l.concurrency.to_string(),
            ];
            cells.extend(
                present
                    .iter()
                    .map(|&e| l.tok_s[e].map_or(String::new(), |t| format!("{t:.1}"))),
            );
            cells.extend(
                present
                    .iter()
                    .filter(|&&e| e > 0)
                    .map(|&e| l.ratio(e).map_or(String::new(), |r| format!("{r:.2}x"))),
            );
            cells
        })
        .collect();
    let mut widths: Vec<usize> = head.iter().map(String::len).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let fmt = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| match i {
                0 => format!("{c:<w$}"),
                _ => format!("{c:>w$}"),
            })
            .collect();
        format!("| {} |\n", parts.join(" | "))
    };
    let mut out = String::from("\nside by side (same file, same call):\n");
    out.push_str(&fmt(&head));
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
    for r in &rows {
        out.push_str(&fmt(r));
    }
    for v in versions {
        out.push_str(&format!("{v}\n"));
    }
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::versus::{batched_bench_rows, hf_rows, llama_bench_rows, testdata};
    use super::*;

    /// The side-by-side of scripts/bench/testdata (the inputs test_combine.py checks
    /// combine.py on): the same ratios.
    #[test]
    fn ratios_are_kilns_figure_over_each_references() {
        let kiln: Value = serde_json::from_str(&testdata("kiln.json")).unwrap();
        let mut refs = llama_bench_rows(&testdata("llama-bench.jsonl"));
        refs.extend(batched_bench_rows(&testdata("llama-batched.jsonl")));
        refs.extend(hf_rows(&testdata("hf.json")).unwrap().0);
        let lines = compare(kiln["rows"].as_array().unwrap(), &refs);
        let at = |t: &str, n: usize, c: usize| {
            lines
                .iter()
                .find(|l| l.test == t && l.tokens == n && l.concurrency == c)
                .unwrap_or_else(|| panic!("no line {t} {n} {c}"))
        };
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= 1e-12 * b);
        let p2k = at("prefill", 2048, 1);
        assert!(close(p2k.ratio(1), 40000.0 / 23910.0) && close(p2k.ratio(2), 40000.0 / 33105.0));
        let d8k = at("decode", 8192, 1);
        assert!(close(d8k.ratio(1), 220.0 / 189.4) && d8k.ratio(2).is_none());
        let b32 = at("decode", 512, 32);
        assert!(close(b32.ratio(1), 6400.0 / 3613.0) && close(b32.ratio(2), 6400.0 / 513.0));
        // A case only llama.cpp measured still shows, without a ratio.
        let b8 = at("decode", 512, 8);
        assert!(b8.tok_s[0].is_none() && b8.ratio(1).is_none());
        // Prefill first, then decode by depth and streams.
        assert_eq!(lines[0].test, "prefill");
        assert!(lines
            .windows(2)
            .all(|w| (w[0].test != "prefill", w[0].tokens, w[0].concurrency)
                <= (w[1].test != "prefill", w[1].tokens, w[1].concurrency)));
        let j = p2k.to_json();
        assert_eq!(j["llama.cpp"], 23910.0);
        assert!(close(j["kiln_vs_llama.cpp"].as_f64(), 40000.0 / 23910.0));

        let t = table(&lines, &["llama.cpp test build".into()], &["a note".into()]);
        assert!(
            t.contains("kiln/llama.cpp") && t.contains("kiln/transformers"),
            "{t}"
        );
        assert!(t.contains(&format!("{:.2}x", 40000.0 / 23910.0)), "{t}");
        assert!(t.contains("llama.cpp test build\nnote: a note\n"), "{t}");
        let widths: Vec<usize> = t.lines().skip(2).take(4).map(str::len).collect();
        assert!(
            widths.windows(2).all(|w| w[0] == w[1]),
            "ragged table:\n{t}"
        );
    }

    #[test]
    fn only_measured_engines_get_columns() {
        let kiln = vec![json!({"test": "prefill", "tokens": 64, "concurrency": 1, "tok_s": 100.0})];
        let refs = vec![RefRow {
            engine: "llama.cpp",
            test: "prefill",
            tokens: 64,
            concurrency: 1,
            tok_s: 50.0,
            tok_s_min: 50.0,
            tok_s_max: 50.0,
        }];
        let lines = compare(&kiln, &refs);
        assert_eq!(lines.len(), 1);
        let t = table(&lines, &[], &[]);
        assert!(t.contains("2.00x") && !t.contains("transformers"), "{t}");
    }
}
