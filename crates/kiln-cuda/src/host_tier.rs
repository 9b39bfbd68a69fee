//! The host tier of the prefix cache: pinned host memory holding copies of KV blocks the pool
//! gave up, so that a later prompt can copy them back instead of computing them again. A slot
//! holds one block of every layer, K then V per layer; copies are queued on the step stream, so
//! they land before the next step's kernels read or overwrite the blocks.

use anyhow::{ensure, Result};
use kiln_step::BlockCopy;

use crate::device::{Gpu, PinnedBuf};
use crate::kv_cache::KvCache;

pub struct HostTier {
    /// Raw bytes of the storage type.
    buf: PinnedBuf<u8>,
    pub slots: usize,
    slot_bytes: usize,
}

impl HostTier {
    /// As many slots as `bytes` holds for this pool's blocks (none when it holds none).
    pub fn new(gpu: &Gpu, kv: &KvCache, bytes: usize) -> Result<Option<HostTier>> {
        let slot_bytes = kv.block_span_bytes();
        let slots = bytes / slot_bytes.max(1);
        if slots == 0 {
            return Ok(None);
        }
        let buf = PinnedBuf::new(gpu, slots * slot_bytes)?;
        Ok(Some(HostTier {
            buf,
            slots,
            slot_bytes,
        }))
    }

    pub fn bytes(&self) -> usize {
        self.slots * self.slot_bytes
    }

    /// Queues `copies` in order on the stream.
    pub fn copy(&mut self, gpu: &Gpu, kv: &KvCache, copies: &[BlockCopy]) -> Result<()> {
        for &c in copies {
            let (block, slot) = match c {
                BlockCopy::ToHost { block, slot } | BlockCopy::ToDevice { slot, block } => {
                    (block, slot)
                }
            };
            ensure!(
                (block as usize) < kv.num_blocks && slot < self.slots,
                "block copy {c:?} is outside the pool of {} blocks or the {} host slots",
                kv.num_blocks,
                self.slots
            );
            let mut at = slot * self.slot_bytes;
            for (k, v, n) in kv.block_spans(block) {
                for (dev, off) in [(k, at), (v, at + n)] {
                    match c {
                        BlockCopy::ToHost { .. } => {
                            self.buf.copy_range_from_device(gpu, dev, off, n)?
                        }
                        BlockCopy::ToDevice { .. } => {
                            self.buf.copy_range_to_device(gpu, off, dev, n)?
                        }
                    }
                }
                at += 2 * n;
            }
        }
        Ok(())
    }
}
