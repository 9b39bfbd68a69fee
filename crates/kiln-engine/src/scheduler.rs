//! Decides each step's tokens: the decode token of every running sequence plus prefill chunks,
//! all under one token budget (chunked prefill, as vLLM v1 and nano-vllm do). Admits waiting
//! sequences while KV blocks last, starting each from the longest prefix the prefix cache holds,
//! and, when blocks run out, preempts the newest running sequence (its blocks are freed, its
//! computed blocks stay cached, and it is recomputed later from its tokens).
//!
//! A prefill chunk is never a single token and never leaves a single token behind: a lone token
//! takes the decode path, whose arithmetic differs (within bf16) from a prefill row's on the GPU,
//! and every split of a prompt (into chunks, or into a cached prefix and the rest) must give the
//! bits of the prompt run whole.

use std::collections::{HashMap, VecDeque};

use crate::block_manager::BlockManager;
use crate::sequence::{SeqId, Sequence};
use kiln_step::{ChunkInput, KvGeometry};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences running at once.
    pub max_num_seqs: usize,
    /// Tokens run per step, decode and prefill together.
    pub max_batched_tokens: usize,
    /// Most prompt tokens one sequence runs in a step.
    pub prefill_chunk: usize,
    /// Keep computed blocks for later sequences with the same leading tokens.
    pub prefix_cache: bool,
    /// Block copies the backend's host tier holds under the prefix cache (0: none).
    pub host_blocks: usize,
}

/// One sequence's tokens `start..start + len` in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    pub start: usize,
    pub len: usize,
    /// The chunk ends at the sequence's last token: its logits give the next token.
    pub want_logits: bool,
}

#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    blocks: BlockManager,
    seqs: HashMap<SeqId, Sequence>,
    waiting: VecDeque<SeqId>,
    /// Oldest admission first; preemption takes from the back.
    running: Vec<SeqId>,
    preemptions: u64,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig, geometry: KvGeometry) -> Scheduler {
        // Every running sequence needs a token of budget each step, or the youngest starve.
        let max_batched_tokens = cfg.max_batched_tokens.max(1);
        let cfg = SchedulerConfig {
            max_num_seqs: cfg.max_num_seqs.clamp(1, max_batched_tokens),
            max_batched_tokens,
            prefill_chunk: cfg.prefill_chunk.max(1),
            prefix_cache: cfg.prefix_cache,
            host_blocks: cfg.host_blocks,
        };
        let blocks = match cfg.prefix_cache {
            true => BlockManager::with_prefix_cache(geometry).with_host_tier(cfg.host_blocks),
            false => BlockManager::new(geometry),
        };
        Scheduler {
            cfg,
            blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            preemptions: 0,
        }
    }

    /// Queues a new sequence behind the waiting ones.
    pub fn add(&mut self, seq: Sequence) {
        self.waiting.push_back(seq.id);
        self.seqs.insert(seq.id, seq);
    }

    /// Plans the next step. Empty only when there is nothing to run.
    pub fn schedule(&mut self) -> Vec<ScheduledChunk> {
        let mut plan = Vec::new();
        let mut budget = self.cfg.max_batched_tokens;
        let preemptions_before = self.preemptions;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            // Leave one token of budget for each younger running sequence, so that a long
            // prefill chunk never stalls their decodes.
            let share = budget.saturating_sub(self.running.len() - i - 1).max(1);
            let Some(chunk) = self.next_chunk(id, share) else {
                i += 1;
                continue;
            };
            if self.make_room(id, chunk.start + chunk.len) {
                budget -= chunk.len;
                plan.push(chunk);
                i += 1;
            }
        }
        // A step that had to preempt admits nobody: the pool is already too tight.
        let preempted = self.preemptions != preemptions_before;
        while !preempted && budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            self.take_cached_prefix(id);
            let admitted = match self.next_chunk(id, budget) {
                Some(chunk) if self.blocks.grow(id, chunk.start + chunk.len) => Some(chunk),
                _ => None,
            };
            let Some(chunk) = admitted else {
                // Not this step: give the cached prefix back (it stays cached) and keep waiting.
                self.blocks.release(id);
                if let Some(seq) = self.seqs.get_mut(&id) {
                    (seq.num_computed, seq.prefill_upto) = (0, 0);
                }
                break;
            };
            self.waiting.pop_front();
            self.running.push(id);
            budget -= chunk.len;
            plan.push(chunk);
        }
        plan
    }

    /// Starts a sequence that holds no blocks from the longest cached run of its leading
    /// blocks, leaving at least two tokens to prefill (see the module's note).
    fn take_cached_prefix(&mut self, id: SeqId) {
        let bs = self.blocks.block_size();
        let Some(seq) = self.seqs.get(&id) else {
            return;
        };
        if seq.num_computed > 0 || !self.blocks.table(id).is_empty() {
            return;
        }
        let max_blocks = seq.tokens.len().saturating_sub(2) / bs;
        let hit = self.blocks.take_cached(id, &seq.tokens, max_blocks);
        let seq = self.seqs.get_mut(&id).expect("looked up above");
        (seq.num_computed, seq.prefill_upto) = (hit * bs, hit * bs);
        if seq.generated().is_empty() {
            seq.cached_tokens = hit * bs;
        }
    }

    /// The next chunk of `id`'s pending tokens, at most `limit` long. A sequence with more than
    /// one token pending gets a chunk of two or more that leaves none or two or more, or none
    /// this step (unless the limits themselves are under two tokens).
    fn next_chunk(&self, id: SeqId, limit: usize) -> Option<ScheduledChunk> {
        let seq = self.seqs.get(&id)?;
        let splittable = self.cfg.prefill_chunk.min(self.cfg.max_batched_tokens) >= 3;
        let len = chunk_len(seq.pending(), self.cfg.prefill_chunk.min(limit), splittable);
        (len > 0).then(|| ScheduledChunk {
            seq: id,
            start: seq.num_computed,
            len,
            want_logits: seq.num_computed + len == seq.tokens.len(),
        })
    }

    /// Grows `id`'s blocks to `tokens` positions, preempting the newest running sequences
    /// until they fit. Returns false when `id` itself had to be preempted.
    fn make_room(&mut self, id: SeqId, tokens: usize) -> bool {
        while !self.blocks.grow(id, tokens) {
            let Some(victim) = self.running.pop() else {
                return false;
            };
            self.preempt(victim);
            if victim == id {
                return false;
            }
        }
        true
    }

    fn preempt(&mut self, id: SeqId) {
        self.blocks.release(id);
        if let Some(seq) = self.seqs.get_mut(&id) {
            (seq.num_computed, seq.prefill_upto) = (0, 0);
        }
        self.waiting.push_front(id);
        self.preemptions += 1;
        tracing::debug!(seq = id, "preempted: KV cache full, will recompute");
    }

    /// Copies between the KV pool and the host tier that scheduling asked for, to be made before
    /// the next step runs (also when the step is empty).
    pub fn take_copies(&mut self) -> Vec<kiln_step::BlockCopy> {
        self.blocks.take_copies()
    }

    /// The backend's view of a plan: tokens, positions and block tables.
    pub fn inputs(&self, plan: &[ScheduledChunk]) -> Vec<ChunkInput<'_>> {
        plan.iter()
            .map(|c| ChunkInput {
                tokens: &self.seqs[&c.seq].tokens[c.start..c.start + c.len],
                start_pos: c.start,
                block_table: self.blocks.table(c.seq),
                want_logits: c.want_logits,
            })
            .collect()
    }

    /// Records that the plan ran: its tokens are now in the KV cache, and the blocks its
    /// prefill chunks completed become findable in the prefix cache.
    pub fn complete(&mut self, plan: &[ScheduledChunk]) {
        let bs = self.blocks.block_size();
        for c in plan {
            let Some(seq) = self.seqs.get_mut(&c.seq) else {
                continue;
            };
            seq.num_computed = seq.num_computed.max(c.start + c.len);
            if c.len >= 2 && c.start == seq.prefill_upto {
                seq.prefill_upto = c.start + c.len;
                self.blocks
                    .cache_computed(c.seq, &seq.tokens, seq.prefill_upto / bs);
            }
        }
    }

    /// Appends a sampled token to a sequence.
    pub fn push_token(&mut self, id: SeqId, token: u32) {
        if let Some(seq) = self.seqs.get_mut(&id) {
            seq.tokens.push(token);
        }
    }

    /// Takes a sequence out (finished, cancelled or failed) and frees its blocks.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        self.blocks.release(id);
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&w| w != id);
        self.seqs.remove(&id)
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Every sequence the scheduler holds, running or waiting.
    pub fn ids(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    /// The sequence next in line for admission.
    pub fn first_waiting(&self) -> Option<SeqId> {
        self.waiting.front().copied()
    }

    pub fn is_running(&self, id: SeqId) -> bool {
        self.running.contains(&id)
    }

    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn blocks(&self) -> &BlockManager {
        &self.blocks
    }

    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }
}

/// How many of a sequence's `pending` tokens its next chunk runs, at most `limit`: with more
/// than one pending, at least two and never leaving exactly one (0: none now, the budget is too
/// small). `splittable`: chunks of three or more can ever be run (else any split is allowed,
/// since nothing else would make progress).
pub fn chunk_len(pending: usize, limit: usize, splittable: bool) -> usize {
    let len = pending.min(limit);
    if pending < 2 || !splittable {
        return len;
    }
    let len = if pending - len == 1 { len - 1 } else { len };
    if len < 2 {
        0
    } else {
        len
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
