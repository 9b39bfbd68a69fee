//! The paged KV cache: one pool of `num_blocks * block_size` slots per layer, allocated once.

use kiln_engine::KvGeometry;

pub(crate) struct LayerKv {
    /// `[slots, kv_dim]`.
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

pub(crate) struct PagedKvCache {
    pub geometry: KvGeometry,
    kv_dim: usize,
    pub layers: Vec<LayerKv>,
}

impl PagedKvCache {
    pub fn new(
        num_layers: usize,
        geometry: KvGeometry,
        kv_dim: usize,
    ) -> anyhow::Result<PagedKvCache> {
        let slots = geometry.num_blocks.checked_mul(geometry.block_size);
        let per_layer = slots.and_then(|s| s.checked_mul(kv_dim));
        let total_bytes = per_layer.and_then(|n| n.checked_mul(2 * 4 * num_layers));
        let (Some(per_layer), Some(_)) = (per_layer, total_bytes) else {
            anyhow::bail!(
                "a KV cache of {} blocks of {} tokens does not fit in memory",
                geometry.num_blocks,
                geometry.block_size
            );
        };
        let mut layers = Vec::with_capacity(num_layers);
        for _ in 0..num_layers {
            layers.push(LayerKv {
                k: zeroed(per_layer)?,
                v: zeroed(per_layer)?,
            });
        }
        Ok(PagedKvCache {
            geometry,
            kv_dim,
            layers,
        })
    }

    /// Stores each token's K and V rows (`kv_dim` elements at `row * stride + k_offset` and
    /// `+ v_offset` of `src`) in its slot.
    pub fn write(
        &mut self,
        layer: usize,
        slots: &[usize],
        src: &[f32],
        stride: usize,
        k_offset: usize,
        v_offset: usize,
    ) {
        let d = self.kv_dim;
        let cache = &mut self.layers[layer];
        for (t, &slot) in slots.iter().enumerate() {
            let row = &src[t * stride..][..stride];
            cache.k[slot * d..][..d].copy_from_slice(&row[k_offset..][..d]);
            cache.v[slot * d..][..d].copy_from_slice(&row[v_offset..][..d]);
        }
    }

    /// Fills every slot with NaN, so that reading a slot no step wrote shows in the logits.
    pub fn poison(&mut self) {
        for layer in &mut self.layers {
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
