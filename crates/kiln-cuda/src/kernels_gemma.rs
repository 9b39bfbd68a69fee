//! Typed launchers for kernels/gemma.cu: the block extras of Gemma 4 (GeGLU, post-norms, the
//! per-layer inputs and gate, layer output scales, soft-capped logits). Pointers are device
//! addresses; argument lists match the .cu signatures.

use anyhow::{bail, Result};
use kiln_model::{Activation, PerLayerInputSpec};

use crate::device::{i32_of, Arg, Gpu};
use crate::kernels::{gated_grid, grid_1d, norm_block};

/// Per-layer slices one `per_layer_mix` CTA takes (one warp each).
const MIX_WARPS: usize = 4;

/// The kernels' code for an activation (gemma.cu's `gate_act`).
fn act_code(act: Activation) -> i32 {
    match act {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
    }
}

/// What a fused post-norm does with the normed block output (gemma.cu's `post_norm_fused`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PostNormThen {
    /// x += delta, out = store(rmsnorm(x) * w): [`Gpu::rmsnorm_residual`].
    Norm { w: u64, out: u64, eps: f32 },
    /// x += delta, out = store(x): [`Gpu::residual_to_store`].
    Store { out: u64 },
    /// x = (x + delta) * scale[0]: [`Gpu::scale_residual`].
    Scale { scale: u64 },
}

impl Gpu {
    /// out[t, i] = store(gelu_tanh(gate) * up) for `rows` rows of `gu` = [gate | up].
    pub fn geglu(&self, gu: u64, out: u64, inter: usize, rows: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let (grid, vec) = gated_grid(inter, rows);
        let args = [
            Arg::Ptr(gu),
            Arg::Ptr(out),
            Arg::I32(i32_of(inter, "inter")?),
            Arg::I32(i32_of(rows, "rows")?),
            Arg::I32(vec),
        ];
        self.launch("geglu", grid, 256, 0, &args)
    }

    /// delta = rmsnorm(delta) * w in place (f32), for `rows` rows.
    pub fn rmsnorm_delta(
        &self,
        delta: u64,
        w: u64,
        rows: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(delta),
            Arg::Ptr(w),
            Arg::I32(i32_of(hidden, "hidden")?),
            Arg::F32(eps),
        ];
        self.launch(
            "rmsnorm_delta",
            (rows as u32, 1, 1),
            norm_block(hidden),
            0,
            &args,
        )
    }

    /// A post-norm of `delta` (weight `w_post`) fused with the op that consumes it
    /// ([`PostNormThen`]), for `rows` rows: the bits of [`Gpu::rmsnorm_delta`] followed by
    /// that op, in one launch.
    #[allow(clippy::too_many_arguments)]
    pub fn post_norm_fused(
        &self,
        x: u64,
        delta: u64,
        w_post: u64,
        eps_post: f32,
        then: PostNormThen,
        rows: usize,
        hidden: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let (w, out, eps, mode) = match then {
            PostNormThen::Norm { w, out, eps } => (w, out, eps, 0),
            PostNormThen::Store { out } => (0, out, 0.0, 1),
            PostNormThen::Scale { scale } => (scale, 0, 0.0, 2),
        };
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(delta),
            Arg::Ptr(w_post),
            Arg::Ptr(w),
            Arg::Ptr(out),
            Arg::I32(i32_of(hidden, "hidden")?),
            Arg::F32(eps_post),
            Arg::F32(eps),
            Arg::I32(mode),
        ];
        self.launch(
            "post_norm_fused",
            (rows as u32, 1, 1),
            norm_block(hidden),
            0,
            &args,
        )
    }

    /// x += delta (delta 0 = none), out = store(x), for `rows` rows.
    pub fn residual_to_store(
        &self,
        x: u64,
        delta: u64,
        out: u64,
        rows: usize,
        hidden: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(delta),
            Arg::Ptr(out),
            Arg::I32(i32_of(hidden, "hidden")?),
        ];
        self.launch(
            "residual_to_store",
            (rows as u32, 1, 1),
            norm_block(hidden),
            0,
            &args,
        )
    }

    /// The per-layer inputs of `rows` tokens, in place over `proj` (`[rows, layers * width]`,
    /// the projection of the scaled embedding): each layer's slice normalised and mixed with
    /// the token table's row of the token id at `tokens` (see [`PerLayerInputSpec`]).
    #[allow(clippy::too_many_arguments)]
    pub fn per_layer_mix(
        &self,
        proj: u64,
        table: u64,
        tokens: u64,
        norm_w: u64,
        rows: usize,
        layers: usize,
        ple: &PerLayerInputSpec,
    ) -> Result<()> {
        if rows == 0 || layers == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(proj),
            Arg::Ptr(table),
            Arg::Ptr(tokens),
            Arg::Ptr(norm_w),
            Arg::I32(i32_of(layers, "layers")?),
            Arg::I32(i32_of(ple.width, "per-layer width")?),
            Arg::F32(ple.projection_scale),
            Arg::F32(ple.table_scale),
            Arg::F32(ple.mix_scale),
            Arg::F32(ple.norm_eps),
        ];
        let grid = (rows as u32, layers.div_ceil(MIX_WARPS) as u32, 1);
        self.launch("per_layer_mix", grid, 32 * MIX_WARPS as u32, 0, &args)
    }

    /// out[t, i] = store(act(gate[t, i]) * per_layer[t, layer * width + i]) for `rows` rows;
    /// `all` is per_layer's row length.
    #[allow(clippy::too_many_arguments)]
    pub fn per_layer_act(
        &self,
        gate: u64,
        per_layer: u64,
        out: u64,
        width: usize,
        all: usize,
        layer: usize,
        rows: usize,
        act: Activation,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        if (layer + 1) * width > all {
            bail!("per-layer slice {layer} of width {width} is outside rows of {all}");
        }
        let grid = grid_1d(rows * width, 256, self.sm_count as usize * 16);
        let args = [
            Arg::Ptr(gate),
            Arg::Ptr(per_layer),
            Arg::Ptr(out),
            Arg::I32(i32_of(width, "per-layer width")?),
            Arg::I32(i32_of(all, "per-layer row")?),
            Arg::I32(i32_of(layer, "layer")?),
            Arg::I32(i32_of(rows, "rows")?),
            Arg::I32(act_code(act)),
        ];
        self.launch("per_layer_act", grid, 256, 0, &args)
    }

    /// x = (x + delta) * scale[0] over `n` elements (delta 0 = none; `scale` a one-element
    /// stored weight).
    pub fn scale_residual(&self, x: u64, delta: u64, scale: u64, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let grid = grid_1d(n, 256, self.sm_count as usize * 16);
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(delta),
            Arg::Ptr(scale),
            Arg::U64(n as u64),
        ];
        self.launch("scale_residual", grid, 256, 0, &args)
    }

    /// logits = tanh(logits / cap) * cap over `n` elements, in place.
    pub fn softcap_logits(&self, logits: u64, n: usize, cap: f32) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let grid = grid_1d(n, 256, self.sm_count as usize * 16);
        let args = [Arg::Ptr(logits), Arg::U64(n as u64), Arg::F32(cap)];
        self.launch("softcap_logits", grid, 256, 0, &args)
    }
}
