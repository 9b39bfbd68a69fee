//! `kiln bench --vs llama.cpp=PATH --vs transformers`: the reference engines run on the same
//! file in the same call, their figures read from their own output (llama-bench and
//! llama-batched-bench JSON lines; scripts/bench/hf_bench.py's JSON) into rows keyed as
//! kiln's are: (test, tokens, streams).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

/// The transformers side, written out next to the run when asked for (one copy of the script).
const HF_BENCH: &str = include_str!("../../../../scripts/bench/hf_bench.py");

/// A reference engine named by `--vs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// llama.cpp's llama-bench (and llama-batched-bench beside it, for several streams).
    LlamaCpp { bench: PathBuf },
    /// transformers through hf_bench.py with this Python.
    Transformers { python: String },
}

impl Reference {
    pub fn engine(&self) -> &'static str {
        match self {
            Reference::LlamaCpp { .. } => "llama.cpp",
            Reference::Transformers { .. } => "transformers",
        }
    }
}

/// Parses `llama.cpp=PATH` or `transformers[=PYTHON]`.
pub fn parse_reference(s: &str) -> Result<Reference, String> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (s, None),
    };
    match (name, value) {
        ("llama.cpp" | "llamacpp" | "llama-bench", Some(p)) if !p.is_empty() => {
            Ok(Reference::LlamaCpp { bench: p.into() })
        }
        ("llama.cpp" | "llamacpp" | "llama-bench", _) => Err(
            "llama.cpp needs the path of its llama-bench: --vs llama.cpp=PATH/TO/llama-bench".into(),
        ),
        ("transformers" | "hf", v) => Ok(Reference::Transformers {
            python: v.filter(|p| !p.is_empty()).unwrap_or("python3").to_string(),
        }),
        _ => Err(format!(
            "`{s}` is not a reference engine; give llama.cpp=PATH/TO/llama-bench or transformers[=PYTHON]"
        )),
    }
}

/// One figure of a reference engine, as combine.py reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RefRow {
    pub engine: &'static str,
    /// "prefill" or "decode".
    pub test: &'static str,
    /// The prompt length (prefill) or the KV depth decoding starts from (decode).
    pub tokens: usize,
    pub concurrency: usize,
    pub tok_s: f64,
    pub tok_s_min: f64,
    pub tok_s_max: f64,
}

impl RefRow {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "engine": self.engine,
            "test": self.test,
            "tokens": self.tokens,
            "concurrency": self.concurrency,
            "tok_s": self.tok_s,
            "tok_s_min": self.tok_s_min,
            "tok_s_max": self.tok_s_max,
        })
    }
}

/// What a reference run gave: its rows and a line on its version and settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefRun {
    pub rows: Vec<RefRow>,
    pub version: Option<String>,
    /// Cases it could not run, for the notes under the table.
    pub notes: Vec<String>,
}

/// The cases of this run that a reference can be asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cases {
    pub prefill: Vec<usize>,
    pub decode: usize,
    pub depths: Vec<usize>,
    pub concurrency: Vec<usize>,
    pub repeats: usize,
    pub chunk: usize,
    pub gpu: bool,
    pub threads: Option<usize>,
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => xs[n / 2],
        _ => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn whole(v: &Value, k: &str) -> usize {
    v.get(k).and_then(Value::as_u64).unwrap_or(0) as usize
}

/// llama-bench `-o jsonl`: a pp test is a prefill row (at depth 0; a prompt on a filled cache
/// is not a figure kiln reports), a tg test a one-stream decode row at its depth. tok/s is the
/// median of the runs, as kiln's.
pub fn llama_bench_rows(text: &str) -> Vec<RefRow> {
    let mut rows = Vec::new();
    for r in json_lines(text) {
        let Some(avg) = num(&r, "avg_ts") else {
            continue;
        };
        let samples: Vec<f64> = r
            .get("samples_ts")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .filter(|s: &Vec<f64>| !s.is_empty())
            .unwrap_or_else(|| vec![avg]);
        let (lo, hi) = samples
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        let (prompt, gen, depth) = (
            whole(&r, "n_prompt"),
            whole(&r, "n_gen"),
            whole(&r, "n_depth"),
        );
        let (test, tokens) = match (prompt, gen) {
            (p, 0) if p > 0 && depth == 0 => ("prefill", p),
            (0, g) if g > 0 => ("decode", depth),
            _ => continue,
        };
        rows.push(RefRow {
            engine: "llama.cpp",
            test,
            tokens,
            concurrency: 1,
            tok_s: median(samples),
            tok_s_min: lo,
            tok_s_max: hi,
        });
    }
    rows
}

/// llama-batched-bench `--output-format jsonl`: generated tok/s of `pl` streams after a prompt
/// of `pp` tokens each (one run each, so no spread). One stream is llama-bench's figure.
pub fn batched_bench_rows(text: &str) -> Vec<RefRow> {
    json_lines(text)
        .iter()
        .filter(|r| whole(r, "pl") > 1)
        .filter_map(|r| {
            let t = num(r, "speed_tg")?;
            Some(RefRow {
                engine: "llama.cpp",
                test: "decode",
                tokens: whole(r, "pp"),
                concurrency: whole(r, "pl"),
                tok_s: t,
                tok_s_min: t,
                tok_s_max: t,
            })
        })
        .collect()
}

/// hf_bench.py's output file.
pub fn hf_rows(text: &str) -> anyhow::Result<(Vec<RefRow>, Option<String>)> {
    let doc: Value = serde_json::from_str(text).context("hf_bench.py wrote no JSON")?;
    let rows = doc
        .get("rows")
        .and_then(Value::as_array)
        .map(|rows| {
            rows.iter()
                .filter_map(|r| {
                    let test = match r.get("test").and_then(Value::as_str)? {
                        "prefill" => "prefill",
                        "decode" => "decode",
                        _ => return None,
                    };
                    let t = num(r, "tok_s")?;
                    Some(RefRow {
                        engine: "transformers",
                        test,
                        tokens: whole(r, "tokens"),
                        concurrency: whole(r, "concurrency").max(1),
                        tok_s: t,
                        tok_s_min: num(r, "tok_s_min").unwrap_or(t),
                        tok_s_max: num(r, "tok_s_max").unwrap_or(t),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let version = doc.get("versions").and_then(Value::as_str).map(|v| {
        format!(
            "{v}, {} {} weights",
            doc.get("dtype").and_then(Value::as_str).unwrap_or("?"),
            doc.get("weights").and_then(Value::as_str).unwrap_or("?")
        )
    });
    Ok((rows, version))
}

/// What llama-bench says about its build and settings, from its first record.
pub fn llama_version(text: &str) -> Option<String> {
    let r = json_lines(text).into_iter().next()?;
    let s = |k: &str| match r.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "?".into(),
    };
    Some(format!(
        "llama.cpp {} ({}, {} threads, ubatch {}, flash_attn {}, {})",
        s("build_commit"),
        s("backends"),
        s("n_threads"),
        s("n_ubatch"),
        s("flash_attn"),
        s("model_type")
    ))
}

fn list(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The llama-bench argument lists for `cases` on `model`: prefill lengths in one call, decode
/// depths in another (`-d` where this llama-bench has it, else depth 0 only).
pub fn llama_bench_args(model: &Path, cases: &Cases, has_depth: bool) -> Vec<Vec<String>> {
    let mut common: Vec<String> = vec!["-m".into(), model.display().to_string()];
    common.extend([
        "-r".into(),
        cases.repeats.to_string(),
        "-o".into(),
        "jsonl".into(),
    ]);
    if cases.gpu {
        common.extend(["-ngl", "99", "-fa", "1"].map(String::from));
    } else {
        common.extend(["-ngl".to_string(), "0".to_string()]);
        if let Some(t) = cases.threads {
            common.extend(["-t".to_string(), t.to_string()]);
        }
    }
    common.extend(["-ub".to_string(), cases.chunk.to_string()]);
    let mut calls = Vec::new();
    if !cases.prefill.is_empty() {
        let mut a = common.clone();
        a.extend(["-p".into(), list(&cases.prefill), "-n".into(), "0".into()]);
        calls.push(a);
    }
    if cases.decode > 0 && cases.concurrency.contains(&1) {
        let depths: Vec<usize> = match has_depth {
            true => cases.depths.clone(),
            false => cases.depths.iter().copied().filter(|&d| d == 0).collect(),
        };
        if !depths.is_empty() {
            let mut a = common;
            a.extend([
                "-p".into(),
                "0".into(),
                "-n".into(),
                cases.decode.to_string(),
            ]);
            if has_depth {
                a.extend(["-d".into(), list(&depths)]);
            }
            calls.push(a);
        }
    }
    calls
}

/// llama-batched-bench calls for the decode cases of more than one stream, one per depth
/// (it cannot start from an empty prompt, so depth 0 is left out).
pub fn batched_args(model: &Path, cases: &Cases) -> Vec<Vec<String>> {
    let streams: Vec<usize> = cases
        .concurrency
        .iter()
        .copied()
        .filter(|&c| c > 1)
        .collect();
    if cases.decode == 0 || streams.is_empty() {
        return Vec::new();
    }
    let most = streams.iter().copied().max().unwrap_or(1);
    cases
        .depths
        .iter()
        .filter(|&&d| d > 0)
        .map(|&d| {
            let ctx = most * (d + cases.decode) + 256;
            let mut a: Vec<String> = vec!["-m".into(), model.display().to_string()];
            a.extend([
                "-c".into(),
                ctx.to_string(),
                "-b".into(),
                cases.chunk.to_string(),
            ]);
            a.extend(["-ub".into(), cases.chunk.to_string()]);
            a.extend([
                "-npp".into(),
                d.to_string(),
                "-ntg".into(),
                cases.decode.to_string(),
            ]);
            a.extend([
                "-npl".into(),
                list(&streams),
                "--output-format".into(),
                "jsonl".into(),
            ]);
            match cases.gpu {
                true => a.extend(["-ngl", "99", "-fa", "on"].map(String::from)),
                false => a.extend(["-ngl", "0"].map(String::from)),
            }
            a
        })
        .collect()
}

/// Runs `program args`, returning its standard output; a failure names the command and ends
/// with what it wrote to standard error.
fn run_tool(program: &Path, args: &[String]) -> anyhow::Result<String> {
    eprintln!("running {} {}", program.display(), args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        bail!(
            "{} failed ({}): {}",
            program.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs llama-bench (and llama-batched-bench when it sits beside it) on `model`.
pub fn run_llama_cpp(bench: &Path, model: &Path, cases: &Cases) -> anyhow::Result<RefRun> {
    let help = Command::new(bench)
        .arg("--help")
        .output()
        .with_context(|| {
            format!(
                "cannot run {}; give the path of a built llama-bench (llama.cpp's build/bin/llama-bench)",
                bench.display()
            )
        })?;
    let help =
        String::from_utf8_lossy(&help.stdout).into_owned() + &String::from_utf8_lossy(&help.stderr);
    let has_depth = help.contains("--n-depth");
    let mut run = RefRun::default();
    if !has_depth && cases.depths.iter().any(|&d| d > 0) {
        run.notes
            .push("this llama-bench has no --n-depth: llama.cpp decodes at depth 0 only".into());
    }
    for args in llama_bench_args(model, cases, has_depth) {
        let text = run_tool(bench, &args)?;
        run.version = run.version.or_else(|| llama_version(&text));
        run.rows.extend(llama_bench_rows(&text));
    }
    let batched = bench.with_file_name("llama-batched-bench");
    let calls = batched_args(model, cases);
    if !calls.is_empty() && !batched.is_file() {
        run.notes.push(format!(
            "no {} beside llama-bench: decode with several streams is not compared",
            batched.display()
        ));
    } else {
        for args in calls {
            run.rows
                .extend(batched_bench_rows(&run_tool(&batched, &args)?));
        }
    }
    Ok(run)
}

/// Runs hf_bench.py (transformers) with `python` on the GGUF or Hugging Face folder `model`.
pub fn run_transformers(python: &str, model: &Path, cases: &Cases) -> anyhow::Result<RefRun> {
    let dir = std::env::temp_dir().join(format!("kiln-vs-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let script = dir.join("hf_bench.py");
    std::fs::write(&script, HF_BENCH)
        .with_context(|| format!("cannot write {}", script.display()))?;
    let out = dir.join("hf.json");
    let source = if model.is_dir() { "--hf" } else { "--gguf" };
    let mut args: Vec<String> = vec![
        script.display().to_string(),
        source.into(),
        model.display().to_string(),
        "--out".into(),
        out.display().to_string(),
        "--prefill".into(),
        list(&cases.prefill),
        "--decode".into(),
        cases.decode.to_string(),
        "--batch".into(),
        list(&cases.concurrency),
        "--prompt".into(),
        list(&cases.depths),
        "--repeats".into(),
        cases.repeats.to_string(),
        "--device".into(),
        if cases.gpu { "cuda" } else { "cpu" }.into(),
    ];
    if let Some(t) = cases.threads.filter(|_| !cases.gpu) {
        args.extend(["--threads".into(), t.to_string()]);
    }
    let result = run_tool(Path::new(python), &args)
        .context("transformers needs Python with torch, transformers and (for GGUF files) gguf: pip install torch transformers gguf")
        .and_then(|_| {
            let text = std::fs::read_to_string(&out)
                .with_context(|| format!("hf_bench.py wrote no {}", out.display()))?;
            hf_rows(&text)
        });
    std::fs::remove_dir_all(&dir).ok();
    let (rows, version) = result?;
    Ok(RefRun {
        rows,
        version,
        notes: Vec::new(),
    })
}

/// A file of scripts/bench/testdata: real outputs of the reference tools, for the parsers' tests.
#[cfg(test)]
pub(super) fn testdata(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/bench/testdata")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_from_the_command_line() {
        assert_eq!(
            parse_reference("llama.cpp=/opt/llama/bin/llama-bench"),
            Ok(Reference::LlamaCpp {
                bench: "/opt/llama/bin/llama-bench".into()
            })
        );
        assert_eq!(
            parse_reference("transformers"),
            Ok(Reference::Transformers {
                python: "python3".into()
            })
        );
        assert_eq!(
            parse_reference("transformers=/venv/bin/python"),
            Ok(Reference::Transformers {
                python: "/venv/bin/python".into()
            })
        );
        assert!(parse_reference("llama.cpp").unwrap_err().contains("PATH"));
        assert!(parse_reference("vllm")
            .unwrap_err()
            .contains("llama.cpp=PATH"));
    }

    #[test]
    fn llama_bench_lines_become_prefill_and_decode_rows() {
        let text = testdata("llama-bench.jsonl");
        let rows = llama_bench_rows(&text);
        // 3 prefill + 2 decode; the prompt on a filled cache (n_depth 8192) is left out.
        assert_eq!(rows.len(), 5, "{rows:?}");
        let p = &rows[0];
        assert_eq!((p.test, p.tokens, p.concurrency), ("prefill", 2048, 1));
        assert_eq!(
            (p.tok_s, p.tok_s_min, p.tok_s_max),
            (23910.0, 23850.0, 23970.0)
        );
        let d = rows.last().unwrap();
        assert_eq!((d.test, d.tokens), ("decode", 8192));
        assert_eq!(d.tok_s, 189.4);
        assert!(llama_version(&text).unwrap().contains("llama 8B F16"));
    }

    #[test]
    fn batched_lines_become_rows_of_several_streams() {
        let rows = batched_bench_rows(&testdata("llama-batched.jsonl"));
        // pl 1 is llama-bench's figure; 8 and 32 streams after 512 tokens remain.
        let keys: Vec<_> = rows
            .iter()
            .map(|r| (r.tokens, r.concurrency, r.tok_s))
            .collect();
        assert_eq!(keys, vec![(512, 8, 1028.0), (512, 32, 3613.0)]);
    }

    #[test]
    fn hf_bench_output_becomes_rows_with_its_versions() {
        let (rows, version) = hf_rows(&testdata("hf.json")).unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0].engine, "transformers");
        assert_eq!(
            (rows[4].test, rows[4].tokens, rows[4].concurrency),
            ("decode", 512, 32)
        );
        assert!(version.unwrap().contains("float16 gguf weights"));
        assert!(hf_rows("not json").is_err());
    }

    #[test]
    fn the_tools_are_asked_for_this_runs_cases() {
        let cases = Cases {
            prefill: vec![512, 2048],
            decode: 64,
            depths: vec![0, 4096],
            concurrency: vec![1, 8],
            repeats: 2,
            chunk: 2048,
            gpu: true,
            threads: None,
        };
        let m = Path::new("/m/model.gguf");
        let calls = llama_bench_args(m, &cases, true);
        assert_eq!(calls.len(), 2);
        let joined: Vec<String> = calls.iter().map(|c| c.join(" ")).collect();
        assert!(joined[0].contains("-m /m/model.gguf") && joined[0].contains("-p 512,2048 -n 0"));
        assert!(joined[0].contains("-ngl 99 -fa 1") && joined[0].contains("-r 2 -o jsonl"));
        assert!(joined[1].ends_with("-p 0 -n 64 -d 0,4096"), "{}", joined[1]);
        // Without -d only depth 0 is asked for.
        let old = llama_bench_args(m, &cases, false);
        assert!(old[1].join(" ").ends_with("-p 0 -n 64"));
        // Streams above one at depths above 0 go to llama-batched-bench.
        let b = batched_args(m, &cases);
        assert_eq!(b.len(), 1);
        let b = b[0].join(" ");
        assert!(
            b.contains("-npp 4096 -ntg 64 -npl 8") && b.contains("-c 33536"),
            "{b}"
        );
        let cpu = Cases {
            gpu: false,
            threads: Some(4),
            ..cases
        };
        assert!(llama_bench_args(m, &cpu, true)[0]
            .join(" ")
            .contains("-ngl 0 -t 4"));
    }
}
