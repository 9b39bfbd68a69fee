//! Which layers' KV caches a ring of blocks can hold (kiln_step::KvRing): a layer that owns
//! its KV and attends within a window, when every layer reading that KV attends within a
//! window no wider. Such a layer never reads a key more than its window behind the query, so
//! its cache needs only the latest window of each sequence.

use crate::spec::ModelSpec;

impl ModelSpec {
    /// Per layer: whether its own KV cache can be a ring.
    pub fn ring_caches(&self) -> Vec<bool> {
        let mut ring: Vec<bool> = self
            .layers
            .iter()
            .map(|l| l.attn.writes_kv() && l.attn.window.is_some())
            .collect();
        for (i, l) in self.layers.iter().enumerate() {
            let src = l.attn.kv_layer(i);
            let own = self.layers[src].attn.window;
            // A reader with no window, or a wider one, needs keys the ring no longer has.
            if matches!((l.attn.window, own), (None, _) | (Some(_), None)) || l.attn.window > own {
                ring[src] = false;
            }
        }
        ring
    }

    /// Per layer: whether its attention reads a ring cache (its own or its `kv_from`'s).
    pub fn reads_ring(&self) -> Vec<bool> {
        let ring = self.ring_caches();
        (0..self.layers.len())
            .map(|i| ring[self.layers[i].attn.kv_layer(i)])
            .collect()
    }

    /// The widest window among ring caches; None when no layer's cache can be a ring.
    pub fn ring_window(&self) -> Option<usize> {
        self.layers
            .iter()
            .zip(self.ring_caches())
            .filter(|(_, r)| *r)
            .filter_map(|(l, _)| l.attn.window)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use crate::presets::preset;

    #[test]
    fn sliding_layers_ring_and_full_ones_do_not() {
        // gemma4-tiny: s s f s s f, the last two reading layers 3 and 2's KV.
        let spec = preset("gemma4-tiny").unwrap().spec();
        assert_eq!(spec.ring_caches(), [true, true, false, true, false, false]);
        assert_eq!(spec.reads_ring(), [true, true, false, true, true, false]);
        assert_eq!(spec.ring_window(), Some(64));
        // Every Mistral layer slides; no Llama layer does.
        let mistral = preset("mistral-7b").unwrap().spec();
        assert!(mistral.ring_caches().iter().all(|&r| r));
        assert_eq!(mistral.ring_window(), Some(4096));
        assert_eq!(preset("llama3-8b").unwrap().spec().ring_window(), None);
    }

    #[test]
    fn a_reader_without_a_window_keeps_its_source_whole() {
        let mut spec = preset("gemma4-tiny").unwrap().spec();
        // Layer 4 reads layer 3's KV; without a window of its own it needs all of it.
        spec.layers[4].attn.window = None;
        assert!(!spec.ring_caches()[3]);
        spec.layers[4].attn.window = Some(65);
        assert!(!spec.ring_caches()[3]);
        spec.layers[4].attn.window = Some(32);
        assert!(spec.ring_caches()[3]);
    }
}
