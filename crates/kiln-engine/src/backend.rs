//! The one small trait between the engine and a compute backend (CPU, CUDA).

/// Shape of the paged KV cache a backend allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeometry {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool; block ids are `0..num_blocks`.
    pub num_blocks: usize,
}

/// The most one step may hold, for a backend whose step buffers have a fixed size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCapacity {
    /// Chunks (sequences) in one step.
    pub max_seqs: usize,
    /// Tokens over all chunks of one step.
    pub max_tokens: usize,
}

/// One sequence's share of a step: a prefill chunk or a single decode token.
#[derive(Debug, Clone)]
pub struct ChunkInput<'a> {
    /// The tokens to run, at positions `start_pos..start_pos + tokens.len()`.
    pub tokens: &'a [u32],
    pub start_pos: usize,
    /// The sequence's KV blocks, covering at least `start_pos + tokens.len()` positions.
    /// Position p lives in slot `block_table[p / block_size] * block_size + p % block_size`.
    pub block_table: &'a [u32],
    /// Whether the engine needs logits for this chunk's last token.
    pub want_logits: bool,
}

/// A compute backend. It owns the weights and the KV pool and runs forward passes; it knows
/// nothing of requests, scheduling or HTTP.
pub trait Backend: Send {
    fn kv_geometry(&self) -> KvGeometry;

    /// The largest step the backend accepts; `None`: no fixed limit. The engine never schedules
    /// a larger step, whatever its own configuration asks for.
    fn step_capacity(&self) -> Option<StepCapacity> {
        None
    }

    /// Runs all chunks as one step. Returns one row of `vocab_size` logits for each chunk with
    /// `want_logits`, in chunk order, concatenated.
    ///
    /// A chunk's logits must not depend on the other chunks in the step (batch invariance).
    fn forward(&mut self, chunks: &[ChunkInput<'_>]) -> anyhow::Result<Vec<f32>>;

    /// Runs the step like [`Backend::forward`] but returns only the argmax of each logits row
    /// (the lowest id among equal maxima; NaN is never chosen), so that the logits need not
    /// leave the device. The engine calls it for steps in which every sequence decodes greedily
    /// without penalties or log-probabilities. `None`: not supported, the engine calls `forward`.
    fn forward_argmax(&mut self, chunks: &[ChunkInput<'_>]) -> Option<anyhow::Result<Vec<u32>>> {
        let _ = chunks;
        None
    }
}
