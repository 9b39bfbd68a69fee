//! Owns the KV cache's fixed-size blocks: the free list, each sequence's block table and a
//! reference count per block (so that a prefix cache can later share blocks between sequences).

use std::collections::{HashMap, VecDeque};

use crate::sequence::SeqId;
use kiln_step::KvGeometry;

#[derive(Debug)]
pub struct BlockManager {
    block_size: usize,
    ref_counts: Vec<u32>,
    /// Blocks with no reference, the least recently freed first.
    free: VecDeque<u32>,
    tables: HashMap<SeqId, Vec<u32>>,
}

impl BlockManager {
    pub fn new(geometry: KvGeometry) -> BlockManager {
        BlockManager {
            block_size: geometry.block_size.max(1),
            ref_counts: vec![0; geometry.num_blocks],
            free: (0..geometry.num_blocks as u32).collect(),
            tables: HashMap::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Tokens the whole pool holds.
    pub fn capacity_tokens(&self) -> usize {
        self.num_blocks() * self.block_size
    }

    /// Blocks needed to hold `tokens` positions.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// The sequence's block table (empty when it holds no blocks).
    pub fn table(&self, seq: SeqId) -> &[u32] {
        self.tables.get(&seq).map_or(&[], Vec::as_slice)
    }

    /// New blocks `seq` would need to cover `tokens` positions.
    pub fn missing_blocks(&self, seq: SeqId, tokens: usize) -> usize {
        self.blocks_for(tokens)
            .saturating_sub(self.table(seq).len())
    }

    /// Extends `seq`'s table to cover `tokens` positions. All or nothing: returns false and
    /// allocates nothing when the free list is too short.
    pub fn grow(&mut self, seq: SeqId, tokens: usize) -> bool {
        let missing = self.missing_blocks(seq, tokens);
        if missing > self.free.len() {
            return false;
        }
        let table = self.tables.entry(seq).or_default();
        for _ in 0..missing {
            let block = self
                .free
                .pop_front()
                .expect("free list length checked above");
            self.ref_counts[block as usize] = 1;
            table.push(block);
        }
        true
    }

    /// Appends a block another sequence already holds to `seq`'s table, taking a reference.
    pub fn share(&mut self, seq: SeqId, block: u32) -> bool {
        match self.ref_counts.get_mut(block as usize) {
            Some(rc) if *rc > 0 => {
                *rc += 1;
                self.tables.entry(seq).or_default().push(block);
                true
            }
            _ => false,
        }
    }

    /// Drops `seq`'s references; blocks nobody else holds go back to the free list.
    /// Returns how many blocks became free.
    pub fn release(&mut self, seq: SeqId) -> usize {
        let Some(table) = self.tables.remove(&seq) else {
            return 0;
        };
        let mut freed = 0;
        for block in table {
            let rc = &mut self.ref_counts[block as usize];
            *rc -= 1;
            if *rc == 0 {
                self.free.push_back(block);
                freed += 1;
            }
        }
        freed
    }

    pub fn ref_count(&self, block: u32) -> u32 {
        self.ref_counts.get(block as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(num_blocks: usize) -> BlockManager {
        BlockManager::new(KvGeometry {
            block_size: 4,
            num_blocks,
        })
    }

    #[test]
    fn grow_allocates_whole_blocks_as_positions_need_them() {
        let mut m = manager(8);
        assert!(m.grow(1, 1));
        assert_eq!(m.table(1).len(), 1);
        assert!(m.grow(1, 4));
        assert_eq!(m.table(1).len(), 1);
        assert!(m.grow(1, 5));
        assert_eq!(m.table(1).len(), 2);
        assert!(m.grow(1, 2), "shrinking requests are no-ops");
        assert_eq!(m.table(1).len(), 2);
        assert_eq!((m.num_used(), m.num_free()), (2, 6));
        assert_eq!(m.capacity_tokens(), 32);
    }

    #[test]
    fn grow_is_all_or_nothing() {
        let mut m = manager(3);
        assert!(m.grow(1, 8));
        assert!(!m.grow(2, 9));
        assert!(m.table(2).is_empty());
        assert_eq!(m.num_free(), 1);
        assert!(m.grow(2, 4));
    }

    #[test]
    fn sequences_never_share_a_block_by_accident() {
        let mut m = manager(6);
        assert!(m.grow(1, 12));
        assert!(m.grow(2, 12));
        let mut all: Vec<u32> = m.table(1).iter().chain(m.table(2)).copied().collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6);
        assert_eq!(m.num_free(), 0);
    }

    #[test]
    fn release_returns_blocks_for_reuse() {
        let mut m = manager(4);
        assert!(m.grow(1, 16));
        assert_eq!(m.release(1), 4);
        assert_eq!(m.release(1), 0);
        assert!(m.table(1).is_empty());
        assert!(m.grow(2, 16));
        assert_eq!(m.num_free(), 0);
    }

    #[test]
    fn shared_blocks_are_freed_with_their_last_reference() {
        let mut m = manager(4);
        assert!(m.grow(1, 8));
        let first = m.table(1)[0];
        assert!(m.share(2, first));
        assert_eq!(m.ref_count(first), 2);
        assert_eq!(m.release(1), 1);
        assert_eq!(m.ref_count(first), 1);
        assert_eq!(m.release(2), 1);
        assert_eq!(m.num_free(), 4);
        assert!(!m.share(3, first), "a free block cannot be shared");
        assert!(!m.share(3, 99));
    }
}
