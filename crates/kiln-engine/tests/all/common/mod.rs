//! The real CPU backend on dummy:tiny weights, and helpers to run requests to completion.
#![allow(dead_code)]

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_engine::{
    Backend, EngineConfig, EngineHandle, Finish, GenEvent, GenerateRequest, SamplingParams,
};
use kiln_model::{DummySource, WeightSource};
use kiln_tokenizer::Tokenizer;

pub const BLOCK_SIZE: usize = 16;

pub fn tiny() -> DummySource {
    DummySource::preset("tiny").expect("dummy:tiny preset")
}

pub fn backend(source: &DummySource, kv_blocks: usize) -> CpuBackend {
    let opts = CpuOptions {
        kv_blocks,
        block_size: BLOCK_SIZE,
        threads: None,
        host_blocks: 0,
        fp8: false,
    };
    CpuBackend::new(source, opts, None).expect("CPU backend on dummy:tiny")
}

pub fn tokenizer(source: &DummySource) -> Tokenizer {
    Tokenizer::byte_level(source.config().vocab_size)
}

/// An engine on dummy:tiny with `kv_blocks` blocks of KV cache.
pub fn engine(kv_blocks: usize, cfg: EngineConfig) -> EngineHandle {
    let source = tiny();
    let backend: Box<dyn Backend> = Box::new(backend(&source, kv_blocks));
    kiln_engine::start(backend, tokenizer(&source), cfg)
}

pub fn config() -> EngineConfig {
    EngineConfig {
        max_num_seqs: 32,
        max_batched_tokens: 256,
        prefill_chunk: 64,
        prefill_alone: false,
        max_queue: 64,
        max_context: 1024,
        prefix_cache: true,
        overlap: true,
        output_thread: true,
    }
}

/// Everything a request produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub ids: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
    pub finish: Finish,
}

pub fn collect(mut stream: kiln_engine::RequestStream) -> Outcome {
    let mut out = Outcome {
        ids: vec![],
        text: String::new(),
        logprobs: vec![],
        top_logprobs: vec![],
        finish: Finish {
            reason: kiln_engine::FinishReason::Cancelled,
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            trailing_text: String::new(),
            time_to_first_token: None,
            draft: Default::default(),
        },
    };
    while let Some(event) = stream.blocking_next() {
        match event {
            GenEvent::Token(t) => {
                out.ids.push(t.id);
                out.text.push_str(&t.text);
                out.logprobs.push(t.logprob);
                out.top_logprobs.push(t.top_logprobs);
            }
            GenEvent::Done(f) => {
                out.text.push_str(&f.trailing_text);
                out.finish = f;
                return out;
            }
            GenEvent::Error(e) => panic!("request failed: {e}"),
        }
    }
    panic!("the stream ended without Done");
}

pub fn run(engine: &EngineHandle, req: GenerateRequest) -> Outcome {
    collect(engine.submit(req).expect("submit"))
}

/// A prompt of `len` byte tokens that differs with `salt`.
pub fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 31 + salt * 17 + 7) % 256)
        .collect()
}

pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        prompt,
        max_tokens,
        ignore_eos: true,
        ..GenerateRequest::default()
    }
}

pub fn seeded(prompt: Vec<u32>, max_tokens: usize, seed: u64) -> GenerateRequest {
    let sampling = SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        top_k: 50,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    GenerateRequest {
        prompt,
        max_tokens,
        ignore_eos: true,
        sampling,
        ..GenerateRequest::default()
    }
}

/// Polls the engine's stats until `done` holds (the engine publishes them after each step).
pub fn wait_for(
    engine: &EngineHandle,
    done: impl Fn(&kiln_engine::EngineStats) -> bool,
) -> kiln_engine::EngineStats {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let stats = engine.stats();
        if done(&stats) || std::time::Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Greedy with log-probabilities: equal outcomes mean equal logits.
pub fn probed(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        logprobs: Some(4),
        ..greedy(prompt, max_tokens)
    }
}

/// Two runs of a request gave the same tokens, log-probabilities, text and finish.
pub fn same(got: &Outcome, want: &Outcome, what: &str) {
    assert_eq!(got.ids, want.ids, "{what}: tokens");
    assert_eq!(got.logprobs, want.logprobs, "{what}: log-probabilities");
    assert_eq!(
        got.top_logprobs, want.top_logprobs,
        "{what}: top log-probabilities"
    );
    assert_eq!(got.text, want.text, "{what}: text");
    assert_eq!(got.finish.reason, want.finish.reason, "{what}: finish");
}
