//! Sliding-window layers' KV as a ring of blocks per sequence, so a long context pays full KV
//! only for the layers that attend over all of it.
//!
//! A ring layer keeps position `p` of a sequence in block `block_table[(p / block_size) %
//! blocks]`: the sequence's first `blocks` blocks, reused in turn. Block ids `0..capable` have
//! room for the ring layers (the others hold only the full layers' KV), so the engine gives a
//! sequence its first `blocks` blocks from them and the rest from `capable..num_blocks`.
//!
//! A step writes every K and V of a chunk before any row attends, so a chunk of `c` tokens
//! starting at `s` overwrites the ring slots of positions `s - blocks * block_size ..`; the
//! first row still needs positions from `s + 1 - window` on. [`KvRing::blocks_for`] makes the
//! ring long enough that nothing a row of the chunk attends to is overwritten:
//! `blocks * block_size >= window + c - 1`.
//!
//! A ring block's contents are a sequence's latest positions, not a fixed prefix, so they can
//! be neither shared nor cached: a backend with ring layers runs without the prefix cache.

use anyhow::{ensure, Result};

use crate::ChunkInput;

/// KILN_KV_RING=1 (or `on`) lets a backend keep its sliding-window layers' KV in a ring; off
/// by default, since the prefix cache is off beside a ring; `0` keeps it off.
pub fn kv_ring_from_env() -> bool {
    std::env::var("KILN_KV_RING").is_ok_and(|v| matches!(v.as_str(), "1" | "on" | "true"))
}

/// The ring of a backend's sliding-window layers (see the module note).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvRing {
    /// Blocks of a sequence the ring layers cycle through.
    pub blocks: usize,
    /// Block ids `0..capable` have room for the ring layers.
    pub capable: usize,
    /// The widest window of the ring layers (what the ring was sized for).
    pub window: usize,
}

impl KvRing {
    /// Ring blocks for layers attending over at most `window` tokens when one step runs at
    /// most `max_chunk` tokens of a sequence.
    pub fn blocks_for(window: usize, max_chunk: usize, block_size: usize) -> usize {
        (window + max_chunk.max(1) - 1).div_ceil(block_size.max(1))
    }

    /// The ring layers' slot of position `pos` of a sequence with this block table.
    pub fn slot(&self, block_table: &[u32], pos: usize, block_size: usize) -> usize {
        block_table[(pos / block_size) % self.blocks] as usize * block_size + pos % block_size
    }

    /// The block table the ring layers read, as long as `block_table`: entry `i` is
    /// `block_table[i % blocks]`, so a kernel that looks position `p` up at `p / block_size`
    /// finds its ring slot.
    pub fn table(&self, block_table: &[u32]) -> Vec<u32> {
        let ring = &block_table[..self.blocks.min(block_table.len())];
        (0..block_table.len())
            .map(|i| ring[i % self.blocks])
            .collect()
    }

    /// Checks a chunk against the ring: its blocks before the ring's length are ring-capable,
    /// and it is short enough that its writes leave what its rows read in place.
    pub fn check(&self, i: usize, c: &ChunkInput<'_>, block_size: usize) -> Result<()> {
        let window = self.window;
        let needed = c.end().div_ceil(block_size).min(self.blocks);
        if let Some(b) = c.block_table[..needed.min(c.block_table.len())]
            .iter()
            .find(|&&b| b as usize >= self.capable)
        {
            anyhow::bail!(
                "chunk {i}: block {b} is among the sequence's first {} blocks, which hold its \
                 ring layers' KV, but only blocks 0..{} have room for them",
                self.blocks,
                self.capable
            );
        }
        ensure!(
            self.blocks * block_size + 1 >= window + c.tokens.len(),
            "chunk {i}: {} tokens overwrite ring slots its rows still read (a ring of {} blocks \
             holds a window of {window} and chunks of up to {})",
            c.tokens.len(),
            self.blocks,
            (self.blocks * block_size + 1).saturating_sub(window)
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_holds_the_window_and_the_longest_chunk() {
        // A 512-token window and 2048-token chunks in 16-token blocks: 2559 slots, 160 blocks.
        assert_eq!(KvRing::blocks_for(512, 2048, 16), 160);
        // Decode alone: the window itself.
        assert_eq!(KvRing::blocks_for(64, 1, 16), 4);
        assert_eq!(KvRing::blocks_for(65, 1, 16), 5);
        // Exhaustively on small shapes: a chunk's writes never reach what its rows read.
        for bs in [1, 3, 4, 16] {
            for window in 1..40 {
                for chunk in 1..40 {
                    let r = KvRing::blocks_for(window, chunk, bs) * bs;
                    for start in 0..100usize {
                        // Overwritten: positions start - r .. start + chunk - r.
                        let first_read = (start + 1).saturating_sub(window);
                        assert!(start + chunk <= r || start + chunk - r <= first_read);
                    }
                }
            }
        }
    }

    #[test]
    fn ring_slots_cycle_through_the_first_blocks() {
        let ring = KvRing {
            blocks: 3,
            capable: 10,
            window: 8,
        };
        let table = [7, 2, 9, 40, 41, 42, 43];
        assert_eq!(ring.table(&table), [7, 2, 9, 7, 2, 9, 7]);
        assert_eq!(ring.slot(&table, 0, 4), 28);
        assert_eq!(ring.slot(&table, 13, 4), 29);
        for p in 0..28 {
            assert_eq!(
                ring.slot(&table, p, 4),
                ring.table(&table)[p / 4] as usize * 4 + p % 4
            );
        }
    }

    #[test]
    fn chunks_are_checked_against_the_ring() {
        let ring = KvRing {
            blocks: 3,
            capable: 10,
            window: 8,
        };
        let tokens = [1u32; 5];
        let c = |table: &'static [u32], n: usize, start| ChunkInput {
            tokens: &tokens[..n],
            start_pos: start,
            block_table: table,
            want_logits: true,
        };
        assert!(ring.check(0, &c(&[1, 2, 3, 40], 5, 8), 4).is_ok());
        let e = ring.check(0, &c(&[1, 20, 3, 40], 5, 8), 4).unwrap_err();
        assert!(e.to_string().contains("block 20"), "{e}");
        // Only the blocks the chunk reaches are checked.
        assert!(ring.check(0, &c(&[1, 2, 40], 5, 0), 4).is_ok());
        // 12 slots hold a window of 8 and chunks up to 5 tokens, not 6.
        let six = [1u32; 6];
        let long = ChunkInput {
            tokens: &six,
            start_pos: 8,
            block_table: &[1, 2, 3, 40],
            want_logits: true,
        };
        assert!(ring
            .check(0, &long, 4)
            .unwrap_err()
            .to_string()
            .contains("overwrite"));
    }
}
