//! The paged KV cache: one pool of `num_blocks * block_size` slots per layer, each slot as
//! wide as that layer's K (or V) rows, allocated once.

use kiln_step::KvGeometry;

pub(crate) struct LayerKv {
    /// `[slots, kv_dim]`.
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    kv_dim: usize,
}

/// One value per token at `offset` of each `stride`-element row of `data`.
#[derive(Clone, Copy)]
pub(crate) struct TokenRows<'a> {
    pub data: &'a [f32],
    pub stride: usize,
    pub offset: usize,
}

impl TokenRows<'_> {
    fn row(&self, t: usize, len: usize) -> &[f32] {
        &self.data[t * self.stride + self.offset..][..len]
    }
}

pub(crate) struct PagedKvCache {
    pub geometry: KvGeometry,
    layers: Vec<LayerKv>,
    /// The host tier: `host_blocks` block copies per layer, laid out like the pool.
    host: Vec<LayerKv>,
    pub host_blocks: usize,
}

impl PagedKvCache {
    /// A pool for layers whose K and V rows are `kv_dims` wide, one entry per layer, and a host
    /// tier of `host_blocks` block copies.
    pub fn new(
        kv_dims: &[usize],
        geometry: KvGeometry,
        host_blocks: usize,
    ) -> anyhow::Result<PagedKvCache> {
        let too_big = || {
            anyhow::anyhow!(
                "a KV cache of {} blocks of {} tokens does not fit in memory",
                geometry.num_blocks,
                geometry.block_size
            )
        };
        let slots = geometry
            .num_blocks
            .checked_mul(geometry.block_size)
            .ok_or_else(too_big)?;
        let total: Option<usize> = kv_dims
            .iter()
            .try_fold(0usize, |acc, d| acc.checked_add(slots.checked_mul(*d)?));
        total
            .and_then(|n| n.checked_mul(2 * 4))
            .ok_or_else(too_big)?;
        let host_slots = host_blocks
            .checked_mul(geometry.block_size)
            .ok_or_else(too_big)?;
        let alloc = |slots: usize| -> anyhow::Result<Vec<LayerKv>> {
            kv_dims
                .iter()
                .map(|&kv_dim| {
                    let n = slots.checked_mul(kv_dim).ok_or_else(too_big)?;
                    Ok(LayerKv {
                        k: zeroed(n)?,
                        v: zeroed(n)?,
                        kv_dim,
                    })
                })
                .collect()
        };
        Ok(PagedKvCache {
            geometry,
            layers: alloc(slots)?,
            host: alloc(host_slots)?,
            host_blocks,
        })
    }

    /// The same pool with the layers `ring` marks holding only blocks `0..capable`
    /// (kiln_step::KvRing), and no host tier.
    pub fn with_ring(
        kv_dims: &[usize],
        ring: &[bool],
        geometry: KvGeometry,
        capable: usize,
    ) -> anyhow::Result<PagedKvCache> {
        anyhow::ensure!(
            capable <= geometry.num_blocks,
            "a KV ring of {capable} blocks does not fit a pool of {}",
            geometry.num_blocks
        );
        let layers = kv_dims
            .iter()
            .zip(ring)
            .map(|(&kv_dim, &ring)| {
                let blocks = if ring { capable } else { geometry.num_blocks };
                let n = blocks * geometry.block_size * kv_dim;
                Ok(LayerKv {
                    k: zeroed(n)?,
                    v: zeroed(n)?,
                    kv_dim,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(PagedKvCache {
            geometry,
            layers,
            host: Vec::new(),
            host_blocks: 0,
        })
    }

    /// Copies one block of every layer to a host slot or back.
    pub fn copy_block(&mut self, copy: kiln_step::BlockCopy) -> anyhow::Result<()> {
        use kiln_step::BlockCopy;
        let (block, slot, to_host) = match copy {
            BlockCopy::ToHost { block, slot } => (block as usize, slot, true),
            BlockCopy::ToDevice { slot, block } => (block as usize, slot, false),
        };
        anyhow::ensure!(
            block < self.geometry.num_blocks && slot < self.host_blocks,
            "block copy {copy:?} is outside the pool of {} blocks or the {} host slots",
            self.geometry.num_blocks,
            self.host_blocks
        );
        let bs = self.geometry.block_size;
        for (pool, host) in self.layers.iter_mut().zip(&mut self.host) {
            let n = bs * pool.kv_dim;
            let (p, h) = (block * n..(block + 1) * n, slot * n..(slot + 1) * n);
            for (pool, host) in [(&mut pool.k, &mut host.k), (&mut pool.v, &mut host.v)] {
                if to_host {
                    host[h.clone()].copy_from_slice(&pool[p.clone()]);
                } else {
                    pool[p.clone()].copy_from_slice(&host[h.clone()]);
                }
            }
        }
        Ok(())
    }

    pub fn layer(&self, layer: usize) -> &LayerKv {
        &self.layers[layer]
    }

    /// Stores each token's K and V rows (`kv_dim` elements of row `t` of `k` and of `v`) in
    /// its slot.
    pub fn write(&mut self, layer: usize, slots: &[usize], k: TokenRows<'_>, v: TokenRows<'_>) {
        let cache = &mut self.layers[layer];
        let d = cache.kv_dim;
        for (t, &slot) in slots.iter().enumerate() {
            cache.k[slot * d..][..d].copy_from_slice(k.row(t, d));
            cache.v[slot * d..][..d].copy_from_slice(v.row(t, d));
        }
    }

    /// Fills every slot with NaN, so that reading a slot no step wrote shows in the logits.
    pub fn poison(&mut self) {
        for layer in self.layers.iter_mut().chain(&mut self.host) {
            layer.k.fill(f32::NAN);
            layer.v.fill(f32::NAN);
        }
    }
}

/// A zeroed buffer, or an error (not an abort) when the memory is not there. Pages are zeroed
/// lazily by the OS, so an unused part of the pool costs nothing.
fn zeroed(n: usize) -> anyhow::Result<Vec<f32>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f32>(n)?;
    // SAFETY: the layout has a non-zero size; a non-null result is a zeroed allocation of
    // exactly `n` f32 values from the global allocator, the layout `Vec<f32>` frees with.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut f32;
        anyhow::ensure!(
            !ptr.is_null(),
            "cannot allocate a KV cache of {} MiB",
            (n * 4) >> 20
        );
        Ok(Vec::from_raw_parts(ptr, n, n))
    }
}
