//! Gemma 4's assistant fixtures (tests/fixtures/gemma4_assistant*: a random-weight assistant
//! beside one of the Gemma 4 target fixtures), found where common/models.rs finds fixtures.
#![allow(dead_code)]

use kiln_model::hf_source::HfSource;

use crate::common::models::{fixture_reference, fixtures_dir};

pub const FIXTURES: [&str; 2] = ["gemma4_assistant", "gemma4_assistant_plain"];

/// An assistant fixture: its target and assistant, the target's tokens and the points drafted at
/// (at point n the cache holds the positions below n and the drafts follow token n).
pub struct Fixture {
    pub target: HfSource,
    pub assistant: HfSource,
    pub tokens: Vec<u32>,
    pub points: Vec<usize>,
    pub steps: usize,
}

pub fn fixture(name: &str) -> Fixture {
    let r = fixture_reference(name).unwrap_or_else(|| panic!("{name}/reference.json"));
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("a list of ids")
            .iter()
            .map(|x| x.as_u64().expect("an id") as u32)
            .collect()
    };
    let points: Vec<usize> = ids(&r["points"]).into_iter().map(|p| p as usize).collect();
    let steps = r["logits_shape"][0].as_u64().unwrap() as usize / points.len();
    let dir = fixtures_dir();
    let target = dir.join(r["target"].as_str().unwrap()).join("hf");
    Fixture {
        target: HfSource::open(&target).expect("the target fixture"),
        assistant: HfSource::open(&dir.join(name).join("assistant")).expect("the assistant"),
        tokens: ids(&r["tokens"]),
        points,
        steps,
    }
}
