//! The layer program's ops on the device (`kiln_model::program::StepOps`): every launch of a
//! step, reading the per-step inputs from the persistent step buffer. Rows 0..n_decode are
//! decode rows (skinny GEMM, split-KV attention); the rest are prefill rows (cuBLASLt, flash
//! attention). A backend storing f32 or f16 has neither bf16 tensor-core kernel: its GEMMs all
//! take cuBLASLt and every row's attention the split-KV kernel. The order of the ops is
//! the model's, written once in kiln-model; an eager step and a graph capture run the same
//! code, so they queue the same launches in the same order.

use anyhow::{bail, ensure, Context, Result};
use kiln_model::program::run_draft_step;
use kiln_model::{run_step, Activation, LayerWeight, ModelSpec, RopeStyle, StepOps};

use crate::device::Gpu;
use crate::gemm_lt::{GemmOut, LtGemm};
use crate::kernels::{AttnCall, FlashTiles, QkvKind};
use crate::kernels_gemma::PostNormThen;
use crate::kv_cache::KvCache;
use crate::quant_gemm::quant_skinny_all;
use crate::quant_prefill::AheadStep;
use crate::step_plan::{StepLayout, StepPlan};
use crate::store::StoreType;
use crate::switches::Switches;
use crate::weights::{MatrixRef, ModelWeights};

#[path = "forward_fused.rs"]
mod fused;
use fused::Fusion;
// fp8 input rows quantised by the launch that writes them.
#[path = "forward_fp8.rs"]
mod fp8;

// A draft model's step: its input and output projections (Gemma 4's assistant).
#[path = "forward_draft.rs"]
mod draft;
pub use draft::DraftIo;
// A step's GEMMs: plain and block-quantised weights, the expansion one layer ahead.
#[path = "forward_gemm.rs"]
mod gemm;
// The ring layers' view of the step buffer (a KV ring).
#[path = "forward_ring.rs"]
mod ring;
// The step's activation buffers.
#[path = "forward_activations.rs"]
mod activations;
pub use activations::{per_layer_widths, Activations};

/// Everything a step's launches read.
pub struct StepContext<'a> {
    pub gpu: &'a Gpu,
    pub spec: &'a ModelSpec,
    pub w: &'a ModelWeights,
    pub kv: &'a KvCache,
    pub a: &'a Activations,
    pub layout: &'a StepLayout,
    pub sw: Switches,
    /// A draft model's step: what it reads from its target and where it writes (None: a
    /// model's own step).
    pub draft: Option<DraftIo<'a>>,
}

impl StepContext<'_> {
    /// Queues the whole forward pass of a packed step; the logits of the rows that need them end
    /// in `a.logits` and their argmax in `a.ids`.
    pub fn run(&self, lt: &mut LtGemm, plan: &StepPlan) -> Result<()> {
        let mut ops = CudaOps {
            ctx: self,
            lt,
            plan,
            pending: false,
            post_norm: None,
            fp8_rows: None,
            fused: Fusion::for_step(self.spec, &self.sw, self.gpu.store, plan),
            ahead: AheadStep::new(self.w.ahead.is_some() && self.gpu.capturing()?),
        };
        let ran = match self.draft {
            None => run_step(self.spec, &mut ops),
            Some(_) => run_draft_step(self.spec, &mut ops),
        };
        if let Some(a) = &self.w.ahead {
            a.finish(self.gpu, &ops.ahead)?;
        }
        ran
    }

    fn step_ptr(&self, section: usize) -> u64 {
        self.a.step.at(section)
    }
}

/// One step's ops on the device.
struct CudaOps<'c, 'a> {
    ctx: &'c StepContext<'a>,
    lt: &'c mut LtGemm,
    plan: &'c StepPlan,
    /// `delta` holds a block's output not yet added to `x`.
    pending: bool,
    /// A post-norm of `delta` not yet applied (KILN_GEMMA_FUSE): the op that consumes the
    /// block output applies it in the same launch.
    post_norm: Option<PostNorm>,
    /// The store buffer whose rows the step's fp8 buffer holds quantised, by the launch that
    /// wrote them (forward_fp8.rs): the next projection's input, taken by `linear`.
    fp8_rows: Option<u64>,
    /// What this step's GEMMs take over from the kernels around them (forward_fused.rs).
    fused: Fusion,
    /// How far the expansion one layer ahead has gone (quant_prefill.rs).
    ahead: AheadStep,
}

/// A deferred post-norm: its weight and epsilon.
#[derive(Debug, Clone, Copy)]
struct PostNorm {
    w: u64,
    eps: f32,
}

impl CudaOps<'_, '_> {
    /// Attention without flash attention (storage other than bf16): every row, prefill or
    /// decode, takes the split-KV kernel. A row's result depends only on its own position and
    /// its sequence's keys, so chunked == whole, and a one-token tail of a prompt gives the bits
    /// of the unchunked prompt. Rows go in windows of `max_seqs`, the room of the partials.
    fn split_attention_every_row(&mut self, layer: usize) -> Result<()> {
        let c = self.ctx;
        let (g, a, n_tokens) = (c.gpu, c.a, self.plan.n_tokens);
        let at = &c.spec.layers[layer].attn;
        let (nq, hd) = (at.num_heads, at.head_dim);
        let inp = c.attn_inputs(layer);
        let step = c.layout.max_seqs;
        for r0 in (0..n_tokens).step_by(step) {
            let rows = step.min(n_tokens - r0);
            let call = AttnCall {
                q: a.q.dev_ptr().row(r0, nq * hd).addr(),
                kv: c.kv_view(layer),
                inp: &inp.from_row(r0),
                out: a.attn.dev_ptr().row(r0, nq * hd).addr(),
                n_q: nq,
                hd,
                window: at.window.unwrap_or(0),
                scale: at.scale,
            };
            g.decode_attn(call, a.partials(), rows)?;
        }
        Ok(())
    }

    /// Applies a deferred post-norm on its own (a consumer that cannot fuse it).
    fn flush_post_norm(&mut self) -> Result<()> {
        match self.post_norm.take() {
            None => Ok(()),
            Some(p) => {
                let c = self.ctx;
                let (rows, h) = (self.plan.n_tokens, c.spec.hidden_size);
                c.gpu.rmsnorm_delta(c.a.delta.ptr(), p.w, rows, h, p.eps)
            }
        }
    }

    /// Runs a deferred post-norm together with `then`, consuming the pending block output;
    /// false (nothing launched) when no post-norm waits.
    fn fused_post_norm(&mut self, then: PostNormThen) -> Result<bool> {
        let Some(p) = self.post_norm.take() else {
            return Ok(false);
        };
        let c = self.ctx;
        let delta = self.take_delta();
        ensure!(delta != 0, "a post-norm with no block output");
        let (rows, h) = (self.plan.n_tokens, c.spec.hidden_size);
        c.gpu
            .post_norm_fused(c.a.x.ptr(), delta, p.w, p.eps, then, rows, h)?;
        Ok(true)
    }

    /// The address of `delta` when a block's output is pending (no longer pending after the
    /// caller's kernel adds it), else 0.
    fn take_delta(&mut self) -> u64 {
        match std::mem::take(&mut self.pending) {
            true => self.ctx.a.delta.ptr(),
            false => 0,
        }
    }
}

impl StepOps for CudaOps<'_, '_> {
    fn embed(&mut self) -> Result<()> {
        let c = self.ctx;
        let (x, tokens, n) = (c.a.x.ptr(), c.step_ptr(c.layout.tokens), self.plan.n_tokens);
        let (h, scale) = (c.spec.hidden_size, c.spec.embed_scale.unwrap_or(1.0));
        match c.w.embedding()? {
            MatrixRef::Plain(e) => c.gpu.embed_gather(x, e, tokens, n, h, scale),
            MatrixRef::Quant(q) => match q.segments.as_slice() {
                [s] => c
                    .gpu
                    .quant_embed(s.format, x, s.data.ptr(), tokens, n, q.cols, scale),
                _ => bail!("a quantised embedding in more than one format"),
            },
            MatrixRef::Fp8(_) => bail!("an fp8 embedding (only layer projections are fp8)"),
        }
    }

    /// The projection of the scaled embedding (a GEMM of `x` in the storage type), then the mix
    /// with the token table gathered by id on the device: only the step's token ids were uploaded.
    fn per_layer_inputs(&mut self) -> Result<()> {
        let c = self.ctx;
        let (g, a, s) = (c.gpu, c.a, c.spec);
        let ple = s
            .per_layer_input
            .context("the model has no per-layer inputs")?;
        let w =
            c.w.per_layer
                .as_ref()
                .context("per-layer weights not loaded")?;
        let (n, h, all) = (self.plan.n_tokens, s.hidden_size, per_layer_widths(s).0);
        g.residual_to_store(a.x.ptr(), 0, a.normed.ptr(), n, h)?;
        self.gemm(
            a.per_layer.dev_ptr(),
            a.normed.dev_ptr(),
            MatrixRef::Plain(w.projection.ptr()),
            all,
            h,
        )?;
        g.per_layer_mix(
            a.per_layer.ptr(),
            w.table.ptr(),
            c.step_ptr(c.layout.tokens),
            w.norm.ptr(),
            n,
            s.layers.len(),
            &ple,
        )
    }

    fn norm_delta(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
        ensure!(
            self.pending,
            "{weight:?} of layer {layer}: no block output to norm"
        );
        self.flush_post_norm()?;
        let c = self.ctx;
        let (w, eps) = (c.w.layers[layer].ptr(weight), c.spec.layers[layer].norm_eps);
        if c.sw.gemma_fuse {
            self.post_norm = Some(PostNorm { w, eps });
            return Ok(());
        }
        c.gpu.rmsnorm_delta(
            c.a.delta.ptr(),
            w,
            self.plan.n_tokens,
            c.spec.hidden_size,
            eps,
        )
    }

    fn per_layer_activation(&mut self, layer: usize) -> Result<()> {
        let c = self.ctx;
        let ple = c
            .spec
            .per_layer_input
            .context("the model has no per-layer inputs")?;
        let (all, width) = per_layer_widths(c.spec);
        c.gpu.per_layer_act(
            c.a.pl_gate.ptr(),
            c.a.per_layer.ptr(),
            c.a.pl_act.ptr(),
            width,
            all,
            layer,
            self.plan.n_tokens,
            ple.act,
        )
    }

    fn scale_residual(&mut self, layer: usize) -> Result<()> {
        let c = self.ctx;
        let scale = c.w.layers[layer].ptr(LayerWeight::OutputScale);
        if self.fused_post_norm(PostNormThen::Scale { scale })? {
            return Ok(());
        }
        let delta = self.take_delta();
        c.gpu.scale_residual(
            c.a.x.ptr(),
            delta,
            c.w.layers[layer].ptr(LayerWeight::OutputScale),
            self.plan.n_tokens * c.spec.hidden_size,
        )
    }

    fn add_norm(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
        if self.defer_norm(layer, weight) {
            return Ok(());
        }
        let c = self.ctx;
        let then = PostNormThen::Norm {
            w: c.w.layers[layer].ptr(weight),
            out: c.a.normed.ptr(),
            eps: c.spec.layers[layer].norm_eps,
        };
        if self.fused_post_norm(then)? {
            return Ok(());
        }
        let delta = self.take_delta();
        if self.norm_fp8(layer, weight, delta)? {
            return Ok(());
        }
        c.gpu.rmsnorm_residual(
            c.a.x.ptr(),
            delta,
            c.w.layers[layer].ptr(weight),
            c.a.normed.ptr(),
            self.plan.n_tokens,
            c.spec.hidden_size,
            c.spec.layers[layer].norm_eps,
        )
    }

    fn linear(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
        let quantized = self.fp8_rows.take();
        if self.fused_linear(layer, weight)? {
            return Ok(());
        }
        let c = self.ctx;
        let (spec, a) = (&c.spec.layers[layer], c.a);
        let h = c.spec.hidden_size;
        let inter = spec.ffn.intermediate();
        let width = spec.per_layer_input.unwrap_or(0);
        let (y, x, n, k) = match weight {
            LayerWeight::Qkv => (&a.qkv, &a.normed, spec.attn.qkv_rows(), h),
            LayerWeight::O => (&a.delta, &a.attn, h, spec.attn.q_dim()),
            LayerWeight::GateUp => (&a.gu, &a.normed, 2 * inter, h),
            LayerWeight::Down => (&a.delta, &a.act, h, inter),
            LayerWeight::PerLayerGate => (&a.pl_gate, &a.normed, width, h),
            LayerWeight::PerLayerProj => (&a.delta, &a.pl_act, h, width),
            other => bail!("{other:?} is not a projection"),
        };
        // The block output goes into `delta` for the next kernel to add, or straight into x.
        let out = match self.adds_in_gemm(layer, weight, n, k)? {
            true => GemmOut::Add,
            false => GemmOut::Store,
        };
        ensure!(
            out == GemmOut::Store || !self.pending,
            "{weight:?} of layer {layer}: an add into x with a block output pending"
        );
        let y = if out == GemmOut::Add { &a.x } else { y };
        if weight == LayerWeight::PerLayerGate {
            // The gate reads the residual stream itself, the pending block output added.
            let then = PostNormThen::Store {
                out: a.normed.ptr(),
            };
            if !self.fused_post_norm(then)? {
                let delta = self.take_delta();
                c.gpu
                    .residual_to_store(a.x.ptr(), delta, a.normed.ptr(), self.plan.n_tokens, h)?;
            }
        } else {
            self.flush_post_norm()?;
        }
        match c.w.layers[layer].matrix(weight) {
            MatrixRef::Fp8(w) if quantized == Some(x.ptr()) => {
                self.fp8_matmul(out, y.dev_ptr(), w, n, k)?
            }
            _ if self.quant_ahead(layer, weight, out, y.ptr(), x.ptr())? => {}
            w => self.gemm_to(out, y.dev_ptr(), x.dev_ptr(), w, n, k)?,
        }
        self.pending |= out == GemmOut::Store
            && matches!(
                weight,
                LayerWeight::O | LayerWeight::Down | LayerWeight::PerLayerProj
            );
        Ok(())
    }

    fn qkv_rope_kv(&mut self, layer: usize) -> Result<()> {
        if std::mem::take(&mut self.fused.roped) {
            return Ok(());
        }
        let c = self.ctx;
        let (spec, lw, a) = (&c.spec.layers[layer], &c.w.layers[layer], c.a);
        let at = &spec.attn;
        let neox = matches!(c.spec.rope(layer).style, RopeStyle::Neox);
        c.gpu.qkv_prepare(
            a.qkv.ptr(),
            lw.ptr(LayerWeight::QkvBias),
            lw.ptr(LayerWeight::QNorm),
            lw.ptr(LayerWeight::KNorm),
            c.w.ropes[at.rope].ptr(),
            c.rope_positions(),
            c.kv_slots(layer),
            a.q.ptr(),
            c.kv_view(layer),
            self.plan.n_tokens,
            at.num_heads,
            at.head_dim,
            neox,
            spec.norm_eps,
            QkvKind::of(at),
            at.v_norm,
        )
    }

    /// Every row runs on: the launches keep their shapes (and a graph its buckets), and the
    /// rows that want logits are picked by `logits`.
    fn keep_logit_rows(&mut self) -> Result<()> {
        Ok(())
    }

    fn attention(&mut self, layer: usize) -> Result<()> {
        let c = self.ctx;
        let (g, a, plan) = (c.gpu, c.a, self.plan);
        let at = &c.spec.layers[layer].attn;
        let inp = c.attn_inputs(layer);
        if g.store != StoreType::Bf16 && c.sw.flash_attn && c.sw.split_decode {
            return self.split_attention_every_row(layer);
        }
        let call = AttnCall {
            q: a.q.ptr(),
            kv: c.kv_view(layer),
            inp: &inp,
            out: a.attn.ptr(),
            n_q: at.num_heads,
            hd: at.head_dim,
            window: at.window.unwrap_or(0),
            scale: at.scale,
        };
        if !c.sw.flash_attn || g.store != StoreType::Bf16 {
            return g.ref_attn(call, plan.n_tokens);
        }
        let d = plan.n_decode;
        if c.sw.split_decode {
            g.decode_attn(call, a.partials(), d)?;
        } else {
            g.ref_attn(call, d)?;
        }
        let tiles = FlashTiles {
            ptr: c.step_ptr(c.layout.tiles),
            n: plan.n_tiles,
        };
        g.flash_attn(call, tiles, plan.prefill_keys)
    }

    fn ffn_activation(&mut self, layer: usize) -> Result<()> {
        if std::mem::take(&mut self.fused.activated) || self.activation_fp8(layer)? {
            return Ok(());
        }
        let c = self.ctx;
        let ffn = &c.spec.layers[layer].ffn;
        let (gu, act, rows) = (c.a.gu.ptr(), c.a.act.ptr(), self.plan.n_tokens);
        match ffn.activation() {
            Activation::Silu => c.gpu.swiglu(gu, act, ffn.intermediate(), rows),
            Activation::GeluTanh => c.gpu.geglu(gu, act, ffn.intermediate(), rows),
        }
    }

    fn logits(&mut self) -> Result<()> {
        self.flush_post_norm()?;
        let c = self.ctx;
        let (g, a, s) = (c.gpu, c.a, c.spec);
        let r = self.plan.n_logits;
        let delta = self.take_delta();
        g.final_norm_rows(
            a.x.ptr(),
            delta,
            c.step_ptr(c.layout.logits_rows),
            c.w.out_norm.ptr(),
            a.logit_in.ptr(),
            r,
            s.hidden_size,
            s.norm_eps,
        )?;
        // Logits rows always take the skinny kernel (bf16, quantised or not; with KILN_BF16_WG
        // the wgmma row order's) or the pinned cuBLASLt algorithm (other formats), so a row's
        // logits never depend on the step.
        let logits = c.draft.map_or(a.logits.ptr(), |d| d.logits);
        let x = a.logit_in.ptr();
        match c.w.lm_head()? {
            MatrixRef::Quant(q) => quant_skinny_all(g, q, logits, x, r)?,
            MatrixRef::Plain(w) if self.chain_order() => {
                let (v, h) = (s.vocab_size, s.hidden_size);
                self.chain_or_lt(GemmOut::Store, logits, x, w, r, v, h)?
            }
            MatrixRef::Plain(w) if c.sw.bf16_wg => {
                g.bf16_wg(logits, x, w, r, s.vocab_size, s.hidden_size)?
            }
            MatrixRef::Plain(w) if g.store == StoreType::Bf16 => {
                g.skinny_gemm(logits, x, w, r, s.vocab_size, s.hidden_size)?
            }
            MatrixRef::Plain(w) => {
                self.lt
                    .matmul(g, logits, x, w, r, s.vocab_size, s.hidden_size)?
            }
            MatrixRef::Fp8(_) => bail!("an fp8 LM head (only layer projections are fp8)"),
        }
        // In place, so the argmax, the device sampler and the logits copied out all see it.
        if let Some(cap) = s.logit_softcap {
            g.softcap_logits(logits, r * s.vocab_size, cap)?;
        }
        self.keep_best_centroids()?;
        let picks = c.draft.map_or(a.ids.ptr(), |d| d.picks);
        g.argmax_rows(logits, picks, r, s.vocab_size)
    }

    fn draft_input(&mut self) -> Result<()> {
        self.draft_in()
    }

    fn draft_output(&mut self) -> Result<()> {
        self.draft_out()
    }
}
