//! Fused decode launches (KILN_DECODE_FUSE, a child module of forward.rs): in a step whose rows
//! are all decode rows, the kernels around a GEMM move into it. The residual add goes into the
//! o and down GEMMs' epilogues (`add`); the RMSNorm into the QKV and gate/up GEMMs' prologues
//! (`norm`, up to 8 rows, after `add`: the GEMM reads the residual stream itself); SwiGLU into
//! the gate/up epilogue (`glu`); bias, RoPE and the KV write into the QKV epilogue (`rope`).
//! Each fused launch computes what the launches it replaces computed, in the same order
//! (skinny_epilogue.cu), so a step gives the same bits fused or not, and `linear` falls back to
//! the plain path wherever a condition fails (a quantised weight, another storage type, a
//! layer with post-norms or Q/K norms).

use anyhow::Result;
use kiln_model::{Activation, LayerWeight, ModelSpec, RopeStyle};

use super::CudaOps;
use crate::kernels::norm_block;
use crate::quant_gemm::quant_skinny_fused;
use crate::quant_order::RowOrder;
use crate::quant_weights::QuantMatrix;
use crate::skinny::SkinnyKind;
use crate::skinny_fused::{
    fusable_blocks, rope_fusable, Epilogue, NormPrologue, RopeOut, NORM_PROLOGUE_MAX_ROWS,
};
use crate::step_plan::StepPlan;
use crate::store::{StorePtr, StoreType};
use crate::switches::{DecodeFuse, Switches};
use crate::weights::MatrixRef;

/// A step's fusion state.
#[derive(Debug, Default)]
pub(super) struct Fusion {
    /// What this step fuses: nothing unless every row is a decode row of a model whose blocks
    /// are norm, attention, norm, gated MLP (no post-norms, per-layer inputs or output scales),
    /// in bf16 with the 16-warp skinny kernel.
    pub on: DecodeFuse,
    /// What it fuses into block-quantised GEMMs (KILN_QUANT_FUSE; the second decode family):
    /// the same steps, the rows of a RoPE or SwiGLU epilogue stored in its pairs at load.
    pub quant: DecodeFuse,
    /// A norm deferred to the next projection: (norm weight, eps).
    pub norm: Option<(u64, f32)>,
    /// The QKV projection finished Q, K and V (no qkv_prepare); the gate/up projection wrote
    /// the activation (no swiglu).
    pub roped: bool,
    pub activated: bool,
}

impl Fusion {
    pub fn for_step(spec: &ModelSpec, sw: &Switches, store: StoreType, plan: &StepPlan) -> Fusion {
        let plain_blocks = fusable_blocks(spec);
        let k = sw.kernels;
        let wide = k.skinny_pipe && k.skinny_wide;
        let step = plain_blocks
            && sw.skinny_gemm
            && store == StoreType::Bf16
            && plan.n_tokens > 0
            && plan.n_decode == plan.n_tokens;
        // The fused launches are skinny kernels: not in the prefill's order.
        let on = step && sw.fuse.any() && wide && !sw.chain_gemm;
        let mut f = Fusion::default();
        if step && sw.kernels.quant_decode_v2 {
            // `norm` has no quantised form: fused_quant never reads it.
            f.quant = sw.quant_fuse;
        }
        if on {
            f.on = sw.fuse;
            // The norm prologue keeps the norm kernel's reduction for blocks of up to 512
            // threads and reads x whole per CTA: a few rows only.
            f.on.norm &= plan.n_tokens <= NORM_PROLOGUE_MAX_ROWS
                && norm_block(spec.hidden_size) <= 512
                && sw.fuse.add
                && !sw.bf16_wg; // the wgmma row order has the epilogues, not the prologue
        }
        f
    }
}

impl CudaOps<'_, '_> {
    /// add_norm when the next projection computes the norm: nothing to launch now.
    pub(super) fn defer_norm(&mut self, layer: usize, weight: LayerWeight) -> bool {
        // An fp8 projection has no norm prologue: add_norm launches the norm (forward_fp8.rs).
        let fp8 = super::fp8::normed_projection(weight).is_some_and(|p| self.is_fp8(layer, p));
        if !self.fused.on.norm || self.pending || fp8 {
            return false;
        }
        let c = self.ctx;
        let w = c.w.layers[layer].ptr(weight);
        self.fused.norm = Some((w, c.spec.layers[layer].norm_eps));
        true
    }

    /// Launches a deferred norm the way add_norm would have (nothing pending: `add` is on).
    pub(super) fn flush_norm(&mut self) -> Result<()> {
        let Some((w, eps)) = self.fused.norm.take() else {
            return Ok(());
        };
        let c = self.ctx;
        let (h, a) = (c.spec.hidden_size, c.a);
        c.gpu
            .rmsnorm_residual(a.x.ptr(), 0, w, a.normed.ptr(), self.plan.n_tokens, h, eps)
    }

    /// A projection with what fusion moves into it; Ok(false) when nothing is fused for it
    /// (the caller then runs the plain path, after any deferred norm was flushed).
    pub(super) fn fused_linear(&mut self, layer: usize, weight: LayerWeight) -> Result<bool> {
        let c = self.ctx;
        let f = self.fused.on;
        let w = match c.w.layers[layer].matrix(weight) {
            MatrixRef::Plain(w) if f.any() => w,
            MatrixRef::Plain(_) => return Ok(false),
            MatrixRef::Quant(q) => {
                self.flush_norm()?;
                return self.fused_quant(layer, weight, q);
            }
            // The fp8 GEMM has no prologue or epilogue: the plain path.
            MatrixRef::Fp8(_) => {
                self.flush_norm()?;
                return Ok(false);
            }
        };
        let (spec, a, h) = (&c.spec.layers[layer], c.a, c.spec.hidden_size);
        let norm = |f: &mut Fusion| {
            f.norm.take().map(|(w, eps)| NormPrologue {
                x: a.x.ptr(),
                w,
                eps,
            })
        };
        let (epi, x, n, k, pro) = match weight {
            LayerWeight::Qkv => {
                let at = &spec.attn;
                let roped = f.rope && rope_fusable(at);
                let epi = if roped {
                    let neox = matches!(c.spec.rope(layer).style, RopeStyle::Neox);
                    Epilogue::Rope(self.rope_out(layer, at.head_dim, neox))
                } else {
                    Epilogue::Store { y: a.qkv.ptr() }
                };
                self.fused.roped = roped;
                (
                    epi,
                    a.normed.dev_ptr(),
                    at.qkv_rows(),
                    h,
                    norm(&mut self.fused),
                )
            }
            LayerWeight::GateUp => {
                let inter = spec.ffn.intermediate();
                let glu = f.glu && spec.ffn.activation() == Activation::Silu;
                let epi = if glu {
                    Epilogue::Glu {
                        act: a.act.ptr(),
                        inter,
                    }
                } else {
                    Epilogue::Store { y: a.gu.ptr() }
                };
                self.fused.activated = glu;
                (epi, a.normed.dev_ptr(), 2 * inter, h, norm(&mut self.fused))
            }
            LayerWeight::O if f.add => (
                Epilogue::Add { y: a.x.ptr() },
                a.attn.dev_ptr(),
                h,
                spec.attn.q_dim(),
                None,
            ),
            LayerWeight::Down if f.add => (
                Epilogue::Add { y: a.x.ptr() },
                a.act.dev_ptr(),
                h,
                spec.ffn.intermediate(),
                None,
            ),
            _ => {
                self.flush_norm()?;
                return Ok(false);
            }
        };
        if matches!(epi, Epilogue::Store { .. }) && pro.is_none() {
            return Ok(false);
        }
        self.fused_gemm(&epi, pro, x, w, n, k)?;
        Ok(true)
    }

    /// Where layer `layer`'s fused RoPE epilogue reads and writes (as qkv_prepare takes them).
    fn rope_out(&self, layer: usize, hd: usize, neox: bool) -> RopeOut {
        let c = self.ctx;
        let at = &c.spec.layers[layer].attn;
        RopeOut {
            q_out: c.a.q.ptr(),
            bias: c.w.layers[layer].ptr(LayerWeight::QkvBias),
            rope: c.w.ropes[at.rope].ptr(),
            positions: c.rope_positions(),
            slots: c.kv_slots(layer),
            kv: c.kv_view(layer),
            n_q: at.num_heads,
            hd,
            neox,
        }
    }

    /// A block-quantised projection with what `fused.quant` moves into it (RoPE and SwiGLU
    /// where load stored the rows in their pairs); Ok(false): nothing fused for it.
    fn fused_quant(&mut self, layer: usize, weight: LayerWeight, q: &QuantMatrix) -> Result<bool> {
        let f = self.fused.quant;
        let c = self.ctx;
        let (spec, a) = (&c.spec.layers[layer], c.a);
        let order = q.segments.first().map(|s| s.order);
        let (epi, x) = match weight {
            LayerWeight::Qkv if f.rope => {
                let Some(RowOrder::Rope { hd, neox }) = order else {
                    return Ok(false);
                };
                let epi = Epilogue::Rope(self.rope_out(layer, hd, neox));
                self.fused.roped = true;
                (epi, a.normed.ptr())
            }
            LayerWeight::GateUp if f.glu && order == Some(RowOrder::Glu) => {
                self.fused.activated = true;
                let epi = Epilogue::Glu {
                    act: a.act.ptr(),
                    inter: spec.ffn.intermediate(),
                };
                (epi, a.normed.ptr())
            }
            LayerWeight::O if f.add => (Epilogue::Add { y: a.x.ptr() }, a.attn.ptr()),
            LayerWeight::Down if f.add => (Epilogue::Add { y: a.x.ptr() }, a.act.ptr()),
            _ => return Ok(false),
        };
        quant_skinny_fused(c.gpu, q, &epi, x, self.plan.n_tokens)?;
        Ok(true)
    }

    /// One fused GEMM over the step's rows: the tensor-core kernel where it takes this many
    /// rows (it has no norm prologue: `Fusion::for_step` keeps the norm to fewer rows), else
    /// the skinny kernel's fused entries; with KILN_BF16_WG the wgmma row order's kernels
    /// (no norm prologue there either).
    fn fused_gemm(
        &self,
        epi: &Epilogue,
        norm: Option<NormPrologue>,
        x: StorePtr,
        w: u64,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let (g, rows) = (self.ctx.gpu, self.plan.n_tokens);
        let kc = self.ctx.sw.kernels;
        if self.ctx.sw.bf16_wg {
            anyhow::ensure!(norm.is_none(), "a norm prologue in the wgmma row order");
            return g.bf16_wg_epi(epi, x.addr(), w, rows, n, k);
        }
        if norm.is_none() {
            if let Some(l) = g.wg_for(&kc, SkinnyKind::Wide, epi, rows, n, k)? {
                return g.skinny_wg(&l, epi, kc.pdl, x.addr(), w, rows, n, k);
            }
            if let Some((e, part)) = g.tc_split_for(&kc, SkinnyKind::Wide, epi, rows, n)? {
                return g.skinny_tc_split(e, epi, kc.pdl, x.addr(), w, part, rows, n, k);
            }
            if let Some(e) = g.tc_for(&kc, SkinnyKind::Wide, epi, rows, n, k)? {
                return g.skinny_tc_entry(e, epi, kc.pdl, x.addr(), w, rows, n, k);
            }
        }
        g.skinny_fused(epi, norm, kc.pdl, x.addr(), w, rows, n, k)
    }
}
