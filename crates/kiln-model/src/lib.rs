//! What a model is, independent of where it runs: the architecture table ([`Arch`]), the
//! hyper-parameters ([`ModelConfig`]), canonical tensor names ([`TensorId`]) and the sources
//! that produce weights by those names ([`WeightSource`]): GGUF files, Hugging Face folders and
//! deterministic dummy weights.

pub mod config;
mod config_gguf;
mod config_hf;
pub mod dummy;
pub mod gguf_source;
pub mod hf_source;
pub mod load;
pub mod names;
pub mod permute;
pub mod presets;
pub mod rope;
pub mod source;

pub use config::{Arch, ModelConfig, RopeScaling, RopeStyle};
pub use dummy::{dummy_value, DummySource};
pub use gguf_source::GgufSource;
pub use hf_source::HfSource;
pub use load::{load, LoadedModel, ModelDescription};
pub use names::{Role, TensorId};
pub use source::{DummyFill, HostTensor, QuantTensor, WeightSource};
