//! The engine: decides which tokens each step runs (scheduler), owns the KV blocks (block
//! manager), picks the next tokens (sampler), and drives a [`Backend`] that does the math.
//! The backend interface itself lives in `kiln_step`; it is re-exported here for the engine's
//! users.

mod active;
mod batch_sampler;
pub mod block_manager;
pub mod draft;
mod engine;
mod grammar_space;
pub mod handle;
pub mod model_drafter;
mod output;
mod output_stage;
pub mod prefix_cache;
pub mod request;
pub mod sampler;
pub mod scheduler;
pub mod sequence;
mod shared;
mod speculate;
mod step_adjust;
mod step_run;
pub mod step_timing;
pub mod stop;

pub use draft::{BackendDrafter, DraftConfig, Drafter, NgramDrafter};
pub use handle::{
    start, start_with_drafter, EngineConfig, EngineHandle, EngineStats, RequestStream, SubmitError,
};
pub use kiln_grammar::{CompileError, Constraint, Grammar};
pub use kiln_step::{
    Backend, ChunkInput, DeviceTiming, DraftRow, Feed, KvGeometry, Launched, RowSampling,
    RunAtLaunch, StepCapacity, StepOutput, Want, MAX_DEVICE_TOP_LOGPROBS,
};
pub use model_drafter::ModelDrafter;
pub use request::{
    DraftCounts, Finish, FinishReason, GenEvent, GenerateRequest, SamplingParams, TokenEvent,
};
pub use step_timing::{Phase, PhaseTiming, StepTimingSnapshot};
