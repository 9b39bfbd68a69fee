//! A step's quantised projections with the bf16 expansion one layer ahead (KILN_QUANT_AHEAD,
//! quant_prefill.rs): the decode rows through the skinny kernels as always, the prefill rows
//! through cuBLASLt on the expansion the side stream made while the layer before ran.

use anyhow::Result;
use kiln_model::LayerWeight;

use super::CudaOps;
use crate::device::DevPtr;
use crate::quant_prefill::{quant_gemm, Bf16Of};
use crate::weights::MatrixRef;

impl CudaOps<'_, '_> {
    /// y = x . W^T for layer `layer`'s `weight` when it is quantised, the step has prefill rows
    /// and the expansion runs ahead; Ok(false): nothing launched, the plain path's to do.
    pub(super) fn quant_ahead(
        &mut self,
        layer: usize,
        weight: LayerWeight,
        y: u64,
        x: u64,
    ) -> Result<bool> {
        let c = self.ctx;
        let (Some(ahead), MatrixRef::Quant(q)) = (&c.w.ahead, c.w.layers[layer].matrix(weight))
        else {
            return Ok(false);
        };
        // As `gemm` splits the rows (no buffers are made for KILN_QUANT_PREFILL=skinny).
        let t = self.plan.n_tokens;
        let d = if c.sw.skinny_gemm {
            self.plan.n_decode
        } else {
            0
        };
        if t <= d {
            return Ok(false);
        }
        let bf16 = ahead.matrix(&c.w.layers, layer, weight)?;
        // A graph's steps (prefill chunks of a few tokens) keep to the main stream: the matrix
        // is expanded into its place in the layer buffer just before its GEMM.
        let at = if c.gpu.capturing()? {
            Bf16Of::Scratch(bf16)
        } else {
            ahead.enter(c.gpu, &c.w.layers, layer, &mut self.ahead)?;
            Bf16Of::Expanded(bf16)
        };
        let (y, x) = (DevPtr::<f32>::new(y), DevPtr::<u16>::new(x));
        quant_gemm(c.gpu, self.lt, at, q, y, x, t, d)?;
        Ok(true)
    }
}
