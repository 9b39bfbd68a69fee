//! The parity fixtures under tests/fixtures (made by scripts/reference/make_fixtures.py):
//! small models saved as a Hugging Face folder and as a GGUF, with reference logits.
//!
//! Shared by kiln-model's tests and the CPU parity tests (included there by path).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Every fixture saved twice (Hugging Face folder and GGUF), by directory name.
pub const FIXTURES: [&str; 6] = ["llama", "mistral", "qwen2", "qwen3", "gemma4", "gemma4_kv"];
/// Fixtures with a Hugging Face folder only (no GGUF spelling exists for what they exercise).
pub const HF_ONLY_FIXTURES: [&str; 1] = ["qwen2_window"];

/// One fixture: where its two copies live and what transformers computed for it.
#[derive(Debug)]
pub struct Fixture {
    pub name: String,
    pub hf_dir: PathBuf,
    pub gguf: PathBuf,
    pub prompt_text: String,
    pub prompt_ids: Vec<u32>,
    /// The greedy continuation, one token per logits row.
    pub continuation_ids: Vec<u32>,
    /// `[steps, vocab]` row-major: row k chose `continuation_ids[k]` (row 0 is the prompt's last
    /// position).
    pub logits: Vec<f32>,
    pub vocab: usize,
    /// Top-1 minus top-2 logit of each row.
    pub margins: Vec<f32>,
    pub min_margin: f32,
    pub max_abs_logit: f32,
    /// How far transformers' float32 forward lands from the (float64) reference.
    pub fp32_max_abs_err: f32,
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

impl Fixture {
    pub fn load(name: &str) -> Fixture {
        let dir = fixtures_dir().join(name);
        let text = std::fs::read_to_string(dir.join("reference.json"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("reference.json").display()));
        let r: serde_json::Value = serde_json::from_str(&text).expect("reference.json parses");
        let ids = |key: &str| -> Vec<u32> {
            let arr = r[key]
                .as_array()
                .unwrap_or_else(|| panic!("{name}: '{key}' is not a list"));
            arr.iter()
                .map(|v| v.as_u64().expect("token id") as u32)
                .collect()
        };
        let num = |key: &str| {
            r[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: '{key}' is not a number")) as f32
        };
        let logits_file = r["logits_file"].as_str().expect("logits_file");
        let bytes = std::fs::read(dir.join(logits_file)).expect("logits file reads");
        let logits: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let (steps, vocab) = (
            r["logits_shape"][0].as_u64().unwrap() as usize,
            r["logits_shape"][1].as_u64().unwrap() as usize,
        );
        assert_eq!(logits.len(), steps * vocab, "{name}: logits file size");
        let continuation_ids = ids("continuation_ids");
        assert_eq!(
            continuation_ids.len(),
            steps,
            "{name}: one row per continuation token"
        );
        Fixture {
            name: name.to_string(),
            hf_dir: dir.join("hf"),
            gguf: dir.join("model.gguf"),
            prompt_text: r["prompt_text"].as_str().expect("prompt_text").to_string(),
            prompt_ids: ids("prompt_ids"),
            continuation_ids,
            logits,
            vocab,
            margins: r["margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect(),
            min_margin: num("min_margin"),
            max_abs_logit: num("max_abs_logit"),
            fp32_max_abs_err: num("fp32_max_abs_err"),
        }
    }

    pub fn all() -> Vec<Fixture> {
        FIXTURES.iter().map(|n| Fixture::load(n)).collect()
    }

    pub fn row(&self, step: usize) -> &[f32] {
        &self.logits[step * self.vocab..(step + 1) * self.vocab]
    }
}

/// `max |a - b| / max |reference|`: the error measure the parity tests bound.
pub fn rel_err(got: &[f32], reference: &[f32]) -> f32 {
    assert_eq!(got.len(), reference.len());
    let scale = reference
        .iter()
        .fold(0f32, |m, x| m.max(x.abs()))
        .max(f32::MIN_POSITIVE);
    let diff = got.iter().zip(reference).fold(0f32, |m, (a, b)| {
        if (a - b).is_nan() {
            f32::INFINITY
        } else {
            m.max((a - b).abs())
        }
    });
    diff / scale
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in row.iter().enumerate() {
        if *x > row[best] {
            best = i;
        }
    }
    best as u32
}
