//! The one small trait between the engine and a compute backend (CPU, CUDA).

use crate::sampler::{SampleError, Sampled};

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

/// Most `top_logprobs` a backend is asked to compute on the device (the API's limit).
pub const MAX_DEVICE_TOP_LOGPROBS: usize = 20;

/// How one logits row is sampled: the host sampler's parameters without the penalties (which
/// need the sequence's history), and the row's random draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSampling {
    /// 0: greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// The row's uniform draw in [0, 1), `sampler::uniform(seed, index)`.
    pub uniform: f64,
    /// `Some(n)`: the chosen token's log-probability and the `n` most likely tokens'
    /// (`n <= MAX_DEVICE_TOP_LOGPROBS`).
    pub logprobs: Option<usize>,
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

    /// Runs the step like [`Backend::forward`] and samples each logits row with `rows` (one per
    /// row, in order), returning only the chosen tokens and their log-probabilities. The result
    /// must equal `sampler::sample` on the row's logits with the same parameters and draw, token
    /// for token. `None`: not supported, the engine calls `forward` and samples on the host.
    #[allow(clippy::type_complexity)]
    fn forward_sample(
        &mut self,
        chunks: &[ChunkInput<'_>],
        rows: &[RowSampling],
    ) -> Option<anyhow::Result<Vec<Result<Sampled, SampleError>>>> {
        let _ = (chunks, rows);
        None
    }
}
