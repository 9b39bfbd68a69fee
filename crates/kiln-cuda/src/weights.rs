//! The model's weights on the device, in the backend's storage type (bf16 unless asked
//! otherwise), laid out once at load in the fused layout of `kiln_model::schema` (Q/K/V one
//! matrix, gate/up another, so a layer runs four GEMMs). Dummy models are generated on the
//! device by the same pure function the host uses, so an 8B dummy model loads in seconds.

use anyhow::{bail, ensure, Context, Result};
use kiln_model::schema::{self, Fused, GlobalWeight, LayerWeight};
use kiln_model::{DummyFill, ModelSpec, TensorId, WeightSource};

use crate::device::{DevBuf, Gpu};
use crate::store::StoreBuf;

/// f32 staging for file weights: uploaded in pieces of this many elements, converted on the device.
const STAGING_ELEMS: usize = 1 << 24;

/// One layer's weights as the schema names them (`kiln_model::schema`), each in one buffer.
pub struct LayerWeights {
    bufs: [Option<StoreBuf>; LayerWeight::ALL.len()],
}

impl LayerWeights {
    /// The weight's address; 0 when the layer has none (optional bias and Q/K norms).
    pub fn ptr(&self, w: LayerWeight) -> u64 {
        self.bufs[w.index()].as_ref().map_or(0, |b| b.ptr())
    }
}

/// Gemma 4's per-layer input weights: the token table `[vocab, layers * width]` (gathered by
/// id on the device), the projection of the embedding `[layers * width, hidden]` and its norm.
pub struct PerLayerWeights {
    pub table: StoreBuf,
    pub projection: StoreBuf,
    pub norm: StoreBuf,
}

pub struct ModelWeights {
    pub embed: StoreBuf,
    pub out_norm: StoreBuf,
    /// None when the LM head is the embedding.
    pub lm_head: Option<StoreBuf>,
    /// None when the model has no per-layer inputs.
    pub per_layer: Option<PerLayerWeights>,
    pub layers: Vec<LayerWeights>,
    /// One per RoPE of the spec: cos/sin per (position, pair), times the attention factor,
    /// [max_pos][pairs][2].
    pub ropes: Vec<DevBuf<f32>>,
    pub rope_positions: usize,
    pub bytes: usize,
}

impl ModelWeights {
    pub fn lm_head_ptr(&self) -> u64 {
        self.lm_head.as_ref().unwrap_or(&self.embed).ptr()
    }
}

struct Loader<'a> {
    gpu: &'a Gpu,
    src: &'a dyn WeightSource,
    staging: Option<DevBuf<f32>>,
    done: usize,
    total: usize,
    progress: Option<&'a dyn Fn(usize, usize)>,
    bytes: usize,
}

impl Loader<'_> {
    fn alloc(&mut self, len: usize) -> Result<StoreBuf> {
        let buf = self.gpu.alloc_store(len)?;
        self.bytes += buf.bytes();
        Ok(buf)
    }

    /// Writes tensor `id` (expected `len` elements) into `dst` at element `offset`.
    fn put(&mut self, id: TensorId, dst: &StoreBuf, offset: usize, len: usize) -> Result<()> {
        match self.src.dummy_fill(id) {
            Some(DummyFill::Random { seed }) => self.gpu.dummy_fill(dst.at(offset), len, seed)?,
            Some(DummyFill::Ones) => self.gpu.fill_store(dst.at(offset), len, 1.0)?,
            None => {
                let t = self
                    .src
                    .load_f32(id)
                    .with_context(|| format!("loading {id}"))?;
                ensure!(
                    t.data.len() == len,
                    "{id}: expected {len} elements, the source has {} (shape {:?})",
                    t.data.len(),
                    t.shape
                );
                if self.staging.is_none() {
                    self.staging = Some(self.gpu.alloc::<f32>(STAGING_ELEMS)?);
                }
                let staging = self.staging.as_ref().expect("staging allocated above");
                for (i, piece) in t.data.chunks(STAGING_ELEMS).enumerate() {
                    // The previous piece's conversion must finish before the staging is refilled.
                    self.gpu.synchronize()?;
                    staging.upload(0, piece)?;
                    self.gpu.f32_to_store(
                        dst.at(offset + i * STAGING_ELEMS),
                        staging.ptr(),
                        piece.len(),
                    )?;
                }
            }
        }
        self.done += 1;
        if let Some(p) = self.progress {
            p(self.done, self.total);
        }
        Ok(())
    }

    /// A fused weight of the schema in one buffer: each part at its offset, absent parts left
    /// as the schema says (the buffer starts cleared, so zeros need no write).
    fn fused<W>(&mut self, f: &Fused<W>) -> Result<StoreBuf> {
        let buf = self.alloc(f.len())?;
        let cols = f.cols.unwrap_or(1);
        for (part, at) in f.offsets() {
            if f.loads(&part, self.src) {
                self.put(part.id, &buf, at, part.rows * cols)?;
            } else if f.absent_value() != 0.0 {
                self.gpu
                    .fill_store(buf.at(at), part.rows * cols, f.absent_value())?;
            }
        }
        Ok(buf)
    }
}

/// Loads every weight of the schema of `spec` onto the device, and builds each RoPE table
/// for `rope_positions`.
pub fn load_weights(
    gpu: &Gpu,
    src: &dyn WeightSource,
    spec: &ModelSpec,
    rope_positions: usize,
    progress: Option<&dyn Fn(usize, usize)>,
) -> Result<ModelWeights> {
    let h = spec.hidden_size;
    for (l, layer) in spec.layers.iter().enumerate() {
        for (what, v) in [
            ("hidden size", h),
            ("intermediate size", layer.ffn.intermediate()),
            ("q dim", layer.attn.q_dim()),
            ("kv dim", layer.attn.kv_dim()),
            ("per-layer input width", layer.per_layer_input.unwrap_or(0)),
        ] {
            if !v.is_multiple_of(8) {
                bail!("CUDA backend needs the {what} to be a multiple of 8, layer {l} has {v}");
            }
        }
        let pairs = spec.rope(l).inv_freq.len();
        ensure!(
            2 * pairs == layer.attn.head_dim,
            "layer {l}: RoPE gives {pairs} frequencies for head dim {}",
            layer.attn.head_dim
        );
    }
    let mut ld = Loader {
        gpu,
        src,
        staging: None,
        done: 0,
        total: schema::tensors_to_load(spec, src),
        progress,
        bytes: 0,
    };
    let (mut embed, mut lm_head, mut out_norm) = (None, None, None);
    let (mut pl_table, mut pl_proj, mut pl_norm) = (None, None, None);
    for f in schema::global_weights(spec) {
        let buf = ld.fused(&f)?;
        match f.weight {
            GlobalWeight::Embedding => embed = Some(buf),
            GlobalWeight::LmHead => lm_head = Some(buf),
            GlobalWeight::OutputNorm => out_norm = Some(buf),
            GlobalWeight::PerLayerEmbedding => pl_table = Some(buf),
            GlobalWeight::PerLayerProjection => pl_proj = Some(buf),
            GlobalWeight::PerLayerProjNorm => pl_norm = Some(buf),
        }
    }
    let per_layer = match (pl_table, pl_proj, pl_norm) {
        (Some(table), Some(projection), Some(norm)) => Some(PerLayerWeights {
            table,
            projection,
            norm,
        }),
        (None, None, None) => None,
        _ => bail!("the schema names some per-layer input weights but not all three"),
    };
    let mut layers = Vec::with_capacity(spec.layers.len());
    for (l, layer) in spec.layers.iter().enumerate() {
        let mut w = LayerWeights {
            bufs: Default::default(),
        };
        for f in schema::layer_weights(l, layer, h) {
            w.bufs[f.weight.index()] = Some(ld.fused(&f)?);
        }
        layers.push(w);
    }
    let mut ropes = Vec::with_capacity(spec.ropes.len());
    let mut rope_bytes = 0;
    for rope in &spec.ropes {
        let pairs = rope.inv_freq.len();
        let freq = gpu.alloc::<f32>(pairs)?;
        freq.upload(0, &rope.inv_freq)?;
        let table = gpu.alloc::<f32>(rope_positions * 2 * pairs)?;
        gpu.rope_table_build(
            table.ptr(),
            freq.ptr(),
            rope_positions,
            pairs,
            rope.attention_factor,
        )?;
        gpu.synchronize().context("building the RoPE table")?;
        rope_bytes += table.bytes();
        ropes.push(table);
    }
    gpu.synchronize()
        .context("building the weights on the device")?;
    Ok(ModelWeights {
        embed: embed.context("the schema has no embedding")?,
        out_norm: out_norm.context("the schema has no output norm")?,
        lm_head,
        per_layer,
        layers,
        ropes,
        rope_positions,
        bytes: ld.bytes + rope_bytes,
    })
}
