//! The prefix cache's index over the KV pool: full blocks keyed by a chained hash of their
//! tokens (the key of a block covers every token before it, since its keys and values depend on
//! all of them), and the cached blocks no sequence holds, in the order they were last used, so
//! that the pool evicts the least recently used first. A block's tokens and its parent's key are
//! kept beside the key and compared on every hit, so a hash collision is a miss, never wrong KV.

use std::collections::{BTreeMap, HashMap};

/// Counters since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Prompt tokens looked up (the full blocks of every admitted prompt).
    pub queried_tokens: u64,
    /// Prompt tokens found cached.
    pub hit_tokens: u64,
    /// Cached blocks given to new data because the pool needed them.
    pub evictions: u64,
    /// Evicted blocks kept in the backend's host tier instead of forgotten.
    pub host_saves: u64,
    /// Prompt tokens copied back from the host tier instead of computed.
    pub host_hit_tokens: u64,
}

/// What identifies a cached block's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: u64,
    parent: u64,
    tokens: Box<[u32]>,
}

#[derive(Debug)]
pub(crate) struct PrefixIndex {
    by_key: HashMap<u64, u32>,
    entry: Vec<Option<Entry>>,
    /// Cached blocks with no reference, by the tick of their last release.
    idle: BTreeMap<u64, u32>,
    idle_tick: Vec<Option<u64>>,
    tick: u64,
    pub stats: PrefixStats,
}

/// What a cached block held: its parent's key and its tokens.
pub(crate) type Contents = (u64, Box<[u32]>);

/// The key of the chain's first block's parent.
pub(crate) const ROOT: u64 = 0x6b69_6c6e_5f6b_7631;

/// The key of a block holding `tokens` after the block keyed `parent` (FNV-1a over both).
pub(crate) fn chain_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for word in std::iter::once(parent).chain(tokens.iter().map(|&t| t as u64)) {
        for byte in word.to_le_bytes() {
            h ^= byte as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl PrefixIndex {
    pub fn new(num_blocks: usize) -> PrefixIndex {
        PrefixIndex {
            by_key: HashMap::new(),
            entry: vec![None; num_blocks],
            idle: BTreeMap::new(),
            idle_tick: vec![None; num_blocks],
            tick: 0,
            stats: PrefixStats::default(),
        }
    }

    /// The cached block holding `tokens` after `parent`, if there is one.
    pub fn find(&self, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        let key = chain_key(parent, tokens);
        let block = *self.by_key.get(&key)?;
        let e = self.entry[block as usize].as_ref()?;
        (e.parent == parent && *e.tokens == *tokens).then_some((block, key))
    }

    /// Records that `block` holds `tokens` after `parent`; returns the block's key. A block
    /// already cached under that key stays the cached one (this block is then not cached).
    pub fn insert(&mut self, block: u32, parent: u64, tokens: &[u32]) -> u64 {
        let key = chain_key(parent, tokens);
        if self.entry[block as usize].is_none() && !self.by_key.contains_key(&key) {
            self.by_key.insert(key, block);
            self.entry[block as usize] = Some(Entry {
                key,
                parent,
                tokens: tokens.into(),
            });
        }
        key
    }

    pub fn is_cached(&self, block: u32) -> bool {
        self.entry[block as usize].is_some()
    }

    /// Blocks holding cached contents, held or idle.
    pub fn num_cached(&self) -> usize {
        self.by_key.len()
    }

    pub fn num_idle(&self) -> usize {
        self.idle.len()
    }

    /// `block`'s last reference is gone: it stays cached, idle, until the pool needs it.
    pub fn park(&mut self, block: u32) {
        self.tick += 1;
        self.idle.insert(self.tick, block);
        self.idle_tick[block as usize] = Some(self.tick);
    }

    /// `block` is taken again (a hit): it is no longer idle.
    pub fn unpark(&mut self, block: u32) {
        if let Some(t) = self.idle_tick[block as usize].take() {
            self.idle.remove(&t);
        }
    }

    /// Takes the least recently used idle block for new data; returns it with what it held
    /// (its parent's key and its tokens), which the index forgets.
    pub fn evict(&mut self) -> Option<(u32, Option<Contents>)> {
        let (_, block) = self.idle.pop_first()?;
        self.stats.evictions += 1;
        Some((block, self.forget(block)))
    }

    /// Forgets what `block` held (it is no longer findable, nor idle).
    pub fn forget(&mut self, block: u32) -> Option<Contents> {
        self.unpark(block);
        let e = self.entry[block as usize].take()?;
        self.by_key.remove(&e.key);
        Some((e.parent, e.tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_chain_and_a_collision_is_a_miss() {
        let mut p = PrefixIndex::new(4);
        let k0 = p.insert(2, ROOT, &[1, 2]);
        assert_eq!(p.find(ROOT, &[1, 2]), Some((2, k0)));
        assert_eq!(p.find(ROOT, &[1, 3]), None);
        // The same tokens after another parent are another block.
        assert_eq!(p.find(k0, &[1, 2]), None);
        let k1 = p.insert(3, k0, &[1, 2]);
        assert_ne!(k0, k1);
        assert_eq!(p.find(k0, &[1, 2]), Some((3, k1)));
        // A second block with the same contents is not cached twice.
        p.insert(1, ROOT, &[1, 2]);
        assert!(!p.is_cached(1));
        assert_eq!(p.num_cached(), 2);
        // An entry whose stored tokens differ from the query (as after a hash collision) is
        // no hit.
        p.entry[2].as_mut().unwrap().tokens = Box::new([9, 9]);
        assert_eq!(p.find(ROOT, &[1, 2]), None);
    }

    #[test]
    fn idle_blocks_are_evicted_least_recently_used_first() {
        let mut p = PrefixIndex::new(4);
        for b in 0..3 {
            p.insert(b, ROOT + b as u64, &[b]);
        }
        p.park(0);
        p.park(1);
        p.park(2);
        p.unpark(0);
        p.park(0);
        let contents = |b: u32| Some((b, Some((ROOT + b as u64, vec![b].into_boxed_slice()))));
        assert_eq!(p.evict(), contents(1));
        assert_eq!(p.evict(), contents(2));
        assert!(!p.is_cached(1));
        assert_eq!(p.find(ROOT + 1, &[1]), None);
        assert_eq!(p.evict(), contents(0));
        assert_eq!(p.evict(), None);
        assert_eq!(p.stats.evictions, 3);
    }
}
