//! Tensor bytes to f32 for the plain float types.
//!
//! Block-quantised GGUF types are decoded by `kiln_formats::dequant`; this covers the float
//! types every source needs until that path is wired in.

use anyhow::bail;
use half::{bf16, f16};
use kiln_formats::{DType, TensorView};
use rayon::prelude::*;

/// Decodes a tensor of F32, F16 or BF16 values (little-endian) into f32.
pub fn to_f32(view: &TensorView<'_>) -> anyhow::Result<Vec<f32>> {
    let n = view.n_elements();
    let width = match view.dtype {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        other => bail!(
            "tensor '{}': type {other} cannot be converted to f32 here",
            view.name
        ),
    };
    if view.data.len() != n * width {
        bail!(
            "tensor '{}': {} bytes for {n} {} values",
            view.name,
            view.data.len(),
            view.dtype
        );
    }
    let mut out = vec![0f32; n];
    const CHUNK: usize = 1 << 16;
    let dtype = view.dtype;
    out.par_chunks_mut(CHUNK)
        .zip(view.data.par_chunks(CHUNK * width))
        .for_each(|(dst, src)| {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(width)) {
                *d = match dtype {
                    DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                    DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f32(),
                    _ => bf16::from_le_bytes([b[0], b[1]]).to_f32(),
                };
            }
        });
    Ok(out)
}
