//! Weight sources: anything that can hand out a model's tensors by canonical name.

use kiln_formats::DType;

use crate::{ModelConfig, TensorId};

/// A dense f32 tensor on the host, row-major, outermost dimension first.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// A tensor in its file's block quantisation (GGML Q8_0, Q4_0, Q4_K, Q6_K...): `shape[0]` rows
/// of whole blocks, rows in the canonical order (as [`WeightSource::load_f32`] gives them).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantTensor {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub data: Vec<u8>,
}

/// How a dummy source fills a tensor, so that a device backend can generate the identical
/// values in place instead of copying them from the host (see [`crate::dummy::dummy_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DummyFill {
    /// Element `i` is `dummy_value(seed, i)`.
    Random { seed: u64 },
    /// Every element is 1.0 (norm weights).
    Ones,
}

/// Where a backend gets its weights. Tensors come one at a time so that a backend can convert
/// and upload each without holding the whole model in f32 on the host.
///
/// Every source returns tensors in the canonical layout: Hugging Face orientation
/// (`[out_features, in_features]`), Q/K rows in the order [`ModelConfig::rope_style`] expects.
pub trait WeightSource: Send + Sync {
    fn config(&self) -> &ModelConfig;
    /// Whether the model has this tensor (biases, norms and the LM head are optional).
    fn has(&self, id: TensorId) -> bool;
    /// The tensor, dequantised to f32.
    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor>;
    /// The tensor in its stored block quantisation, for backends that compute from the blocks;
    /// `None` when it is not block-quantised (or the source only gives f32). Dequantising it
    /// gives exactly the values of `load_f32`.
    fn load_quantized(&self, _id: TensorId) -> anyhow::Result<Option<QuantTensor>> {
        Ok(None)
    }
    /// The format `load_quantized` would give this tensor in, without loading it (for sizing
    /// device memory before a load). A source that overrides `load_quantized` says it here too.
    fn quantized_dtype(&self, _id: TensorId) -> Option<DType> {
        None
    }
    /// For generated weights: how to produce this tensor without loading it. None for weights
    /// that come from a file.
    fn dummy_fill(&self, _id: TensorId) -> Option<DummyFill> {
        None
    }
}
