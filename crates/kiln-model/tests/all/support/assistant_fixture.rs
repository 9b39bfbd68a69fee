//! The Gemma 4 assistant fixtures under tests/fixtures (made by
//! scripts/reference/make_fixtures.py): a random `gemma4_assistant` beside one of the Gemma 4
//! target fixtures, with transformers' drafts at a few points of the target's sequence.
//!
//! Included by path by the tests that need them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Every assistant fixture, by directory name.
pub const ASSISTANT_FIXTURES: [&str; 2] = ["gemma4_assistant", "gemma4_assistant_plain"];

#[derive(Debug)]
pub struct AssistantFixture {
    pub name: String,
    /// The target fixture's Hugging Face folder, and the assistant's.
    pub target_dir: PathBuf,
    pub assistant_dir: PathBuf,
    /// The target's prompt and greedy continuation.
    pub tokens: Vec<u32>,
    /// At point n the KV cache holds positions below n and the drafts follow token n, all at
    /// position n.
    pub points: Vec<usize>,
    /// Per point, the drafted ids.
    pub draft_ids: Vec<Vec<u32>>,
    /// `[points * steps, vocab]`: the logits each draft step chose from.
    pub logits: Vec<f32>,
    pub vocab: usize,
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

impl AssistantFixture {
    pub fn load(name: &str) -> AssistantFixture {
        let dir = fixtures_dir().join(name);
        let path = dir.join("reference.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let r: serde_json::Value = serde_json::from_str(&text).expect("reference.json parses");
        let ids = |v: &serde_json::Value| -> Vec<u32> {
            v.as_array()
                .expect("a list of ids")
                .iter()
                .map(|x| x.as_u64().expect("an id") as u32)
                .collect()
        };
        let bytes = std::fs::read(dir.join(r["logits_file"].as_str().unwrap())).unwrap();
        let logits: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let vocab = r["logits_shape"][1].as_u64().unwrap() as usize;
        let target = r["target"].as_str().expect("target");
        let f = AssistantFixture {
            name: name.to_string(),
            target_dir: fixtures_dir().join(target).join("hf"),
            assistant_dir: dir.join("assistant"),
            tokens: ids(&r["tokens"]),
            points: ids(&r["points"]).into_iter().map(|p| p as usize).collect(),
            draft_ids: r["draft_ids"]
                .as_array()
                .expect("draft_ids")
                .iter()
                .map(ids)
                .collect(),
            logits,
            vocab,
        };
        assert_eq!(
            f.logits.len(),
            f.points.len() * f.steps() * vocab,
            "{name}: logits file size"
        );
        f
    }

    /// Draft steps per point.
    pub fn steps(&self) -> usize {
        self.draft_ids[0].len()
    }

    /// The logits row of draft step `step` at point `point` (an index into `points`).
    pub fn row(&self, point: usize, step: usize) -> &[f32] {
        let r = point * self.steps() + step;
        &self.logits[r * self.vocab..(r + 1) * self.vocab]
    }
}
