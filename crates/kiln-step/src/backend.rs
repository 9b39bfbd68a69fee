//! The one trait between the engine and a compute backend (CPU, CUDA): run a step, return what
//! the caller asked for.

use anyhow::{bail, Result};

use crate::adjust::{adjust_row, RowAdjust, StepAdjust};
use crate::chunk::{ChunkInput, KvGeometry, StepCapacity};
use crate::pipeline::{DeviceTiming, Feed, Launched};
use crate::sampling::{choose, sample_row, sample_rows, RowSampling, SampleError, Sampled};

/// What a step must return for its logits rows (one per chunk with `want_logits`, in chunk
/// order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want<'a> {
    /// The raw logits, `vocab_size` per row: the caller samples (penalties need the history).
    Logits,
    /// Each row's argmax: the lowest id among equal maxima, NaN never chosen. A backend may
    /// pick it where the logits are, so that they need not travel.
    Argmax,
    /// Each row sampled with its entry (one per row): exactly what [`sample_row`] picks from
    /// the row's logits, with the log-probabilities it asks for.
    Sample(&'a [RowSampling]),
    /// Like `Sample`, each row first adjusted by its entry of the [`StepAdjust`] (a client's
    /// logit bias, a grammar's allowed tokens): exactly what [`choose`] picks from the row's
    /// logits and its [`adjust_row`] result. The adjustments may still be being computed when
    /// the step starts; a backend waits for them only before it samples.
    SampleAdjusted(&'a [RowSampling], &'a StepAdjust),
}

impl Want<'_> {
    /// The answer to this request from logits on the host: how a backend that only computes
    /// logits (or whose device path is switched off) honours `Argmax` and `Sample`.
    pub fn from_logits(&self, logits: Vec<f32>, vocab: usize) -> Result<StepOutput> {
        Ok(match self {
            Want::Logits => StepOutput::Logits(logits),
            Want::Argmax => {
                let greedy = RowSampling {
                    temperature: 0.0,
                    top_k: 0,
                    top_p: 1.0,
                    min_p: 0.0,
                    uniform: 0.0,
                    logprobs: None,
                };
                StepOutput::Tokens(
                    logits
                        .chunks_exact(vocab.max(1))
                        .map(|row| sample_row(row, &greedy))
                        .collect(),
                )
            }
            Want::Sample(rows) => {
                let n = logits.len() / vocab.max(1);
                if rows.len() != n {
                    bail!("{} sampling rows for {n} logits rows", rows.len());
                }
                StepOutput::Tokens(sample_rows(&logits, vocab, rows))
            }
            Want::SampleAdjusted(rows, adjust) => {
                let n = logits.len() / vocab.max(1);
                let adjust = adjust.wait();
                if rows.len() != n || adjust.len() != n {
                    bail!(
                        "{} sampling rows and {} adjustments for {n} logits rows",
                        rows.len(),
                        adjust.len()
                    );
                }
                let jobs: Vec<(&[f32], &RowSampling, &Option<RowAdjust>)> = logits
                    .chunks_exact(vocab.max(1))
                    .zip(rows.iter())
                    .zip(adjust)
                    .map(|((raw, row), adj)| (raw, row, adj))
                    .collect();
                StepOutput::Tokens(crate::par::map_rows(
                    &jobs,
                    logits.len(),
                    |&(raw, row, adj)| match adj {
                        Some(adj) if !adj.is_identity() => {
                            let mut adjusted = Vec::new();
                            adjust_row(raw, adj, &mut adjusted);
                            choose(raw, &adjusted, row)
                        }
                        _ => sample_row(raw, row),
                    },
                ))
            }
        })
    }
}

/// What a step returned.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutput {
    /// For [`Want::Logits`]: the rows, concatenated.
    Logits(Vec<f32>),
    /// For [`Want::Argmax`] and [`Want::Sample`]: one token per row, or why that row has none.
    Tokens(Vec<Result<Sampled, SampleError>>),
}

/// One block's keys and values (every layer) moved between the KV pool and the backend's host
/// tier: a second level under the prefix cache, where blocks the pool must give up are kept
/// instead of forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockCopy {
    ToHost { block: u32, slot: usize },
    ToDevice { slot: usize, block: u32 },
}

/// One sequence a backend's own draft model drafts for ([`Backend::draft`]).
#[derive(Debug, Clone, Copy)]
pub struct DraftRow<'a> {
    /// The sequence's last token, at position `pos`; its K and V are not in the cache yet.
    pub token: u32,
    pub pos: usize,
    /// The sequence's KV blocks, covering at least positions `0..pos`.
    pub block_table: &'a [u32],
    /// The logits row of the step last finished that chose `token` (the row at `pos - 1`):
    /// the draft model starts from that row's hidden state.
    pub hidden_row: usize,
}

/// A compute backend. It owns the weights and the KV pool and runs forward passes; it knows
/// nothing of requests, scheduling or HTTP.
pub trait Backend: Send {
    fn kv_geometry(&self) -> KvGeometry;

    /// The ring holding the sliding-window layers' KV ([`crate::KvRing`]), when the backend
    /// keeps one: the engine then gives each sequence its first `blocks` blocks from the ids
    /// below `capable`, and runs without the prefix cache.
    fn kv_ring(&self) -> Option<crate::KvRing> {
        None
    }

    /// The largest step the backend accepts; `None`: no fixed limit. The engine never schedules
    /// a larger step, whatever its own configuration asks for.
    fn step_capacity(&self) -> Option<StepCapacity> {
        None
    }

    /// Runs all chunks as one step and returns what `want` asks for, one answer per chunk with
    /// `want_logits`, in chunk order. A chunk's answer must not depend on the other chunks of
    /// the step (batch invariance). Nothing runs when the step is malformed.
    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> Result<StepOutput>;

    /// Block slots of the host tier (0: the backend keeps none).
    fn host_blocks(&self) -> usize {
        0
    }

    /// Carries out `copies` in order, before anything a later step does: a block copied to a
    /// slot is read before the step that overwrites it, a slot copied back is in its block
    /// before the step that reads it.
    fn copy_blocks(&mut self, copies: &[BlockCopy]) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        bail!("this backend keeps no host copies of KV blocks")
    }

    /// Whether [`Backend::launch`] returns before the step has run, so that the host can
    /// prepare the next step while the device works. Such a backend answers `launch` and
    /// `collect`; the others only `step`.
    fn pipelined(&self) -> bool {
        false
    }

    /// Queues a step like [`Backend::step`] and returns at once; [`Backend::collect`] gives its
    /// answer. `feeds`: inputs whose token is the pick of a row of the step launched before
    /// this one (which must have said `feeds_next`), their tokens in `chunks` being stand-ins.
    /// At most two launched steps wait to be collected at a time. Nothing runs when the step
    /// is malformed.
    fn launch(
        &mut self,
        _chunks: &[ChunkInput<'_>],
        _want: Want<'_>,
        _feeds: &[Feed],
    ) -> Result<Launched> {
        bail!("this backend runs steps only as a whole (step)")
    }

    /// The answer of the oldest launched step, waiting for the device if it is still running.
    fn collect(&mut self) -> Result<StepOutput> {
        bail!("this backend runs steps only as a whole (step)")
    }

    /// How long the device spent on the step last finished (by `step` or `collect`), when the
    /// backend measures it; taken once.
    fn device_timing(&mut self) -> Option<DeviceTiming> {
        None
    }

    /// Whether the backend holds a draft model that reads its own KV cache and hidden states
    /// (Gemma 4's assistant), so that [`Backend::draft`] answers.
    fn has_draft_model(&self) -> bool {
        false
    }

    /// `k` greedy draft tokens for each row, all rows at once, from the backend's draft
    /// model: it reads the KV cache below each row's position and the hidden state of the
    /// row's `hidden_row` in the step last finished, and writes no KV.
    fn draft(&mut self, _rows: &[DraftRow<'_>], _k: usize) -> Result<Vec<Vec<u32>>> {
        bail!("this backend holds no draft model")
    }

    /// The step's logits rows: `step` with [`Want::Logits`].
    fn forward(&mut self, chunks: &[ChunkInput<'_>]) -> Result<Vec<f32>> {
        match self.step(chunks, Want::Logits)? {
            StepOutput::Logits(logits) => Ok(logits),
            StepOutput::Tokens(_) => bail!("the backend returned tokens where logits were asked"),
        }
    }
}
