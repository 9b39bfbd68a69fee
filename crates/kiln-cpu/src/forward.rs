//! The layer program's ops on the CPU (`kiln_model::program::StepOps`): each op is one or two
//! kernel calls over the step's activations. The order of the ops is the model's, written once
//! in kiln-model; nothing here decides it.

use std::borrow::Cow;

use anyhow::Result;
use kiln_model::{LayerWeight, ModelSpec, StepOps};
use rayon::prelude::*;

use crate::kernels::{
    apply_rope, matmul, paged_attention, rmsnorm, rmsnorm_heads_in_place, swiglu, AttentionShape,
    KvView, QueryRow, RopeTable,
};
use crate::kv_cache::PagedKvCache;
use crate::step_plan::StepPlan;
use crate::weights::ModelWeights;

/// Rows per parallel task for the cheap per-row work between matmuls.
const MIN_ROWS_PER_TASK: usize = 16;

/// Per-step activations, `[rows, width]` each, sized for the widest layer.
struct Activations {
    /// The residual stream (`x`).
    hidden: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    /// `delta`: the last block's output.
    proj: Vec<f32>,
    gate_up: Vec<f32>,
    act: Vec<f32>,
}

/// One step's ops: the model, the cache it writes, the step's rows and activations.
pub(crate) struct CpuOps<'a> {
    spec: &'a ModelSpec,
    weights: &'a ModelWeights,
    kv: &'a mut PagedKvCache,
    plan: &'a StepPlan<'a>,
    /// cos/sin of every row's position, one table per RoPE of the spec.
    ropes: Vec<RopeTable>,
    a: Activations,
    /// Rows still computed: every token, until `keep_logit_rows`.
    rows: Cow<'a, [QueryRow<'a>]>,
    /// `proj` holds a block's output not yet added to `hidden`.
    pending: bool,
    /// Row stride of `qkv` as the last QKV projection wrote it.
    qkv_stride: usize,
    /// The step's result, filled by `logits`.
    pub logits: Vec<f32>,
}

impl<'a> CpuOps<'a> {
    pub fn new(
        spec: &'a ModelSpec,
        weights: &'a ModelWeights,
        kv: &'a mut PagedKvCache,
        plan: &'a StepPlan<'a>,
    ) -> CpuOps<'a> {
        let t = plan.tokens.len();
        let hidden = spec.hidden_size;
        let widest = |f: fn(&kiln_model::LayerSpec) -> usize| t * spec.max_over_layers(f);
        let a = Activations {
            hidden: vec![0.0; t * hidden],
            normed: vec![0.0; t * hidden],
            qkv: vec![0.0; widest(|l| l.attn.qkv_rows())],
            attn: vec![0.0; widest(|l| l.attn.q_dim())],
            proj: vec![0.0; t * hidden],
            gate_up: vec![0.0; widest(|l| 2 * l.ffn.intermediate())],
            act: vec![0.0; widest(|l| l.ffn.intermediate())],
        };
        let ropes = spec
            .ropes
            .iter()
            .map(|r| RopeTable::new(&r.inv_freq, r.attention_factor, &plan.positions))
            .collect();
        CpuOps {
            spec,
            weights,
            kv,
            plan,
            ropes,
            a,
            rows: Cow::Borrowed(plan.rows.as_slice()),
            pending: false,
            qkv_stride: 0,
            logits: Vec::new(),
        }
    }

    fn n(&self) -> usize {
        self.rows.len()
    }

    /// `hidden += proj` if a block's output is pending.
    fn add_pending(&mut self) {
        if std::mem::take(&mut self.pending) {
            let n = self.n() * self.spec.hidden_size;
            add_assign(&mut self.a.hidden[..n], &self.a.proj[..n]);
        }
    }
}

impl StepOps for CpuOps<'_> {
    fn embed(&mut self) -> Result<()> {
        let h = self.spec.hidden_size;
        for (row, &token) in self.a.hidden.chunks_exact_mut(h).zip(&self.plan.tokens) {
            self.weights.embed(token, row);
        }
        Ok(())
    }

    fn add_norm(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
        self.add_pending();
        let n = self.n() * self.spec.hidden_size;
        let w = self.weights.layers[layer].norm(weight);
        let eps = self.spec.layers[layer].norm_eps;
        rmsnorm(&self.a.hidden[..n], w, eps, &mut self.a.normed[..n]);
        Ok(())
    }

    fn linear(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
        let w = self.weights.layers[layer].matrix(weight);
        let (n, a) = (self.n(), &mut self.a);
        let (x, y): (&[f32], &mut [f32]) = match weight {
            LayerWeight::Qkv => (&a.normed, &mut a.qkv),
            LayerWeight::O => (&a.attn, &mut a.proj),
            LayerWeight::GateUp => (&a.normed, &mut a.gate_up),
            LayerWeight::Down => (&a.act, &mut a.proj),
            other => anyhow::bail!("{other:?} is not a projection"),
        };
        matmul(&x[..n * w.cols()], w, &mut y[..n * w.rows()]);
        match weight {
            LayerWeight::Qkv => self.qkv_stride = w.rows(),
            LayerWeight::O | LayerWeight::Down => self.pending = true,
            _ => {}
        }
        Ok(())
    }

    fn qkv_rope_kv(&mut self, layer: usize) -> Result<()> {
        let spec = &self.spec.layers[layer];
        let at = &spec.attn;
        let (hd, eps) = (at.head_dim, spec.norm_eps);
        let (q_dim, kv_dim, stride) = (at.q_dim(), at.kv_dim(), at.qkv_rows());
        let lw = &self.weights.layers[layer];
        let bias = lw.vector(LayerWeight::QkvBias);
        let norms = lw
            .vector(LayerWeight::QNorm)
            .zip(lw.vector(LayerWeight::KNorm));
        let rope = &self.ropes[at.rope];
        let style = self.spec.ropes[at.rope].style;
        let qkv = &mut self.a.qkv[..self.rows.len() * stride];
        qkv.par_chunks_mut(stride)
            .enumerate()
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|(t, row)| {
                if let Some(bias) = bias {
                    for (x, b) in row.iter_mut().zip(bias) {
                        *x += b;
                    }
                }
                let (q, rest) = row.split_at_mut(q_dim);
                let k = &mut rest[..kv_dim];
                if let Some((qn, kn)) = norms {
                    rmsnorm_heads_in_place(q, qn, eps);
                    rmsnorm_heads_in_place(k, kn, eps);
                }
                let (cos, sin) = rope.row(t);
                apply_rope(q, hd, cos, sin, style);
                apply_rope(k, hd, cos, sin, style);
            });
        self.kv
            .write(layer, &self.plan.slots, qkv, stride, q_dim, q_dim + kv_dim);
        Ok(())
    }

    fn keep_logit_rows(&mut self) -> Result<()> {
        let keep = &self.plan.logit_rows;
        let h = self.spec.hidden_size;
        let stride = self.qkv_stride;
        self.add_pending();
        for (buf, width) in [(&mut self.a.hidden, h), (&mut self.a.qkv, stride)] {
            for (dst, &src) in keep.iter().enumerate() {
                buf.copy_within(src * width..(src + 1) * width, dst * width);
            }
        }
        self.rows = Cow::Owned(keep.iter().map(|&r| self.plan.rows[r]).collect());
        Ok(())
    }

    fn attention(&mut self, layer: usize) -> Result<()> {
        let at = &self.spec.layers[layer].attn;
        let shape = AttentionShape {
            num_heads: at.num_heads,
            num_kv_heads: at.num_kv_heads,
            head_dim: at.head_dim,
            block_size: self.kv.geometry.block_size,
            window: at.window,
        };
        let cache = self.kv.layer(layer);
        let stride = at.qkv_rows();
        let n = self.rows.len();
        paged_attention(
            &shape,
            at.scale,
            &self.a.qkv[..n * stride],
            stride,
            &self.rows,
            KvView {
                k: &cache.k,
                v: &cache.v,
            },
            &mut self.a.attn[..n * at.q_dim()],
        );
        Ok(())
    }

    fn ffn_activation(&mut self, layer: usize) -> Result<()> {
        let inter = self.spec.layers[layer].ffn.intermediate();
        let n = self.n();
        swiglu(
            &self.a.gate_up[..n * 2 * inter],
            inter,
            &mut self.a.act[..n * inter],
        );
        Ok(())
    }

    fn logits(&mut self) -> Result<()> {
        self.add_pending();
        let h = self.spec.hidden_size;
        let hidden = &self.a.hidden[..self.n() * h];
        let mut normed = vec![0.0; hidden.len()];
        rmsnorm(
            hidden,
            &self.weights.output_norm,
            self.spec.norm_eps,
            &mut normed,
        );
        let mut logits = vec![0.0; self.n() * self.spec.vocab_size];
        matmul(&normed, &self.weights.lm_head, &mut logits);
        self.logits = logits;
        Ok(())
    }
}

fn add_assign(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}
