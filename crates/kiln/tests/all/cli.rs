//! The `kiln` binary's commands, run as a user would, on dummy:tiny.

use serde_json::Value;

use crate::support::kiln;

fn ok(args: &[&str]) -> (String, String) {
    let out = kiln(args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "kiln {args:?} failed:\n{stderr}");
    (stdout, stderr)
}

fn json(args: &[&str]) -> Value {
    let (stdout, _) = ok(args);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_u64().expect("an id"))
        .collect()
}

#[test]
fn generate_json_prints_prompt_ids_ids_text_and_timings() {
    let args = [
        "generate",
        "--model",
        "dummy:tiny",
        "--prompt",
        "Hello",
        "-n",
        "8",
        "--ignore-eos",
        "--json",
    ];
    let v = json(&args);
    let tokenized = json(&["tokenize", "--model", "dummy:tiny", "Hello"]);
    assert_eq!(v["prompt_ids"], tokenized);
    assert_eq!(ids(&v["ids"]).len(), 8);
    assert!(v["text"].is_string());
    assert_eq!(v["finish_reason"], "length");
    let t = &v["timings"];
    assert_eq!(t["prompt_tokens"], ids(&tokenized).len());
    assert_eq!(t["generated_tokens"], 8);
    for key in [
        "load_s",
        "prompt_s",
        "prompt_tokens_per_s",
        "generation_s",
        "generation_tokens_per_s",
    ] {
        assert!(t[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {t}");
    }
    // Greedy is deterministic.
    assert_eq!(json(&args)["ids"], v["ids"]);
}

#[test]
fn generate_streams_text_to_stdout_and_speeds_to_stderr() {
    let (stdout, stderr) = ok(&["generate", "--prompt", "Hi", "-n", "6", "--ignore-eos"]);
    let v = json(&[
        "generate",
        "--prompt",
        "Hi",
        "-n",
        "6",
        "--ignore-eos",
        "--json",
    ]);
    assert_eq!(
        stdout.strip_suffix('\n').unwrap(),
        v["text"].as_str().unwrap()
    );
    assert!(
        stderr.contains("prompt:") && stderr.contains("generation:") && stderr.contains("tok/s"),
        "{stderr}"
    );
}

#[test]
fn generate_with_a_seed_is_reproducible() {
    let run = |seed: &str| {
        let args = [
            "generate",
            "-p",
            "Once",
            "-n",
            "12",
            "--ignore-eos",
            "--temperature",
            "1.0",
            "--top-k",
            "40",
        ];
        ids(&json(&[&args[..], &["--top-p", "0.9", "--seed", seed, "--json"]].concat())["ids"])
    };
    assert_eq!(run("5"), run("5"));
    assert_ne!(run("5"), run("6"));
}

#[test]
fn generate_chat_goes_through_the_chat_template() {
    let chat = json(&["generate", "-p", "Hi", "--chat", "-n", "2", "--json"]);
    let plain = json(&["generate", "-p", "Hi", "-n", "2", "--json"]);
    let im_start = ids(&json(&["tokenize", "--no-special", "<|im_start|>"]));
    assert_eq!(im_start.len(), 1, "<|im_start|> is one special token");
    let chat_ids = ids(&chat["prompt_ids"]);
    assert!(chat_ids.contains(&im_start[0]), "{chat_ids:?}");
    assert!(chat_ids.len() > ids(&plain["prompt_ids"]).len());
}

#[test]
fn tokenize_prints_a_json_array_with_the_models_special_tokens() {
    let with = ids(&json(&["tokenize", "--model", "dummy:tiny", "Hi!"]));
    let without = ids(&json(&[
        "tokenize",
        "--model",
        "dummy:tiny",
        "--no-special",
        "Hi!",
    ]));
    assert_eq!(without, vec![b'H' as u64, b'i' as u64, b'!' as u64]);
    assert_eq!(
        with[with.len() - 3..],
        without[..],
        "BOS first, then the bytes"
    );
    assert_eq!(with.len(), 4);
}

#[test]
fn info_describes_the_model() {
    let (text, _) = ok(&["info", "--model", "dummy:tiny"]);
    for needle in [
        "architecture:  llama",
        "4 layers",
        "parameters:",
        "tensor types:",
        "tokenizer:",
        "chat template: yes",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let v = json(&["info", "--model", "dummy:tiny", "--json"]);
    assert_eq!(v["architecture"], "llama");
    assert!(v["parameters"].as_u64().unwrap() > 1_000_000);
    assert_eq!(v["config"]["vocab_size"], 512);
}

#[test]
fn bad_input_fails_with_a_clear_message() {
    let missing = kiln(&["info", "--model", "/nonexistent/model.gguf"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/model.gguf"));
    let cuda = kiln(&["generate", "-p", "x", "--device", "cuda"]);
    assert!(!cuda.status.success());
    assert!(String::from_utf8_lossy(&cuda.stderr).contains("CUDA backend not available"));
    let preset = kiln(&["tokenize", "--model", "dummy:nope", "x"]);
    assert!(!preset.status.success());
    assert!(String::from_utf8_lossy(&preset.stderr).contains("nope"));
}

#[test]
fn drafted_generation_gives_the_plain_text_and_reports_its_drafts() {
    // Drafting needs a request without penalties; the shipped model's defaults have one.
    let base = [
        "generate",
        "-p",
        "A file descriptor is",
        "-n",
        "40",
        "--repetition-penalty",
        "1",
        "--json",
    ];
    let plain = json(&base);
    let shipped_draft = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../models/kiln-4m-draft/kiln-4m-draft-f16.gguf"
    );
    for draft in ["ngram", shipped_draft] {
        let mut args = base.to_vec();
        args.extend(["--draft", draft]);
        let drafted = json(&args);
        assert_eq!(drafted["ids"], plain["ids"], "{draft}");
        assert_eq!(drafted["text"], plain["text"], "{draft}");
        let d = &drafted["draft"];
        assert!(d["proposed"].as_u64().unwrap() > 0, "{draft}: {d}");
        assert!(d["target_passes"].as_u64().unwrap() > 0, "{draft}: {d}");
    }
    assert_eq!(plain["draft"]["proposed"], 0);
    let mismatch = kiln(&["generate", "-p", "x", "-n", "2", "--draft", "dummy:tiny"]);
    assert!(!mismatch.status.success());
    assert!(String::from_utf8_lossy(&mismatch.stderr).contains("share the target's tokenizer"));
}

#[test]
fn a_gemma4_assistant_drafts_inside_its_target_and_a_mismatched_one_is_refused() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
    let target = format!("{fixtures}/gemma4/hf");
    let assistant = format!("{fixtures}/gemma4_assistant/assistant");
    let base = [
        "generate",
        "--model",
        &target,
        "--device",
        "cpu",
        "-p",
        "The potter loads the kiln",
        "-n",
        "24",
        "--ignore-eos",
        "--json",
    ];
    let plain = json(&base);
    let mut args = base.to_vec();
    args.extend(["--draft", &assistant]);
    let drafted = json(&args);
    assert_eq!(drafted["ids"], plain["ids"]);
    assert_eq!(drafted["text"], plain["text"]);
    assert!(drafted["draft"]["proposed"].as_u64().unwrap() > 0);
    // gemma4_kv's full layers have one KV head, this assistant's two; a llama is no target.
    let kv_target = format!("{fixtures}/gemma4_kv/hf");
    for (model, want) in [
        (kv_target.as_str(), "KV heads"),
        ("dummy:tiny", "drafts for gemma4 models"),
    ] {
        let out = kiln(&[
            "generate", "--model", model, "--device", "cpu", "-p", "x", "-n", "2", "--draft",
            &assistant,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{model}");
        assert!(
            err.contains("does not fit the model") && err.contains(want),
            "{model}: {err}"
        );
    }
}
