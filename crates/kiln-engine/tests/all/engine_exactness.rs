//! The engine gives exactly the tokens of the plainest possible loop over the backend, alone,
//! among 15 other requests, and when a tiny KV pool forces preemption and recomputation.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use kiln_engine::sampler::{sample_row, Sampled};
use kiln_engine::{
    Backend, ChunkInput, EngineConfig, FinishReason, KvGeometry, StepCapacity, StepOutput, Want,
};

/// Greedy decoding with no engine: the whole prompt in one chunk, then one token per step.
fn plain_greedy_loop(prompt: &[u32], max_tokens: usize) -> Vec<u32> {
    let source = tiny();
    let mut backend = backend(&source, 64);
    let table: Vec<u32> = (0..64).collect();
    let argmax = |row: &[f32]| {
        let mut best = 0;
        for (i, &l) in row.iter().enumerate() {
            if l > row[best] {
                best = i;
            }
        }
        best as u32
    };
    let mut tokens = prompt.to_vec();
    let mut start = 0;
    while tokens.len() < prompt.len() + max_tokens {
        let chunk = ChunkInput {
            tokens: &tokens[start..],
            start_pos: start,
            block_table: &table,
            want_logits: true,
        };
        let logits = backend.forward(&[chunk]).expect("forward");
        start = tokens.len();
        tokens.push(argmax(&logits));
    }
    tokens[prompt.len()..].to_vec()
}

#[test]
fn greedy_output_equals_a_plain_loop_over_the_backend() {
    let engine = engine(64, config());
    let prompt = prompt(37, 1);
    let out = run(&engine, greedy(prompt.clone(), 24));
    assert_eq!(out.ids, plain_greedy_loop(&prompt, 24));
    assert_eq!(out.finish.reason, FinishReason::Length);
    assert_eq!(
        (out.finish.prompt_tokens, out.finish.completion_tokens),
        (37, 24)
    );
    engine.shutdown();
}

/// Sixteen requests: greedy and seeded sampling, prompts of 3 to 93 tokens.
fn sixteen_requests() -> Vec<kiln_engine::GenerateRequest> {
    (0..16u32)
        .map(|i| {
            let p = prompt(3 + 6 * i as usize, i);
            if i % 2 == 0 {
                greedy(p, 20)
            } else {
                seeded(p, 20, 1000 + i as u64)
            }
        })
        .collect()
}

fn run_concurrently(
    engine: &kiln_engine::EngineHandle,
    reqs: &[kiln_engine::GenerateRequest],
) -> Vec<Vec<u32>> {
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
        .map(|t| t.join().expect("reader thread").ids)
        .collect()
}

#[test]
fn sixteen_concurrent_requests_each_equal_their_solo_run() {
    let reqs = sixteen_requests();
    let solo_engine = engine(64, config());
    let solo: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| run(&solo_engine, r.clone()).ids)
        .collect();
    solo_engine.shutdown();

    // Small chunks and budget so that steps mix decodes with partial prefills.
    let cfg = EngineConfig {
        max_batched_tokens: 48,
        prefill_chunk: 16,
        ..config()
    };
    let engine = engine(256, cfg);
    let together = run_concurrently(&engine, &reqs);
    assert_eq!(together, solo);
    assert!(solo.iter().all(|ids| ids.len() == 20));
    engine.shutdown();
}

#[test]
fn preemption_with_a_tiny_kv_pool_gives_the_same_tokens() {
    let reqs = sixteen_requests();
    let roomy = engine(256, config());
    let expected = run_concurrently(&roomy, &reqs);
    roomy.shutdown();

    // 12 blocks of 16 tokens: the longest request (113 tokens) fits alone, all of them
    // together need far more.
    let tight = engine(12, config());
    let got = run_concurrently(&tight, &reqs);
    let stats = wait_for(&tight, |s| s.requests_finished == 16);
    assert!(
        stats.preemptions > 0,
        "the pool was meant to force preemption: {stats:?}"
    );
    assert_eq!(got, expected);
    assert_eq!(stats.kv_blocks_used, 0);
    tight.shutdown();
}

#[test]
fn seeded_sampling_is_reproducible_and_seeds_differ() {
    let engine = engine(64, config());
    let p = prompt(20, 3);
    let a = run(&engine, seeded(p.clone(), 32, 7));
    let b = run(&engine, seeded(p.clone(), 32, 7));
    let c = run(&engine, seeded(p.clone(), 32, 8));
    assert_eq!(a.ids, b.ids);
    assert_ne!(a.ids, c.ids);
    // Unseeded requests draw a fresh seed each time.
    let mut unseeded = seeded(p, 32, 0);
    unseeded.sampling.seed = None;
    let d = run(&engine, unseeded.clone());
    let e = run(&engine, unseeded);
    assert_ne!(d.ids, e.ids);
    engine.shutdown();
}

/// The CPU backend answering `Want::Argmax` as a device-side argmax would (lowest id among
/// equal maxima), counting the steps that took that path.
struct ArgmaxCpu {
    inner: kiln_cpu::CpuBackend,
    vocab: usize,
    argmax_steps: Arc<AtomicUsize>,
}

impl Backend for ArgmaxCpu {
    fn kv_geometry(&self) -> KvGeometry {
        self.inner.kv_geometry()
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> anyhow::Result<StepOutput> {
        if want != Want::Argmax {
            return self.inner.step(chunks, want);
        }
        self.argmax_steps.fetch_add(1, Ordering::SeqCst);
        let logits = self.inner.forward(chunks)?;
        let ids = logits
            .chunks_exact(self.vocab)
            .map(|row| {
                let mut best = 0;
                for (i, &l) in row.iter().enumerate() {
                    if l > row[best] {
                        best = i;
                    }
                }
                Ok(Sampled::id_only(best as u32))
            })
            .collect();
        Ok(StepOutput::Tokens(ids))
    }
}

#[test]
fn all_greedy_steps_take_the_backend_argmax_and_give_the_same_tokens() {
    use kiln_model::WeightSource;
    let reqs = sixteen_requests();
    let plain = engine(256, config());
    let expected = run_concurrently(&plain, &reqs);
    plain.shutdown();

    let source = tiny();
    let argmax_steps = Arc::new(AtomicUsize::new(0));
    let backend = ArgmaxCpu {
        inner: backend(&source, 256),
        vocab: source.config().vocab_size,
        argmax_steps: argmax_steps.clone(),
    };
    let engine = kiln_engine::start(Box::new(backend), tokenizer(&source), config());
    // Mixed steps (greedy and seeded sampling) fetch logits; greedy-only ones need not.
    assert_eq!(run_concurrently(&engine, &reqs), expected);
    let greedy_only: Vec<_> = reqs
        .iter()
        .filter(|r| r.sampling.temperature == 0.0)
        .cloned()
        .collect();
    let before = argmax_steps.load(Ordering::SeqCst);
    let got = run_concurrently(&engine, &greedy_only);
    let want: Vec<_> = expected.iter().step_by(2).cloned().collect();
    assert_eq!(got, want);
    assert!(
        argmax_steps.load(Ordering::SeqCst) > before,
        "greedy-only steps ask for the argmax"
    );
    engine.shutdown();
}

/// The CPU backend with fixed step buffers, as the CUDA backend has: it refuses any step with
/// more sequences or tokens than it was sized for, and records the largest step it saw.
struct SizedCpu {
    inner: kiln_cpu::CpuBackend,
    cap: StepCapacity,
    largest: Arc<Mutex<(usize, usize)>>,
}

impl Backend for SizedCpu {
    fn kv_geometry(&self) -> KvGeometry {
        self.inner.kv_geometry()
    }

    fn step_capacity(&self) -> Option<StepCapacity> {
        Some(self.cap)
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> anyhow::Result<StepOutput> {
        let tokens: usize = chunks.iter().map(|c| c.tokens.len()).sum();
        {
            let mut largest = self.largest.lock().unwrap();
            largest.0 = largest.0.max(chunks.len());
            largest.1 = largest.1.max(tokens);
        }
        anyhow::ensure!(
            chunks.len() <= self.cap.max_seqs && tokens <= self.cap.max_tokens,
            "step of {} sequences and {tokens} tokens exceeds {:?}",
            chunks.len(),
            self.cap
        );
        self.inner.step(chunks, want)
    }
}

#[test]
fn an_engine_configured_beyond_the_backends_step_buffers_stays_within_them() {
    let reqs = sixteen_requests();
    let plain = engine(256, config());
    let expected = run_concurrently(&plain, &reqs);
    plain.shutdown();

    let source = tiny();
    let cap = StepCapacity {
        max_seqs: 5,
        max_tokens: 40,
    };
    let largest = Arc::new(Mutex::new((0, 0)));
    let backend = SizedCpu {
        inner: backend(&source, 256),
        cap,
        largest: largest.clone(),
    };
    // Asks for 32 sequences and 256 tokens a step; the backend holds 5 and 40.
    let engine = kiln_engine::start(Box::new(backend), tokenizer(&source), config());
    assert_eq!(run_concurrently(&engine, &reqs), expected);
    let (seqs, tokens) = *largest.lock().unwrap();
    assert_eq!(seqs, cap.max_seqs, "the engine fills the step buffers");
    assert!(tokens <= cap.max_tokens);
    engine.shutdown();
}

/// The CPU backend answering `Want::Sample` with the host reference (`sampler::sample_row`),
/// and `Want::SampleAdjusted` (penalties, bias) with `Want::from_logits`, as a device sampler
/// must, counting the rows it sampled.
struct SamplingCpu {
    inner: kiln_cpu::CpuBackend,
    vocab: usize,
    sampled_rows: Arc<AtomicUsize>,
}

impl Backend for SamplingCpu {
    fn kv_geometry(&self) -> KvGeometry {
        self.inner.kv_geometry()
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> anyhow::Result<StepOutput> {
        if let Want::SampleAdjusted(rows, _) = want {
            let logits = self.inner.forward(chunks)?;
            self.sampled_rows.fetch_add(rows.len(), Ordering::SeqCst);
            return want.from_logits(logits, self.vocab);
        }
        let Want::Sample(rows) = want else {
            return self.inner.step(chunks, want);
        };
        let logits = self.inner.forward(chunks)?;
        assert_eq!(
            logits.len(),
            rows.len() * self.vocab,
            "one row per logits row"
        );
        self.sampled_rows.fetch_add(rows.len(), Ordering::SeqCst);
        let out = logits
            .chunks_exact(self.vocab)
            .zip(rows)
            .map(|(l, r)| sample_row(l, r))
            .collect();
        Ok(StepOutput::Tokens(out))
    }
}

/// Seeded sampling with log-probabilities, with and without penalties.
fn sampling_requests() -> Vec<kiln_engine::GenerateRequest> {
    (0..12u32)
        .map(|i| {
            let mut r = seeded(prompt(5 + 7 * i as usize, i), 16, 500 + i as u64);
            r.logprobs = Some(i as usize % 4);
            r.sampling.min_p = if i % 3 == 0 { 0.05 } else { 0.0 };
            if i % 4 == 3 {
                r.sampling.presence_penalty = 0.5;
            }
            r
        })
        .collect()
}

#[test]
fn backend_sampling_gives_the_host_samplers_tokens_and_logprobs() {
    use kiln_model::WeightSource;
    let reqs = sampling_requests();
    let plain = engine(256, config());
    let expected: Vec<_> = reqs.iter().map(|r| run(&plain, r.clone())).collect();
    plain.shutdown();

    let source = tiny();
    let sampled_rows = Arc::new(AtomicUsize::new(0));
    let backend = SamplingCpu {
        inner: backend(&source, 256),
        vocab: source.config().vocab_size,
        sampled_rows: sampled_rows.clone(),
    };
    let engine = kiln_engine::start(Box::new(backend), tokenizer(&source), config());
    // Alone: every row goes to the backend's sampler, penalised ones with their penalties.
    for (r, want) in reqs.iter().zip(&expected) {
        let before = sampled_rows.load(Ordering::SeqCst);
        let got = run(&engine, r.clone());
        assert_eq!(
            (&got.ids, &got.text, &got.logprobs, &got.top_logprobs),
            (&want.ids, &want.text, &want.logprobs, &want.top_logprobs)
        );
        let by_backend = sampled_rows.load(Ordering::SeqCst) - before;
        assert_eq!(by_backend, r.max_tokens);
    }
    // Together: a penalised request sends nobody's rows to the host.
    let before = sampled_rows.load(Ordering::SeqCst);
    let together = run_concurrently(&engine, &reqs);
    assert_eq!(
        sampled_rows.load(Ordering::SeqCst) - before,
        reqs.iter().map(|r| r.max_tokens).sum::<usize>()
    );
    let want: Vec<Vec<u32>> = expected.iter().map(|o| o.ids.clone()).collect();
    assert_eq!(together, want);
    engine.shutdown();
}

/// Penalised requests through the engine (their penalties handed to the backend with each row)
/// give the tokens and log-probabilities of a plain loop over the backend that samples each row
/// on the host with the sampler's own penalties over the history.
#[test]
fn penalties_equal_the_host_samplers_over_the_history() {
    use kiln_engine::sampler::{sample, History};
    let source = tiny();
    let mut reqs = sampling_requests();
    for (i, r) in reqs.iter_mut().enumerate() {
        r.sampling.repetition_penalty = [1.0, 1.3, 0.8][i % 3];
        r.sampling.presence_penalty = [0.0, 0.5, -0.25][(i / 2) % 3];
        r.sampling.frequency_penalty = [0.25, 0.0, 1.5][(i / 3) % 3];
        if i % 5 == 0 {
            r.sampling.temperature = 0.0;
        }
    }
    let engine = engine(256, config());
    let together = run_concurrently(&engine, &reqs);
    for (i, r) in reqs.iter().enumerate() {
        let out = run(&engine, r.clone());
        // The plain loop: whole prompt, then one token a step, sampled on the host.
        let mut b = backend(&source, 64);
        let table: Vec<u32> = (0..64).collect();
        let mut tokens = r.prompt.clone();
        let (mut start, mut logprobs) = (0, Vec::new());
        for k in 0..r.max_tokens {
            let chunk = ChunkInput {
                tokens: &tokens[start..],
                start_pos: start,
                block_table: &table,
                want_logits: true,
            };
            let logits = b.forward(&[chunk]).expect("forward");
            let history = History {
                prompt: &r.prompt,
                generated: &tokens[r.prompt.len()..],
            };
            let s = sample(
                &logits,
                &r.sampling,
                history,
                500 + i as u64,
                k as u64,
                r.logprobs,
            )
            .expect("sample");
            start = tokens.len();
            tokens.push(s.id);
            logprobs.push(s.logprob);
        }
        assert_eq!(out.ids, tokens[r.prompt.len()..], "request {i}");
        assert_eq!(out.logprobs, logprobs, "request {i}");
        assert_eq!(together[i], out.ids, "request {i} among the others");
    }
    engine.shutdown();
}
