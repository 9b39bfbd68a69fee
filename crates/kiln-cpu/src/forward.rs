//! The layer program's ops on the CPU (`kiln_model::program::StepOps`): each op is one or two
//! kernel calls over the step's activations. The order of the ops is the model's, written once
//! in kiln-model; nothing here decides it.

use std::borrow::Cow;

use anyhow::{Context, Result};
use kiln_model::{Activation, LayerWeight, ModelSpec, StepOps};
use rayon::prelude::*;

use crate::kernels::{
    apply_rope, geglu, gelu_tanh, matmul, paged_attention, paged_attention_rounding, rmsnorm,
    rmsnorm_heads_in_place, rmsnorm_heads_unweighted_in_place, rmsnorm_row_in_place, silu, swiglu,
    AttentionShape, KvView, PackedMatrix, QueryRow, RopeTable, RoundProbs,
};
use crate::kv_cache::{PagedKvCache, TokenRows};
use crate::rounding::{Narrow, Rounding};
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
    /// V of the layers that take it from K (`[rows, kv_dim]`), apart from `qkv`.
    v: Vec<f32>,
    /// The per-layer inputs, `[rows, layers * width]`; `pl_gate` and `pl_act`, `[rows, width]`.
    per_layer: Vec<f32>,
    pl_gate: Vec<f32>,
    pl_act: Vec<f32>,
}

/// What a draft model's step reads from its target and hands on
/// (`kiln_model::program::run_draft_step`).
pub(crate) struct DraftIo<'a> {
    /// The target's weights, for the embedding of each row's token.
    pub target: &'a ModelWeights,
    /// `[rows, backbone]`: the hidden state each row starts from; after the step, the one it
    /// gives the next.
    pub hidden: Vec<f32>,
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
    /// A narrower backend's roundings, emulated (None: plain f32).
    rounding: Option<Rounding>,
    /// Rows still computed that belong to chunks longer than one token (prefill rows).
    prefill: Cow<'a, [bool]>,
    /// The step's result, filled by `logits`.
    pub logits: Vec<f32>,
    /// The final-normed rows the LM head read, `[logit rows, hidden]` (a draft model starts
    /// from them).
    pub final_normed: Vec<f32>,
    /// A draft model's step: its target's part.
    pub draft: Option<DraftIo<'a>>,
    /// With a KV ring: which layers' caches are rings and which layers read one, and the rows
    /// as those layers read them (still computed, like `rows`).
    ring: Option<(&'a RingLayers, Cow<'a, [QueryRow<'a>]>)>,
}

/// Which layers keep their KV in the ring (`ModelSpec::ring_caches`) and which read a ring
/// (`ModelSpec::reads_ring`).
pub(crate) struct RingLayers {
    pub caches: Vec<bool>,
    pub reads: Vec<bool>,
}

impl<'a> CpuOps<'a> {
    pub fn new(
        spec: &'a ModelSpec,
        weights: &'a ModelWeights,
        kv: &'a mut PagedKvCache,
        plan: &'a StepPlan<'a>,
        rounding: Option<Rounding>,
    ) -> CpuOps<'a> {
        let t = plan.tokens.len();
        let hidden = spec.hidden_size;
        let widest = |f: fn(&kiln_model::LayerSpec) -> usize| t * spec.max_over_layers(f);
        let pl_width = spec.per_layer_input.map_or(0, |p| p.width);
        let a = Activations {
            hidden: vec![0.0; t * hidden],
            normed: vec![0.0; t * hidden],
            qkv: vec![0.0; widest(|l| l.attn.qkv_rows())],
            attn: vec![0.0; widest(|l| l.attn.q_dim())],
            proj: vec![0.0; t * hidden],
            gate_up: vec![0.0; widest(|l| 2 * l.ffn.intermediate())],
            act: vec![0.0; widest(|l| l.ffn.intermediate())],
            v: vec![0.0; widest(|l| if l.attn.v_from_k { l.attn.kv_dim() } else { 0 })],
            per_layer: vec![0.0; t * pl_width * spec.layers.len()],
            pl_gate: vec![0.0; t * pl_width],
            pl_act: vec![0.0; t * pl_width],
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
            rounding,
            prefill: Cow::Borrowed(plan.prefill.as_slice()),
            logits: Vec::new(),
            final_normed: Vec::new(),
            draft: None,
            ring: None,
        }
    }

    /// Ring layers write their KV at the plan's ring slots and read through `rows`, the ring
    /// tables' view of the plan's rows.
    pub fn with_ring(mut self, layers: &'a RingLayers, rows: &'a [QueryRow<'a>]) -> CpuOps<'a> {
        self.ring = Some((layers, Cow::Borrowed(rows)));
        self
    }

    /// The format projection inputs are rounded to, when emulating a narrower backend.
    fn gemm_rounding(&self) -> Option<Narrow> {
        self.rounding.filter(|r| r.gemm_inputs).map(|r| r.format)
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

    /// Width of one token's per-layer inputs (every layer's).
    fn per_layer_row(&self) -> usize {
        self.spec
            .per_layer_input
            .map_or(0, |p| p.width * self.spec.layers.len())
    }
}

impl StepOps for CpuOps<'_> {
    fn embed(&mut self) -> Result<()> {
        let h = self.spec.hidden_size;
        for (row, &token) in self.a.hidden.chunks_exact_mut(h).zip(&self.plan.tokens) {
            self.weights.embed(token, row);
            if let Some(scale) = self.spec.embed_scale {
                row.iter_mut().for_each(|x| *x *= scale);
            }
        }
        Ok(())
    }

    fn per_layer_inputs(&mut self) -> Result<()> {
        let ple = self
            .spec
            .per_layer_input
            .context("the model has no per-layer inputs")?;
        let w = self
            .weights
            .per_layer
            .as_ref()
            .context("the per-layer input weights are not loaded")?;
        let (h, n, all) = (self.spec.hidden_size, self.n(), self.per_layer_row());
        let x = rounded(&self.a.hidden[..n * h], self.gemm_rounding());
        let out = &mut self.a.per_layer[..n * all];
        matmul(&x, &w.projection, out);
        // (rmsnorm(proj(x) * s) + table[token] * t) * m, in transformers' order.
        out.par_chunks_mut(all)
            .zip(&self.plan.tokens)
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each_init(Vec::new, |table_row, (row, &token)| {
                table_row.resize(all, 0.0);
                w.table.copy_row(token as usize, table_row);
                for (layer, t) in row
                    .chunks_exact_mut(ple.width)
                    .zip(table_row.chunks_exact(ple.width))
                {
                    layer.iter_mut().for_each(|x| *x *= ple.projection_scale);
                    rmsnorm_row_in_place(layer, &w.norm, ple.norm_eps);
                    for (x, &e) in layer.iter_mut().zip(t) {
                        *x = (*x + e * ple.table_scale) * ple.mix_scale;
                    }
                }
            });
        Ok(())
    }

    fn norm_delta(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
        anyhow::ensure!(
            self.pending,
            "{weight:?} of layer {layer}: no block output to norm"
        );
        let h = self.spec.hidden_size;
        let n = self.n() * h;
        let w = self.weights.layers[layer].norm(weight);
        let eps = self.spec.layers[layer].norm_eps;
        self.a.proj[..n]
            .par_chunks_mut(h)
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|row| rmsnorm_row_in_place(row, w, eps));
        Ok(())
    }

    fn per_layer_activation(&mut self, layer: usize) -> Result<()> {
        let ple = self
            .spec
            .per_layer_input
            .context("the model has no per-layer inputs")?;
        let (w, all, n) = (ple.width, self.per_layer_row(), self.n());
        let act = activation_fn(ple.act);
        let inputs = &self.a.per_layer[..n * all];
        self.a.pl_act[..n * w]
            .par_chunks_mut(w)
            .zip(self.a.pl_gate[..n * w].par_chunks(w))
            .zip(inputs.par_chunks(all))
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|((out, gate), input)| {
                let input = &input[layer * w..][..w];
                for ((o, &g), &x) in out.iter_mut().zip(gate).zip(input) {
                    *o = act(g) * x;
                }
            });
        Ok(())
    }

    fn scale_residual(&mut self, layer: usize) -> Result<()> {
        self.add_pending();
        let scale = self.weights.layers[layer].norm(LayerWeight::OutputScale)[0];
        let n = self.n() * self.spec.hidden_size;
        self.a.hidden[..n].iter_mut().for_each(|x| *x *= scale);
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
        if weight == LayerWeight::PerLayerGate {
            self.add_pending();
        }
        let w = self.weights.layers[layer].matrix(weight);
        let narrow = self.gemm_rounding();
        let (n, a) = (self.n(), &mut self.a);
        let (x, y): (&[f32], &mut [f32]) = match weight {
            LayerWeight::Qkv => (&a.normed, &mut a.qkv),
            LayerWeight::O => (&a.attn, &mut a.proj),
            LayerWeight::GateUp => (&a.normed, &mut a.gate_up),
            LayerWeight::Down => (&a.act, &mut a.proj),
            LayerWeight::PerLayerGate => (&a.hidden, &mut a.pl_gate),
            LayerWeight::PerLayerProj => (&a.pl_act, &mut a.proj),
            other => anyhow::bail!("{other:?} is not a projection"),
        };
        let x = rounded(&x[..n * w.cols()], narrow);
        match self.weights.layers[layer].fp8_scales(weight) {
            None => matmul(&x, w, &mut y[..n * w.rows()]),
            Some(w_scales) => fp8_matmul(x.into_owned(), w, w_scales, &mut y[..n * w.rows()]),
        }
        match weight {
            LayerWeight::Qkv => self.qkv_stride = w.rows(),
            LayerWeight::O | LayerWeight::Down | LayerWeight::PerLayerProj => self.pending = true,
            _ => {}
        }
        Ok(())
    }

    fn qkv_rope_kv(&mut self, layer: usize) -> Result<()> {
        let spec = &self.spec.layers[layer];
        let at = &spec.attn;
        let (hd, eps) = (at.head_dim, spec.norm_eps);
        let (q_dim, k_rows, stride) = (at.q_dim(), at.k_rows(), at.qkv_rows());
        let kv_dim = at.kv_dim();
        let lw = &self.weights.layers[layer];
        let bias = lw.vector(LayerWeight::QkvBias);
        let (q_norm, k_norm) = (lw.vector(LayerWeight::QNorm), lw.vector(LayerWeight::KNorm));
        let rope = &self.ropes[at.rope];
        let style = self.spec.ropes[at.rope].style;
        let rounding = self.rounding;
        let n = self.rows.len();
        let qkv = &mut self.a.qkv[..n * stride];
        // V taken from K has no room in `qkv`: it goes to `v`, one kv_dim row per token.
        let v_width = if at.v_from_k { kv_dim } else { 0 };
        let v_extra = &mut self.a.v[..n * v_width];
        let mut v_rows: Vec<&mut [f32]> = match v_width {
            0 => (0..n).map(|_| <&mut [f32]>::default()).collect(),
            w => v_extra.chunks_exact_mut(w).collect(),
        };
        qkv.par_chunks_mut(stride)
            .zip(v_rows.par_iter_mut())
            .enumerate()
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|(t, (row, v_out))| {
                if let Some(bias) = bias {
                    for (x, b) in row.iter_mut().zip(bias) {
                        *x += b;
                    }
                }
                let (q, rest) = row.split_at_mut(q_dim);
                let (k, v) = rest.split_at_mut(k_rows);
                let v: &mut [f32] = match at.v_from_k {
                    // transformers takes V from K before K's norm and RoPE.
                    true if k_rows > 0 => {
                        v_out.copy_from_slice(k);
                        v_out
                    }
                    _ => v,
                };
                if let Some(qn) = q_norm {
                    rmsnorm_heads_in_place(q, qn, eps);
                }
                if let Some(kn) = k_norm {
                    rmsnorm_heads_in_place(k, kn, eps);
                }
                if at.v_norm && !v.is_empty() {
                    rmsnorm_heads_unweighted_in_place(v, hd, eps);
                }
                let (cos, sin) = rope.row(t);
                apply_rope(q, hd, cos, sin, style);
                apply_rope(k, hd, cos, sin, style);
                if let Some(r) = rounding {
                    if r.q {
                        r.format.round_all(q);
                    }
                    if r.kv {
                        r.format.round_all(k);
                        r.format.round_all(v);
                    }
                }
            });
        if at.writes_kv() {
            let k = TokenRows {
                data: qkv,
                stride,
                offset: q_dim,
            };
            let v = match at.v_from_k {
                true => TokenRows {
                    data: &self.a.v[..n * kv_dim],
                    stride: kv_dim,
                    offset: 0,
                },
                false => TokenRows {
                    data: qkv,
                    stride,
                    offset: q_dim + kv_dim,
                },
            };
            let slots = match &self.ring {
                Some((r, _)) if r.caches[layer] => &self.plan.ring_slots,
                _ => &self.plan.slots,
            };
            self.kv.write(layer, slots, k, v);
        }
        Ok(())
    }

    fn keep_logit_rows(&mut self) -> Result<()> {
        let keep = &self.plan.logit_rows;
        let h = self.spec.hidden_size;
        let stride = self.qkv_stride;
        let per_layer = self.per_layer_row();
        self.add_pending();
        let a = &mut self.a;
        for (buf, width) in [
            (&mut a.hidden, h),
            (&mut a.qkv, stride),
            (&mut a.per_layer, per_layer),
        ] {
            for (dst, &src) in keep.iter().enumerate() {
                buf.copy_within(src * width..(src + 1) * width, dst * width);
            }
        }
        self.rows = Cow::Owned(keep.iter().map(|&r| self.plan.rows[r]).collect());
        if let Some((_, rows)) = &mut self.ring {
            *rows = Cow::Owned(keep.iter().map(|&r| rows[r]).collect());
        }
        self.prefill = Cow::Owned(keep.iter().map(|&r| self.plan.prefill[r]).collect());
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
        let cache = self.kv.layer(at.kv_layer(layer));
        let stride = at.qkv_rows();
        let n = self.rows.len();
        let (q, out) = (
            &self.a.qkv[..n * stride],
            &mut self.a.attn[..n * at.q_dim()],
        );
        let kv = KvView {
            k: &cache.k,
            v: &cache.v,
        };
        let rows: &[QueryRow<'_>] = match &self.ring {
            Some((r, ring_rows)) if r.reads[layer] => ring_rows,
            _ => &self.rows,
        };
        let round_rows: Vec<bool> = match self.rounding {
            Some(r) => self
                .prefill
                .iter()
                .map(|&p| r.rounds_probs(p, at.head_dim))
                .collect(),
            None => Vec::new(),
        };
        match self.rounding.filter(|_| round_rows.contains(&true)) {
            None => paged_attention(&shape, at.scale, q, stride, rows, kv, out),
            Some(r) => {
                let round: fn(f32) -> f32 = match r.format {
                    Narrow::Bf16 => |x| Narrow::Bf16.round(x),
                    Narrow::F16 => |x| Narrow::F16.round(x),
                };
                let probs = RoundProbs {
                    round,
                    rows: &round_rows,
                };
                paged_attention_rounding(&shape, at.scale, q, stride, rows, kv, out, probs)
            }
        }
        Ok(())
    }

    fn ffn_activation(&mut self, layer: usize) -> Result<()> {
        let ffn = &self.spec.layers[layer].ffn;
        let inter = ffn.intermediate();
        let n = self.n();
        let (gate_up, out) = (
            &self.a.gate_up[..n * 2 * inter],
            &mut self.a.act[..n * inter],
        );
        match ffn.activation() {
            Activation::Silu => swiglu(gate_up, inter, out),
            Activation::GeluTanh => geglu(gate_up, inter, out),
        }
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
        if let Some(f) = self.gemm_rounding() {
            f.round_all(&mut normed);
        }
        let mut logits = vec![0.0; self.n() * self.spec.vocab_size];
        matmul(&normed, &self.weights.lm_head, &mut logits);
        if let Some(cap) = self.spec.logit_softcap {
            // transformers: logits / cap, tanh, * cap.
            logits.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
        }
        let ordered = self.spec.draft.and_then(|d| d.ordered);
        if let (Some(o), Some(w)) = (ordered, &self.weights.draft) {
            let (Some(centroids), Some(ordering)) = (&w.centroids, &w.ordering) else {
                anyhow::bail!("the ordered LM head's centroids are not loaded");
            };
            crate::draft_head::keep_best_centroids(&mut logits, &normed, centroids, ordering, o);
        }
        self.logits = logits;
        self.final_normed = normed;
        Ok(())
    }

    fn draft_input(&mut self) -> Result<()> {
        let d = self.spec.draft.context("the model is not a draft model")?;
        let w = self
            .weights
            .draft
            .as_ref()
            .context("no draft projections")?;
        let io = self
            .draft
            .as_ref()
            .context("a draft step without its target")?;
        let (b, n, h) = (d.backbone_hidden, self.n(), self.spec.hidden_size);
        anyhow::ensure!(
            io.hidden.len() == n * b,
            "draft hidden states of the wrong size"
        );
        let mut input = vec![0.0; n * 2 * b];
        let rows = input.chunks_exact_mut(2 * b).zip(&self.plan.tokens);
        for ((row, &token), hidden) in rows.zip(io.hidden.chunks_exact(b)) {
            // [the target's scaled embedding, its hidden state], as transformers concatenates.
            let (embed, rest) = row.split_at_mut(b);
            io.target.embed(token, embed);
            embed.iter_mut().for_each(|x| *x *= d.input_embed_scale);
            rest.copy_from_slice(hidden);
        }
        if let Some(f) = self.gemm_rounding() {
            f.round_all(&mut input);
        }
        matmul(&input, &w.pre, &mut self.a.hidden[..n * h]);
        Ok(())
    }

    fn draft_output(&mut self) -> Result<()> {
        let w = self
            .weights
            .draft
            .as_ref()
            .context("no draft projections")?;
        let io = self
            .draft
            .as_mut()
            .context("a draft step without its target")?;
        io.hidden.resize(self.rows.len() * w.post.rows(), 0.0);
        matmul(&self.final_normed, &w.post, &mut io.hidden);
        Ok(())
    }
}

/// The scalar function of an activation.
fn activation_fn(a: Activation) -> fn(f32) -> f32 {
    match a {
        Activation::Silu => silu,
        Activation::GeluTanh => gelu_tanh,
    }
}

/// `x`, or a copy rounded to `narrow`.
fn rounded(x: &[f32], narrow: Option<Narrow>) -> Cow<'_, [f32]> {
    match narrow {
        None => Cow::Borrowed(x),
        Some(f) => Cow::Owned(x.iter().map(|&v| f.round(v)).collect()),
    }
}

/// y = x . w^T for an fp8 projection: `w` holds E4M3 values with a scale a row, and x's rows
/// are quantised the same way first; the products of the values are summed, then each output
/// is multiplied by its two scales (their product first), as the GPU's fp8 GEMM applies them.
fn fp8_matmul(mut x: Vec<f32>, w: &PackedMatrix, w_scales: &[f32], y: &mut [f32]) {
    let x_scales: Vec<f32> = x
        .chunks_exact_mut(w.cols())
        .map(kiln_formats::fp8::quantize_values)
        .collect();
    matmul(&x, w, y);
    for (row, &sx) in y.chunks_exact_mut(w.rows()).zip(&x_scales) {
        for (v, &sw) in row.iter_mut().zip(w_scales) {
            *v *= sx * sw;
        }
    }
}

fn add_assign(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}
