//! The paged KV cache: one allocation for K and one for V, sized once from a budget and never
//! grown. Layout per layer: [block][kv_head][block_size][head_dim] in the storage type (each
//! layer with its own head shape), so a block of one head is contiguous and a token's slot is
//! `block * block_size + offset`. Only layers that own KV take room: a layer that reads another
//! layer's KV (`AttnSpec::kv_from`) is given that layer's view. With a KV ring
//! (kiln_step::KvRing) the ring layers (`ModelSpec::ring_caches`) hold only the ring-capable
//! blocks and a scratch block after them.

use anyhow::{bail, Result};
use kiln_model::ModelSpec;
use kiln_step::KvRing;

use crate::device::Gpu;
use crate::kernels::KvView;
use crate::store::{StoreBuf, StoreType};

pub struct KvCache {
    k: StoreBuf,
    v: StoreBuf,
    /// Per layer: its first element in `k` and `v`, its KV head count, and the elements one
    /// block of it holds (of K, and again of V).
    layers: Vec<(usize, usize, usize)>,
    pub num_blocks: usize,
    pub block_size: usize,
    /// Per layer: whether its own cache is a ring (all false without a ring).
    ring_caches: Vec<bool>,
}

/// The ring layers' part of a pool: which layers' caches are rings, and the blocks each holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingPool {
    pub caches: Vec<bool>,
    pub blocks: usize,
}

impl KvCache {
    /// Bytes one block takes across all layers, K and V, stored as `store`.
    pub fn block_bytes(spec: &ModelSpec, block_size: usize, store: StoreType) -> usize {
        let elems: usize = spec
            .layers
            .iter()
            .map(|l| l.attn.cache_kv_dim() * block_size)
            .sum();
        2 * elems * store.bytes()
    }

    /// Bytes one block takes across the layers whose caches `ring` marks, and across the others.
    pub fn ring_block_bytes(
        spec: &ModelSpec,
        block_size: usize,
        store: StoreType,
        ring: &[bool],
    ) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for (l, &r) in spec.layers.iter().zip(ring) {
            let bytes = 2 * l.attn.cache_kv_dim() * block_size * store.bytes();
            match r {
                true => on += bytes,
                false => off += bytes,
            }
        }
        (on, off)
    }

    /// A pool in the device's storage type.
    pub fn new(
        gpu: &Gpu,
        spec: &ModelSpec,
        block_size: usize,
        budget_bytes: usize,
    ) -> Result<KvCache> {
        let per_block = Self::block_bytes(spec, block_size, gpu.store);
        let num_blocks = budget_bytes / per_block.max(1);
        if num_blocks == 0 {
            bail!("KV cache budget of {budget_bytes} bytes holds no block of {block_size} tokens ({per_block} bytes each)");
        }
        Self::with_blocks(gpu, spec, block_size, num_blocks, None)
    }

    /// A pool of `num_blocks` blocks, the ring layers' of `ring.blocks` when `ring` is given.
    pub fn with_blocks(
        gpu: &Gpu,
        spec: &ModelSpec,
        block_size: usize,
        num_blocks: usize,
        ring: Option<&RingPool>,
    ) -> Result<KvCache> {
        let no_ring = vec![false; spec.layers.len()];
        let ring_caches = ring.map_or(no_ring, |r| r.caches.clone());
        let mut layers = Vec::with_capacity(spec.layers.len());
        let mut at = 0;
        for (i, l) in spec.layers.iter().enumerate() {
            if let Some(src) = l.attn.kv_from {
                // ModelConfig::validate checked it: an earlier layer of the same shape.
                debug_assert!(src < i && spec.layers[src].attn.kv_dim() == l.attn.kv_dim());
                let (src_at, n_kv, _) = layers[src];
                layers.push((src_at, n_kv, 0));
                continue;
            }
            let block_elems = block_size * l.attn.kv_dim();
            layers.push((at, l.attn.num_kv_heads, block_elems));
            let blocks = match ring {
                Some(r) if ring_caches[i] => r.blocks,
                _ => num_blocks,
            };
            at += blocks * block_elems;
        }
        let k = gpu.alloc_store(at)?;
        let v = gpu.alloc_store(at)?;
        Ok(KvCache {
            k,
            v,
            layers,
            num_blocks,
            block_size,
            ring_caches,
        })
    }

    /// Whether layer `layer`'s own cache is a ring (its KV is written at the ring slots).
    pub fn ring_cache(&self, layer: usize) -> bool {
        self.ring_caches[layer]
    }

    /// The cache layer `layer`'s attention reads: its own, or the one its `kv_from` names.
    pub fn view(&self, layer: usize) -> KvView {
        let (at, n_kv, _) = self.layers[layer];
        KvView {
            k: self.k.at(at),
            v: self.v.at(at),
            n_kv,
            block_size: self.block_size,
        }
    }

    /// Where `block` of every layer lives: per layer the K address, the V address and the
    /// bytes of each.
    pub fn block_spans(&self, block: u32) -> impl Iterator<Item = (u64, u64, usize)> + '_ {
        let size = self.k.store().bytes();
        self.layers
            .iter()
            .filter(|&&(_, _, n)| n > 0)
            .map(move |&(at, _, n)| {
                let first = at + block as usize * n;
                (self.k.at(first), self.v.at(first), n * size)
            })
    }

    /// Bytes one block takes over every layer, K and V.
    pub fn block_span_bytes(&self) -> usize {
        let size = self.k.store().bytes();
        self.layers.iter().map(|&(_, _, n)| 2 * n * size).sum()
    }

    pub fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }
}

/// What a backend asks of a ring: the ring layers' widest window, the blocks a sequence cycles
/// through, how many sequences may hold one at once, and the most blocks worth having at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingAsk {
    pub window: usize,
    pub blocks: usize,
    pub max_seqs: usize,
    pub max_blocks: usize,
}

impl RingAsk {
    /// The ring a backend keeps when `on` and the model has ring layers: each sequence's ring
    /// holds the window and a step of `max_tokens` (`KvRing::blocks_for`).
    pub fn for_model(
        spec: &ModelSpec,
        on: bool,
        block_size: usize,
        max_tokens: usize,
        max_seqs: usize,
        max_context: usize,
    ) -> Option<RingAsk> {
        let window = spec.ring_window().filter(|_| on)?;
        Some(RingAsk {
            window,
            blocks: KvRing::blocks_for(window, max_tokens, block_size),
            max_seqs,
            max_blocks: max_seqs * max_context.div_ceil(block_size),
        })
    }
}

impl KvCache {
    /// The engine's blocks and the ring for `budget` bytes: the ring layers take a ring for each
    /// of `max_seqs` sequences when the budget holds that many blocks of every layer, and the
    /// other layers the rest; a smaller budget gives as many rings as its blocks hold. None
    /// when it holds no ring.
    pub fn ring_sizing(
        spec: &ModelSpec,
        block_size: usize,
        store: StoreType,
        budget: usize,
        ask: RingAsk,
    ) -> Option<(usize, KvRing)> {
        let caches = spec.ring_caches();
        let (on, off) = Self::ring_block_bytes(spec, block_size, store, &caches);
        let all = ask.max_seqs * ask.blocks;
        let plain = budget / (on + off).max(1);
        let (blocks, capable) = if plain >= all {
            let rest = (budget - all * on) / off.max(1);
            (rest.min(ask.max_blocks.max(all)), all)
        } else {
            (plain, plain / ask.blocks.max(1) * ask.blocks)
        };
        let ring = KvRing {
            blocks: ask.blocks,
            capable,
            window: ask.window,
        };
        (capable > 0).then_some((blocks, ring))
    }

    /// A pool for `budget` bytes with a ring ([`KvCache::ring_sizing`]), plus a scratch block
    /// past the engine's blocks and one past the ring's.
    pub fn with_ring(
        gpu: &Gpu,
        spec: &ModelSpec,
        block_size: usize,
        budget: usize,
        ask: RingAsk,
    ) -> Result<(KvCache, KvRing)> {
        let Some((blocks, ring)) = Self::ring_sizing(spec, block_size, gpu.store, budget, ask)
        else {
            bail!(
                "KV cache budget of {budget} bytes holds no ring of {} blocks of {block_size} tokens",
                ask.blocks
            );
        };
        let pool = RingPool {
            caches: spec.ring_caches(),
            blocks: ring.capable + 1,
        };
        let kv = Self::with_blocks(gpu, spec, block_size, blocks + 1, Some(&pool))?;
        Ok((kv, ring))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_leaves_the_budget_to_the_full_layers() {
        // gemma4-tiny: layers 0, 1 and 3 slide and own their KV; layer 2 is full.
        let spec = kiln_model::presets::preset("gemma4-tiny").unwrap().spec();
        let caches = spec.ring_caches();
        let (on, off) = KvCache::ring_block_bytes(&spec, 16, StoreType::Bf16, &caches);
        assert_eq!(on + off, KvCache::block_bytes(&spec, 16, StoreType::Bf16));
        let ask = RingAsk {
            window: 64,
            blocks: 7,
            max_seqs: 4,
            max_blocks: 1000,
        };
        // Room for 28 ring blocks and 100 full ones.
        let budget = 28 * on + 100 * off;
        let (blocks, ring) = KvCache::ring_sizing(&spec, 16, StoreType::Bf16, budget, ask).unwrap();
        assert_eq!((blocks, ring.capable, ring.blocks), (100, 28, 7));
        // Never more blocks than worth having.
        let capped = RingAsk {
            max_blocks: 60,
            ..ask
        };
        let (blocks, _) = KvCache::ring_sizing(&spec, 16, StoreType::Bf16, budget, capped).unwrap();
        assert_eq!(blocks, 60);
        // A budget of 20 whole blocks: two rings, every block in both.
        let small = 20 * (on + off) + 1;
        let (blocks, ring) = KvCache::ring_sizing(&spec, 16, StoreType::Bf16, small, ask).unwrap();
        assert_eq!((blocks, ring.capable), (20, 14));
        // Less than a ring: none.
        let tiny = 6 * (on + off);
        assert!(KvCache::ring_sizing(&spec, 16, StoreType::Bf16, tiny, ask).is_none());
    }
}
