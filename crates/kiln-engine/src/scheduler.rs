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
use kiln_step::{ChunkInput, KvGeometry, KvRing};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences running at once.
    pub max_num_seqs: usize,
    /// Tokens run per step, decode and prefill together.
    pub max_batched_tokens: usize,
    /// Most prompt tokens one sequence runs in a step.
    pub prefill_chunk: usize,
    /// In a step where no running sequence is decoding, a prefill chunk may take the whole
    /// budget instead of `prefill_chunk` (which is there to keep decodes moving): a prompt
    /// alone runs in fewer, larger chunks (`kiln serve --prefill-alone`).
    pub prefill_alone: bool,
    /// Keep computed blocks for later sequences with the same leading tokens.
    pub prefix_cache: bool,
    /// Block copies the backend's host tier holds under the prefix cache (0: none).
    pub host_blocks: usize,
    /// Most backend inputs in one step (a verify chunk is one per row); 0: no limit.
    pub max_inputs: usize,
}

/// One sequence's tokens `start..start + len` in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    pub start: usize,
    pub len: usize,
    /// The chunk ends at the sequence's last token: its logits give the next token.
    pub want_logits: bool,
    /// Drafted tokens after the last one (`len` is then 1 + draft): each runs as a decode row
    /// of its own, so that the target's choice at every position is plain decoding's.
    pub draft: usize,
}

impl ScheduledChunk {
    /// Logits rows the chunk produces.
    pub fn rows(&self) -> usize {
        if self.want_logits {
            1 + self.draft
        } else {
            0
        }
    }

    /// Backend inputs the chunk becomes.
    pub fn inputs(&self) -> usize {
        1 + self.draft
    }
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
            prefill_alone: cfg.prefill_alone,
            prefix_cache: cfg.prefix_cache,
            host_blocks: cfg.host_blocks,
            max_inputs: if cfg.max_inputs == 0 {
                usize::MAX
            } else {
                cfg.max_inputs
            },
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

    /// Gives sequences their first blocks from the backend's KV ring (see [`KvRing`]) and
    /// turns the prefix cache off: a ring block holds a sequence's latest positions, so no
    /// prefix of it can be reused. Call before the first sequence is added.
    pub fn use_kv_ring(&mut self, ring: KvRing) {
        let geometry = KvGeometry {
            block_size: self.blocks.block_size(),
            num_blocks: self.blocks.num_blocks(),
        };
        self.blocks = BlockManager::with_kv_ring(geometry, ring);
        self.cfg.prefix_cache = false;
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
        let mut inputs = self.cfg.max_inputs;
        let cap = self.chunk_cap();
        let preemptions_before = self.preemptions;
        let mut i = 0;
        while i < self.running.len() && budget > 0 && inputs > 0 {
            let id = self.running[i];
            // Leave one token of budget (and one input) for each younger running sequence, so
            // that a long prefill chunk or a deep draft never stalls their decodes.
            let younger = self.running.len() - i - 1;
            let share = budget.saturating_sub(younger).max(1);
            let room = inputs.saturating_sub(younger).max(1);
            let Some(chunk) = self.next_chunk(id, share, room, cap) else {
                i += 1;
                continue;
            };
            if self.make_room(id, chunk.start + chunk.len) {
                budget -= chunk.len;
                inputs -= chunk.inputs();
                plan.push(chunk);
                i += 1;
            }
        }
        // A step that had to preempt admits nobody: the pool is already too tight.
        let preempted = self.preemptions != preemptions_before;
        while !preempted && budget > 0 && inputs > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            // Preempted while its last token was being picked: it waits for that token.
            if self.seqs.get(&id).is_some_and(|s| s.awaiting > 0) {
                break;
            }
            self.take_cached_prefix(id);
            let admitted = match self.next_chunk(id, budget, inputs, cap) {
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
            inputs -= chunk.inputs();
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

    /// The most prompt tokens one sequence runs this step: `prefill_chunk`, or with
    /// `prefill_alone` the whole budget while no running sequence is decoding (its prompt
    /// computed; a sequence recomputing after preemption counts once past its prompt).
    fn chunk_cap(&self) -> usize {
        let decoding = || {
            self.running.iter().any(|id| {
                self.seqs
                    .get(id)
                    .is_some_and(|s| s.num_computed >= s.prompt_len)
            })
        };
        if self.cfg.prefill_alone && !decoding() {
            self.cfg.max_batched_tokens
        } else {
            self.cfg.prefill_chunk
        }
    }

    /// The next chunk of `id`'s pending tokens, at most `limit` long and `inputs` backend inputs,
    /// a prefill chunk at most `cap` ([`Scheduler::chunk_cap`]).
    /// A sequence with more than one token pending gets a chunk of two or more that leaves none
    /// or two or more, or none this step (unless the limits themselves are under two tokens). A
    /// decoding sequence with a draft verifies as much of it as the limits allow.
    fn next_chunk(
        &self,
        id: SeqId,
        limit: usize,
        inputs: usize,
        cap: usize,
    ) -> Option<ScheduledChunk> {
        let seq = self.seqs.get(&id)?;
        // A sequence at its length limit ends when its last token is known; one whose last
        // token is still being picked runs nothing but that token (never a prefill with it).
        if seq.tokens.len() >= seq.max_len || (seq.awaiting > 0 && seq.pending() != 1) {
            return None;
        }
        if seq.pending() == 1 && !seq.draft().is_empty() {
            let draft = seq.draft().len().min(limit - 1).min(inputs - 1);
            return Some(ScheduledChunk {
                seq: id,
                start: seq.num_computed,
                len: 1 + draft,
                want_logits: true,
                draft,
            });
        }
        let splittable = self.cfg.prefill_chunk.min(self.cfg.max_batched_tokens) >= 3;
        let len = chunk_len(seq.pending(), cap.min(limit), splittable);
        (len > 0).then(|| ScheduledChunk {
            seq: id,
            start: seq.num_computed,
            len,
            want_logits: seq.num_computed + len == seq.tokens.len(),
            draft: 0,
        })
    }

    /// Sets the tokens `id` drafts after its last one, to be verified in its next step (empty:
    /// none). Only for a sequence that is decoding.
    pub fn set_draft(&mut self, id: SeqId, draft: Vec<u32>) {
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        seq.verify.clear();
        if seq.pending() == 1 && !draft.is_empty() {
            seq.verify
                .push(*seq.tokens.last().expect("a decoding sequence has tokens"));
            seq.verify.extend(draft);
        }
    }

    /// The verify step of `chunk` kept its first `accepted` drafted tokens: those and the last
    /// token are in the KV cache; the rest of the draft's slots are free for what comes next
    /// (their blocks beyond the sequence's next token are given back). Call before the tokens
    /// the step chose are pushed.
    pub fn settle_draft(&mut self, chunk: &ScheduledChunk, accepted: usize) {
        let Some(seq) = self.seqs.get_mut(&chunk.seq) else {
            return;
        };
        seq.num_computed = chunk.start + 1 + accepted;
        seq.verify.clear();
        // The chosen tokens: `accepted` drafts and one more, pending.
        let keep = chunk.start + accepted + 2;
        self.blocks.truncate(chunk.seq, keep);
    }

    /// Sequences decoding (one token pending), in admission order: those a drafter may serve.
    pub fn decoding(&self) -> impl Iterator<Item = &Sequence> + '_ {
        self.running
            .iter()
            .filter_map(|id| self.seqs.get(id))
            .filter(|s| s.pending() == 1)
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
            seq.verify.clear();
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

    /// The backend's view of a plan: tokens, positions and block tables. A verify chunk becomes
    /// one single-token input per row, so that each takes the decode path.
    pub fn inputs(&self, plan: &[ScheduledChunk]) -> Vec<ChunkInput<'_>> {
        let mut out = Vec::with_capacity(plan.iter().map(ScheduledChunk::inputs).sum());
        for c in plan {
            let seq = &self.seqs[&c.seq];
            let table = self.blocks.table(c.seq);
            if c.draft == 0 {
                out.push(ChunkInput {
                    tokens: &seq.tokens[c.start..c.start + c.len],
                    start_pos: c.start,
                    block_table: table,
                    want_logits: c.want_logits,
                });
                continue;
            }
            for j in 0..=c.draft {
                out.push(ChunkInput {
                    tokens: &seq.verify[j..j + 1],
                    start_pos: c.start + j,
                    block_table: table,
                    want_logits: true,
                });
            }
        }
        out
    }

    /// Records that the plan ran: its tokens are now in the KV cache, and the blocks its
    /// prefill chunks completed become findable in the prefix cache. Verify chunks are settled
    /// by [`Scheduler::settle_draft`] once their rows are judged.
    pub fn complete(&mut self, plan: &[ScheduledChunk]) {
        self.advance(plan);
        self.register_computed(plan);
    }

    /// Records that the plan was launched, before its picks are known: its tokens count as
    /// computed, and each sequence it picks a token for gets a stand-in for that token
    /// ([`Sequence::awaiting`]), so that the next step can be planned at once.
    /// [`Scheduler::resolve`] puts the token in, [`Scheduler::register_computed`] caches the
    /// prefill blocks once the step has run.
    pub fn launched(&mut self, plan: &[ScheduledChunk]) {
        self.advance(plan);
        for c in plan.iter().filter(|c| c.draft == 0 && c.want_logits) {
            if let Some(seq) = self.seqs.get_mut(&c.seq) {
                seq.tokens.push(0);
                seq.awaiting += 1;
            }
        }
    }

    /// Puts the token a launched step picked in place of `id`'s oldest stand-in. False when
    /// the sequence is gone or awaits nothing (the row is stale: its request ended meanwhile).
    pub fn resolve(&mut self, id: SeqId, token: u32) -> bool {
        match self.seqs.get_mut(&id) {
            Some(seq) if seq.awaiting > 0 => {
                let at = seq.tokens.len() - seq.awaiting;
                seq.tokens[at] = token;
                seq.awaiting -= 1;
                true
            }
            _ => false,
        }
    }

    fn advance(&mut self, plan: &[ScheduledChunk]) {
        for c in plan.iter().filter(|c| c.draft == 0) {
            let Some(seq) = self.seqs.get_mut(&c.seq) else {
                continue;
            };
            seq.num_computed = seq.num_computed.max(c.start + c.len);
            if c.len >= 2 && c.start == seq.prefill_upto {
                seq.prefill_upto = c.start + c.len;
            }
        }
    }

    /// Makes the blocks the plan's prefill chunks completed findable in the prefix cache, for
    /// the sequences that still hold them (one preempted or removed since has given them up).
    pub fn register_computed(&mut self, plan: &[ScheduledChunk]) {
        let bs = self.blocks.block_size();
        for c in plan.iter().filter(|c| c.draft == 0 && c.len >= 2) {
            let end = c.start + c.len;
            match self.seqs.get(&c.seq) {
                Some(seq) if seq.prefill_upto >= end => {
                    self.blocks.cache_computed(c.seq, &seq.tokens, end / bs)
                }
                _ => {}
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
