//! Readers for the model files people have: GGUF (v2/v3) and Hugging Face folders
//! (config.json, safetensors, sharded indexes). Everything here is parsing and bounds
//! checking; the only arithmetic is dequantisation of GGUF block formats and the fp8 rows
//! `--quantize fp8` keeps (fp8.rs).

pub mod dequant;
pub mod dtype;
pub mod error;
mod file_bytes;
pub mod fp8;
pub mod gguf;
pub mod safetensors;

pub use dequant::{dequantize_into, to_f32};
pub use dtype::DType;
pub use error::{FormatError, Result};
pub use gguf::{GgufFile, GgufValue, TensorInfo};
pub use safetensors::SafetensorsModel;

/// A borrowed, zero-copy view of one tensor's bytes inside a mapped file.
///
/// `shape` is row-major, outermost dimension first (a `[rows, cols]` weight has `cols`
/// contiguous elements per row) for both GGUF and safetensors; GGUF's innermost-first
/// `ne[]` order is reversed when the file is read.
#[derive(Debug, Clone)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

impl TensorView<'_> {
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }
}
