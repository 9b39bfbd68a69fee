//! One step's chunks flattened into token rows, checked (`kiln_step::StepLimits`) before any
//! arithmetic runs.

use kiln_step::{ChunkInput, StepLimits};

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
    /// Per token row: its chunk has more than one token (a GPU runs it as a prefill row).
    pub prefill: Vec<bool>,
    /// With a ring (kiln_step::KvRing): each token's slot in the ring layers' caches, each
    /// chunk's table as the ring layers read it, and each row's chunk.
    pub ring_slots: Vec<usize>,
    pub ring_tables: Vec<Vec<u32>>,
    pub chunk_of: Vec<usize>,
}

impl<'a> StepPlan<'a> {
    /// Flattens `chunks`, or says which chunk is malformed and how.
    pub fn new(chunks: &[ChunkInput<'a>], limits: &StepLimits) -> anyhow::Result<StepPlan<'a>> {
        limits.check(chunks)?;
        let total: usize = chunks.iter().map(|c| c.tokens.len()).sum();
        let mut plan = StepPlan {
            tokens: Vec::with_capacity(total),
            positions: Vec::with_capacity(total),
            slots: Vec::with_capacity(total),
            rows: Vec::with_capacity(total),
            logit_rows: Vec::new(),
            prefill: Vec::with_capacity(total),
            ring_slots: Vec::new(),
            ring_tables: Vec::new(),
            chunk_of: Vec::with_capacity(total),
        };
        let bs = limits.kv.block_size;
        for (ci, chunk) in chunks.iter().enumerate() {
            if let Some(ring) = limits.ring {
                plan.ring_tables.push(ring.table(chunk.block_table));
                let positions = chunk.start_pos..chunk.end();
                plan.ring_slots
                    .extend(positions.map(|p| ring.slot(chunk.block_table, p, bs)));
            }
            for (offset, &token) in chunk.tokens.iter().enumerate() {
                let pos = chunk.start_pos + offset;
                plan.tokens.push(token);
                plan.positions.push(pos);
                plan.slots.push(limits.kv.slot(chunk.block_table, pos));
                plan.rows.push(QueryRow {
                    pos,
                    block_table: chunk.block_table,
                });
                plan.prefill.push(chunk.tokens.len() > 1);
                plan.chunk_of.push(ci);
            }
            if chunk.want_logits {
                plan.logit_rows.push(plan.tokens.len() - 1);
            }
        }
        Ok(plan)
    }
}

impl StepPlan<'_> {
    /// Each row as the ring layers read it: its position and its chunk's ring table (none
    /// without a ring).
    pub fn ring_rows(&self) -> Vec<QueryRow<'_>> {
        if self.ring_tables.is_empty() {
            return Vec::new();
        }
        self.rows
            .iter()
            .zip(&self.chunk_of)
            .map(|(r, &c)| QueryRow {
                pos: r.pos,
                block_table: &self.ring_tables[c],
            })
            .collect()
    }
}

impl<'a> StepPlan<'a> {
    /// A draft model's step: one row per sequence, its token at `pos` turned by RoPE at `pos`,
    /// attending as the target's row at `pos - 1` does (its own K and V are not in the cache);
    /// every row wants logits. Writes no KV, so no slots.
    pub fn draft(tokens: &[u32], rows: &[kiln_step::DraftRow<'a>]) -> StepPlan<'a> {
        StepPlan {
            tokens: tokens.to_vec(),
            positions: rows.iter().map(|r| r.pos).collect(),
            slots: Vec::new(),
            rows: rows
                .iter()
                .map(|r| QueryRow {
                    pos: r.pos - 1,
                    block_table: r.block_table,
                })
                .collect(),
            logit_rows: (0..rows.len()).collect(),
            prefill: vec![false; rows.len()],
            ring_slots: Vec::new(),
            ring_tables: Vec::new(),
            chunk_of: (0..rows.len()).collect(),
        }
    }
}
