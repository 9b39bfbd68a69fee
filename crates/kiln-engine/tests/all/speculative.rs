//! Speculative decoding on the CPU backend: drafted output equals plain output token for token
//! and log-probability for log-probability, greedy and seeded, with the n-gram drafter, with a
//! drafter that is always right and one that is always wrong, alone and in batches mixed with
//! prefill chunks; stop strings and max_tokens behave as without drafting; what a rollback left
//! behind never reaches a later request. (Gemma 4's assistant: speculative_assistant.rs.)

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::*;
use kiln_engine::{DraftConfig, Drafter, EngineHandle, GenerateRequest, NgramDrafter};

fn drafted(drafter: Box<dyn Drafter>, max_tokens: usize) -> EngineHandle {
    let source = tiny();
    let cfg = DraftConfig {
        max_tokens,
        max_batch: 64,
    };
    kiln_engine::start_with_drafter(
        Box::new(backend(&source, 256)),
        tokenizer(&source),
        config(),
        Some((drafter, cfg)),
    )
}

/// Each request alone on a plain engine.
fn plain_outcomes(reqs: &[GenerateRequest]) -> Vec<Outcome> {
    let e = engine(256, config());
    let out = reqs.iter().map(|r| run(&e, r.clone())).collect();
    e.shutdown();
    out
}

/// Prompts whose continuations repeat (dummy:tiny's greedy output loops), so n-grams match.
fn requests() -> Vec<GenerateRequest> {
    let mut reqs: Vec<GenerateRequest> = (0..4u32)
        .map(|i| {
            let mut p = prompt(12 + 9 * i as usize, i);
            let copy = p.clone();
            p.extend(copy);
            probed(p, 40)
        })
        .collect();
    for i in 0..3u32 {
        let mut r = seeded(prompt(30, 10 + i), 40, 99 + i as u64);
        r.logprobs = Some(2);
        reqs.push(r);
    }
    reqs
}

/// Knows the plain output of every prompt: proposes its true continuation (right) or tokens that
/// differ from it at every position (wrong).
struct Oracle {
    answers: HashMap<Vec<u32>, Vec<u32>>,
    right: bool,
    vocab: u32,
}

impl Drafter for Oracle {
    fn propose(&mut self, _seq: u64, tokens: &[u32], k: usize) -> Vec<u32> {
        for (prompt, answer) in &self.answers {
            if tokens.starts_with(prompt) {
                let done = tokens.len() - prompt.len();
                let next = &answer[done.min(answer.len())..];
                return next
                    .iter()
                    .take(k)
                    .map(|&t| if self.right { t } else { (t + 1) % self.vocab })
                    .collect();
            }
        }
        Vec::new()
    }
}

#[test]
fn ngram_drafts_give_the_plain_output() {
    let reqs = requests();
    let want = plain_outcomes(&reqs);
    let e = drafted(Box::new(NgramDrafter::default()), 5);
    for (r, w) in reqs.iter().zip(&want) {
        same(&run(&e, r.clone()), w, "alone");
    }
    let st = e.stats();
    assert!(st.draft_proposed > 0 && st.draft_accepted > 0, "{st:?}");
    e.shutdown();
}

#[test]
fn a_right_drafter_saves_passes_and_a_wrong_one_changes_nothing() {
    let reqs = requests();
    let want = plain_outcomes(&reqs);
    let answers: HashMap<Vec<u32>, Vec<u32>> = reqs
        .iter()
        .zip(&want)
        .map(|(r, w)| (r.prompt.clone(), w.ids.clone()))
        .collect();
    let vocab = tiny_vocab();
    for right in [true, false] {
        let oracle = Oracle {
            answers: answers.clone(),
            right,
            vocab,
        };
        let e = drafted(Box::new(oracle), 4);
        for (r, w) in reqs.iter().zip(&want) {
            let got = run(&e, r.clone());
            same(
                &got,
                w,
                if right {
                    "right drafts"
                } else {
                    "wrong drafts"
                },
            );
            let d = got.finish.draft;
            assert!(d.proposed > 0);
            if right {
                assert_eq!(d.accepted, d.proposed, "every right draft is kept");
                assert!(d.target_passes * 3 < got.ids.len() as u64, "{d:?}");
            } else {
                assert_eq!(d.accepted, 0, "no wrong draft is kept");
            }
        }
        e.shutdown();
    }
}

fn tiny_vocab() -> u32 {
    use kiln_model::WeightSource;
    tiny().config().vocab_size as u32
}

#[test]
fn drafted_sequences_in_a_batch_with_prefill_chunks_equal_each_alone() {
    let mut reqs = requests();
    // Long prompts that prefill in several chunks while the others draft and verify.
    for i in 0..3u32 {
        reqs.push(probed(prompt(300 + 40 * i as usize, 50 + i), 12));
    }
    let want = plain_outcomes(&reqs);
    let e = drafted(Box::new(NgramDrafter::default()), 5);
    for round in 0..2 {
        let streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
        let outs: Vec<Outcome> = streams
            .into_iter()
            .map(|s| std::thread::spawn(move || collect(s)))
            .map(|t| t.join().unwrap())
            .collect();
        for (got, w) in outs.iter().zip(&want) {
            same(got, w, &format!("together, round {round}"));
        }
    }
    assert!(e.stats().draft_accepted > 0);
    e.shutdown();
}

#[test]
fn stops_and_lengths_behave_as_without_drafts() {
    let p = {
        let mut p = prompt(20, 3);
        let copy = p.clone();
        p.extend(copy);
        p
    };
    let plain = plain_outcomes(&[probed(p.clone(), 30)]).remove(0);
    // A stop string cut from the plain text, and max_tokens that end inside a draft.
    let cut = plain.text.chars().skip(5).take(3).collect::<String>();
    let mut reqs = Vec::new();
    for max_tokens in [1, 2, 7, 13] {
        reqs.push(probed(p.clone(), max_tokens));
    }
    if !cut.is_empty() {
        let mut r = probed(p.clone(), 30);
        r.stop = vec![cut];
        reqs.push(r);
    }
    // Penalties: drafting steps aside, the output is still plain's.
    let mut r = probed(p.clone(), 20);
    r.sampling.repetition_penalty = 1.3;
    reqs.push(r);
    let mut r = probed(p, 20);
    r.no_draft = true;
    reqs.push(r);
    let want = plain_outcomes(&reqs);
    let e = drafted(Box::new(NgramDrafter::default()), 6);
    for (r, w) in reqs.iter().zip(&want) {
        let got = run(&e, r.clone());
        same(
            &got,
            w,
            &format!("max_tokens {} stop {:?}", r.max_tokens, r.stop),
        );
        assert!(got.ids.len() <= r.max_tokens);
        if r.sampling.repetition_penalty != 1.0 || r.no_draft {
            assert_eq!(got.finish.draft.proposed, 0, "no drafts for this request");
        }
    }
    e.shutdown();
}

/// Wraps a drafter to record what it proposed, so that a test can see rollbacks happened.
struct Counting(Box<dyn Drafter>, Arc<Mutex<usize>>);

impl Drafter for Counting {
    fn propose(&mut self, seq: u64, tokens: &[u32], k: usize) -> Vec<u32> {
        let d = self.0.propose(seq, tokens, k);
        *self.1.lock().unwrap() += d.len();
        d
    }
}

#[test]
fn rolled_back_slots_never_reach_a_later_request() {
    // Wrong drafts write their keys and values into slots that are rolled back; later requests
    // (the same prompt, hitting the prefix cache, and others reusing the freed blocks) must get
    // plain output.
    let reqs = requests();
    let want = plain_outcomes(&reqs);
    let answers: HashMap<Vec<u32>, Vec<u32>> = reqs
        .iter()
        .zip(&want)
        .map(|(r, w)| (r.prompt.clone(), w.ids.clone()))
        .collect();
    let count = Arc::new(Mutex::new(0));
    let wrong = Oracle {
        answers,
        right: false,
        vocab: tiny_vocab(),
    };
    let e = drafted(Box::new(Counting(Box::new(wrong), count.clone())), 4);
    for _ in 0..2 {
        for (r, w) in reqs.iter().zip(&want) {
            same(&run(&e, r.clone()), w, "after rollbacks");
        }
    }
    assert!(*count.lock().unwrap() > 0);
    e.shutdown();
}

#[test]
fn the_shipped_draft_model_gives_the_target_plain_output() {
    shipped_draft_model_gives_the_plain_output(false);
}

/// The same with fp8 projections (`--quantize fp8`) in both models: a verify row is computed
/// as the row alone would be, so the drafted output is still the plain fp8 output.
#[test]
fn with_fp8_projections_the_shipped_draft_model_gives_the_target_plain_output() {
    shipped_draft_model_gives_the_plain_output(true);
}

fn shipped_draft_model_gives_the_plain_output(fp8: bool) {
    use kiln_model::{GgufSource, WeightSource};
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
    let target = GgufSource::open(&models.join("kiln-4m/kiln-4m-f16.gguf")).unwrap();
    let draft = GgufSource::open(&models.join("kiln-4m-draft/kiln-4m-draft-f16.gguf")).unwrap();
    let tok = kiln_tokenizer::Tokenizer::from_gguf(target.file()).unwrap();
    let cpu = |src: &dyn WeightSource| {
        kiln_cpu::CpuBackend::new(
            src,
            kiln_cpu::CpuOptions {
                kv_blocks: 128,
                block_size: BLOCK_SIZE,
                threads: None,
                host_blocks: 0,
                fp8,
            },
            None,
        )
        .unwrap()
    };
    let texts = [
        "A file descriptor is",
        "The kernel schedules processes",
        "To mount a disk, run",
    ];
    let reqs: Vec<GenerateRequest> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = tok.encode(t, true).unwrap();
            if i == 2 {
                GenerateRequest {
                    logprobs: Some(2),
                    ..seeded(p, 48, 5)
                }
            } else {
                probed(p, 48)
            }
        })
        .collect();
    let plain = kiln_engine::start(Box::new(cpu(&target)), tok.clone(), config());
    let want: Vec<Outcome> = reqs.iter().map(|r| run(&plain, r.clone())).collect();
    plain.shutdown();
    let drafter = kiln_engine::ModelDrafter::new(Box::new(cpu(&draft)), 64);
    let e = kiln_engine::start_with_drafter(
        Box::new(cpu(&target)),
        tok,
        config(),
        Some((Box::new(drafter), DraftConfig::default())),
    );
    for (r, w) in reqs.iter().zip(&want) {
        same(
            &run(&e, r.clone()),
            w,
            &format!("kiln-4m drafted by kiln-4m-draft, fp8 {fp8}"),
        );
    }
    let st = e.stats();
    assert!(
        st.draft_accepted > 0,
        "the draft model is right sometimes: {st:?}"
    );
    e.shutdown();
}
