//! Owns the KV cache's fixed-size blocks: the free list, each sequence's block table, a
//! reference count per block, and the prefix cache: full blocks whose keys and values were
//! computed stay findable by their tokens after their sequence lets go, until the pool needs
//! them (least recently used first). A block held by a sequence is never evicted.
//!
//! With a KV ring (kiln_step::KvRing) a sequence's first `ring.blocks` blocks come from the
//! ring-capable ids `0..ring.capable`, which also hold the sliding-window layers' KV, and the
//! rest from the other ids; ring blocks are neither cached nor shared.

use std::collections::{HashMap, VecDeque};

use crate::prefix_cache::{PrefixIndex, PrefixStats, ROOT};
use crate::sequence::SeqId;
use kiln_step::{BlockCopy, KvGeometry, KvRing};

#[derive(Debug)]
pub struct BlockManager {
    block_size: usize,
    ref_counts: Vec<u32>,
    /// Blocks with no reference and no cached contents, the least recently freed first.
    free: VecDeque<u32>,
    tables: HashMap<SeqId, Vec<u32>>,
    /// None: the prefix cache is off.
    cache: Option<PrefixIndex>,
    /// Per sequence, the keys of its leading blocks whose contents are known (cached or hit).
    chains: HashMap<SeqId, Vec<u64>>,
    /// The host tier: slots of the backend's host memory holding evicted cached blocks (every
    /// occupied slot idle, evicted least recently saved first), and the slots not in use.
    host: Option<PrefixIndex>,
    host_free: Vec<usize>,
    /// Copies between the pool and the host tier the backend must make before the next step.
    copies: Vec<BlockCopy>,
    /// With a KV ring: its shape and the free ring-capable blocks (`free` holds the others).
    ring: Option<(KvRing, VecDeque<u32>)>,
}

impl BlockManager {
    /// A pool without a prefix cache.
    pub fn new(geometry: KvGeometry) -> BlockManager {
        BlockManager {
            block_size: geometry.block_size.max(1),
            ref_counts: vec![0; geometry.num_blocks],
            free: (0..geometry.num_blocks as u32).collect(),
            tables: HashMap::new(),
            cache: None,
            chains: HashMap::new(),
            host: None,
            host_free: Vec::new(),
            copies: Vec::new(),
            ring: None,
        }
    }

    /// A pool (without a prefix cache: ring blocks hold a sequence's latest positions, not a
    /// prefix) whose sequences take their first `ring.blocks` blocks from the ids below
    /// `ring.capable`.
    pub fn with_kv_ring(geometry: KvGeometry, ring: KvRing) -> BlockManager {
        let mut m = BlockManager::new(geometry);
        let capable = ring.capable.min(geometry.num_blocks) as u32;
        let (low, high): (VecDeque<u32>, VecDeque<u32>) =
            m.free.drain(..).partition(|&b| b < capable);
        m.free = high;
        m.ring = Some((ring, low));
        m
    }

    /// The most positions one sequence can hold (all of the pool without a ring).
    pub fn max_sequence_tokens(&self) -> usize {
        match &self.ring {
            None => self.capacity_tokens(),
            Some((r, _)) => {
                let other = self.num_blocks().saturating_sub(r.capable);
                (r.blocks.min(r.capable) + other) * self.block_size
            }
        }
    }

    /// A pool whose full computed blocks are kept for reuse (see [`BlockManager::take_cached`]).
    pub fn with_prefix_cache(geometry: KvGeometry) -> BlockManager {
        let mut m = BlockManager::new(geometry);
        m.cache = Some(PrefixIndex::new(geometry.num_blocks));
        m
    }

    /// Adds a host tier of `slots` block copies under the prefix cache: a cached block the pool
    /// evicts is copied there, and copied back when a later prompt starts with it.
    pub fn with_host_tier(mut self, slots: usize) -> BlockManager {
        if self.cache.is_some() && slots > 0 {
            self.host = Some(PrefixIndex::new(slots));
            self.host_free = (0..slots).rev().collect();
        }
        self
    }

    /// The copies to make before the next step (see [`kiln_step::Backend::copy_blocks`]).
    pub fn take_copies(&mut self) -> Vec<BlockCopy> {
        std::mem::take(&mut self.copies)
    }

    /// Block copies the host tier holds.
    pub fn num_host_cached(&self) -> usize {
        self.host.as_ref().map_or(0, PrefixIndex::num_cached)
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks a sequence may take: the free ones and the cached ones nobody holds.
    pub fn num_free(&self) -> usize {
        let ring = self.ring.as_ref().map_or(0, |(_, f)| f.len());
        self.free.len() + ring + self.cache.as_ref().map_or(0, PrefixIndex::num_idle)
    }

    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Blocks whose contents the prefix cache can hand out (held or idle).
    pub fn num_cached(&self) -> usize {
        self.cache.as_ref().map_or(0, PrefixIndex::num_cached)
    }

    pub fn prefix_stats(&self) -> PrefixStats {
        let mut s = self
            .cache
            .as_ref()
            .map_or(PrefixStats::default(), |c| c.stats);
        if let Some(h) = &self.host {
            s.host_saves = h.stats.host_saves;
            s.host_hit_tokens = h.stats.host_hit_tokens;
        }
        s
    }

    pub fn prefix_cache_on(&self) -> bool {
        self.cache.is_some()
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
    /// allocates nothing when the free list is too short. Plain free blocks go first; then the
    /// least recently used cached ones are evicted.
    pub fn grow(&mut self, seq: SeqId, tokens: usize) -> bool {
        let missing = self.missing_blocks(seq, tokens);
        if let Some((ring, ring_free)) = self.ring.as_ref().map(|(r, f)| (*r, f.len())) {
            // Table indices below the ring's length take ring-capable blocks.
            let have = self.table(seq).len();
            let from_ring = ring.blocks.min(have + missing).saturating_sub(have);
            if from_ring > ring_free || missing - from_ring > self.free.len() {
                return false;
            }
            for i in have..have + missing {
                let block = match i < ring.blocks {
                    true => self.ring.as_mut().and_then(|(_, f)| f.pop_front()),
                    false => self.free.pop_front(),
                };
                let block = block.expect("free counts checked above");
                self.ref_counts[block as usize] = 1;
                self.tables.entry(seq).or_default().push(block);
            }
            return true;
        }
        if missing > self.num_free() {
            return false;
        }
        for _ in 0..missing {
            let block = self.alloc().expect("free count checked above");
            self.tables.entry(seq).or_default().push(block);
        }
        true
    }

    /// One block for new data, with a reference taken: a plain free one, else the least
    /// recently used cached one, whose contents go to the host tier when there is one.
    fn alloc(&mut self) -> Option<u32> {
        let block = match self.free.pop_front() {
            Some(b) => b,
            None => {
                let (block, contents) = self.cache.as_mut()?.evict()?;
                if let (Some(host), Some((parent, tokens))) = (self.host.as_mut(), contents) {
                    let slot = match self.host_free.pop() {
                        Some(s) => s,
                        None => host.evict().map(|(s, _)| s as usize)?,
                    };
                    host.insert(slot as u32, parent, &tokens);
                    host.park(slot as u32);
                    host.stats.host_saves += 1;
                    self.copies.push(BlockCopy::ToHost { block, slot });
                }
                block
            }
        };
        self.ref_counts[block as usize] = 1;
        Some(block)
    }

    /// Gives back `seq`'s blocks beyond what `tokens` positions need (a draft's rolled-back slots).
    pub fn truncate(&mut self, seq: SeqId, tokens: usize) {
        let keep = self.blocks_for(tokens);
        let Some(table) = self.tables.get_mut(&seq) else {
            return;
        };
        if table.len() <= keep {
            return;
        }
        let extra: Vec<u32> = table.drain(keep..).collect();
        if let Some(chain) = self.chains.get_mut(&seq) {
            chain.truncate(keep);
        }
        for block in extra.into_iter().rev() {
            self.drop_ref(block);
        }
    }

    /// Drops one reference to `block`; with the last it goes back to the free list, or stays
    /// cached (idle) when its contents are known. Returns whether nobody holds it now.
    fn drop_ref(&mut self, block: u32) -> bool {
        let rc = &mut self.ref_counts[block as usize];
        *rc -= 1;
        if *rc > 0 {
            return false;
        }
        match (self.cache.as_mut(), self.ring.as_mut()) {
            (Some(c), _) if c.is_cached(block) => c.park(block),
            (_, Some((r, f))) if (block as usize) < r.capable => f.push_back(block),
            _ => self.free.push_back(block),
        }
        true
    }

    /// Appends a block another sequence already holds to `seq`'s table, taking a reference.
    pub fn share(&mut self, seq: SeqId, block: u32) -> bool {
        // Ring blocks are rewritten as their sequence moves on: never shared.
        if self.ring.is_some() {
            return false;
        }
        match self.ref_counts.get_mut(block as usize) {
            Some(rc) if *rc > 0 => {
                *rc += 1;
                self.tables.entry(seq).or_default().push(block);
                true
            }
            _ => false,
        }
    }

    /// Gives `seq` (which holds no blocks) the longest run of cached blocks that hold the
    /// leading tokens of `tokens`, at most `max_blocks`, by reference. Returns how many.
    pub fn take_cached(&mut self, seq: SeqId, tokens: &[u32], max_blocks: usize) -> usize {
        let bs = self.block_size;
        debug_assert!(self.table(seq).is_empty());
        let Some(cache) = self.cache.as_mut() else {
            return 0;
        };
        let full = (tokens.len() / bs).min(max_blocks);
        cache.stats.queried_tokens += (full * bs) as u64;
        let mut chain = Vec::new();
        let mut table = Vec::new();
        for b in 0..full {
            let parent = chain.last().copied().unwrap_or(ROOT);
            let block_tokens = &tokens[b * bs..(b + 1) * bs];
            let cache = self.cache.as_mut().expect("checked above");
            if let Some((block, key)) = cache.find(parent, block_tokens) {
                cache.unpark(block);
                self.ref_counts[block as usize] += 1;
                chain.push(key);
                table.push(block);
                continue;
            }
            // In the host tier: copied back into a block of its own, cached there again.
            let Some((slot, key)) = self
                .host
                .as_ref()
                .and_then(|h| h.find(parent, block_tokens))
            else {
                break;
            };
            let host = self.host.as_mut().expect("found above");
            // Not idle while it waits for its copy, so that the allocation cannot evict it.
            host.unpark(slot);
            let Some(block) = self.alloc() else {
                self.host.as_mut().expect("found above").park(slot);
                break;
            };
            self.copies.push(BlockCopy::ToDevice {
                slot: slot as usize,
                block,
            });
            let host = self.host.as_mut().expect("found above");
            host.forget(slot);
            host.stats.host_hit_tokens += bs as u64;
            self.host_free.push(slot as usize);
            let cache = self.cache.as_mut().expect("checked above");
            cache.insert(block, parent, block_tokens);
            chain.push(key);
            table.push(block);
        }
        let cache = self.cache.as_mut().expect("checked above");
        cache.stats.hit_tokens += (table.len() * bs) as u64;
        let hit = table.len();
        if hit > 0 {
            self.tables.insert(seq, table);
            self.chains.insert(seq, chain);
        }
        hit
    }

    /// Records that `seq`'s first `blocks` blocks hold the keys and values of `tokens` as a
    /// fresh computation would: they become findable by later sequences.
    pub fn cache_computed(&mut self, seq: SeqId, tokens: &[u32], blocks: usize) {
        let bs = self.block_size;
        let Some(cache) = self.cache.as_mut() else {
            return;
        };
        let table = self.tables.get(&seq).map_or(&[][..], Vec::as_slice);
        let chain = self.chains.entry(seq).or_default();
        let blocks = blocks.min(table.len()).min(tokens.len() / bs);
        for b in chain.len()..blocks {
            let parent = chain.last().copied().unwrap_or(ROOT);
            chain.push(cache.insert(table[b], parent, &tokens[b * bs..(b + 1) * bs]));
        }
    }

    /// Drops `seq`'s references; blocks nobody else holds go back to the free list, or stay
    /// cached (idle) when their contents are known. Returns how many blocks nobody holds now.
    pub fn release(&mut self, seq: SeqId) -> usize {
        self.chains.remove(&seq);
        let Some(table) = self.tables.remove(&seq) else {
            return 0;
        };
        // Tail first: a chain's later blocks become the least recently used, so eviction takes
        // them before the blocks every longer match starts with.
        table
            .into_iter()
            .rev()
            .filter(|&block| self.drop_ref(block))
            .count()
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
    fn a_ring_gives_each_sequence_its_first_blocks_from_the_capable_ids() {
        let geometry = KvGeometry {
            block_size: 4,
            num_blocks: 10,
        };
        let ring = KvRing {
            blocks: 2,
            capable: 4,
            window: 5,
        };
        let mut m = BlockManager::with_kv_ring(geometry, ring);
        assert!(!m.prefix_cache_on());
        assert_eq!(m.max_sequence_tokens(), (2 + 6) * 4);
        assert!(m.grow(1, 13));
        let t1 = m.table(1).to_vec();
        assert!(t1[..2].iter().all(|&b| b < 4) && t1[2..].iter().all(|&b| b >= 4));
        assert!(m.grow(2, 5));
        assert!(m.table(2).iter().all(|&b| b < 4));
        // No ring-capable block is left for a third sequence, whatever else is free.
        assert!(!m.grow(3, 1));
        assert!(m.table(3).is_empty());
        // Ring blocks are not shared; given back, they serve the ring again.
        assert!(!m.share(3, t1[0]));
        m.release(1);
        assert!(m.grow(3, 20));
        let t3 = m.table(3);
        assert!(t3[..2].iter().all(|&b| b < 4) && t3[2..].iter().all(|&b| b >= 4));
        // A sequence longer than its ring and the other blocks can never fit.
        assert!(!m.grow(2, 8 * 4 + 1));
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

    fn cached_manager(num_blocks: usize) -> BlockManager {
        BlockManager::with_prefix_cache(KvGeometry {
            block_size: 4,
            num_blocks,
        })
    }

    #[test]
    fn computed_blocks_are_found_by_their_tokens_after_release() {
        let mut m = cached_manager(8);
        let tokens: Vec<u32> = (0..10).collect();
        assert!(m.grow(1, 10));
        m.cache_computed(1, &tokens, 2);
        assert_eq!(m.num_cached(), 2);
        let held = m.table(1)[..2].to_vec();
        // Held blocks can be shared while their sequence runs.
        assert_eq!(m.take_cached(2, &tokens, 8), 2);
        assert_eq!(m.table(2), held.as_slice());
        assert_eq!(m.ref_count(held[0]), 2);
        m.release(1);
        m.release(2);
        // Idle, still cached, still counted free.
        assert_eq!((m.num_free(), m.num_cached()), (8, 2));
        // Another prompt sharing only the first block finds only it.
        let other: Vec<u32> = (0..4).chain(90..96).collect();
        assert_eq!(m.take_cached(3, &other, 8), 1);
        assert_eq!(m.table(3), &held[..1]);
        // The limit is respected, and a different first token misses everything.
        m.release(3);
        assert_eq!(m.take_cached(4, &tokens, 1), 1);
        let mut changed = tokens.clone();
        changed[0] = 7;
        assert_eq!(m.take_cached(5, &changed, 8), 0);
        assert!(m.table(5).is_empty());
        let s = m.prefix_stats();
        assert_eq!((s.queried_tokens, s.hit_tokens), (8 + 8 + 4 + 8, 8 + 4 + 4));
    }

    #[test]
    fn cached_blocks_go_last_and_least_recently_used_first() {
        let mut m = cached_manager(4);
        let a: Vec<u32> = (0..4).collect();
        let b: Vec<u32> = (10..14).collect();
        assert!(m.grow(1, 4));
        m.cache_computed(1, &a, 1);
        assert!(m.grow(2, 4));
        m.cache_computed(2, &b, 1);
        m.release(1);
        m.release(2);
        // Two plain blocks are free: they are used before any cached one.
        assert!(m.grow(3, 8));
        assert_eq!(m.num_cached(), 2);
        // Then the least recently released cached block (a's) is evicted first.
        assert!(m.grow(3, 12));
        assert_eq!(m.num_cached(), 1);
        assert_eq!(m.take_cached(4, &a, 1), 0);
        assert_eq!(m.take_cached(5, &b, 1), 1);
        // b is held again: it cannot be evicted, so the pool is full.
        assert!(!m.grow(3, 16));
        assert_eq!(m.prefix_stats().evictions, 1);
    }

    #[test]
    fn without_the_cache_nothing_is_kept() {
        let mut m = manager(4);
        let a: Vec<u32> = (0..8).collect();
        assert!(m.grow(1, 8));
        m.cache_computed(1, &a, 2);
        m.release(1);
        assert_eq!(m.take_cached(2, &a, 2), 0);
        assert_eq!((m.num_cached(), m.num_free()), (0, 4));
    }
}
