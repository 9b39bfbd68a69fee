//! One step's chunks flattened into token rows, checked before any arithmetic runs.

use std::collections::HashSet;

use kiln_engine::{ChunkInput, KvGeometry};

use crate::kernels::QueryRow;

/// Every token of the step, in chunk order.
pub(crate) struct StepPlan<'a> {
    pub tokens: Vec<u32>,
    pub positions: Vec<usize>,
    /// The cache slot each token's K and V go to.
    pub slots: Vec<usize>,
    pub rows: Vec<QueryRow<'a>>,
    /// Token rows whose logits the engine wants, in chunk order.
    pub logit_rows: Vec<usize>,
}

impl<'a> StepPlan<'a> {
    /// Flattens `chunks`, or says which chunk is malformed and how.
    pub fn new(
        chunks: &[ChunkInput<'a>],
        geometry: KvGeometry,
        vocab_size: usize,
    ) -> anyhow::Result<StepPlan<'a>> {
        let total: usize = chunks.iter().map(|c| c.tokens.len()).sum();
        let mut plan = StepPlan {
            tokens: Vec::with_capacity(total),
            positions: Vec::with_capacity(total),
            slots: Vec::with_capacity(total),
            rows: Vec::with_capacity(total),
            logit_rows: Vec::new(),
        };
        let bs = geometry.block_size;
        for (i, chunk) in chunks.iter().enumerate() {
            anyhow::ensure!(!chunk.tokens.is_empty(), "chunk {i} has no tokens");
            let end = chunk
                .start_pos
                .checked_add(chunk.tokens.len())
                .ok_or_else(|| {
                    anyhow::anyhow!("chunk {i}: start position {} overflows", chunk.start_pos)
                })?;
            let covered = chunk.block_table.len().saturating_mul(bs);
            anyhow::ensure!(
                covered >= end,
                "chunk {i}: its block table covers {covered} positions, the chunk reaches position {end}"
            );
            if let Some(bad) = chunk.block_table[..end.div_ceil(bs)]
                .iter()
                .find(|&&b| b as usize >= geometry.num_blocks)
            {
                anyhow::bail!(
                    "chunk {i}: block id {bad} is outside the KV pool of {} blocks",
                    geometry.num_blocks
                );
            }
            if let Some(bad) = chunk.tokens.iter().find(|&&t| t as usize >= vocab_size) {
                anyhow::bail!(
                    "chunk {i}: token id {bad} is outside the vocabulary of {vocab_size} tokens"
                );
            }
            for (offset, &token) in chunk.tokens.iter().enumerate() {
                let pos = chunk.start_pos + offset;
                let row = QueryRow {
                    pos,
                    block_table: chunk.block_table,
                };
                plan.tokens.push(token);
                plan.positions.push(pos);
                plan.slots
                    .push(chunk.block_table[pos / bs] as usize * bs + pos % bs);
                plan.rows.push(row);
            }
            if chunk.want_logits {
                plan.logit_rows.push(plan.tokens.len() - 1);
            }
        }
        let mut seen = HashSet::with_capacity(plan.slots.len());
        if let Some(dup) = plan.slots.iter().find(|&&s| !seen.insert(s)) {
            anyhow::bail!("two tokens of one step write KV slot {dup}: the block tables overlap");
        }
        Ok(plan)
    }
}
