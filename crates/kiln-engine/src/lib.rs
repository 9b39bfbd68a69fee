//! The engine: decides which tokens each step runs (scheduler), owns the KV blocks (block
//! manager), picks the next tokens (sampler), and drives a [`Backend`] that does the math.

pub mod backend;
mod batch_sampler;
pub mod block_manager;
mod engine;
pub mod handle;
pub mod request;
pub mod sampler;
pub mod sampling_weights;
pub mod scheduler;
pub mod sequence;
pub mod stop;

pub use backend::{
    Backend, ChunkInput, KvGeometry, RowSampling, StepCapacity, MAX_DEVICE_TOP_LOGPROBS,
};
pub use handle::{start, EngineConfig, EngineHandle, EngineStats, RequestStream, SubmitError};
pub use request::{Finish, FinishReason, GenEvent, GenerateRequest, SamplingParams, TokenEvent};
