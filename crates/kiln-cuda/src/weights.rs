//! The model's weights on the device, in the backend's storage type (bf16 unless asked
//! otherwise), laid out once at load in the fused layout of `kiln_model::schema` (Q/K/V one
//! matrix, gate/up another, so a layer runs four GEMMs). Dummy models are generated on the
//! device by the same pure function the host uses, so an 8B dummy model loads in seconds.
//! With bf16 storage and `KILN_GPU_QUANT=1`, projections, the embedding and the LM head stored
//! in GGUF block formats stay in them (quant_weights.rs). With `--quantize fp8` each layer's
//! four projections are quantised to fp8 rows once loaded (fp8_rows.rs).

use anyhow::{bail, ensure, Context, Result};
use kiln_model::schema::{self, Fused, GlobalWeight, LayerWeight};
use kiln_model::{DummyFill, ModelSpec, TensorId, WeightSource};

use crate::device::{DevBuf, Gpu};
use crate::fp8_rows::Fp8Matrix;
use crate::quant_order::{self, RowOrder};
use crate::quant_prefill::AheadBuffers;
use crate::quant_weights::{self, quantizable_global, quantizable_layer, QuantMatrix};
use crate::store::{StoreBuf, StoreType};
use crate::switches::Switches;

/// f32 staging for file weights: uploaded in pieces of this many elements, converted on the device.
const STAGING_ELEMS: usize = 1 << 24;

/// A matrix as a launch reads it: rows in the storage type at an address, block-quantised
/// segments, or fp8 rows.
#[derive(Clone, Copy)]
pub enum MatrixRef<'a> {
    Plain(u64),
    Quant(&'a QuantMatrix),
    Fp8(&'a Fp8Matrix),
}

/// One layer's weights as the schema names them (`kiln_model::schema`), each in one buffer.
pub struct LayerWeights {
    bufs: [Option<StoreBuf>; LayerWeight::ALL.len()],
    /// Projections kept block-quantised (their `bufs` entry is None).
    quant: [Option<QuantMatrix>; LayerWeight::ALL.len()],
    /// Projections in fp8 rows (their `bufs` entry is None).
    fp8: [Option<Fp8Matrix>; LayerWeight::ALL.len()],
}

impl LayerWeights {
    /// The weight's address; 0 when the layer has none (optional bias and Q/K norms).
    pub fn ptr(&self, w: LayerWeight) -> u64 {
        self.bufs[w.index()].as_ref().map_or(0, |b| b.ptr())
    }

    /// The layer's quantised projections, in the schema's order.
    pub fn quantised(&self) -> impl Iterator<Item = (LayerWeight, &QuantMatrix)> {
        LayerWeight::ALL
            .iter()
            .filter_map(|&w| self.quant[w.index()].as_ref().map(|q| (w, q)))
    }

    /// A projection, quantised or in the storage type.
    pub fn matrix(&self, w: LayerWeight) -> MatrixRef<'_> {
        match (&self.quant[w.index()], &self.fp8[w.index()]) {
            (Some(q), _) => MatrixRef::Quant(q),
            (None, Some(f)) => MatrixRef::Fp8(f),
            (None, None) => MatrixRef::Plain(self.ptr(w)),
        }
    }

    /// The layer's fp8 projections.
    pub fn fp8(&self) -> impl Iterator<Item = &Fp8Matrix> {
        self.fp8.iter().flatten()
    }
}

/// Gemma 4's per-layer input weights: the token table `[vocab, layers * width]` (gathered by
/// id on the device), the projection of the embedding `[layers * width, hidden]` and its norm.
pub struct PerLayerWeights {
    pub table: StoreBuf,
    pub projection: StoreBuf,
    pub norm: StoreBuf,
}

/// A draft model's weights beside its blocks (Gemma 4's assistant): the projections from and
/// back to its target, and its ordered LM head's centroids `[centroids, hidden]` with each
/// token's centroid `[vocab]` (i32, from the token ordering).
pub struct DraftWeights {
    pub pre: StoreBuf,
    pub post: StoreBuf,
    pub ordered: Option<(StoreBuf, DevBuf<i32>)>,
}

pub struct ModelWeights {
    /// None when the embedding is kept quantised (`quant_embed`).
    pub embed: Option<StoreBuf>,
    pub out_norm: StoreBuf,
    /// None when the LM head is the embedding (or kept quantised).
    pub lm_head: Option<StoreBuf>,
    /// None when the model has no per-layer inputs.
    pub per_layer: Option<PerLayerWeights>,
    /// A draft model's own weights (Gemma 4's assistant); None for a model that runs alone.
    pub draft: Option<DraftWeights>,
    pub quant_embed: Option<QuantMatrix>,
    pub quant_lm_head: Option<QuantMatrix>,
    /// bf16 room for the largest quantised projection, which prefill rows multiply (None
    /// when no projection is quantised, or with the layer-ahead buffers).
    pub scratch: Option<DevBuf<u16>>,
    /// Two layer-sized bf16 buffers for the expansion one layer ahead (KILN_QUANT_AHEAD).
    pub ahead: Option<AheadBuffers>,
    pub layers: Vec<LayerWeights>,
    /// One per RoPE of the spec: cos/sin per (position, pair), times the attention factor,
    /// [max_pos][pairs][2].
    pub ropes: Vec<DevBuf<f32>>,
    pub rope_positions: usize,
    /// The weights and RoPE tables (not the scratch).
    pub bytes: usize,
}

impl ModelWeights {
    pub fn embedding(&self) -> Result<MatrixRef<'_>> {
        match (&self.quant_embed, &self.embed) {
            (Some(q), _) => Ok(MatrixRef::Quant(q)),
            (None, Some(b)) => Ok(MatrixRef::Plain(b.ptr())),
            (None, None) => bail!("the model has no embedding on the device"),
        }
    }

    /// The LM head: its own, else the embedding.
    pub fn lm_head(&self) -> Result<MatrixRef<'_>> {
        match (&self.quant_lm_head, &self.lm_head) {
            (Some(q), _) => Ok(MatrixRef::Quant(q)),
            (None, Some(b)) => Ok(MatrixRef::Plain(b.ptr())),
            (None, None) => self.embedding(),
        }
    }

    /// The prefill scratch's address; 0 when there is none.
    pub fn scratch_ptr(&self) -> u64 {
        self.scratch.as_ref().map_or(0, |b| b.ptr())
    }

    pub fn scratch_bytes(&self) -> usize {
        self.scratch.as_ref().map_or(0, |b| b.bytes())
            + self.ahead.as_ref().map_or(0, |a| a.bytes())
    }

    /// Every quantised matrix.
    pub fn quantized(&self) -> impl Iterator<Item = &QuantMatrix> {
        let layers = self.layers.iter().flat_map(|l| l.quant.iter().flatten());
        self.quant_embed
            .iter()
            .chain(&self.quant_lm_head)
            .chain(layers)
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

    /// Each token's centroid under `order` (the token ids of centroid 0, then 1, ...), i32 on
    /// the device.
    fn token_owners(&mut self, order: &[u32], spec: &ModelSpec) -> Result<DevBuf<i32>> {
        let o = spec
            .draft
            .and_then(|d| d.ordered)
            .context("a token ordering without an ordered LM head")?;
        let per = order.len() / o.centroids;
        let mut owner = vec![0i32; order.len()];
        for (i, &t) in order.iter().enumerate() {
            owner[t as usize] = (i / per) as i32;
        }
        let buf = self.gpu.alloc::<i32>(owner.len())?;
        buf.upload(0, &owner)?;
        self.bytes += buf.bytes();
        self.done += 1;
        if let Some(p) = self.progress {
            p(self.done, self.total);
        }
        Ok(buf)
    }

    /// A matrix of the schema kept in its block formats.
    fn quant<W>(
        &mut self,
        f: &Fused<W>,
        formats: &[crate::quant_layout::GpuQuant],
        host: bool,
        order: RowOrder,
    ) -> Result<QuantMatrix> {
        let (gpu, src, total, progress) = (self.gpu, self.src, self.total, self.progress);
        let done = &mut self.done;
        let m = quant_weights::load_matrix(gpu, src, f, formats, host, order, || {
            *done += 1;
            if let Some(p) = progress {
                p(*done, total);
            }
        })?;
        self.bytes += m.bytes();
        Ok(m)
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
/// for `rope_positions`; `prefill_rows`: whether a step may hold rows the skinny kernels do
/// not take, so quantised matrices need room for their bf16 expansion; `fp8`: the projections
/// `LayerWeight::fp8_projection` names are kept in fp8 rows (block-quantised ones included).
pub fn load_weights(
    gpu: &Gpu,
    src: &dyn WeightSource,
    spec: &ModelSpec,
    rope_positions: usize,
    prefill_rows: bool,
    fp8: bool,
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
        // cuBLASLt's fp8 GEMM reads both sides of a weight in 16-byte steps.
        let sides = [
            ("hidden size", h),
            ("intermediate size", layer.ffn.intermediate()),
            ("q dim", layer.attn.q_dim()),
            ("QKV rows", layer.attn.qkv_rows()),
        ];
        for (what, v) in sides {
            ensure!(
                !fp8 || v.is_multiple_of(16),
                "--quantize fp8 needs projection sides that are multiples of 16: layer {l}'s {what} is {v}"
            );
        }
        let pairs = spec.rope(l).inv_freq.len();
        ensure!(
            2 * pairs == layer.attn.head_dim,
            "layer {l}: RoPE gives {pairs} frequencies for head dim {}",
            layer.attn.head_dim
        );
    }
    ensure!(
        !fp8 || gpu.arch >= 89,
        "--quantize fp8 needs a GPU of compute capability 8.9 or later; this one is {}.{}",
        gpu.arch / 10,
        gpu.arch % 10
    );
    let mut ld = Loader {
        gpu,
        src,
        staging: None,
        done: 0,
        total: schema::tensors_to_load(spec, src),
        progress,
        bytes: 0,
    };
    // The quantised kernels read bf16 activations.
    let sw = Switches::from_env();
    let quant_on = sw.gpu_quant && gpu.store == StoreType::Bf16;
    let (mut embed, mut lm_head, mut out_norm) = (None, None, None);
    let (mut pl_table, mut pl_proj, mut pl_norm) = (None, None, None);
    let (mut quant_embed, mut quant_lm_head) = (None, None);
    let (mut pre, mut post, mut centroids, mut owner) = (None, None, None, None);
    for f in schema::global_weights(spec) {
        if let Some(formats) =
            quant_weights::kept_formats(&f, src, quant_on && quantizable_global(f.weight))
        {
            let host =
                f.weight == GlobalWeight::Embedding && quant_weights::embedding_on_host(spec);
            let m = ld.quant(&f, &formats, host, RowOrder::Natural)?;
            match f.weight {
                GlobalWeight::Embedding => quant_embed = Some(m),
                _ => quant_lm_head = Some(m),
            }
            continue;
        }
        if f.weight == GlobalWeight::TokenOrdering {
            let ids = ld.src.load_f32(f.parts[0].id)?.data;
            let order = kiln_model::draft_spec::token_ordering(&ids, spec.vocab_size)?;
            owner = Some(ld.token_owners(&order, spec)?);
            continue;
        }
        let buf = ld.fused(&f)?;
        match f.weight {
            GlobalWeight::Embedding => embed = Some(buf),
            GlobalWeight::LmHead => lm_head = Some(buf),
            GlobalWeight::OutputNorm => out_norm = Some(buf),
            GlobalWeight::PerLayerEmbedding => pl_table = Some(buf),
            GlobalWeight::PerLayerProjection => pl_proj = Some(buf),
            GlobalWeight::PerLayerProjNorm => pl_norm = Some(buf),
            GlobalWeight::DraftPreProjection => pre = Some(buf),
            GlobalWeight::DraftPostProjection => post = Some(buf),
            GlobalWeight::Centroids => centroids = Some(buf),
            GlobalWeight::TokenOrdering => {}
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
    let draft = match (pre, post) {
        (Some(pre), Some(post)) => Some(DraftWeights {
            pre,
            post,
            ordered: match (centroids, owner) {
                (Some(c), Some(o)) => Some((c, o)),
                (None, None) => None,
                _ => bail!("the schema names the centroids or the token ordering alone"),
            },
        }),
        (None, None) => None,
        _ => bail!("the schema names one of a draft model's projections only"),
    };
    let mut layers = Vec::with_capacity(spec.layers.len());
    let mut scratch_len = 0;
    for (l, layer) in spec.layers.iter().enumerate() {
        let mut w = LayerWeights {
            bufs: Default::default(),
            quant: Default::default(),
            fp8: Default::default(),
        };
        for f in schema::layer_weights(l, layer, h) {
            let i = f.weight.index();
            if fp8 && f.weight.fp8_projection() {
                let cols = f.cols.context("a projection without columns")?;
                let stored = ld.fused(&f)?;
                let m = Fp8Matrix::from_store(gpu, &stored, f.rows(), cols)?;
                // The stored copy goes once its rows are quantised (the stream is in order).
                gpu.synchronize()?;
                ld.bytes = ld.bytes - stored.bytes() + m.bytes();
                w.fp8[i] = Some(m);
                continue;
            }
            match quant_weights::kept_formats(&f, src, quant_on && quantizable_layer(f.weight)) {
                Some(formats) => {
                    scratch_len = scratch_len.max(f.len());
                    let order = quant_order::for_layer_matrix(spec, l, f.weight, &formats, &sw);
                    w.quant[i] = Some(ld.quant(&f, &formats, false, order)?);
                }
                None => w.bufs[i] = Some(ld.fused(&f)?),
            }
        }
        layers.push(w);
    }
    // No prefill row reads an expansion when every row takes the skinny kernels.
    let expands = prefill_rows && !sw.quant_prefill_skinny;
    let ahead = match sw.quant_ahead {
        Some(_) if expands => AheadBuffers::new(gpu, &layers)?,
        _ => None,
    };
    let scratch = match scratch_len {
        0 => None,
        _ if !expands || ahead.is_some() => None,
        n => Some(gpu.alloc::<u16>(n)?),
    };
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
    if embed.is_none() && quant_embed.is_none() {
        bail!("the schema has no embedding");
    }
    Ok(ModelWeights {
        embed,
        out_norm: out_norm.context("the schema has no output norm")?,
        lm_head,
        per_layer,
        draft,
        quant_embed,
        quant_lm_head,
        scratch,
        ahead,
        layers,
        ropes,
        rope_positions,
        bytes: ld.bytes + rope_bytes,
    })
}
