//! The paged KV cache: one allocation for K and one for V, sized once from a budget and never
//! grown. Layout per layer: [block][kv_head][block_size][head_dim] in the storage type (each
//! layer with its own head shape), so a block of one head is contiguous and a token's slot is
//! `block * block_size + offset`. Only layers that own KV take room: a layer that reads another
//! layer's KV (`AttnSpec::kv_from`) is given that layer's view.

use anyhow::{bail, Result};
use kiln_model::ModelSpec;

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
            at += num_blocks * block_elems;
        }
        let k = gpu.alloc_store(at)?;
        let v = gpu.alloc_store(at)?;
        Ok(KvCache {
            k,
            v,
            layers,
            num_blocks,
            block_size,
        })
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
