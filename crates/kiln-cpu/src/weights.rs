//! The model's weights as the CPU forward pass wants them, in the fused layout of
//! `kiln_model::schema`: norms and biases as plain vectors, every projection packed for the
//! matmul (16 bits a value when that is exact; a GGUF's Q8_0, Q4_0, Q4_K and Q6_K blocks kept
//! quantised and decoded inside the matmul). With `--quantize fp8` a layer's projections hold
//! their fp8 rows' E4M3 values (exact in 16 bits) and a scale per row (kiln_formats::fp8).

use anyhow::Context;
use kiln_model::schema::{self, Fused, GlobalWeight, LayerWeight};
use kiln_model::{ModelConfig, ModelSpec, TensorId, WeightSource};

use crate::kernels::{PackedMatrix, QuantFormat, RowBlock};

/// One layer's weights as the schema names them (`kiln_model::schema`): vectors (norms, biases)
/// as plain f32, matrices packed for the matmul.
pub(crate) struct LayerWeights {
    vectors: [Option<Vec<f32>>; LayerWeight::ALL.len()],
    matrices: [Option<PackedMatrix>; LayerWeight::ALL.len()],
    /// The row scales of the fp8 projections (their matrices hold the E4M3 values).
    fp8_scales: [Option<Vec<f32>>; LayerWeight::ALL.len()],
}

impl LayerWeights {
    /// A vector weight the layer has (norm or bias), None when the spec has no such weight.
    pub fn vector(&self, w: LayerWeight) -> Option<&[f32]> {
        self.vectors[w.index()].as_deref()
    }

    /// A matrix weight; every layer has its projections.
    pub fn matrix(&self, w: LayerWeight) -> &PackedMatrix {
        self.matrices[w.index()]
            .as_ref()
            .unwrap_or_else(|| panic!("layer has no {w:?} matrix"))
    }

    /// An fp8 projection's row scales; None for a projection in plain values.
    pub fn fp8_scales(&self, w: LayerWeight) -> Option<&[f32]> {
        self.fp8_scales[w.index()].as_deref()
    }

    /// A vector weight the layer must have.
    pub fn norm(&self, w: LayerWeight) -> &[f32] {
        self.vector(w)
            .unwrap_or_else(|| panic!("layer has no {w:?} weight"))
    }
}

/// Gemma 4's per-layer inputs: the token table, the projection of the embedding and its norm.
pub(crate) struct PerLayerWeights {
    /// `[vocab, layers * width]`, decoded a row at a time like the embedding.
    pub table: PackedMatrix,
    /// `[layers * width, hidden]`.
    pub projection: PackedMatrix,
    /// `[width]`.
    pub norm: Vec<f32>,
}

/// A draft model's own weights beside its blocks (Gemma 4's assistant): the projections from
/// and back to its target, and its ordered LM head's centroids and token ordering.
pub(crate) struct DraftWeights {
    /// `[hidden, 2 backbone]`.
    pub pre: PackedMatrix,
    /// `[backbone, hidden]`.
    pub post: PackedMatrix,
    /// `[centroids, hidden]` and the `[vocab]` token ids of the centroids in order.
    pub centroids: Option<PackedMatrix>,
    pub ordering: Option<Vec<u32>>,
}

pub(crate) struct ModelWeights {
    /// `[vocab, hidden]`; `None` when the LM head is the embedding (tied).
    embedding: Option<PackedMatrix>,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    pub lm_head: PackedMatrix,
    pub per_layer: Option<PerLayerWeights>,
    pub draft: Option<DraftWeights>,
}

impl ModelWeights {
    /// Loads every weight of the schema once, reporting `(loaded, total)` after each tensor.
    /// Packing runs on `pool`; `progress` is called on this thread. `fp8`: the projections
    /// [`LayerWeight::fp8_projection`] names are kept as fp8 rows (E4M3 values and row scales).
    pub fn load(
        src: &dyn WeightSource,
        spec: &ModelSpec,
        pool: &rayon::ThreadPool,
        progress: Option<&dyn Fn(usize, usize)>,
        fp8: bool,
    ) -> anyhow::Result<ModelWeights> {
        let cfg = src.config().clone();
        let mut loader = Loader {
            src,
            pool,
            progress,
            done: 0,
            total: schema::tensors_to_load(spec, src),
            cfg: &cfg,
            keep_quantized: crate::kernels::quantized_weights_allowed(),
        };
        let (mut embedding, mut lm_head, mut output_norm) = (None, None, None);
        let (mut pl_table, mut pl_projection, mut pl_norm) = (None, None, None);
        let (mut pre, mut post, mut centroids, mut ordering) = (None, None, None, None);
        for f in schema::global_weights(spec) {
            match f.weight {
                // Embedding rows are decoded one token at a time (`copy_row`), quantised or not.
                GlobalWeight::Embedding => embedding = Some(loader.matrix(&f)?),
                GlobalWeight::LmHead => lm_head = Some(loader.matrix(&f)?),
                GlobalWeight::OutputNorm => output_norm = Some(loader.vector(&f)?),
                GlobalWeight::PerLayerEmbedding => pl_table = Some(loader.matrix(&f)?),
                GlobalWeight::PerLayerProjection => pl_projection = Some(loader.matrix(&f)?),
                GlobalWeight::PerLayerProjNorm => pl_norm = Some(loader.vector(&f)?),
                GlobalWeight::DraftPreProjection => pre = Some(loader.matrix(&f)?),
                GlobalWeight::DraftPostProjection => post = Some(loader.matrix(&f)?),
                GlobalWeight::Centroids => centroids = Some(loader.matrix(&f)?),
                GlobalWeight::TokenOrdering => {
                    let ids = loader.vector(&f)?;
                    ordering = Some(kiln_model::draft_spec::token_ordering(
                        &ids,
                        spec.vocab_size,
                    )?);
                }
            }
        }
        let draft = match (pre, post) {
            (Some(pre), Some(post)) => Some(DraftWeights {
                pre,
                post,
                centroids,
                ordering,
            }),
            (None, None) => None,
            _ => anyhow::bail!("the schema names one of a draft model's projections only"),
        };
        let per_layer = match (pl_table, pl_projection, pl_norm) {
            (Some(table), Some(projection), Some(norm)) => Some(PerLayerWeights {
                table,
                projection,
                norm,
            }),
            (None, None, None) => None,
            _ => anyhow::bail!("the schema names some of the per-layer input weights only"),
        };
        let embedding = embedding.context("the schema has no embedding")?;
        let (embedding, lm_head) = match lm_head {
            Some(head) => (Some(embedding), head),
            None => (None, embedding),
        };
        debug_assert_eq!(lm_head.rows(), spec.vocab_size);
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (l, layer) in spec.layers.iter().enumerate() {
            let mut w = LayerWeights {
                vectors: Default::default(),
                matrices: Default::default(),
                fp8_scales: Default::default(),
            };
            for f in schema::layer_weights(l, layer, spec.hidden_size) {
                let i = f.weight.index();
                match f.cols {
                    Some(cols) if fp8 && f.weight.fp8_projection() => {
                        let (m, scales) = loader.fp8_matrix(&f, cols)?;
                        w.matrices[i] = Some(m);
                        w.fp8_scales[i] = Some(scales);
                    }
                    Some(_) => w.matrices[i] = Some(loader.matrix(&f)?),
                    None => w.vectors[i] = Some(loader.vector(&f)?),
                }
            }
            layers.push(w);
        }
        Ok(ModelWeights {
            embedding,
            layers,
            output_norm: output_norm.context("the schema has no output norm")?,
            lm_head,
            per_layer,
            draft,
        })
    }

    /// Writes token `token`'s embedding into `out`. The caller has checked the id.
    pub fn embed(&self, token: u32, out: &mut [f32]) {
        self.embedding
            .as_ref()
            .unwrap_or(&self.lm_head)
            .copy_row(token as usize, out);
    }
}

struct Loader<'a> {
    src: &'a dyn WeightSource,
    pool: &'a rayon::ThreadPool,
    cfg: &'a ModelConfig,
    progress: Option<&'a dyn Fn(usize, usize)>,
    done: usize,
    total: usize,
    /// Keep block-quantised projections quantised (see `quantized_weights_allowed`).
    keep_quantized: bool,
}

/// A projection weight as loaded: f32 values, or the file's quantised blocks.
enum Fetched {
    F32(Vec<f32>),
    Quant {
        format: QuantFormat,
        rows: usize,
        bytes: Vec<u8>,
    },
}

impl Fetched {
    fn block(&self) -> RowBlock<'_> {
        match self {
            Fetched::F32(d) => RowBlock::F32(d),
            Fetched::Quant {
                format,
                rows,
                bytes,
            } => RowBlock::Quant {
                format: *format,
                rows: *rows,
                bytes,
            },
        }
    }
}

/// Decodes a block of rows to f32, exactly as the file's dequantisation does.
fn expand(block: &RowBlock<'_>, cols: usize) -> anyhow::Result<Vec<f32>> {
    match block {
        RowBlock::F32(d) => Ok(d.to_vec()),
        RowBlock::Quant {
            format,
            rows,
            bytes,
        } => {
            let mut out = vec![0f32; rows * cols];
            kiln_formats::dequantize_into(format.dtype(), bytes, &mut out)?;
            Ok(out)
        }
    }
}

impl Loader<'_> {
    /// One tensor, checked against the shape the config implies.
    fn fetch(&mut self, id: TensorId) -> anyhow::Result<Vec<f32>> {
        let shape = id.shape(self.cfg);
        let t = self
            .src
            .load_f32(id)
            .with_context(|| format!("loading tensor {id}"))?;
        let numel: usize = shape.iter().product();
        anyhow::ensure!(
            t.shape == shape && t.data.len() == numel,
            "tensor {} has shape {:?} ({} values), the model config implies {:?}",
            id,
            t.shape,
            t.data.len(),
            shape
        );
        self.tick();
        Ok(t.data)
    }

    /// A projection's weight: its quantised blocks when the file stores it in a format the
    /// matmul decodes, else f32 values.
    fn fetch_matrix(&mut self, id: TensorId) -> anyhow::Result<Fetched> {
        if self.keep_quantized {
            let quant = self
                .src
                .load_quantized(id)
                .with_context(|| format!("loading tensor {id}"))?;
            if let Some(q) = quant {
                if let Some(format) = QuantFormat::from_dtype(q.dtype) {
                    let shape = id.shape(self.cfg);
                    anyhow::ensure!(
                        q.shape == shape,
                        "tensor {id} has shape {:?}, the model config implies {shape:?}",
                        q.shape
                    );
                    self.tick();
                    return Ok(Fetched::Quant {
                        format,
                        rows: shape[0],
                        bytes: q.data,
                    });
                }
            }
        }
        Ok(Fetched::F32(self.fetch(id)?))
    }

    /// Stacks projections with `cols` columns into one matrix, each part in its own format.
    fn stack(&self, cols: usize, parts: &[Fetched]) -> anyhow::Result<PackedMatrix> {
        let blocks: Vec<RowBlock<'_>> = parts.iter().map(Fetched::block).collect();
        self.pool
            .install(|| PackedMatrix::stack(cols, &blocks, |b| expand(b, cols)))
    }

    fn tick(&mut self) {
        self.done += 1;
        if let Some(report) = self.progress {
            report(self.done, self.total);
        }
    }

    /// A fused matrix of the schema: its parts fetched (quantised where the matmul decodes
    /// them) and stacked.
    fn matrix<W>(&mut self, f: &Fused<W>) -> anyhow::Result<PackedMatrix> {
        let cols = f.cols.context("a matrix weight without columns")?;
        let parts = f
            .parts
            .iter()
            .map(|p| self.fetch_matrix(p.id))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let m = self.stack(cols, &parts)?;
        debug_assert_eq!(m.rows(), f.rows());
        Ok(m)
    }

    /// A fused matrix of the schema in fp8 rows (its parts' rows are its rows, so each part
    /// is quantised on its own): the E4M3 values, packed (16 bits hold them exactly), and the
    /// scale of each row, whatever the file stores.
    fn fp8_matrix<W>(
        &mut self,
        f: &Fused<W>,
        cols: usize,
    ) -> anyhow::Result<(PackedMatrix, Vec<f32>)> {
        let (mut parts, mut scales) = (Vec::with_capacity(f.parts.len()), Vec::new());
        for p in &f.parts {
            let mut v = self.fetch(p.id)?;
            scales.extend(
                self.pool
                    .install(|| kiln_formats::fp8::quantize_values_par(&mut v, cols)),
            );
            parts.push(Fetched::F32(v));
        }
        Ok((self.stack(cols, &parts)?, scales))
    }

    /// A fused vector of the schema: its parts one after another, absent ones as the schema
    /// says.
    fn vector<W>(&mut self, f: &Fused<W>) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(f.len());
        for p in &f.parts {
            if f.loads(p, self.src) {
                out.extend(self.fetch(p.id)?);
            } else {
                out.resize(out.len() + p.rows, f.absent_value());
            }
        }
        Ok(out)
    }
}
