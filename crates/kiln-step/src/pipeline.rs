//! Steps queued ahead of their answers. A backend whose device runs a step while the host
//! prepares the next one splits [`crate::Backend::step`] into `launch` and `collect`; the next
//! step's decode tokens may then be the picks of the step still running, taken where they lie
//! (feeds), so that the device never waits for the host between two steps.

use anyhow::{bail, ensure, Result};

use crate::adjust::{RowAdjust, StepAdjust};
use crate::backend::{Backend, StepOutput, Want};
use crate::chunk::ChunkInput;
use crate::sampling::RowSampling;

/// Input `input` of a launched step (a one-token chunk) takes as its token the pick of logits
/// row `row` of the step launched just before it; the token the chunk carries is a stand-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feed {
    pub input: usize,
    pub row: usize,
}

/// What [`crate::Backend::launch`] queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    /// The step's picks stay where the next launch can take them as feeds. False when the
    /// step's tokens are chosen on the host (logits asked for, or sampling the device cannot
    /// do): the step must be collected before any step that depends on it is launched.
    pub feeds_next: bool,
}

/// How long the device spent on one step, as the device measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceTiming {
    /// From the step's first copy to its last.
    pub busy_s: f64,
    /// The device idle between the end of the step before and this one's start.
    pub idle_before_s: f64,
}

/// A step's [`Want`] owned (adjustments waited for), so that a launched step can be finished
/// after the caller's borrows end.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnedWant {
    Logits,
    Argmax,
    Sample(Vec<RowSampling>),
    SampleAdjusted(Vec<RowSampling>, Vec<Option<RowAdjust>>),
}

impl OwnedWant {
    /// Blocks for the adjustments of `SampleAdjusted` until they are computed.
    pub fn of(want: &Want<'_>) -> OwnedWant {
        match want {
            Want::Logits => OwnedWant::Logits,
            Want::Argmax => OwnedWant::Argmax,
            Want::Sample(rows) => OwnedWant::Sample(rows.to_vec()),
            Want::SampleAdjusted(rows, adjust) => {
                OwnedWant::SampleAdjusted(rows.to_vec(), adjust.wait().to_vec())
            }
        }
    }

    /// [`Want::from_logits`] for the owned form.
    pub fn from_logits(&self, logits: Vec<f32>, vocab: usize) -> Result<StepOutput> {
        match self {
            OwnedWant::Logits => Want::Logits.from_logits(logits, vocab),
            OwnedWant::Argmax => Want::Argmax.from_logits(logits, vocab),
            OwnedWant::Sample(rows) => Want::Sample(rows).from_logits(logits, vocab),
            OwnedWant::SampleAdjusted(rows, adjust) => {
                let adjust = StepAdjust::ready(adjust.clone());
                Want::SampleAdjusted(rows, &adjust).from_logits(logits, vocab)
            }
        }
    }
}

/// Checks a launch's feeds against its chunks and the rows of the step before: each names a
/// distinct one-token input and an existing row.
pub fn check_feeds(chunks: &[ChunkInput<'_>], feeds: &[Feed], prev_rows: usize) -> Result<()> {
    let mut seen = vec![false; chunks.len()];
    for f in feeds {
        let Some(chunk) = chunks.get(f.input) else {
            bail!(
                "a feed names input {} of a step of {} inputs",
                f.input,
                chunks.len()
            );
        };
        ensure!(
            chunk.tokens.len() == 1,
            "a feed names input {}, which has {} tokens (feeds are one-token inputs)",
            f.input,
            chunk.tokens.len()
        );
        ensure!(
            !std::mem::replace(&mut seen[f.input], true),
            "two feeds name input {}",
            f.input
        );
        ensure!(
            f.row < prev_rows,
            "a feed takes row {} of a step that picked {prev_rows} tokens",
            f.row
        );
    }
    Ok(())
}

/// Any backend as a pipelined one: each launch runs the step at once (its feeds taken from the
/// answer of the step before) and holds the answer for `collect`. It gains nothing in speed;
/// it lets the engine's pipelined path run on every backend, so tests see it on the CPU.
pub struct RunAtLaunch<B> {
    inner: B,
    /// Answers launched and not yet collected, oldest first.
    held: std::collections::VecDeque<Result<StepOutput>>,
    /// The picks of the last launched step, for the next launch's feeds.
    last_picks: Option<Vec<u32>>,
}

impl<B: Backend> RunAtLaunch<B> {
    pub fn new(inner: B) -> RunAtLaunch<B> {
        RunAtLaunch {
            inner,
            held: Default::default(),
            last_picks: None,
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }
}

impl<B: Backend> Backend for RunAtLaunch<B> {
    fn kv_geometry(&self) -> crate::KvGeometry {
        self.inner.kv_geometry()
    }

    fn step_capacity(&self) -> Option<crate::StepCapacity> {
        self.inner.step_capacity()
    }

    fn kv_ring(&self) -> Option<crate::KvRing> {
        self.inner.kv_ring()
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> Result<StepOutput> {
        ensure!(
            self.held.is_empty(),
            "a step was run while launched steps wait to be collected"
        );
        self.last_picks = None;
        self.inner.step(chunks, want)
    }

    fn host_blocks(&self) -> usize {
        self.inner.host_blocks()
    }

    fn copy_blocks(&mut self, copies: &[crate::BlockCopy]) -> Result<()> {
        self.inner.copy_blocks(copies)
    }

    fn pipelined(&self) -> bool {
        true
    }

    fn device_timing(&mut self) -> Option<DeviceTiming> {
        self.inner.device_timing()
    }

    fn has_draft_model(&self) -> bool {
        self.inner.has_draft_model()
    }

    fn draft(&mut self, rows: &[crate::DraftRow<'_>], k: usize) -> Result<Vec<Vec<u32>>> {
        ensure!(
            self.held.is_empty(),
            "drafts read the hidden states of the step last finished: collect every step first"
        );
        self.inner.draft(rows, k)
    }

    fn launch(
        &mut self,
        chunks: &[ChunkInput<'_>],
        want: Want<'_>,
        feeds: &[Feed],
    ) -> Result<Launched> {
        ensure!(
            self.held.len() < 2,
            "two launched steps wait to be collected; collect one first"
        );
        let picks = if feeds.is_empty() {
            &[][..]
        } else {
            match &self.last_picks {
                Some(p) => &p[..],
                None => bail!("feeds name a step whose picks were made on the host"),
            }
        };
        check_feeds(chunks, feeds, picks.len())?;
        let fed: Vec<u32> = feeds.iter().map(|f| picks[f.row]).collect();
        let mut owned: Vec<ChunkInput<'_>> = chunks.to_vec();
        for (f, t) in feeds.iter().zip(&fed) {
            owned[f.input].tokens = std::slice::from_ref(t);
        }
        let out = self.inner.step(&owned, want);
        self.last_picks = match &out {
            Ok(StepOutput::Tokens(rows)) => Some(
                rows.iter()
                    .map(|r| r.as_ref().map_or(0, |s| s.id))
                    .collect(),
            ),
            _ => None,
        };
        let feeds_next = self.last_picks.is_some();
        self.held.push_back(out);
        Ok(Launched { feeds_next })
    }

    fn collect(&mut self) -> Result<StepOutput> {
        match self.held.pop_front() {
            Some(out) => out,
            None => bail!("collect with no step launched"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(tokens: &[u32]) -> ChunkInput<'_> {
        ChunkInput {
            tokens,
            start_pos: 0,
            block_table: &[0],
            want_logits: true,
        }
    }

    #[test]
    fn feeds_are_checked_against_inputs_and_rows() {
        let (a, b) = ([1u32], [1u32, 2]);
        let chunks = [chunk(&a), chunk(&b)];
        let ok = [Feed { input: 0, row: 2 }];
        assert!(check_feeds(&chunks, &ok, 3).is_ok());
        let cases: [(&[Feed], &str); 4] = [
            (&[Feed { input: 2, row: 0 }], "of a step of 2 inputs"),
            (&[Feed { input: 1, row: 0 }], "one-token"),
            (
                &[Feed { input: 0, row: 0 }, Feed { input: 0, row: 1 }],
                "two feeds",
            ),
            (&[Feed { input: 0, row: 3 }], "picked 3 tokens"),
        ];
        for (feeds, want) in cases {
            let e = check_feeds(&chunks, feeds, 3).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
