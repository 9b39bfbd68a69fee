//! Where a layer's attention reads its blocks and writes its K and V when the backend keeps a
//! KV ring (kiln_step::KvRing; a child module of forward.rs): a ring cache is written at the
//! step's ring slots and read through its ring tables (step_plan.rs), so every attention
//! kernel finds position p in block `table[(p / block_size) % blocks]` unchanged.

use super::StepContext;
use crate::kernels::AttnInputs;

impl StepContext<'_> {
    /// Layer `layer`'s attention inputs: the ring tables for a layer reading a ring cache.
    pub(super) fn attn_inputs(&self, layer: usize) -> AttnInputs {
        let l = self.layout;
        let ring = self.ring_cache(self.spec.layers[layer].attn.kv_layer(layer));
        AttnInputs {
            positions: self.step_ptr(l.positions),
            token_seq: self.step_ptr(l.token_seq),
            bt_start: self.step_ptr(if ring { l.ring_bt_start } else { l.bt_start }),
            block_tables: self.step_ptr(l.block_tables),
            old_keys_ready: self.draft.is_none(),
        }
    }

    /// Where layer `layer` writes its tokens' K and V: the ring slots for a ring cache.
    pub(super) fn kv_slots(&self, layer: usize) -> u64 {
        let l = self.layout;
        self.step_ptr(if self.ring_cache(layer) {
            l.ring_slots
        } else {
            l.slots
        })
    }

    /// Whether layer `layer`'s own cache is a ring. A draft model's layers read their target's
    /// cache whole: the backend keeps no ring beside a draft model.
    fn ring_cache(&self, layer: usize) -> bool {
        self.draft.is_none() && self.kv.ring_cache(layer)
    }
}
