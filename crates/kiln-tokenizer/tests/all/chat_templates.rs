//! Every chat template in ../shared/templates renders a system + user + assistant + user
//! conversation with a generation prompt. Failures are listed; the families kiln must serve
//! (Llama 3.x, Qwen2.5/3/3.5, Gemma 2/4, Mistral, Phi-3.5, DeepSeek) may not fail.

use std::path::PathBuf;

use kiln_tokenizer::{ChatMessage, ChatTemplate};

use crate::test_data;

use test_data::templates_dir;

pub fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "You are a terse assistant."),
        ChatMessage::new("user", "What is the capital of France?"),
        ChatMessage::new("assistant", "Paris."),
        ChatMessage::new("user", "And of Italy?"),
    ]
}

/// Templates that must render.
const REQUIRED: &[&str] = &[
    "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct",
    "meta-llama-Llama-3.3-70B-Instruct",
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B",
    "Qwen3.5-4B",
    "google-gemma-2-2b-it",
    "google-gemma-4-31B-it",
    "google-gemma-4-31B-it-interleaved",
    "mistralai-Mistral-Nemo-Instruct-2407",
    "Mistral-Small-3.2-24B-Instruct-2506",
    "microsoft-Phi-3.5-mini-instruct",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-ai-DeepSeek-V3.1",
];

#[test]
fn every_shared_template_renders() {
    let mut names: Vec<PathBuf> = std::fs::read_dir(templates_dir())
        .expect("../shared/templates")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .collect();
    names.sort();
    assert!(
        names.len() > 50,
        "expected the shared template set, found {}",
        names.len()
    );

    let mut failed = Vec::new();
    for path in &names {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let src = std::fs::read_to_string(path).expect("read template");
        let result =
            ChatTemplate::new(&src, "<s>", "</s>").and_then(|t| t.render(&conversation(), true));
        match result {
            Ok(text) => {
                assert!(
                    text.contains("And of Italy?"),
                    "{name}: the last message is missing:\n{text}"
                );
                println!("ok    {name}");
            }
            Err(e) => {
                println!("FAIL  {name}: {e:#}");
                failed.push(name);
            }
        }
    }
    println!(
        "{} of {} templates render",
        names.len() - failed.len(),
        names.len()
    );
    let required_failed: Vec<&String> = failed
        .iter()
        .filter(|f| REQUIRED.contains(&f.as_str()))
        .collect();
    assert!(
        required_failed.is_empty(),
        "required templates fail: {required_failed:?}"
    );
    for r in REQUIRED {
        assert!(
            names
                .iter()
                .any(|p| p.file_stem().unwrap().to_string_lossy() == *r),
            "{r} is not in the shared set"
        );
    }
}

/// Templates whose rendering must equal transformers' byte for byte.
const EXACT_REQUIRED: &[&str] = &[
    "meta-llama-Llama-3.1-8B-Instruct",
    "Qwen-Qwen2.5-7B-Instruct",
    "google-gemma-2-2b-it",
    "Qwen-Qwen3-0.6B",
    "Qwen3.5-4B",
    "google-gemma-4-31B-it",
    "mistralai-Mistral-Nemo-Instruct-2407",
    "microsoft-Phi-3.5-mini-instruct",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
];

/// How many of transformers' renderings kiln reproduces exactly (all of them when recorded).
const EXACT_FLOOR: usize = 66;

/// The clock tests/reference/render_templates.py pins: 2024-07-26 13:05:09 UTC.
const FIXED_NOW: i64 = 1_721_999_109;

#[test]
fn renderings_match_transformers() {
    let reference =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reference/rendered_templates.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reference).expect("read reference"))
            .expect("JSON");
    let mut exact = 0;
    let mut differ = Vec::new();
    for (name, r) in reference.as_object().expect("object") {
        let Some(want) = r.get("text").and_then(|t| t.as_str()) else {
            println!("skip  {name}: transformers fails too ({})", r["error"]);
            continue;
        };
        let src = std::fs::read_to_string(templates_dir().join(format!("{name}.jinja")))
            .expect("template");
        let got = ChatTemplate::new(&src, "<s>", "</s>")
            .and_then(|t| t.with_fixed_time(FIXED_NOW))
            .and_then(|t| t.render(&conversation(), true));
        match got {
            Ok(text) if text == want => exact += 1,
            Ok(text) => {
                let at = text
                    .bytes()
                    .zip(want.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                let ctx = |s: &str| {
                    s.get(at.saturating_sub(20)..(at + 40).min(s.len()))
                        .unwrap_or("")
                        .to_string()
                };
                println!(
                    "DIFF  {name} at byte {at}:\n  kiln:         {:?}\n  transformers: {:?}",
                    ctx(&text),
                    ctx(want)
                );
                differ.push(name.clone());
            }
            Err(e) => {
                println!("FAIL  {name}: {e:#}");
                differ.push(name.clone());
            }
        }
    }
    println!("{exact} renderings identical to transformers");
    let bad: Vec<&String> = differ
        .iter()
        .filter(|d| EXACT_REQUIRED.contains(&d.as_str()))
        .collect();
    assert!(
        bad.is_empty(),
        "required templates differ from transformers: {bad:?}"
    );
    assert!(
        exact >= EXACT_FLOOR,
        "{exact} identical renderings, floor {EXACT_FLOOR}: {differ:?}"
    );
}
