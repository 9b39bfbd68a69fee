//! A step's input: one chunk per sequence, the paged KV geometry its block tables index, and
//! the checks every backend runs before any arithmetic.

use std::collections::HashSet;

use anyhow::{bail, ensure, Result};

/// Shape of the paged KV cache a backend allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeometry {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool; block ids are `0..num_blocks`.
    pub num_blocks: usize,
}

impl KvGeometry {
    /// The cache slot of position `pos` of a sequence with this block table.
    pub fn slot(&self, block_table: &[u32], pos: usize) -> usize {
        block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }
}

/// The most one step may hold, for a backend whose step buffers have a fixed size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCapacity {
    /// Chunks (sequences) in one step.
    pub max_seqs: usize,
    /// Tokens over all chunks of one step.
    pub max_tokens: usize,
}

/// One sequence's share of a step: a prefill chunk or a single decode token.
#[derive(Debug, Clone)]
pub struct ChunkInput<'a> {
    /// The tokens to run, at positions `start_pos..start_pos + tokens.len()`.
    pub tokens: &'a [u32],
    pub start_pos: usize,
    /// The sequence's KV blocks, covering at least `start_pos + tokens.len()` positions.
    /// Position p lives in slot [`KvGeometry::slot`]: `block_table[p / block_size] *
    /// block_size + p % block_size`.
    pub block_table: &'a [u32],
    /// Whether the engine needs logits for this chunk's last token.
    pub want_logits: bool,
}

impl ChunkInput<'_> {
    /// One past the last position the chunk writes.
    pub fn end(&self) -> usize {
        self.start_pos + self.tokens.len()
    }
}

/// What a backend accepts in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    pub kv: KvGeometry,
    pub vocab_size: usize,
    /// Longest sequence the backend holds; None: only the block tables limit it.
    pub max_context: Option<usize>,
    /// None: no fixed step size.
    pub capacity: Option<StepCapacity>,
    /// The ring of the sliding-window layers' KV, when the backend keeps one.
    pub ring: Option<crate::KvRing>,
}

impl StepLimits {
    /// Checks a whole step: each chunk well formed and inside the pool, the step inside the
    /// capacity, and no two tokens writing one KV slot. Says which chunk is wrong and how.
    pub fn check(&self, chunks: &[ChunkInput<'_>]) -> Result<()> {
        let total = chunks
            .iter()
            .try_fold(0usize, |n, c| n.checked_add(c.tokens.len()));
        if let Some(cap) = self.capacity {
            ensure!(
                chunks.len() <= cap.max_seqs,
                "step has {} sequences; the backend was sized for {}",
                chunks.len(),
                cap.max_seqs
            );
            if let Some(n) = total.filter(|&n| n > cap.max_tokens) {
                bail!(
                    "step has {n} tokens; the backend was sized for {} per step",
                    cap.max_tokens
                );
            }
        }
        for (i, chunk) in chunks.iter().enumerate() {
            self.check_chunk(i, chunk)?;
            if let Some(ring) = self.ring {
                ring.check(i, chunk, self.kv.block_size)?;
            }
        }
        let mut seen = HashSet::with_capacity(total.unwrap_or(0));
        for chunk in chunks {
            for pos in chunk.start_pos..chunk.end() {
                let slot = self.kv.slot(chunk.block_table, pos);
                ensure!(
                    seen.insert(slot),
                    "two tokens of one step write KV slot {slot}: the block tables overlap"
                );
            }
        }
        Ok(())
    }

    fn check_chunk(&self, i: usize, c: &ChunkInput<'_>) -> Result<()> {
        ensure!(!c.tokens.is_empty(), "chunk {i} has no tokens");
        let Some(end) = c.start_pos.checked_add(c.tokens.len()) else {
            bail!("chunk {i}: start position {} overflows", c.start_pos);
        };
        if let Some(max) = self.max_context {
            ensure!(
                end <= max,
                "chunk {i} reaches position {end}, beyond the backend's context of {max} tokens"
            );
        }
        if let Some(t) = c.tokens.iter().find(|&&t| t as usize >= self.vocab_size) {
            bail!(
                "chunk {i}: token id {t} is outside the vocabulary of {} tokens",
                self.vocab_size
            );
        }
        let bs = self.kv.block_size;
        let covered = c.block_table.len().saturating_mul(bs);
        ensure!(
            covered >= end,
            "chunk {i}: its block table covers {covered} positions, the chunk reaches position {end}"
        );
        if let Some(b) = c.block_table[..end.div_ceil(bs)]
            .iter()
            .find(|&&b| b as usize >= self.kv.num_blocks)
        {
            bail!(
                "chunk {i}: block id {b} is outside the KV pool of {} blocks",
                self.kv.num_blocks
            );
        }
        Ok(())
    }
}

impl StepLimits {
    /// Checks the rows of a draft call ([`crate::DraftRow`]): each token in the vocabulary,
    /// after position 0 and inside the context, its block table covering the positions before
    /// it with blocks of the pool, its hidden row one of the `hidden_rows` logits rows of the
    /// step last finished.
    pub fn check_draft(&self, rows: &[crate::DraftRow<'_>], hidden_rows: usize) -> Result<()> {
        for (i, r) in rows.iter().enumerate() {
            ensure!(
                (r.token as usize) < self.vocab_size,
                "draft row {i}: token id {} is outside the vocabulary of {} tokens",
                r.token,
                self.vocab_size
            );
            ensure!(
                r.pos > 0,
                "draft row {i}: a draft needs the hidden state of an earlier position"
            );
            if let Some(max) = self.max_context {
                ensure!(
                    r.pos < max,
                    "draft row {i}: position {} is beyond the backend's context of {max} tokens",
                    r.pos
                );
            }
            ensure!(
                r.hidden_row < hidden_rows,
                "draft row {i}: hidden row {} of a step that had {hidden_rows} logits rows",
                r.hidden_row
            );
            let blocks = r.pos.div_ceil(self.kv.block_size);
            ensure!(
                r.block_table.len() >= blocks,
                "draft row {i}: its block table covers {} positions, the draft reads {}",
                r.block_table.len() * self.kv.block_size,
                r.pos
            );
            if let Some(b) = r.block_table[..blocks]
                .iter()
                .find(|&&b| b as usize >= self.kv.num_blocks)
            {
                bail!(
                    "draft row {i}: block id {b} is outside the KV pool of {} blocks",
                    self.kv.num_blocks
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> StepLimits {
        StepLimits {
            kv: KvGeometry {
                block_size: 16,
                num_blocks: 64,
            },
            vocab_size: 1000,
            max_context: Some(1024),
            capacity: Some(StepCapacity {
                max_seqs: 8,
                max_tokens: 256,
            }),
            ring: None,
        }
    }

    fn chunk<'a>(tokens: &'a [u32], start_pos: usize, table: &'a [u32]) -> ChunkInput<'a> {
        ChunkInput {
            tokens,
            start_pos,
            block_table: table,
            want_logits: true,
        }
    }

    fn err(chunks: &[ChunkInput<'_>]) -> String {
        limits().check(chunks).unwrap_err().to_string()
    }

    #[test]
    fn draft_rows_are_checked() {
        let row = |token, pos, table: &'static [u32], hidden_row| crate::DraftRow {
            token,
            pos,
            block_table: table,
            hidden_row,
        };
        assert!(limits().check_draft(&[row(5, 17, &[0, 1], 1)], 2).is_ok());
        let cases = [
            (row(1000, 17, &[0, 1], 0), "vocabulary"),
            (row(5, 0, &[0], 0), "earlier position"),
            (row(5, 1024, &[0; 64], 0), "context"),
            (row(5, 17, &[0, 1], 2), "hidden row 2"),
            (row(5, 17, &[0], 0), "covers 16"),
            (row(5, 17, &[0, 64], 0), "outside the KV pool"),
        ];
        for (r, want) in cases {
            let e = limits().check_draft(&[r], 2).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn slots_follow_the_block_table() {
        let kv = limits().kv;
        assert_eq!(kv.slot(&[5, 2], 0), 80);
        assert_eq!(kv.slot(&[5, 2], 17), 33);
    }

    #[test]
    fn malformed_steps_are_refused_with_a_reason() {
        let many = vec![1u32; 257];
        let table: Vec<u32> = (0..17).collect();
        let cases: [(&[ChunkInput<'_>], &str); 7] = [
            (&[chunk(&[], 0, &[0])], "no tokens"),
            (&[chunk(&[1000], 0, &[0])], "vocabulary"),
            (&[chunk(&[1; 17], 0, &[0])], "block table"),
            (&[chunk(&[1], 0, &[64])], "outside the KV pool"),
            (&[chunk(&[1], 1024, &[0; 65])], "context"),
            (&[chunk(&many, 0, &table)], "per step"),
            (&[chunk(&[1, 2], 0, &[3]), chunk(&[4], 1, &[3])], "overlap"),
        ];
        for (chunks, want) in cases {
            let e = err(chunks);
            assert!(e.contains(want), "{want}: {e}");
        }
        let nine: Vec<ChunkInput<'_>> = (0..9).map(|i| chunk(&[1], 0, &table[i..])).collect();
        assert!(err(&nine).contains("sequences"));
        assert!(limits()
            .check(&[chunk(&[1, 2], 0, &[3]), chunk(&[4], 0, &[2])])
            .is_ok());
    }
}
