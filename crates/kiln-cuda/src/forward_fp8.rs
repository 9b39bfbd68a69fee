//! An fp8 projection's input rows quantised by the launch that writes them (KILN_FP8_FUSE, a
//! child module of forward.rs): the RMSNorm before QKV and gate/up, the gated activation before
//! down (kernels/fp8.cu). The layer program calls each of them just before its projection, so
//! the rows they leave in the step's fp8 buffer are that projection's input; `linear` takes the
//! mark and goes straight to the fp8 GEMM. Same bits as quantising in the GEMM's own launch.

use anyhow::Result;
use kiln_model::LayerWeight;

use super::CudaOps;
use crate::fp8_rows::Fp8Rows;
use crate::weights::MatrixRef;

/// The projection whose input a norm writes (the program's order, kiln-model program.rs).
pub(super) fn normed_projection(norm: LayerWeight) -> Option<LayerWeight> {
    match norm {
        LayerWeight::AttnNorm => Some(LayerWeight::Qkv),
        LayerWeight::FfnNorm => Some(LayerWeight::GateUp),
        _ => None,
    }
}

impl CudaOps<'_, '_> {
    /// Whether `layer`'s `weight` is an fp8 projection.
    pub(super) fn is_fp8(&self, layer: usize, weight: LayerWeight) -> bool {
        matches!(self.ctx.w.layers[layer].matrix(weight), MatrixRef::Fp8(_))
    }

    fn fp8_buffer(&self) -> Fp8Rows {
        Fp8Rows {
            q: self.ctx.a.fp8_x.ptr(),
            scale: self.ctx.a.fp8_scale.ptr(),
        }
    }

    /// add_norm's plain launch (x += delta unless 0, normed = rmsnorm(x) * w) with normed's
    /// rows also quantised, when the norm's projection is fp8; Ok(false): nothing launched.
    pub(super) fn norm_fp8(&mut self, layer: usize, norm: LayerWeight, delta: u64) -> Result<bool> {
        let fused =
            self.ctx.sw.fp8_fuse && normed_projection(norm).is_some_and(|p| self.is_fp8(layer, p));
        if !fused {
            return Ok(false);
        }
        let (c, a) = (self.ctx, self.ctx.a);
        c.gpu.rmsnorm_residual_fp8(
            a.x.ptr(),
            delta,
            c.w.layers[layer].ptr(norm),
            a.normed.ptr(),
            self.fp8_buffer(),
            self.plan.n_tokens,
            c.spec.hidden_size,
            c.spec.layers[layer].norm_eps,
        )?;
        self.fp8_rows = Some(a.normed.ptr());
        Ok(true)
    }

    /// ffn_activation (act = act(gate) * up) with act's rows also quantised, when down is fp8;
    /// Ok(false): nothing launched.
    pub(super) fn activation_fp8(&mut self, layer: usize) -> Result<bool> {
        if !self.ctx.sw.fp8_fuse || !self.is_fp8(layer, LayerWeight::Down) {
            return Ok(false);
        }
        let (c, a) = (self.ctx, self.ctx.a);
        let ffn = &c.spec.layers[layer].ffn;
        c.gpu.gated_fp8(
            a.gu.ptr(),
            a.act.ptr(),
            self.fp8_buffer(),
            ffn.intermediate(),
            self.plan.n_tokens,
            ffn.activation(),
        )?;
        self.fp8_rows = Some(a.act.ptr());
        Ok(true)
    }
}
