//! One step's forward pass on the device: every launch of every layer, reading the per-step
//! inputs from the persistent step buffer. Rows 0..n_decode are decode rows (skinny GEMM,
//! split-KV attention); the rest are prefill rows (cuBLASLt, flash attention).

use anyhow::Result;
use kiln_model::ModelConfig;

use crate::device::{DevBuf, Gpu};
use crate::gemm_lt::LtGemm;
use crate::kernels::{AttnInputs, DECODE_MAX_SPLITS};
use crate::kv_cache::KvCache;
use crate::step_plan::{StepLayout, StepPlan};
use crate::switches::Switches;
use crate::weights::ModelWeights;

/// Activation buffers, sized once for the largest step, at fixed addresses.
pub struct Activations {
    pub x: DevBuf<f32>,
    pub delta: DevBuf<f32>,
    pub normed: DevBuf<u16>,
    pub qkv: DevBuf<f32>,
    pub q: DevBuf<u16>,
    pub attn: DevBuf<u16>,
    pub gu: DevBuf<f32>,
    pub act: DevBuf<u16>,
    pub part_o: DevBuf<f32>,
    pub part_ml: DevBuf<f32>,
    pub logit_in: DevBuf<u16>,
    pub logits: DevBuf<f32>,
    pub ids: DevBuf<i32>,
    /// The packed per-step inputs (see step_plan.rs).
    pub step: DevBuf<i32>,
}

impl Activations {
    pub fn new(gpu: &Gpu, c: &ModelConfig, l: &StepLayout) -> Result<Activations> {
        let (t, s) = (l.max_tokens, l.max_seqs);
        let qkv_n = c.q_dim() + 2 * c.kv_dim();
        Ok(Activations {
            x: gpu.alloc(t * c.hidden_size)?,
            delta: gpu.alloc(t * c.hidden_size)?,
            normed: gpu.alloc(t * c.hidden_size)?,
            qkv: gpu.alloc(t * qkv_n)?,
            q: gpu.alloc(t * c.q_dim())?,
            attn: gpu.alloc(t * c.q_dim())?,
            gu: gpu.alloc(t * 2 * c.intermediate_size)?,
            act: gpu.alloc(t * c.intermediate_size)?,
            part_o: gpu.alloc(s * c.num_heads * DECODE_MAX_SPLITS * c.head_dim)?,
            part_ml: gpu.alloc(s * c.num_heads * DECODE_MAX_SPLITS * 2)?,
            logit_in: gpu.alloc(s * c.hidden_size)?,
            logits: gpu.alloc(s * c.vocab_size)?,
            ids: gpu.alloc(s)?,
            step: gpu.alloc(l.len)?,
        })
    }

    pub fn bytes(&self) -> usize {
        self.x.bytes()
            + self.delta.bytes()
            + self.normed.bytes()
            + self.qkv.bytes()
            + self.q.bytes()
            + self.attn.bytes()
            + self.gu.bytes()
            + self.act.bytes()
            + self.part_o.bytes()
            + self.part_ml.bytes()
            + self.logit_in.bytes()
            + self.logits.bytes()
            + self.ids.bytes()
            + self.step.bytes()
    }
}

/// Everything a step's launches read.
pub struct StepContext<'a> {
    pub gpu: &'a Gpu,
    pub cfg: &'a ModelConfig,
    pub w: &'a ModelWeights,
    pub kv: &'a KvCache,
    pub a: &'a Activations,
    pub layout: &'a StepLayout,
    pub sw: Switches,
}

impl StepContext<'_> {
    fn step_ptr(&self, section: usize) -> u64 {
        self.a.step.at(section)
    }

    /// y = x . w^T for `plan.n_tokens` rows: decode rows through the skinny kernel, prefill rows
    /// through cuBLASLt (or every row through cuBLASLt with KILN_SKINNY_GEMM=0).
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        lt: &mut LtGemm,
        plan: &StepPlan,
        y: u64,
        x: u64,
        w: u64,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let (t, d) = (
            plan.n_tokens,
            if self.sw.skinny_gemm {
                plan.n_decode
            } else {
                0
            },
        );
        self.gpu.skinny_gemm(y, x, w, d, n, k)?;
        lt.matmul(
            self.gpu,
            y + (d * n * 4) as u64,
            x + (d * k * 2) as u64,
            w,
            t - d,
            n,
            k,
        )
    }

    /// Queues the whole forward pass of a packed step; the logits of the rows that need them end
    /// in `a.logits` and their argmax in `a.ids`.
    pub fn run(&self, lt: &mut LtGemm, plan: &StepPlan) -> Result<()> {
        let (g, c, a, l) = (self.gpu, self.cfg, self.a, self.layout);
        let (t, h, hd) = (plan.n_tokens, c.hidden_size, c.head_dim);
        let (nq, inter) = (c.num_heads, c.intermediate_size);
        let qkv_n = c.q_dim() + 2 * c.kv_dim();
        let window = c.sliding_window.unwrap_or(0);
        let scale = 1.0 / (hd as f32).sqrt();
        let neox = matches!(c.rope_style, kiln_model::RopeStyle::Neox);
        let inp = AttnInputs {
            positions: self.step_ptr(l.positions),
            token_seq: self.step_ptr(l.token_seq),
            bt_start: self.step_ptr(l.bt_start),
            block_tables: self.step_ptr(l.block_tables),
        };
        let opt = |b: &Option<DevBuf<u16>>| b.as_ref().map_or(0, |b| b.ptr());
        g.embed_gather(a.x.ptr(), self.w.embed.ptr(), self.step_ptr(l.tokens), t, h)?;
        for (li, lw) in self.w.layers.iter().enumerate() {
            let kv = self.kv.view(li);
            let delta = if li == 0 { 0 } else { a.delta.ptr() };
            g.rmsnorm_residual(
                a.x.ptr(),
                delta,
                lw.attn_norm.ptr(),
                a.normed.ptr(),
                t,
                h,
                c.rms_norm_eps,
            )?;
            self.gemm(
                lt,
                plan,
                a.qkv.ptr(),
                a.normed.ptr(),
                lw.wqkv.ptr(),
                qkv_n,
                h,
            )?;
            g.qkv_prepare(
                a.qkv.ptr(),
                opt(&lw.qkv_bias),
                opt(&lw.q_norm),
                opt(&lw.k_norm),
                self.w.rope.ptr(),
                inp.positions,
                self.step_ptr(l.slots),
                a.q.ptr(),
                kv,
                t,
                nq,
                hd,
                neox,
                c.rms_norm_eps,
            )?;
            self.attention(plan, kv, &inp, window, scale)?;
            self.gemm(
                lt,
                plan,
                a.delta.ptr(),
                a.attn.ptr(),
                lw.wo.ptr(),
                h,
                c.q_dim(),
            )?;
            g.rmsnorm_residual(
                a.x.ptr(),
                a.delta.ptr(),
                lw.ffn_norm.ptr(),
                a.normed.ptr(),
                t,
                h,
                c.rms_norm_eps,
            )?;
            self.gemm(
                lt,
                plan,
                a.gu.ptr(),
                a.normed.ptr(),
                lw.w_gate_up.ptr(),
                2 * inter,
                h,
            )?;
            g.swiglu(a.gu.ptr(), a.act.ptr(), inter, t)?;
            self.gemm(
                lt,
                plan,
                a.delta.ptr(),
                a.act.ptr(),
                lw.w_down.ptr(),
                h,
                inter,
            )?;
        }
        let r = plan.n_logits;
        g.final_norm_rows(
            a.x.ptr(),
            a.delta.ptr(),
            self.step_ptr(l.logits_rows),
            self.w.out_norm.ptr(),
            a.logit_in.ptr(),
            r,
            h,
            c.rms_norm_eps,
        )?;
        // Logits rows always take the skinny kernel, so a row's logits never depend on the step.
        g.skinny_gemm(
            a.logits.ptr(),
            a.logit_in.ptr(),
            self.w.lm_head_ptr(),
            r,
            c.vocab_size,
            h,
        )?;
        g.argmax_rows(a.logits.ptr(), a.ids.ptr(), r, c.vocab_size)
    }

    fn attention(
        &self,
        plan: &StepPlan,
        kv: crate::kernels::KvView,
        inp: &AttnInputs,
        window: usize,
        scale: f32,
    ) -> Result<()> {
        let (g, c, a) = (self.gpu, self.cfg, self.a);
        let (nq, hd) = (c.num_heads, c.head_dim);
        if !self.sw.flash_attn {
            return g.ref_attn(
                a.q.ptr(),
                kv,
                inp,
                a.attn.ptr(),
                plan.n_tokens,
                nq,
                hd,
                window,
                scale,
            );
        }
        let d = plan.n_decode;
        if self.sw.split_decode {
            g.decode_attn(
                a.q.ptr(),
                kv,
                inp,
                a.part_o.ptr(),
                a.part_ml.ptr(),
                a.attn.ptr(),
                d,
                nq,
                hd,
                window,
                scale,
            )?;
        } else {
            g.ref_attn(a.q.ptr(), kv, inp, a.attn.ptr(), d, nq, hd, window, scale)?;
        }
        g.flash_attn(
            a.q.ptr(),
            kv,
            self.step_ptr(self.layout.tiles),
            plan.n_tiles,
            inp,
            a.attn.ptr(),
            nq,
            hd,
            window,
            scale,
        )
    }
}
