//! What a model is, independent of where it runs: the architecture table ([`Arch`]), the
//! hyper-parameters ([`ModelConfig`]), canonical tensor names ([`TensorId`]) and the sources
//! that produce weights by those names ([`WeightSource`]): GGUF files, Hugging Face folders and
//! deterministic dummy weights.

pub mod config;
pub mod names;
pub mod source;

pub use config::{Arch, ModelConfig, RopeScaling, RopeStyle};
pub use names::{Role, TensorId};
pub use source::{HostTensor, WeightSource};
