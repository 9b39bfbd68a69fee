//! What the engine thread and its handles share: the engine's limits, its stats, and the
//! commands that cross from handles to the loop.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use crate::request::{GenEvent, GenerateRequest};
use crate::sequence::SeqId;

/// Limits of the engine loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Sequences decoded together at most.
    pub max_num_seqs: usize,
    /// Tokens per step, decode and prefill together.
    pub max_batched_tokens: usize,
    /// Most prompt tokens one sequence runs in a step.
    pub prefill_chunk: usize,
    /// A prompt may take the whole step budget while no sequence decodes (fewer, larger
    /// chunks for a prompt alone; `prefill_chunk` still applies beside decodes).
    pub prefill_alone: bool,
    /// Requests that may wait beyond the `max_num_seqs` running ones.
    pub max_queue: usize,
    /// Longest sequence (prompt plus generated tokens). The KV pool may lower it further.
    pub max_context: usize,
    /// Keep computed prompt blocks for later requests that start with the same tokens
    /// (`KILN_PREFIX_CACHE=0` turns it off too).
    pub prefix_cache: bool,
    /// Plan and launch each step while the backend's device runs the one before, when the
    /// backend can (`KILN_OVERLAP=0` turns it off too).
    pub overlap: bool,
    /// Detokenise, match stop strings and send events on a thread of their own
    /// (`KILN_OUTPUT_THREAD=0` turns it off too).
    pub output_thread: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_num_seqs: 64,
            max_batched_tokens: 2048,
            prefill_chunk: 2048,
            prefill_alone: false,
            max_queue: 1024,
            max_context: 4096,
            prefix_cache: true,
            overlap: true,
            output_thread: true,
        }
    }
}

/// A snapshot of the engine, refreshed every step.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    pub kv_block_size: usize,
    pub kv_blocks_total: usize,
    pub kv_blocks_used: usize,
    /// Free blocks include the cached ones nobody holds (taken, least recently used first,
    /// when the pool needs them).
    pub kv_blocks_free: usize,
    /// Blocks whose contents the prefix cache can hand to a new request.
    pub kv_blocks_cached: usize,
    pub prefix_cache_on: bool,
    /// Prompt tokens looked up in the prefix cache (full blocks of admitted prompts).
    pub prefix_queried_tokens: u64,
    /// Of those, tokens found cached.
    pub prefix_hit_tokens: u64,
    /// Cached blocks reused for new data.
    pub prefix_evictions: u64,
    /// Block copies the backend's host tier holds.
    pub host_blocks_cached: usize,
    /// Evicted cached blocks copied to the host tier.
    pub prefix_host_saves: u64,
    /// Prompt tokens copied back from the host tier instead of computed.
    pub prefix_host_hit_tokens: u64,
    /// Drafted tokens proposed, and of those accepted by the target.
    pub draft_proposed: u64,
    pub draft_accepted: u64,
    /// Decode rows run to verify drafts (the last token and its drafts, per verify step).
    pub draft_verify_rows: u64,
    /// Verify steps (one per drafted sequence per step).
    pub draft_verify_steps: u64,
    pub steps: u64,
    /// Seconds spent in the backend's forward passes, over all steps.
    pub forward_seconds: f64,
    /// Seconds spent in whole steps (scheduling, forward, sampling, handing tokens out).
    pub step_seconds: f64,
    /// Tokens run through the model: prompts, recomputation after preemption and decodes.
    pub tokens_processed: u64,
    pub generated_tokens: u64,
    pub preemptions: u64,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
    pub requests_failed: u64,
    /// Logits rows sampled under a grammar's mask, and the seconds the masks took (summed
    /// per step, wall time, mostly hidden behind the forward pass).
    pub grammar_masks: u64,
    pub grammar_mask_seconds: f64,
}

/// State shared between the handles and the engine thread.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub stats: Mutex<EngineStats>,
    pub timings: crate::step_timing::StepTimings,
    /// Whether the engine overlaps steps (set once, at start).
    pub overlap: AtomicBool,
    /// Submitted and not yet finished.
    pub in_flight: AtomicUsize,
    pub shutting_down: AtomicBool,
    pub next_id: AtomicU64,
}

pub(crate) enum Command {
    Submit(Box<Submission>),
    Shutdown,
}

pub(crate) struct Submission {
    pub id: SeqId,
    pub req: GenerateRequest,
    pub events: UnboundedSender<GenEvent>,
    pub submitted: Instant,
}
