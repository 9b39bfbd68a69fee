//! CUDA graphs of a draft model's calls (Gemma 4's assistant): every step of a call in one
//! executable per (batch size, steps, logits kept). The draft keeps no KV of its own, so its k
//! steps read the same cache window and share one set of attention inputs, uploaded once per
//! call before the replay; the block-table walk, the window, the KV reads and each step's argmax
//! (the next step's tokens) all run inside the graph, which therefore replays at any sequence
//! length. Rows are padded up to the batch-size bucket with inert rows (graphs_pad.rs); a call of
//! more rows than the largest bucket runs launch by launch. KILN_DRAFT_GRAPHS=0 keeps every call
//! eager.

use std::collections::HashMap;

use anyhow::Result;

use crate::device::Gpu;
use crate::graphs::{capture_exec, Exec};
use crate::graphs_pad::{GraphBuckets, GraphShape};
use crate::step_plan::StepLayout;

/// Most rows a draft graph takes: more than the engine drafts for at once by default.
pub const DRAFT_GRAPH_ROWS: usize = 16;

/// What one draft graph runs: its padded rows, its steps, whether it keeps each step's logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DraftGraphKey {
    pub rows: usize,
    pub steps: usize,
    pub logits: bool,
}

/// How often each path ran since the draft model was attached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftGraphCounters {
    pub captures: u64,
    pub replays: u64,
    /// Row groups drafted launch by launch (graphs off, or more rows than the largest bucket).
    pub eager_groups: u64,
}

pub struct DraftGraphs {
    /// The batch-size buckets (1, 2, 4, ... up to DRAFT_GRAPH_ROWS), as graphs_pad.rs pads.
    pub buckets: GraphBuckets,
    enabled: bool,
    execs: HashMap<DraftGraphKey, Exec>,
    pub counters: DraftGraphCounters,
}

// SAFETY: the executables are used only through &mut self, from one thread at a time.
unsafe impl Send for DraftGraphs {}

impl DraftGraphs {
    /// Buckets for a draft pass laid out as `l` (its rows capped at DRAFT_GRAPH_ROWS).
    pub fn new(l: &StepLayout, enabled: bool) -> DraftGraphs {
        let rows = l.max_seqs.min(DRAFT_GRAPH_ROWS);
        let capped = StepLayout::new(
            rows,
            rows,
            l.max_context,
            l.block_size,
            l.num_blocks,
            l.vocab_size,
        );
        DraftGraphs {
            buckets: GraphBuckets::new(&capped, 0),
            enabled,
            execs: HashMap::new(),
            counters: DraftGraphCounters::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
        if !on {
            self.execs.clear();
        }
    }

    /// Drops every executable: the buffers they read moved (a KV pool rebuild, grown buffers).
    pub fn forget(&mut self) {
        self.execs.clear();
    }

    /// The padded shape of a group of `rows` rows, when graphs are on and a bucket holds it.
    pub fn shape_for(&self, rows: usize) -> Option<GraphShape> {
        let bucket = self.buckets.decode.iter().copied().find(|&b| b >= rows)?;
        self.enabled.then_some(GraphShape {
            decode_rows: bucket,
            prefill_rows: 0,
        })
    }

    /// Replays `key`'s executable, recording it first with `queue` when none is held.
    pub fn run(
        &mut self,
        gpu: &Gpu,
        key: DraftGraphKey,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if !self.execs.contains_key(&key) {
            let exec = capture_exec(gpu, queue)?;
            self.counters.captures += 1;
            self.execs.insert(key, exec);
        }
        self.execs[&key].launch(gpu)?;
        self.counters.replays += 1;
        Ok(())
    }
}
