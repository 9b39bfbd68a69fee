//! What one step of a backend takes and gives back: the chunks of a step and the paged KV
//! geometry they index ([`chunk`]), the [`Backend`] trait with what a step must return
//! ([`Want`], [`StepOutput`]), and the row sampler every backend's tokens must equal
//! ([`sampling`]). A leaf crate: backends and the engine both stand on it, and it knows nothing
//! of models, tokenizers or requests.

pub mod adjust;
mod backend;
pub mod chunk;
pub mod par;
pub mod pipeline;
pub mod ring;
pub mod sampling;
pub mod sampling_weights;

pub use adjust::{adjust_row, Penalty, RowAdjust, StepAdjust, TokenSet};
pub use backend::{Backend, BlockCopy, DraftRow, StepOutput, Want};
pub use chunk::{ChunkInput, KvGeometry, StepCapacity, StepLimits};
pub use pipeline::{DeviceTiming, Feed, Launched, OwnedWant, RunAtLaunch};
pub use ring::{kv_ring_from_env, KvRing};
pub use sampling::{
    sample_row, sample_rows, RowSampling, SampleError, Sampled, MAX_DEVICE_TOP_LOGPROBS,
};
