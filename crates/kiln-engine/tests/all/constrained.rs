//! Constrained output on the CPU backend: sampled replies under a JSON schema all validate (the
//! shipped model, 50 seeds per schema, all in one batch); a grammar that completes ends the
//! request; rows without a constraint give the same tokens whatever constrained rows share
//! their steps; drafted constrained output equals plain constrained output; logit_bias steers
//! and bans tokens.

use crate::common;
use crate::json_schema;

use common::*;
use kiln_engine::{
    DraftConfig, EngineHandle, FinishReason, GenerateRequest, Grammar, NgramDrafter, SamplingParams,
};
use kiln_model::{GgufSource, WeightSource};
use kiln_tokenizer::Tokenizer;
use serde_json::{json, Value};

fn shipped() -> (EngineHandle, Tokenizer) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/kiln-4m/kiln-4m-f16.gguf");
    let src = GgufSource::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(src.file()).unwrap();
    let backend = kiln_cpu::CpuBackend::new(
        &src as &dyn WeightSource,
        kiln_cpu::CpuOptions {
            kv_blocks: 1024,
            block_size: BLOCK_SIZE,
            threads: None,
            host_blocks: 0,
            fp8: false,
        },
        None,
    )
    .unwrap();
    let cfg = kiln_engine::EngineConfig {
        max_num_seqs: 64,
        max_batched_tokens: 1024,
        max_queue: 256,
        ..config()
    };
    (kiln_engine::start(Box::new(backend), tok.clone(), cfg), tok)
}

fn sampled(prompt: Vec<u32>, seed: u64) -> GenerateRequest {
    GenerateRequest {
        prompt,
        max_tokens: 300,
        sampling: SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        ..GenerateRequest::default()
    }
}

#[test]
fn sampled_replies_under_a_schema_all_validate() {
    let (e, tok) = shipped();
    let schemas = [
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "home": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "maxLength": 16},
                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                    },
                    "required": ["city", "zip"],
                    "additionalProperties": false
                }
            },
            "required": ["name", "age", "home"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "level": {"enum": ["debug", "info", "warn", "error"]},
                "retry": {"type": "boolean"},
                "codes": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 100, "maximum": 599},
                    "minItems": 1,
                    "maxItems": 4
                }
            },
            "required": ["level", "retry", "codes"],
            "additionalProperties": false
        }),
        json!({
            "type": "array",
            "items": {"type": "string", "enum": ["ls", "cd", "rm -rf", "mount"]},
            "minItems": 2,
            "maxItems": 5
        }),
    ];
    let prompt = tok.encode("The configuration file says", true).unwrap();
    for schema in schemas {
        let constraint = e.compile(&Grammar::JsonSchema(schema.clone())).unwrap();
        let streams: Vec<_> = (0..50)
            .map(|seed| {
                let req = GenerateRequest {
                    constraint: Some(constraint.clone()),
                    ..sampled(prompt.clone(), seed)
                };
                e.submit(req).unwrap()
            })
            .collect();
        for (seed, s) in streams.into_iter().enumerate() {
            let out = collect(s);
            assert_eq!(
                out.finish.reason,
                FinishReason::Stop,
                "seed {seed}: {}",
                out.text
            );
            let v: Value = serde_json::from_str(&out.text)
                .unwrap_or_else(|err| panic!("seed {seed}: not JSON ({err}): {}", out.text));
            if let Err(err) = json_schema::check(&schema, &v) {
                panic!("seed {seed}: {} breaks {schema}: {err}", out.text);
            }
        }
    }
    let stats = e.stats();
    assert!(stats.grammar_masks > 0 && stats.grammar_mask_seconds > 0.0);
    e.shutdown();
}

#[test]
fn a_completed_grammar_ends_the_request() {
    let (e, tok) = shipped();
    let prompt = tok.encode("Is the disk mounted?", true).unwrap();
    let c = e
        .compile(&Grammar::Regex("(yes|no), [a-z]{1,8}\\.".into()))
        .unwrap();
    let out = run(
        &e,
        GenerateRequest {
            constraint: Some(c),
            max_tokens: 100,
            ..greedy(prompt, 100)
        },
    );
    assert_eq!(out.finish.reason, FinishReason::Stop);
    let (answer, rest) = out.text.split_once(", ").expect("the regex's shape");
    assert!(answer == "yes" || answer == "no", "{}", out.text);
    let word = rest.strip_suffix('.').expect("ends with a full stop");
    assert!((1..=8).contains(&word.len()) && word.chars().all(|c| c.is_ascii_lowercase()));
    e.shutdown();
}

#[test]
fn grammars_that_do_not_compile_are_refused_with_the_reason() {
    let e = engine(64, config());
    for g in [
        Grammar::JsonSchema(json!({"type": "object", "properties": {"a": {"type": 5}}})),
        Grammar::Regex("[z-a]".into()),
        Grammar::Lark("start: nowhere".into()),
    ] {
        let err = e.compile(&g).expect_err("must not compile").to_string();
        assert!(err.contains("the grammar does not compile"), "{err}");
    }
    e.shutdown();
}

/// Requests with no constraint, each run alone and then beside constrained ones.
#[test]
fn unconstrained_rows_are_unchanged_by_constrained_neighbours() {
    let e = engine(256, config());
    let plain = [
        GenerateRequest {
            logprobs: Some(3),
            ..greedy(prompt(20, 1), 30)
        },
        GenerateRequest {
            logprobs: Some(2),
            ..seeded(prompt(33, 2), 30, 7)
        },
    ];
    let alone: Vec<Outcome> = plain.iter().map(|r| run(&e, r.clone())).collect();
    let json = e.compile(&Grammar::JsonObject).unwrap();
    let digits = e.compile(&Grammar::Regex("[0-9]{20,40}".into())).unwrap();
    let mut streams = Vec::new();
    for i in 0..6u32 {
        let c = if i % 2 == 0 { &json } else { &digits };
        let mut r = seeded(prompt(10 + i as usize, 40 + i), 30, i as u64);
        r.constraint = Some(c.clone());
        r.ignore_eos = false;
        streams.push(e.submit(r).unwrap());
    }
    let mixed: Vec<_> = plain.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    for (s, want) in mixed.into_iter().zip(&alone) {
        let got = collect(s);
        assert_eq!(got.ids, want.ids);
        assert_eq!(got.logprobs, want.logprobs);
        assert_eq!(got.top_logprobs, want.top_logprobs);
    }
    for (i, s) in streams.into_iter().enumerate() {
        let out = collect(s);
        if i % 2 == 1 {
            assert!(out.text.chars().all(|c| c.is_ascii_digit()), "{}", out.text);
        }
    }
    e.shutdown();
}

#[test]
fn drafted_constrained_output_equals_plain_constrained_output() {
    let source = tiny();
    let drafted = kiln_engine::start_with_drafter(
        Box::new(backend(&source, 256)),
        tokenizer(&source),
        config(),
        Some((
            Box::new(NgramDrafter::default()),
            DraftConfig {
                max_tokens: 4,
                max_batch: 64,
            },
        )),
    );
    let plain = engine(256, config());
    // Forced stretches repeat, so n-grams find drafts; the free choices test the masks of
    // verify rows.
    let g = Grammar::Regex("(abcab|[a-e]{2}){4,30}".into());
    let reqs: Vec<GenerateRequest> = (0..4u32)
        .map(|i| {
            let mut r = if i % 2 == 0 {
                greedy(prompt(16, i), 60)
            } else {
                seeded(prompt(16, i), 60, i as u64)
            };
            r.logprobs = Some(2);
            r.ignore_eos = false;
            r.constraint = Some(plain.compile(&g).unwrap());
            r
        })
        .collect();
    for r in &reqs {
        let want = run(&plain, r.clone());
        let got = run(&drafted, r.clone());
        assert_eq!(got.ids, want.ids);
        assert_eq!(got.logprobs, want.logprobs);
        assert_eq!(got.text, want.text);
        assert_eq!(got.finish.reason, want.finish.reason);
    }
    assert!(drafted.stats().draft_accepted > 0, "drafts were kept");
    drafted.shutdown();
    plain.shutdown();
}

#[test]
fn logit_bias_steers_and_bans() {
    let e = engine(256, config());
    let base = greedy(prompt(24, 3), 12);
    let free = run(&e, base.clone());
    // +100 on one byte: every greedy token is that byte.
    let forced = run(
        &e,
        GenerateRequest {
            sampling: SamplingParams {
                logit_bias: vec![(b'k' as u32, 100.0)],
                ..SamplingParams::default()
            },
            ..base.clone()
        },
    );
    assert!(
        forced.ids.iter().all(|&t| t == b'k' as u32),
        "{:?}",
        forced.ids
    );
    // -100 on the free run's tokens: none of them comes first any more.
    let mut banned: Vec<(u32, f32)> = free.ids.iter().map(|&t| (t, -100.0)).collect();
    banned.sort_by_key(|b| b.0);
    banned.dedup_by_key(|b| b.0);
    let avoided = run(
        &e,
        GenerateRequest {
            sampling: SamplingParams {
                logit_bias: banned.clone(),
                ..SamplingParams::default()
            },
            ..base.clone()
        },
    );
    assert!(avoided
        .ids
        .iter()
        .all(|t| !banned.iter().any(|b| b.0 == *t)));
    // Out of range and unordered biases are refused by name.
    for bias in [
        vec![(1_000_000, 1.0)],
        vec![(5, 1.0), (3, 1.0)],
        vec![(5, 101.0)],
    ] {
        let r = GenerateRequest {
            sampling: SamplingParams {
                logit_bias: bias,
                ..SamplingParams::default()
            },
            ..base.clone()
        };
        let err = e.submit(r).expect_err("refused").to_string();
        assert!(err.contains("logit_bias"), "{err}");
    }
    e.shutdown();
}
