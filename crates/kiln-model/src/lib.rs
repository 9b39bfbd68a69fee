//! What a model is, independent of where it runs: the architecture table ([`arch`]), the
//! hyper-parameters as files give them ([`ModelConfig`]), what each layer computes
//! ([`spec`]), the fused weights backends hold ([`schema`]), the layer program every backend
//! runs ([`program`]; a draft model's step, [`program::run_draft_step`], bound to its target by
//! [`draft_spec`]), canonical tensor names ([`TensorId`]) and the sources that produce
//! weights by those names ([`WeightSource`]): GGUF files, Hugging Face folders and
//! deterministic dummy weights.

pub mod arch;
pub mod config;
mod config_gguf;
mod config_gguf_layers;
mod config_hf;
mod config_hf_layers;
pub mod draft_spec;
pub mod dummy;
pub mod dummy_quant;
pub mod gguf_source;
pub mod hf_source;
pub mod names;
pub mod permute;
pub mod presets;
pub mod program;
mod ring_layers;
pub mod rope;
pub mod schema;
pub mod source;
pub mod spec;

pub use arch::{Arch, ArchInfo, ARCHS};
pub use config::{
    AssistantConfig, LayerShape, LayerType, ModelConfig, OrderedEmbeddings, RopeParams,
    RopeScaling, RopeStyle,
};
pub use config_hf::HfLayout;
pub use dummy::{dummy_value, DummySource};
pub use gguf_source::GgufSource;
pub use hf_source::HfSource;
pub use names::{Role, TensorId};
pub use program::{run_step, StepOps};
pub use schema::{GlobalWeight, LayerWeight};
pub use source::{DummyFill, HostTensor, QuantTensor, WeightSource};
pub use spec::{
    Activation, AttnSpec, DraftSpec, FfnSpec, LayerSpec, ModelSpec, PerLayerInputSpec, RopeSpec,
};
