//! Request-level behaviour on the real CPU backend: stop strings and tokens, cancellation,
//! limits, log-probabilities, refusals at submit and shutdown.

use crate::common;

use common::*;
use kiln_engine::{EngineConfig, FinishReason, GenerateRequest, SamplingParams, SubmitError};

/// A greedy continuation to cut. Random weights give odd text (stray bytes decode to U+FFFD,
/// padding tokens to nothing), but it is the same every run.
fn reference(engine: &kiln_engine::EngineHandle) -> (GenerateRequest, Outcome) {
    let req = greedy(prompt(12, 5), 48);
    let out = run(engine, req.clone());
    (req, out)
}

#[test]
fn stop_strings_cut_the_text_exactly() {
    let engine = engine(64, config());
    let (req, full) = reference(&engine);
    let chars: Vec<char> = full.text.chars().collect();
    assert!(
        chars.len() >= 6,
        "reference text too short: {:?}",
        full.text
    );
    // A stop string from the middle of the text, ending mid-way through the generation.
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let cut = full.text.find(&stop).expect("stop string is in the text");
    let out = run(
        &engine,
        GenerateRequest {
            stop: vec!["#never#".into(), stop.clone()],
            ..req
        },
    );
    assert_eq!(out.text, full.text[..cut], "stop string {stop:?}");
    assert_eq!(out.finish.reason, FinishReason::Stop);
    assert!(out.ids.len() < full.ids.len());
    assert_eq!(out.ids[..], full.ids[..out.ids.len()]);
    engine.shutdown();
}

#[test]
fn a_stop_token_ends_generation_without_text() {
    let engine = engine(64, config());
    let (req, full) = reference(&engine);
    let stop_id = full.ids[10];
    let first = full.ids.iter().position(|&t| t == stop_id).unwrap();
    let out = run(
        &engine,
        GenerateRequest {
            stop_token_ids: vec![stop_id],
            ..req
        },
    );
    assert_eq!(out.ids, full.ids[..=first]);
    assert_eq!(out.finish.reason, FinishReason::Stop);
    assert_eq!(out.finish.completion_tokens, first + 1);
    let text_before: String = run(&engine, greedy(prompt(12, 5), first)).text;
    assert_eq!(
        out.text, text_before,
        "the stop token's own text is not emitted"
    );
    engine.shutdown();
}

#[test]
fn a_dropped_stream_frees_its_blocks() {
    let engine = engine(64, config());
    let mut stream = engine.submit(greedy(prompt(40, 2), 500)).unwrap();
    assert!(matches!(
        stream.blocking_next(),
        Some(kiln_engine::GenEvent::Token(_))
    ));
    let busy = engine.stats();
    assert!(busy.kv_blocks_used >= 3, "{busy:?}");
    drop(stream);
    let stats = wait_for(&engine, |s| s.kv_blocks_used == 0 && s.running == 0);
    assert_eq!(
        (
            stats.kv_blocks_used,
            stats.running,
            stats.requests_cancelled
        ),
        (0, 0, 1),
        "{stats:?}"
    );
    assert!(stats.generated_tokens < 500);
    // The engine goes on serving.
    assert_eq!(run(&engine, greedy(prompt(5, 1), 3)).ids.len(), 3);
    engine.shutdown();
}

#[test]
fn the_context_limit_gives_finish_reason_length() {
    let engine = engine(
        64,
        EngineConfig {
            max_context: 40,
            ..config()
        },
    );
    assert_eq!(engine.max_context(), 40);
    // max_tokens 0: generate until the context is full.
    let out = run(&engine, greedy(prompt(30, 1), 0));
    assert_eq!(out.finish.reason, FinishReason::Length);
    assert_eq!(out.finish.completion_tokens, 10);
    assert_eq!(out.ids.len(), 10);
    let refused = engine.submit(greedy(prompt(30, 1), 11)).unwrap_err();
    assert!(matches!(
        refused,
        SubmitError::PromptTooLong {
            prompt_tokens: 30,
            max_tokens: 11,
            max_context: 40,
            ..
        }
    ));
    assert!(refused.to_string().contains("41 in all"), "{refused}");
    engine.shutdown();
}

#[test]
fn a_prompt_longer_than_the_kv_pool_is_refused_at_submit() {
    // 4 blocks of 16 tokens: 64 tokens, smaller than the configured context.
    let engine = engine(4, config());
    assert_eq!(engine.max_context(), 64);
    let err = engine.submit(greedy(prompt(70, 1), 1)).unwrap_err();
    assert!(
        matches!(
            err,
            SubmitError::PromptTooLong {
                limited_by_kv_cache: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("KV cache"), "{err}");
    assert_eq!(run(&engine, greedy(prompt(60, 1), 4)).ids.len(), 4);
    engine.shutdown();
}

#[test]
fn bad_requests_are_refused_with_a_reason() {
    let engine = engine(8, config());
    let invalid = |req: GenerateRequest| match engine.submit(req) {
        Err(SubmitError::Invalid(m)) => m,
        other => panic!("expected Invalid, got {other:?}"),
    };
    assert!(invalid(greedy(vec![], 4)).contains("empty"));
    assert!(invalid(greedy(vec![1, 100_000], 4)).contains("100000"));
    let sampling = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::default()
    };
    assert!(invalid(GenerateRequest {
        sampling,
        ..greedy(vec![1], 4)
    })
    .contains("temperature"));
    let sampling = SamplingParams {
        top_p: f32::NAN,
        ..SamplingParams::default()
    };
    assert!(invalid(GenerateRequest {
        sampling,
        ..greedy(vec![1], 4)
    })
    .contains("top_p"));
    assert!(invalid(GenerateRequest {
        logprobs: Some(1 << 20),
        ..greedy(vec![1], 4)
    })
    .contains("log"));
    engine.shutdown();
}

#[test]
fn a_full_queue_refuses_and_recovers() {
    let engine = engine(
        64,
        EngineConfig {
            max_num_seqs: 1,
            max_queue: 1,
            ..config()
        },
    );
    let a = engine.submit(greedy(prompt(5, 1), 50)).unwrap();
    let b = engine.submit(greedy(prompt(5, 2), 50)).unwrap();
    assert!(matches!(
        engine.submit(greedy(prompt(5, 3), 5)),
        Err(SubmitError::QueueFull { limit: 2 })
    ));
    assert_eq!(collect(a).ids.len(), 50);
    assert_eq!(collect(b).ids.len(), 50);
    assert_eq!(run(&engine, greedy(prompt(5, 3), 5)).ids.len(), 5);
    engine.shutdown();
}

#[test]
fn a_group_is_admitted_whole_or_not_at_all() {
    let engine = engine(
        64,
        EngineConfig {
            max_num_seqs: 1,
            max_queue: 2,
            ..config()
        },
    );
    let group = |k: u32, n: usize| (0..k).map(|i| greedy(prompt(4, i), n)).collect::<Vec<_>>();
    // More than the engine ever holds: refused as such, and nothing is taken.
    assert!(matches!(
        engine.submit_all(group(4, 5)),
        Err(SubmitError::NeverFits {
            requested: 4,
            limit: 3
        })
    ));
    let a = engine.submit(greedy(prompt(5, 1), 50)).unwrap();
    // Two slots are left: a group of three is refused whole, one of two is admitted whole.
    assert!(matches!(
        engine.submit_all(group(3, 5)),
        Err(SubmitError::QueueFull { limit: 3 })
    ));
    let two = engine.submit_all(group(2, 5)).unwrap();
    assert_eq!(two.len(), 2);
    for s in two {
        assert_eq!(collect(s).ids.len(), 5);
    }
    assert_eq!(collect(a).ids.len(), 50);
    assert_eq!(engine.submit_all(group(3, 2)).unwrap().len(), 3);
    engine.shutdown();
}

#[test]
fn logprobs_report_the_chosen_token_and_the_top_alternatives() {
    let engine = engine(64, config());
    let out = run(
        &engine,
        GenerateRequest {
            logprobs: Some(3),
            ..greedy(prompt(9, 4), 8)
        },
    );
    for (i, (lp, top)) in out.logprobs.iter().zip(&out.top_logprobs).enumerate() {
        let lp = lp.expect("logprob asked for");
        assert_eq!(top.len(), 3);
        assert!(lp <= 0.0 && lp.is_finite());
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0], (out.ids[i], lp));
        assert!(top[0].1 >= top[1].1 && top[1].1 >= top[2].1);
    }
    let plain = run(&engine, greedy(prompt(9, 4), 8));
    assert!(plain.logprobs.iter().all(Option::is_none));
    assert_eq!(plain.ids, out.ids);
    engine.shutdown();
}

#[test]
fn shutdown_cancels_in_flight_requests_and_refuses_new_ones() {
    let engine = engine(64, config());
    let stream = engine.submit(greedy(prompt(10, 1), 1000)).unwrap();
    engine.shutdown();
    let out = collect(stream);
    assert_eq!(out.finish.reason, FinishReason::Cancelled);
    assert!(out.ids.len() < 1000);
    assert!(matches!(
        engine.submit(greedy(prompt(3, 1), 1)),
        Err(SubmitError::ShuttingDown)
    ));
    engine.shutdown();
}

#[test]
fn a_failed_forward_pass_errors_its_requests_and_the_engine_goes_on() {
    // A tokenizer larger than the model's vocabulary lets an id through that the backend
    // refuses: the request gets an Error event, not a hang, and later requests still run.
    let source = tiny();
    let backend = Box::new(backend(&source, 64));
    let engine = kiln_engine::start(
        backend,
        kiln_tokenizer::Tokenizer::byte_level(1024),
        config(),
    );
    let mut bad = engine.submit(greedy(vec![1, 700, 2], 4)).unwrap();
    match bad.blocking_next() {
        Some(kiln_engine::GenEvent::Error(message)) => {
            assert!(message.contains("forward pass failed"), "{message}")
        }
        other => panic!("expected an error event, got {other:?}"),
    }
    assert!(bad.blocking_next().is_none());
    assert_eq!(run(&engine, greedy(prompt(5, 1), 3)).ids.len(), 3);
    let stats = wait_for(&engine, |s| s.requests_failed == 1 && s.kv_blocks_used == 0);
    assert_eq!((stats.requests_failed, stats.kv_blocks_used), (1, 0));
    engine.shutdown();
}
