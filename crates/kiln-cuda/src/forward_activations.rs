//! The activation buffers a step's launches read and write (a child module of forward.rs).

use anyhow::Result;
use kiln_model::ModelSpec;

use crate::device::{DevBuf, Gpu};
use crate::kernels::{decode_part_splits, Partials};
use crate::step_plan::StepLayout;
use crate::store::StoreBuf;

/// Activation buffers, sized once for the largest step and the widest layer, at fixed
/// addresses: f32 where GEMMs write, the storage type where they read.
pub struct Activations {
    pub x: DevBuf<f32>,
    pub delta: DevBuf<f32>,
    pub normed: StoreBuf,
    pub qkv: DevBuf<f32>,
    pub q: StoreBuf,
    pub attn: StoreBuf,
    pub gu: DevBuf<f32>,
    pub act: StoreBuf,
    pub part_o: DevBuf<f32>,
    pub part_ml: DevBuf<f32>,
    pub logit_in: StoreBuf,
    pub logits: DevBuf<f32>,
    pub ids: DevBuf<i32>,
    /// The packed per-step inputs (see step_plan.rs).
    pub step: DevBuf<i32>,
    /// The per-layer inputs `[tokens, layers * width]`, one layer's gate of its slice and the
    /// gated slice `[tokens, width]` (empty without per-layer inputs).
    pub per_layer: DevBuf<f32>,
    pub pl_gate: DevBuf<f32>,
    pub pl_act: StoreBuf,
    /// A projection's input rows in fp8 and their scales (`--quantize fp8`; empty without).
    pub fp8_x: DevBuf<u8>,
    pub fp8_scale: DevBuf<f32>,
}

/// Elements of one token's per-layer inputs (every layer's) and of one layer's slice.
pub fn per_layer_widths(spec: &ModelSpec) -> (usize, usize) {
    let width = spec.per_layer_input.map_or(0, |p| p.width);
    (width * spec.layers.len(), width)
}

impl Activations {
    /// `fp8`: room for the fp8 input rows of the widest projection input.
    pub fn new(gpu: &Gpu, spec: &ModelSpec, l: &StepLayout, fp8: bool) -> Result<Activations> {
        let (t, s, h) = (l.max_tokens, l.max_seqs, spec.hidden_size);
        let widest = |f: fn(&kiln_model::LayerSpec) -> usize| spec.max_over_layers(f);
        let q_dim = widest(|l| l.attn.q_dim());
        let heads = widest(|l| l.attn.num_heads);
        let head_dim = widest(|l| l.attn.head_dim);
        let inter = widest(|l| l.ffn.intermediate());
        let fp8_k = if fp8 { inter.max(q_dim).max(h) } else { 0 };
        Ok(Activations {
            x: gpu.alloc(t * h)?,
            delta: gpu.alloc(t * h)?,
            normed: gpu.alloc_store(t * h)?,
            qkv: gpu.alloc(t * widest(|l| l.attn.qkv_rows()))?,
            q: gpu.alloc_store(t * q_dim)?,
            attn: gpu.alloc_store(t * q_dim)?,
            gu: gpu.alloc(t * 2 * inter)?,
            act: gpu.alloc_store(t * inter)?,
            part_o: gpu.alloc(s * heads * decode_part_splits() * head_dim)?,
            part_ml: gpu.alloc(s * heads * decode_part_splits() * 2)?,
            logit_in: gpu.alloc_store(s * h)?,
            logits: gpu.alloc(s * spec.vocab_size)?,
            ids: gpu.alloc(s)?,
            step: gpu.alloc(l.len)?,
            per_layer: gpu.alloc(t * per_layer_widths(spec).0)?,
            pl_gate: gpu.alloc(t * per_layer_widths(spec).1)?,
            pl_act: gpu.alloc_store(t * per_layer_widths(spec).1)?,
            fp8_x: gpu.alloc(t * fp8_k)?,
            fp8_scale: gpu.alloc(if fp8 { t } else { 0 })?,
        })
    }

    /// Where decode attention writes its splits for their combine.
    pub fn partials(&self) -> Partials {
        Partials {
            o: self.part_o.ptr(),
            ml: self.part_ml.ptr(),
        }
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
            + self.per_layer.bytes()
            + self.pl_gate.bytes()
            + self.pl_act.bytes()
            + self.fp8_x.bytes()
            + self.fp8_scale.bytes()
    }
}
