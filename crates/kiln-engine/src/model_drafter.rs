//! A draft model as a drafter: a small model with the target's tokenizer runs on a backend of
//! its own, keeps its own KV cache per target sequence, and proposes its greedy continuation.
//! After a verify step only the tokens both models agree on stay in the draft's cache; the draft
//! recomputes from there (its own rolled-back guesses are overwritten).

use std::collections::HashMap;

use anyhow::{bail, Result};
use kiln_step::{Backend, ChunkInput, StepOutput, Want};

use crate::block_manager::BlockManager;
use crate::draft::Drafter;
use crate::scheduler::chunk_len;
use crate::sequence::SeqId;

pub struct ModelDrafter {
    backend: Box<dyn Backend>,
    blocks: BlockManager,
    /// Per target sequence, the tokens whose keys and values the draft's cache holds.
    held: HashMap<SeqId, Vec<u32>>,
    /// Most tokens one draft forward runs.
    chunk: usize,
}

impl ModelDrafter {
    pub fn new(backend: Box<dyn Backend>, chunk: usize) -> ModelDrafter {
        let blocks = BlockManager::new(backend.kv_geometry());
        ModelDrafter {
            backend,
            blocks,
            held: HashMap::new(),
            chunk: chunk.max(3),
        }
    }

    fn try_propose(&mut self, seq: SeqId, tokens: &[u32], k: usize) -> Result<Vec<u32>> {
        let len = tokens.len();
        let held = self.held.entry(seq).or_default();
        let same = held.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        // The last token's logits are needed, so it always runs.
        let mut at = same.min(len - 1);
        held.truncate(at);
        if !self.blocks.grow(seq, len + k) {
            // The draft's pool is full: no draft this time (plain decoding goes on).
            self.forget(seq);
            return Ok(Vec::new());
        }
        let table = self.blocks.table(seq).to_vec();
        let mut next = 0;
        while at < len {
            let n = chunk_len(len - at, self.chunk, true);
            let chunk = ChunkInput {
                tokens: &tokens[at..at + n],
                start_pos: at,
                block_table: &table,
                want_logits: at + n == len,
            };
            at += n;
            if at == len {
                next = argmax_of(self.backend.step(&[chunk], Want::Argmax)?)?;
            } else {
                self.backend.forward(&[chunk])?;
            }
        }
        let mut held_now = tokens.to_vec();
        let mut out = vec![next];
        while out.len() < k {
            let last = [next];
            let chunk = ChunkInput {
                tokens: &last,
                start_pos: held_now.len(),
                block_table: &table,
                want_logits: true,
            };
            next = argmax_of(self.backend.step(&[chunk], Want::Argmax)?)?;
            held_now.push(last[0]);
            out.push(next);
        }
        self.held.insert(seq, held_now);
        Ok(out)
    }
}

fn argmax_of(out: StepOutput) -> Result<u32> {
    match out {
        StepOutput::Tokens(mut t) if t.len() == 1 => Ok(t.remove(0)?.id),
        _ => bail!("the draft model's step returned no single token"),
    }
}

impl Drafter for ModelDrafter {
    fn propose(&mut self, seq: SeqId, tokens: &[u32], k: usize) -> Vec<u32> {
        if k == 0 || tokens.is_empty() {
            return Vec::new();
        }
        match self.try_propose(seq, tokens, k) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("draft model failed, no draft for sequence {seq}: {e:#}");
                self.forget(seq);
                Vec::new()
            }
        }
    }

    fn forget(&mut self, seq: SeqId) {
        self.held.remove(&seq);
        self.blocks.release(seq);
    }
}
