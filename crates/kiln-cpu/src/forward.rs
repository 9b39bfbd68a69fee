//! One step of the decoder over all its tokens: embeddings, the layers, and logits for the
//! rows that want them. The model reads like the papers: norm, attention, residual, norm,
//! feed-forward, residual.

use std::borrow::Cow;

use kiln_model::ModelConfig;
use rayon::prelude::*;

use crate::kernels::{
    apply_rope, matmul, paged_attention, rmsnorm, rmsnorm_heads_in_place, swiglu, AttentionShape,
    KvView, RopeTable,
};
use crate::kv_cache::PagedKvCache;
use crate::step_plan::StepPlan;
use crate::weights::{LayerWeights, ModelWeights};

/// Rows per parallel task for the cheap per-row work between matmuls.
const MIN_ROWS_PER_TASK: usize = 16;

/// RoPE's inverse frequencies and cos/sin factor, computed once from the config.
pub(crate) struct RopeFreqs {
    pub inv_freq: Vec<f32>,
    pub attention_factor: f32,
}

/// Everything a step reads but does not change.
pub(crate) struct Model<'a> {
    pub cfg: &'a ModelConfig,
    pub weights: &'a ModelWeights,
    pub rope: &'a RopeFreqs,
}

/// Per-step activations, `[tokens, width]` each.
struct Activations {
    /// The residual stream.
    hidden: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    proj: Vec<f32>,
    gate_up: Vec<f32>,
    act: Vec<f32>,
}

impl Activations {
    /// Keeps only rows `keep` (ascending) of the residual stream and the Q/K/V rows, and
    /// shrinks the other buffers to match.
    fn keep_rows(&mut self, keep: &[usize], cfg: &ModelConfig) {
        let stride = cfg.q_dim() + 2 * cfg.kv_dim();
        for (buf, width) in [(&mut self.hidden, cfg.hidden_size), (&mut self.qkv, stride)] {
            for (dst, &src) in keep.iter().enumerate() {
                buf.copy_within(src * width..(src + 1) * width, dst * width);
            }
            buf.truncate(keep.len() * width);
        }
        let n = keep.len();
        self.normed.truncate(n * cfg.hidden_size);
        self.attn.truncate(n * cfg.q_dim());
        self.proj.truncate(n * cfg.hidden_size);
        self.gate_up.truncate(n * 2 * cfg.intermediate_size);
        self.act.truncate(n * cfg.intermediate_size);
    }
}

impl Model<'_> {
    /// Runs the step and returns `vocab_size` logits per entry of `plan.logit_rows`.
    pub fn forward(&self, kv: &mut PagedKvCache, plan: &StepPlan<'_>) -> Vec<f32> {
        let cfg = self.cfg;
        let tokens = plan.tokens.len();
        let (hidden, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let q_dim = cfg.num_heads * cfg.head_dim;
        let kv_dim = cfg.num_kv_heads * cfg.head_dim;
        let mut a = Activations {
            hidden: vec![0.0; tokens * hidden],
            normed: vec![0.0; tokens * hidden],
            qkv: vec![0.0; tokens * (q_dim + 2 * kv_dim)],
            attn: vec![0.0; tokens * q_dim],
            proj: vec![0.0; tokens * hidden],
            gate_up: vec![0.0; tokens * 2 * inter],
            act: vec![0.0; tokens * inter],
        };
        for (row, &token) in a.hidden.chunks_exact_mut(hidden).zip(&plan.tokens) {
            self.weights.embed(token, row);
        }
        let rope = RopeTable::new(
            &self.rope.inv_freq,
            self.rope.attention_factor,
            &plan.positions,
        );
        for (index, layer) in self.weights.layers.iter().enumerate() {
            self.attention_block(layer, index, kv, plan, &rope, &mut a);
            self.feed_forward_block(layer, &mut a);
        }
        self.logits(&a.hidden)
    }

    fn attention_block(
        &self,
        layer: &LayerWeights,
        index: usize,
        kv: &mut PagedKvCache,
        plan: &StepPlan<'_>,
        rope: &RopeTable,
        a: &mut Activations,
    ) {
        let cfg = self.cfg;
        let (hd, eps) = (cfg.head_dim, cfg.rms_norm_eps);
        let q_dim = cfg.num_heads * hd;
        let kv_dim = cfg.num_kv_heads * hd;
        let stride = q_dim + 2 * kv_dim;

        rmsnorm(&a.hidden, &layer.attn_norm, eps, &mut a.normed);
        matmul(&a.normed, &layer.qkv, &mut a.qkv);
        a.qkv
            .par_chunks_mut(stride)
            .enumerate()
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|(t, row)| {
                if let Some(bias) = &layer.qkv_bias {
                    for (x, b) in row.iter_mut().zip(bias) {
                        *x += b;
                    }
                }
                let (q, rest) = row.split_at_mut(q_dim);
                let k = &mut rest[..kv_dim];
                if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                    rmsnorm_heads_in_place(q, qn, eps);
                    rmsnorm_heads_in_place(k, kn, eps);
                }
                let (cos, sin) = rope.row(t);
                apply_rope(q, hd, cos, sin, cfg.rope_style);
                apply_rope(k, hd, cos, sin, cfg.rope_style);
            });
        kv.write(index, &plan.slots, &a.qkv, stride, q_dim, q_dim + kv_dim);
        // In the last layer only the rows that want logits go on; the others' keys and values
        // are in the cache, which is all later steps need of them.
        let rows = if index + 1 == self.weights.layers.len() {
            a.keep_rows(&plan.logit_rows, cfg);
            Cow::Owned(plan.logit_rows.iter().map(|&r| plan.rows[r]).collect())
        } else {
            Cow::Borrowed(plan.rows.as_slice())
        };

        let shape = AttentionShape {
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: hd,
            block_size: kv.geometry.block_size,
            window: cfg.sliding_window,
        };
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        let cache = &kv.layers[index];
        let cache = KvView {
            k: &cache.k,
            v: &cache.v,
        };
        paged_attention(&shape, scale, &a.qkv, stride, &rows, cache, &mut a.attn);
        matmul(&a.attn, &layer.o, &mut a.proj);
        add_assign(&mut a.hidden, &a.proj);
    }

    fn feed_forward_block(&self, layer: &LayerWeights, a: &mut Activations) {
        rmsnorm(
            &a.hidden,
            &layer.ffn_norm,
            self.cfg.rms_norm_eps,
            &mut a.normed,
        );
        matmul(&a.normed, &layer.gate_up, &mut a.gate_up);
        swiglu(&a.gate_up, self.cfg.intermediate_size, &mut a.act);
        matmul(&a.act, &layer.down, &mut a.proj);
        add_assign(&mut a.hidden, &a.proj);
    }

    /// Final norm and LM head of the rows left after the last layer.
    fn logits(&self, hidden: &[f32]) -> Vec<f32> {
        let rows = hidden.len() / self.cfg.hidden_size;
        let mut normed = vec![0.0; hidden.len()];
        rmsnorm(
            hidden,
            &self.weights.output_norm,
            self.cfg.rms_norm_eps,
            &mut normed,
        );
        let mut logits = vec![0.0; rows * self.cfg.vocab_size];
        matmul(&normed, &self.weights.lm_head, &mut logits);
        logits
    }
}

fn add_assign(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}
