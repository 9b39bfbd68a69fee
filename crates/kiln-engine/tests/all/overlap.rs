//! Overlapped steps (each step planned and launched before the one before is finished, its
//! decode tokens fed from that step's picks) and text made on the output thread give exactly
//! the output of plain steps with text made on the engine thread: every token, its text, its
//! log-probabilities, how and when each request ends; alone and among others; with penalties,
//! stop strings, stop tokens, end of sequence, a grammar, preemption and cancellation. The CPU backend runs behind `RunAtLaunch`, which answers launch and
//! collect, so the engine's pipelined path is the one under test.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use kiln_engine::{
    Backend, ChunkInput, EngineConfig, EngineHandle, Feed, GenerateRequest, Grammar, Launched,
    Phase, RunAtLaunch, SamplingParams, StepOutput, Want,
};
use kiln_model::{GgufSource, WeightSource};
use kiln_tokenizer::Tokenizer;

/// Counts launched steps not yet collected, and the most there ever were.
struct Counting<B> {
    inner: B,
    now: usize,
    most: Arc<AtomicUsize>,
}

impl<B: Backend> Backend for Counting<B> {
    fn kv_geometry(&self) -> kiln_engine::KvGeometry {
        self.inner.kv_geometry()
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> anyhow::Result<StepOutput> {
        self.inner.step(chunks, want)
    }

    fn pipelined(&self) -> bool {
        self.inner.pipelined()
    }

    fn launch(
        &mut self,
        chunks: &[ChunkInput<'_>],
        want: Want<'_>,
        feeds: &[Feed],
    ) -> anyhow::Result<Launched> {
        let l = self.inner.launch(chunks, want, feeds)?;
        self.now += 1;
        self.most.fetch_max(self.now, Ordering::SeqCst);
        Ok(l)
    }

    fn collect(&mut self) -> anyhow::Result<StepOutput> {
        self.now -= 1;
        self.inner.collect()
    }
}

fn shipped_source() -> GgufSource {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/kiln-4m/kiln-4m-f16.gguf");
    GgufSource::open(&path).unwrap()
}

fn cpu(src: &dyn WeightSource, kv_blocks: usize) -> kiln_cpu::CpuBackend {
    let opts = kiln_cpu::CpuOptions {
        kv_blocks,
        block_size: BLOCK_SIZE,
        threads: None,
        host_blocks: 0,
        fp8: false,
    };
    kiln_cpu::CpuBackend::new(src, opts, None).unwrap()
}

/// An engine on `src` whose backend launches ahead (`pipelined`) or runs whole steps; the most
/// launched steps that were ever waiting to be collected.
fn start(
    src: &dyn WeightSource,
    tok: &Tokenizer,
    kv_blocks: usize,
    pipelined: bool,
    cfg: EngineConfig,
) -> (EngineHandle, Arc<AtomicUsize>) {
    let most = Arc::new(AtomicUsize::new(0));
    let backend: Box<dyn Backend> = if pipelined {
        Box::new(Counting {
            inner: RunAtLaunch::new(cpu(src, kv_blocks)),
            now: 0,
            most: most.clone(),
        })
    } else {
        Box::new(cpu(src, kv_blocks))
    };
    (kiln_engine::start(backend, tok.clone(), cfg), most)
}

fn sampling(temperature: f32, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_p: 0.95,
        seed: Some(seed),
        ..SamplingParams::default()
    }
}

/// Requests of every kind the engine treats differently, on the shipped model (whose replies
/// end with its end-of-sequence token).
fn mixed_requests(tok: &Tokenizer, regex: Option<kiln_engine::Constraint>) -> Vec<GenerateRequest> {
    let text = [
        "A file descriptor is",
        "The kernel schedules",
        "To mount a disk",
        "Signals are",
        "The shell reads",
        "A socket buffer",
        "Memory pages",
        "The inode table",
    ];
    let mut reqs = Vec::new();
    for (i, t) in text.iter().enumerate() {
        let prompt = tok.encode(t, true).unwrap();
        let mut r = GenerateRequest {
            prompt,
            max_tokens: 20 + 7 * i,
            ..GenerateRequest::default()
        };
        match i {
            0 => r.logprobs = Some(3),
            1 => r.sampling = sampling(0.9, 11),
            2 => {
                r.sampling = sampling(0.7, 12);
                r.logprobs = Some(2);
            }
            3 => r.sampling.repetition_penalty = 1.3,
            4 => r.stop = vec![" the".into(), "\n".into()],
            5 => r.sampling.logit_bias = vec![(tok.encode(" the", false).unwrap()[0], 5.0)],
            6 => r.ignore_eos = true,
            _ => {}
        }
        reqs.push(r);
    }
    if let Some(c) = regex {
        reqs.push(GenerateRequest {
            prompt: tok.encode("Numbers:", true).unwrap(),
            max_tokens: 30,
            constraint: Some(c),
            ..GenerateRequest::default()
        });
    }
    reqs
}

fn run_all(engine: &EngineHandle, reqs: &[GenerateRequest]) -> Vec<Outcome> {
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| engine.submit(r.clone()).expect("submit"))
        .collect();
    let threads: Vec<_> = streams
        .into_iter()
        .map(|s| std::thread::spawn(move || collect(s)))
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("reader"))
        .collect()
}

/// What must be equal between two runs of a request (the time to first token is not).
fn comparable(o: &Outcome) -> impl PartialEq + std::fmt::Debug {
    (
        o.ids.clone(),
        o.text.clone(),
        o.logprobs.clone(),
        o.top_logprobs.clone(),
        o.finish.reason,
        o.finish.completion_tokens,
        o.finish.prompt_tokens,
    )
}

#[test]
fn overlapped_steps_give_the_output_of_plain_steps() {
    let src = shipped_source();
    let tok = Tokenizer::from_gguf(src.file()).unwrap();
    let cfg = EngineConfig {
        max_batched_tokens: 64,
        prefill_chunk: 16,
        ..config()
    };
    // Alone, on plain whole steps, text made on the engine thread.
    let plain_cfg = EngineConfig {
        output_thread: false,
        ..cfg
    };
    let (plain, _) = start(&src, &tok, 512, false, plain_cfg);
    let regex = plain.compile(&Grammar::Regex("[0-9]{3}( [0-9]{3}){0,6}".into()));
    let reqs = mixed_requests(&tok, Some(regex.unwrap()));
    let alone: Vec<Outcome> = reqs.iter().map(|r| run(&plain, r.clone())).collect();
    plain.shutdown();
    assert!(
        alone.iter().any(|o| o.ids.len() < 20),
        "some reply ends early (end of sequence or stop string)"
    );
    for (overlap, output_thread) in [(true, true), (false, true), (true, false)] {
        let cfg = EngineConfig {
            overlap,
            output_thread,
            ..cfg
        };
        let (engine, most) = start(&src, &tok, 512, true, cfg);
        let together = run_all(&engine, &reqs);
        for (i, (t, a)) in together.iter().zip(&alone).enumerate() {
            assert_eq!(
                comparable(t),
                comparable(a),
                "request {i}, overlap {overlap}, output thread {output_thread}"
            );
        }
        // And each alone on the overlapping engine.
        for (i, r) in reqs.iter().enumerate() {
            let o = run(&engine, r.clone());
            assert_eq!(comparable(&o), comparable(&alone[i]), "request {i} alone");
        }
        let launched_ahead = most.load(Ordering::SeqCst);
        assert_eq!(
            launched_ahead >= 2,
            overlap,
            "steps launched before the one before was collected: at most {launched_ahead}"
        );
        let stats = wait_for(&engine, |s| s.running == 0 && s.kv_blocks_used == 0);
        assert_eq!((stats.running, stats.kv_blocks_used), (0, 0), "{stats:?}");
        engine.shutdown();
    }
}

/// Greedy and seeded requests on dummy:tiny with a KV pool so small that sequences are
/// preempted and recomputed, under overlap: the tokens of a roomy pool.
#[test]
fn overlap_with_preemption_gives_the_same_tokens() {
    let src = tiny();
    let tok = tokenizer(&src);
    let reqs: Vec<GenerateRequest> = (0..12u32)
        .map(|i| {
            let p = prompt(3 + 7 * i as usize, i);
            if i % 2 == 0 {
                greedy(p, 24)
            } else {
                seeded(p, 24, 500 + i as u64)
            }
        })
        .collect();
    let (roomy, _) = start(&src, &tok, 256, false, config());
    let expected = run_all(&roomy, &reqs);
    roomy.shutdown();
    let (tight, most) = start(&src, &tok, 14, true, config());
    let got = run_all(&tight, &reqs);
    let ids = |v: &[Outcome]| v.iter().map(|o| o.ids.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&got), ids(&expected));
    let stats = tight.stats();
    assert!(
        stats.preemptions > 0,
        "the pool was tight enough: {stats:?}"
    );
    assert!(most.load(Ordering::SeqCst) >= 2);
    tight.shutdown();
}

#[test]
fn a_cancelled_request_frees_everything_under_overlap() {
    let src = tiny();
    let tok = tokenizer(&src);
    let (engine, _) = start(&src, &tok, 64, true, config());
    let keep = engine.submit(greedy(prompt(9, 3), 40)).unwrap();
    let mut stream = engine.submit(greedy(prompt(40, 2), 500)).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            stream.blocking_next(),
            Some(kiln_engine::GenEvent::Token(_))
        ));
    }
    drop(stream);
    let kept = collect(keep);
    assert_eq!(kept.ids.len(), 40);
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
    // The engine goes on serving, with the tokens a fresh engine gives.
    let (fresh, _) = start(&src, &tok, 64, false, config());
    let req = greedy(prompt(5, 1), 9);
    assert_eq!(run(&engine, req.clone()).ids, run(&fresh, req).ids);
    fresh.shutdown();
    engine.shutdown();
}

#[test]
fn step_timings_count_every_phase() {
    let src = tiny();
    let tok = tokenizer(&src);
    for overlap in [true, false] {
        let (engine, _) = start(
            &src,
            &tok,
            64,
            true,
            EngineConfig {
                overlap,
                ..config()
            },
        );
        run_all(
            &engine,
            &[greedy(prompt(20, 1), 16), greedy(prompt(9, 2), 16)],
        );
        // The last step's timings are recorded just after its tokens reach the clients.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut t = engine.step_timings();
        while t.phases[Phase::Output as usize].count() < 16 && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
            t = engine.step_timings();
        }
        assert_eq!(t.overlap, overlap);
        assert!(t.steps >= 16 && t.rows >= 32, "{t:?}");
        for p in [
            Phase::Admit,
            Phase::Schedule,
            Phase::Launch,
            Phase::Sample,
            Phase::Output,
        ] {
            let n = t.phases[p as usize].count();
            assert!(n >= 16, "{} observed {n} times", p.name());
        }
        // A synchronous step has nothing to wait for; overlapped ones are collected.
        let waits = t.phases[Phase::Wait as usize].count();
        assert_eq!(waits > 0, overlap, "{waits} waits");
        assert_eq!(
            t.phases[Phase::DeviceBusy as usize].count(),
            0,
            "the CPU backend does not time a device"
        );
        engine.shutdown();
    }
}
