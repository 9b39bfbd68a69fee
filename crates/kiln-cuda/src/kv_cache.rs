//! The paged KV cache: one allocation for K and one for V, sized once from a budget and never
//! grown. Layout per layer: [block][kv_head][block_size][head_dim] bf16, so a block of one head
//! is contiguous and a token's slot is `block * block_size + offset`.

use anyhow::{bail, Result};
use kiln_model::ModelConfig;

use crate::device::{DevBuf, Gpu};
use crate::kernels::KvView;

pub struct KvCache {
    k: DevBuf<u16>,
    v: DevBuf<u16>,
    layer_elems: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    n_kv: usize,
}

impl KvCache {
    /// Bytes one block takes across all layers, K and V.
    pub fn block_bytes(c: &ModelConfig, block_size: usize) -> usize {
        c.num_layers * 2 * c.num_kv_heads * block_size * c.head_dim * 2
    }

    pub fn new(
        gpu: &Gpu,
        c: &ModelConfig,
        block_size: usize,
        budget_bytes: usize,
    ) -> Result<KvCache> {
        let per_block = Self::block_bytes(c, block_size);
        let num_blocks = budget_bytes / per_block;
        if num_blocks == 0 {
            bail!("KV cache budget of {budget_bytes} bytes holds no block of {block_size} tokens ({per_block} bytes each)");
        }
        let layer_elems = num_blocks * c.num_kv_heads * block_size * c.head_dim;
        let k = gpu.alloc(layer_elems * c.num_layers)?;
        let v = gpu.alloc(layer_elems * c.num_layers)?;
        Ok(KvCache {
            k,
            v,
            layer_elems,
            num_blocks,
            block_size,
            n_kv: c.num_kv_heads,
        })
    }

    pub fn view(&self, layer: usize) -> KvView {
        KvView {
            k: self.k.at(layer * self.layer_elems),
            v: self.v.at(layer * self.layer_elems),
            n_kv: self.n_kv,
            block_size: self.block_size,
        }
    }

    pub fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }
}
