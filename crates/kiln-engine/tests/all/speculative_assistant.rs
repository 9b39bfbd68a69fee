//! Speculative decoding with Gemma 4's assistant on the CPU backend: a draft model inside the
//! target's backend that reads the target's KV cache and hidden states
//! (kiln_step::Backend::draft). Drafted output equals plain output token for token and
//! log-probability for log-probability, alone and together with prefill chunks, with and
//! without overlapped steps; and every draft call drafts exactly what a fresh target with the
//! same tokens drafts (the right position, token and hidden row), after kept drafts too.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::*;
use kiln_engine::{Backend, BackendDrafter, DraftConfig, EngineHandle, GenerateRequest};
use kiln_model::{DummySource, WeightSource as _};

fn gemma4_backend() -> kiln_cpu::CpuBackend {
    backend(&DummySource::preset("gemma4-tiny").unwrap(), 512)
}

/// The target with its assistant attached, drafting through the engine (`pipelined`: behind
/// kiln_step::RunAtLaunch, so that the engine takes its overlapped path).
fn assisted(pipelined: bool) -> EngineHandle {
    let mut b = gemma4_backend();
    let assistant = DummySource::preset("gemma4-tiny-assistant").unwrap();
    b.attach_draft_model(&assistant, None).unwrap();
    assisted_engine(b, pipelined)
}

fn assisted_engine(b: impl Backend + 'static, pipelined: bool) -> EngineHandle {
    let tok = tokenizer(&DummySource::preset("gemma4-tiny").unwrap());
    let backend: Box<dyn Backend> = match pipelined {
        true => Box::new(kiln_engine::RunAtLaunch::new(b)),
        false => Box::new(b),
    };
    let cfg = DraftConfig {
        max_tokens: 5,
        max_batch: 64,
    };
    kiln_engine::start_with_drafter(
        backend,
        tok,
        config(),
        Some((Box::new(BackendDrafter), cfg)),
    )
}

fn gemma4_plain_outcomes(reqs: &[GenerateRequest]) -> Vec<Outcome> {
    let source = DummySource::preset("gemma4-tiny").unwrap();
    let e = kiln_engine::start(Box::new(gemma4_backend()), tokenizer(&source), config());
    let out = reqs.iter().map(|r| run(&e, r.clone())).collect();
    e.shutdown();
    out
}

/// Prompts past the target's 64-token window and the assistant's 65, greedy and seeded.
fn assistant_requests() -> Vec<GenerateRequest> {
    let mut reqs: Vec<GenerateRequest> = (0..3u32)
        .map(|i| probed(prompt(20 + 30 * i as usize, 70 + i), 40))
        .collect();
    let mut r = seeded(prompt(50, 80), 40, 7);
    r.logprobs = Some(2);
    reqs.push(r);
    reqs
}

#[test]
fn assistant_drafts_give_the_plain_output_alone_and_together() {
    let mut reqs = assistant_requests();
    let want = plain_outcomes_of(&reqs);
    for pipelined in [false, true] {
        let e = assisted(pipelined);
        for (r, w) in reqs.iter().zip(&want) {
            let got = run(&e, r.clone());
            same(&got, w, &format!("alone, pipelined {pipelined}"));
            assert!(got.finish.draft.proposed > 0, "{:?}", got.finish.draft);
        }
        e.shutdown();
    }
    // Together, with long prompts prefilling in chunks beside the drafting ones, and lengths
    // that end inside a draft.
    for i in 0..2u32 {
        reqs.push(probed(prompt(200 + 40 * i as usize, 90 + i), 9));
    }
    reqs.push(probed(prompt(33, 95), 3));
    let want = plain_outcomes_of(&reqs);
    let e = assisted(false);
    let streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    for (s, w) in streams.into_iter().zip(&want) {
        same(&collect(s), w, "together");
    }
    assert!(e.stats().draft_proposed > 0);
    e.shutdown();
}

fn plain_outcomes_of(reqs: &[GenerateRequest]) -> Vec<Outcome> {
    gemma4_plain_outcomes(reqs)
}

/// Checks each draft call against a fresh backend: the tokens each sequence's KV holds are
/// tracked from the steps (the last write to a position is its token), a new target prefills
/// them and its assistant drafts from its own last row; the drafts must be the same. This
/// holds the engine to the right position, token and hidden row after every kind of step.
struct Checked {
    inner: kiln_cpu::CpuBackend,
    /// Per sequence (by its first block), the token written at each position.
    held: HashMap<u32, Vec<u32>>,
    calls: Arc<Mutex<usize>>,
    /// The target and assistant of the fresh backends (those of `inner`).
    assistant: fn() -> Box<dyn kiln_model::WeightSource>,
    target: fn() -> Box<dyn kiln_model::WeightSource>,
}

fn tokenizer_of(source: &dyn kiln_model::WeightSource) -> kiln_tokenizer::Tokenizer {
    kiln_tokenizer::Tokenizer::byte_level(source.config().vocab_size)
}

fn dummy_assistant() -> Box<dyn kiln_model::WeightSource> {
    Box::new(DummySource::preset("gemma4-tiny-assistant").unwrap())
}

impl Backend for Checked {
    fn kv_geometry(&self) -> kiln_engine::KvGeometry {
        self.inner.kv_geometry()
    }
    fn step(
        &mut self,
        chunks: &[kiln_engine::ChunkInput<'_>],
        want: kiln_engine::Want<'_>,
    ) -> anyhow::Result<kiln_engine::StepOutput> {
        for c in chunks {
            let held = self.held.entry(c.block_table[0]).or_default();
            held.resize(held.len().max(c.end()), u32::MAX);
            held[c.start_pos..c.end()].copy_from_slice(c.tokens);
        }
        self.inner.step(chunks, want)
    }
    fn has_draft_model(&self) -> bool {
        true
    }
    fn draft(
        &mut self,
        rows: &[kiln_engine::DraftRow<'_>],
        k: usize,
    ) -> anyhow::Result<Vec<Vec<u32>>> {
        let got = self.inner.draft_with_logits(rows, k)?;
        let vocab = self.inner.config().vocab_size;
        for (i, r) in rows.iter().enumerate() {
            let history = &self.held[&r.block_table[0]][..r.pos];
            let opts = kiln_cpu::CpuOptions {
                kv_blocks: 64,
                block_size: BLOCK_SIZE,
                threads: None,
                host_blocks: 0,
                fp8: false,
            };
            let mut fresh = kiln_cpu::CpuBackend::new((self.target)().as_ref(), opts, None)?;
            fresh
                .attach_draft_model((self.assistant)().as_ref(), None)
                .unwrap();
            let table: Vec<u32> = (0..(r.pos as u32).div_ceil(16)).collect();
            fresh.forward(&[kiln_engine::ChunkInput {
                tokens: history,
                start_pos: 0,
                block_table: &table,
                want_logits: true,
            }])?;
            let row = kiln_engine::DraftRow {
                token: r.token,
                pos: r.pos,
                block_table: &table,
                hidden_row: 0,
            };
            let want = fresh.draft_with_logits(&[row], k)?;
            assert_eq!(
                got.tokens[i], want.tokens[0],
                "the drafts after {} tokens",
                r.pos
            );
            for s in 0..k {
                let ours = &got.logits[s][i * vocab..(i + 1) * vocab];
                assert!(
                    ours == &want.logits[s][..],
                    "the logits of draft {s} after {} tokens differ from a fresh target's",
                    r.pos
                );
            }
        }
        *self.calls.lock().unwrap() += rows.len();
        Ok(got.tokens)
    }
}

#[test]
fn assistant_drafts_are_what_a_fresh_target_drafts() {
    let mut inner = gemma4_backend();
    let assistant = DummySource::preset("gemma4-tiny-assistant").unwrap();
    inner.attach_draft_model(&assistant, None).unwrap();
    let calls = Arc::new(Mutex::new(0));
    let checked = Checked {
        inner,
        held: HashMap::new(),
        calls: calls.clone(),
        assistant: dummy_assistant,
        target: || Box::new(DummySource::preset("gemma4-tiny").unwrap()),
    };
    let reqs = assistant_requests();
    let want = plain_outcomes_of(&reqs);
    drafted_through(checked, &reqs, &want, "checked drafts");
    assert!(*calls.lock().unwrap() > 20);
}

/// Runs `reqs` together through an engine drafting with `checked`'s own draft model (four tokens
/// a draft), checks each output against `want` and returns the engine's counters. No prefix
/// cache: a sequence's first block is its own (the checks' key).
fn drafted_through(
    checked: Checked,
    reqs: &[GenerateRequest],
    want: &[Outcome],
    what: &str,
) -> kiln_engine::EngineStats {
    let mut cfg = config();
    cfg.prefix_cache = false;
    let tok = tokenizer(&DummySource::preset("gemma4-tiny").unwrap());
    let draft_cfg = DraftConfig {
        max_tokens: 4,
        max_batch: 64,
    };
    let e = kiln_engine::start_with_drafter(
        Box::new(checked),
        tok,
        cfg,
        Some((Box::new(BackendDrafter), draft_cfg)),
    );
    let streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    for (s, w) in streams.into_iter().zip(want) {
        same(&collect(s), w, what);
    }
    let st = e.stats();
    e.shutdown();
    st
}

/// Dummy weights that make a model repeat its last token (an echo): the blocks add almost
/// nothing (their output norms near zero, the feed-forward and per-layer input silent), so the
/// final hidden state is the token's own embedding plus a little context, and the tied LM head
/// scores that token highest. As an assistant it is as wide as the target and its input
/// projection passes the target's embedding through, with a little of the hidden state. An
/// echo target with an echo assistant keeps most drafts, so the drafts after kept ones are
/// checked, and the small context terms make a wrong hidden row show in the logits.
struct Echo {
    config: kiln_model::ModelConfig,
    dummy: DummySource,
    /// The target's embedding, for an assistant's LM head.
    target: Option<DummySource>,
}

impl Echo {
    fn target() -> Echo {
        let dummy = DummySource::preset("gemma4-tiny").unwrap();
        Echo {
            config: dummy.config().clone(),
            dummy,
            target: None,
        }
    }

    fn assistant() -> Echo {
        let mut config = DummySource::preset("gemma4-tiny-assistant")
            .unwrap()
            .config()
            .clone();
        config.hidden_size = 256;
        config.assistant.as_mut().unwrap().ordered_embeddings = None;
        Echo {
            dummy: DummySource::new(config.clone()).unwrap(),
            config,
            target: Some(DummySource::preset("gemma4-tiny").unwrap()),
        }
    }
}

impl kiln_model::WeightSource for Echo {
    fn config(&self) -> &kiln_model::ModelConfig {
        &self.config
    }
    fn has(&self, id: kiln_model::TensorId) -> bool {
        self.dummy.has(id)
    }
    fn load_f32(&self, id: kiln_model::TensorId) -> anyhow::Result<kiln_model::HostTensor> {
        use kiln_model::Role;
        let mut t = self.dummy.load_f32(id)?;
        match (id.role, &self.target) {
            (Role::TokenEmbd, Some(target)) => t = target.load_f32(id)?,
            (Role::DraftPreProjection, _) => {
                let cols = t.shape[1];
                for r in 0..t.shape[0] {
                    t.data[r * cols..r * cols + cols / 2].fill(0.0);
                    t.data[r * cols + r] = 1.0;
                    t.data[r * cols + cols / 2..(r + 1) * cols]
                        .iter_mut()
                        .for_each(|x| *x *= 0.01);
                }
            }
            (Role::PostAttnNorm, _) => t.data.fill(0.01),
            (Role::Down | Role::PerLayerProj, _) => t.data.fill(0.0),
            _ => {}
        }
        Ok(t)
    }
}

#[test]
fn kept_assistant_drafts_leave_the_right_hidden_row() {
    let opts = kiln_cpu::CpuOptions {
        kv_blocks: 512,
        block_size: BLOCK_SIZE,
        threads: None,
        host_blocks: 0,
        fp8: false,
    };
    let echo_backend = || kiln_cpu::CpuBackend::new(&Echo::target(), opts, None).unwrap();
    let mut inner = echo_backend();
    inner.attach_draft_model(&Echo::assistant(), None).unwrap();
    let calls = Arc::new(Mutex::new(0));
    let checked = Checked {
        inner,
        held: HashMap::new(),
        calls: calls.clone(),
        assistant: || Box::new(Echo::assistant()),
        target: || Box::new(Echo::target()),
    };
    let reqs = assistant_requests();
    let source = Echo::target();
    let plain = kiln_engine::start(Box::new(echo_backend()), tokenizer_of(&source), config());
    let want: Vec<Outcome> = reqs.iter().map(|r| run(&plain, r.clone())).collect();
    plain.shutdown();
    let st = drafted_through(checked, &reqs, &want, "echo drafts");
    // Most drafts are kept, and the drafts after them were checked.
    assert!(st.draft_accepted * 2 > st.draft_proposed, "{st:?}");
    assert!(*calls.lock().unwrap() > 20);
}
