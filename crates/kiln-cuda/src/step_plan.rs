//! Host side of a step: checks the chunks (`kiln_step::StepLimits`) and packs every per-step input (token ids,
//! positions, KV slots, token -> sequence, block tables, attention tiles, logits rows) into one
//! i32 array with fixed section offsets, uploaded in one copy into a persistent device buffer.
//! Decode rows (single-token chunks) come first so that GEMMs route them by position: rows
//! 0..n_decode go to the skinny kernel, the rest to the tensor-core path.
//!
//! With a KV ring (kiln_step::KvRing) the ring layers write at `ring_slots` and read through
//! `ring_bt_start`: each sequence's ring table (`KvRing::table`) packed after the plain tables,
//! so the attention kernels, which look position p up at `p / block_size`, find its ring block
//! `table[(p / block_size) % blocks]` unchanged.

use anyhow::Result;
use kiln_step::{ChunkInput, KvGeometry, KvRing, StepCapacity, StepLimits};

use crate::kernels::FLASH_TILE_ROWS;

/// Capacities the persistent buffers are sized for, and where each section starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLayout {
    pub max_tokens: usize,
    pub max_seqs: usize,
    pub max_tiles: usize,
    pub max_blocks_per_seq: usize,
    pub block_size: usize,
    pub num_blocks: usize,
    pub vocab_size: usize,
    pub max_context: usize,
    pub tokens: usize,
    pub positions: usize,
    pub slots: usize,
    pub token_seq: usize,
    pub bt_start: usize,
    pub logits_rows: usize,
    pub tiles: usize,
    pub block_tables: usize,
    /// The ring of the sliding-window layers' KV, when kept; the two ring sections are empty
    /// without one.
    pub ring: Option<KvRing>,
    pub ring_slots: usize,
    pub ring_bt_start: usize,
    /// Total i32 capacity.
    pub len: usize,
}

impl StepLayout {
    pub fn new(
        max_tokens: usize,
        max_seqs: usize,
        max_context: usize,
        block_size: usize,
        num_blocks: usize,
        vocab_size: usize,
    ) -> StepLayout {
        let (bs, n, vocab) = (block_size, num_blocks, vocab_size);
        StepLayout::with_ring(max_tokens, max_seqs, max_context, bs, n, vocab, None)
    }

    /// The layout with `ring`'s sections (and room for the ring tables beside the plain ones).
    pub fn with_ring(
        max_tokens: usize,
        max_seqs: usize,
        max_context: usize,
        block_size: usize,
        num_blocks: usize,
        vocab_size: usize,
        ring: Option<KvRing>,
    ) -> StepLayout {
        let max_tiles = max_tokens.div_ceil(FLASH_TILE_ROWS) + max_seqs;
        let max_blocks_per_seq = max_context.div_ceil(block_size);
        let tokens = 0;
        let positions = tokens + max_tokens;
        let slots = positions + max_tokens;
        let token_seq = slots + max_tokens;
        let bt_start = token_seq + max_tokens;
        let logits_rows = bt_start + max_seqs;
        let tiles = logits_rows + max_seqs;
        let ring_slots = tiles + 4 * max_tiles;
        let ringed = ring.is_some() as usize;
        let ring_bt_start = ring_slots + ringed * max_tokens;
        let block_tables = ring_bt_start + ringed * max_seqs;
        let len = block_tables + (1 + ringed) * max_seqs * max_blocks_per_seq;
        StepLayout {
            max_tokens,
            max_seqs,
            max_tiles,
            max_blocks_per_seq,
            block_size,
            num_blocks,
            vocab_size,
            max_context,
            tokens,
            positions,
            slots,
            token_seq,
            bt_start,
            logits_rows,
            tiles,
            block_tables,
            ring,
            ring_slots,
            ring_bt_start,
            len,
        }
    }

    /// The ring layers' scratch slot, which padding rows write to: the first of ring block
    /// `capable`, never one of a sequence's ring blocks.
    pub fn ring_scratch_slot(&self) -> Option<i32> {
        self.ring
            .and_then(|r| i32::try_from(r.capable * self.block_size).ok())
    }
}

/// What the device launches need to know about a packed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlan {
    pub n_tokens: usize,
    /// Flat tokens 0..n_decode are single-token decode rows.
    pub n_decode: usize,
    pub n_seqs: usize,
    pub n_tiles: usize,
    /// Keys the prefill chunks' attention spans, summed over the chunks (each chunk's last
    /// position + 1): how much K/V the tiles read, for the order of their CTAs.
    pub prefill_keys: usize,
    /// Rows of logits, one per chunk with want_logits, in chunk order.
    pub n_logits: usize,
    /// i32 elements to upload (the fixed sections plus the used part of the block tables).
    pub upload_len: usize,
}

/// Whether a chunk is a decode row. A single token is always treated as decode, so that a
/// sequence's generated tokens never change path; a prompt split into chunks should not end in
/// a one-token chunk if its last logits must equal the unchunked ones.
pub fn is_decode(chunk: &ChunkInput<'_>) -> bool {
    chunk.tokens.len() == 1
}

impl StepLayout {
    /// What the layout accepts, for `kiln_step`'s checks.
    pub fn limits(&self) -> StepLimits {
        StepLimits {
            kv: KvGeometry {
                block_size: self.block_size,
                num_blocks: self.num_blocks,
            },
            vocab_size: self.vocab_size,
            max_context: Some(self.max_context),
            capacity: Some(StepCapacity {
                max_seqs: self.max_seqs,
                max_tokens: self.max_tokens,
            }),
            ring: self.ring,
        }
    }
}

/// Packs `chunks` into `buf` (at least `layout.len` long). Fails with a clear error, touching no
/// device state, when a chunk is malformed or the step exceeds the configured capacities.
pub fn pack_step(chunks: &[ChunkInput<'_>], l: &StepLayout, buf: &mut [i32]) -> Result<StepPlan> {
    let limits = l.limits();
    limits.check(chunks)?;
    let n_tokens: usize = chunks.iter().map(|c| c.tokens.len()).sum();
    // Decode chunks first, each group in the order given.
    let order: Vec<usize> = (0..chunks.len())
        .filter(|&i| is_decode(&chunks[i]))
        .chain((0..chunks.len()).filter(|&i| !is_decode(&chunks[i])))
        .collect();
    let n_decode = chunks.iter().filter(|c| is_decode(c)).count();
    let mut first_token = vec![0usize; chunks.len()];
    let (mut t, mut bt, mut tiles, mut prefill_keys) = (0usize, 0usize, 0usize, 0usize);
    // The last decode row's sequence index and its table as packed (blocks at the end of the
    // block tables): an adjacent decode row reading the same blocks shares them.
    let mut last_decode: Option<(usize, usize)> = None;
    let mut seqs = 0usize;
    // Per sequence index: its packed table's length (the ring tables follow them).
    let mut seq_blocks: Vec<usize> = Vec::with_capacity(chunks.len());
    for &ci in &order {
        let c = &chunks[ci];
        first_token[ci] = t;
        let blocks = (c.start_pos + c.tokens.len()).div_ceil(l.block_size);
        let shared = match last_decode {
            Some((seq, had)) if is_decode(c) => {
                let common = had.min(blocks);
                let packed = &buf[l.block_tables + bt - had..l.block_tables + bt - had + common];
                let same = packed
                    .iter()
                    .zip(&c.block_table[..common])
                    .all(|(&p, &b)| p == b as i32);
                same.then_some((seq, had))
            }
            _ => None,
        };
        let seq = match shared {
            // The rows of one sequence in a verify step: one index, one table (extended to the
            // longer row), so decode attention can read their keys once for all of them.
            Some((seq, had)) => {
                for j in had..blocks.max(had) {
                    buf[l.block_tables + bt] = c.block_table[j] as i32;
                    bt += 1;
                }
                last_decode = Some((seq, blocks.max(had)));
                seq_blocks[seq] = blocks.max(had);
                seq
            }
            None => {
                let seq = seqs;
                seqs += 1;
                buf[l.bt_start + seq] = bt as i32;
                for (j, &b) in c.block_table[..blocks].iter().enumerate() {
                    buf[l.block_tables + bt + j] = b as i32;
                }
                bt += blocks;
                seq_blocks.push(blocks);
                last_decode = is_decode(c).then_some((seq, blocks));
                seq
            }
        };
        for (j, &tok) in c.tokens.iter().enumerate() {
            let p = c.start_pos + j;
            buf[l.tokens + t + j] = tok as i32;
            buf[l.positions + t + j] = p as i32;
            buf[l.slots + t + j] = limits.kv.slot(c.block_table, p) as i32;
            buf[l.token_seq + t + j] = seq as i32;
            if let Some(r) = l.ring {
                buf[l.ring_slots + t + j] = r.slot(c.block_table, p, l.block_size) as i32;
            }
        }
        if !is_decode(c) {
            prefill_keys += c.start_pos + c.tokens.len();
            for r0 in (0..c.tokens.len()).step_by(FLASH_TILE_ROWS) {
                let rows = (c.tokens.len() - r0).min(FLASH_TILE_ROWS);
                let at = l.tiles + 4 * tiles;
                buf[at..at + 4].copy_from_slice(&[
                    (t + r0) as i32,
                    rows as i32,
                    seq as i32,
                    (c.start_pos + r0) as i32,
                ]);
                tiles += 1;
            }
        }
        t += c.tokens.len();
    }
    let mut n_logits = 0;
    for (ci, c) in chunks.iter().enumerate() {
        if c.want_logits {
            buf[l.logits_rows + n_logits] = (first_token[ci] + c.tokens.len() - 1) as i32;
            n_logits += 1;
        }
    }
    let mut tables_len = bt;
    if let Some(r) = l.ring {
        // Entry j of a sequence's ring table is entry j % blocks of its table.
        for (seq, &n) in seq_blocks.iter().enumerate() {
            let at = l.block_tables + buf[l.bt_start + seq] as usize;
            buf[l.ring_bt_start + seq] = (bt + at - l.block_tables) as i32;
            for j in 0..n {
                buf[at + bt + j] = buf[at + j % r.blocks];
            }
        }
        tables_len += bt;
    }
    Ok(StepPlan {
        n_tokens,
        n_decode,
        n_seqs: chunks.len(),
        n_tiles: tiles,
        prefill_keys,
        n_logits,
        upload_len: l.block_tables + tables_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> StepLayout {
        StepLayout::new(256, 8, 1024, 16, 64, 1000)
    }

    #[test]
    fn decode_rows_come_first_and_logits_keep_chunk_order() {
        let l = layout();
        let mut buf = vec![-7i32; l.len];
        let prompt: Vec<u32> = (0..70).collect();
        let chunks = [
            ChunkInput {
                tokens: &prompt,
                start_pos: 0,
                block_table: &[3, 4, 5, 6, 7],
                want_logits: true,
            },
            ChunkInput {
                tokens: &[9],
                start_pos: 20,
                block_table: &[1, 2],
                want_logits: true,
            },
        ];
        let plan = pack_step(&chunks, &l, &mut buf).unwrap();
        assert_eq!(plan.n_tokens, 71);
        assert_eq!(plan.n_decode, 1);
        assert_eq!(plan.n_tiles, 2);
        assert_eq!(plan.prefill_keys, 70);
        assert_eq!(plan.n_logits, 2);
        // The decode token is flat token 0, sequence 0, slot from block 2 (position 20).
        assert_eq!(buf[l.tokens], 9);
        assert_eq!(buf[l.positions], 20);
        assert_eq!(buf[l.slots], 2 * 16 + 4);
        assert_eq!(buf[l.token_seq], 0);
        // The prompt follows: flat tokens 1..71, sequence 1.
        assert_eq!(buf[l.positions + 1 + 69], 69);
        assert_eq!(buf[l.slots + 1 + 69], 7 * 16 + 5);
        assert_eq!(buf[l.token_seq + 70], 1);
        // Tiles of 64 rows: {tok0, rows, seq, pos0}.
        assert_eq!(&buf[l.tiles..l.tiles + 8], &[1, 64, 1, 0, 65, 6, 1, 64]);
        // Logits rows in chunk order: the prompt's last token first, then the decode row.
        assert_eq!(&buf[l.logits_rows..l.logits_rows + 2], &[70, 0]);
        // Block tables packed back to back: the decode sequence's 2 blocks, then 5.
        assert_eq!(buf[l.bt_start], 0);
        assert_eq!(buf[l.bt_start + 1], 2);
        assert_eq!(
            &buf[l.block_tables..l.block_tables + 7],
            &[1, 2, 3, 4, 5, 6, 7]
        );
        assert_eq!(plan.upload_len, l.block_tables + 7);
    }
}

#[cfg(test)]
mod ring {
    use super::*;

    #[test]
    fn ring_layers_read_their_tables_and_write_their_slots() {
        let ring = KvRing {
            blocks: 3,
            capable: 8,
            window: 20,
        };
        let l = StepLayout::with_ring(64, 4, 256, 16, 64, 1000, Some(ring));
        assert_eq!(l.ring_scratch_slot(), Some(8 * 16));
        let mut buf = vec![-7i32; l.len];
        let prompt: Vec<u32> = (0..20).collect();
        let chunks = [
            ChunkInput {
                tokens: &prompt,
                start_pos: 40,
                block_table: &[1, 2, 3, 30],
                want_logits: true,
            },
            ChunkInput {
                tokens: &[9],
                start_pos: 50,
                block_table: &[4, 5, 6, 40],
                want_logits: true,
            },
        ];
        let plan = pack_step(&chunks, &l, &mut buf).unwrap();
        // Plain tables: the decode row's, then the prompt's; their ring tables after them.
        let tables = &buf[l.block_tables..plan.upload_len];
        assert_eq!(tables, &[4, 5, 6, 40, 1, 2, 3, 30, 4, 5, 6, 4, 1, 2, 3, 1]);
        assert_eq!(&buf[l.bt_start..l.bt_start + 2], &[0, 4]);
        assert_eq!(&buf[l.ring_bt_start..l.ring_bt_start + 2], &[8, 12]);
        // Position 50 is in block 3: block 3 % 3 = 0 (id 4) of the ring, id 40 of the table.
        assert_eq!(buf[l.ring_slots], 4 * 16 + 2);
        assert_eq!(buf[l.slots], 40 * 16 + 2);
        // The prompt: position 40 in block 2 (id 3), 59 in block 3 % 3 = 0 (id 1).
        assert_eq!(buf[l.ring_slots + 1], 3 * 16 + 8);
        assert_eq!(buf[l.ring_slots + 20], 16 + 11);
        // A first block outside the ring-capable ids is refused.
        let bad = [ChunkInput {
            block_table: &[9, 2, 3, 30],
            ..chunks[0]
        }];
        assert!(pack_step(&bad, &l, &mut buf).is_err());
    }
}

#[cfg(test)]
mod verify_rows {
    use super::*;

    #[test]
    fn adjacent_decode_rows_of_one_table_share_a_sequence_index() {
        let l = StepLayout::new(256, 8, 1024, 16, 64, 1000);
        let mut buf = vec![-7i32; l.len];
        static A: [u32; 3] = [1, 2, 9];
        static B: [u32; 2] = [4, 5];
        // Rows at 31 and 32 read table a (the second needs its third block); then another
        // sequence; then table a again, not adjacent, so a fresh index.
        let row = |p: usize, t: &'static [u32]| ChunkInput {
            tokens: &[3],
            start_pos: p,
            block_table: t,
            want_logits: true,
        };
        let chunks = [row(31, &A), row(32, &A), row(20, &B), row(5, &A)];
        let plan = pack_step(&chunks, &l, &mut buf).unwrap();
        assert_eq!(&buf[l.token_seq..l.token_seq + 4], &[0, 0, 1, 2]);
        assert_eq!(&buf[l.bt_start..l.bt_start + 3], &[0, 3, 5]);
        assert_eq!(
            &buf[l.block_tables..l.block_tables + 6],
            &[1, 2, 9, 4, 5, 1]
        );
        assert_eq!(plan.upload_len, l.block_tables + 6);
        // Slots still come from each row's own table.
        assert_eq!(buf[l.slots + 1], 9 * 16);
    }
}
