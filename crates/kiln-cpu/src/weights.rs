//! The model's weights as the CPU forward pass wants them: norms as plain vectors, every
//! projection packed for the matmul (16 bits a value when that is exact; a GGUF's Q8_0, Q4_0,
//! Q4_K and Q6_K blocks kept quantised and decoded inside the matmul), Q/K/V and gate/up fused
//! into one matrix each.

use anyhow::Context;
use kiln_model::{ModelConfig, Role, TensorId, WeightSource};

use crate::kernels::{PackedMatrix, QuantFormat, RowBlock};

pub(crate) struct LayerWeights {
    pub attn_norm: Vec<f32>,
    /// `[q_dim + 2 * kv_dim, hidden]`: Q, K and V rows stacked.
    pub qkv: PackedMatrix,
    pub qkv_bias: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub o: PackedMatrix,
    pub ffn_norm: Vec<f32>,
    /// `[2 * intermediate, hidden]`: gate rows, then up rows.
    pub gate_up: PackedMatrix,
    pub down: PackedMatrix,
}

pub(crate) struct ModelWeights {
    /// `[vocab, hidden]`; `None` when the LM head is the embedding (tied).
    embedding: Option<PackedMatrix>,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    pub lm_head: PackedMatrix,
}

impl ModelWeights {
    /// Loads every tensor once, reporting `(loaded, total)` after each.
    /// Packing runs on `pool`; `progress` is called on this thread.
    pub fn load(
        src: &dyn WeightSource,
        pool: &rayon::ThreadPool,
        progress: Option<&dyn Fn(usize, usize)>,
    ) -> anyhow::Result<ModelWeights> {
        let cfg = src.config().clone();
        let mut loader = Loader {
            src,
            pool,
            progress,
            done: 0,
            total: TensorId::all(&cfg).len(),
            cfg: &cfg,
            keep_quantized: crate::kernels::quantized_weights_allowed(),
        };
        let (hidden, vocab) = (cfg.hidden_size, cfg.vocab_size);

        // Embedding rows are decoded one token at a time (`copy_row`), quantised or not.
        let embedding = loader.fetch_matrix(TensorId::global(Role::TokenEmbd))?;
        let embedding = loader.stack(hidden, &[embedding])?;
        let (embedding, lm_head) = if cfg.tie_embeddings {
            (None, embedding)
        } else {
            let head = loader.fetch_matrix(TensorId::global(Role::Output))?;
            (Some(embedding), loader.stack(hidden, &[head])?)
        };
        debug_assert_eq!(lm_head.rows(), vocab);
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for layer in 0..cfg.num_layers {
            layers.push(loader.layer(layer)?);
        }
        let output_norm = loader.fetch(TensorId::global(Role::OutputNorm))?;
        Ok(ModelWeights {
            embedding,
            layers,
            output_norm,
            lm_head,
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

    fn layer(&mut self, layer: usize) -> anyhow::Result<LayerWeights> {
        let cfg = self.cfg;
        let id = |role| TensorId::layer(layer, role);
        let hidden = cfg.hidden_size;
        let q_dim = cfg.num_heads * cfg.head_dim;
        let kv_dim = cfg.num_kv_heads * cfg.head_dim;
        let inter = cfg.intermediate_size;

        let attn_norm = self.fetch(id(Role::AttnNorm))?;
        let qkv = [
            self.fetch_matrix(id(Role::Q))?,
            self.fetch_matrix(id(Role::K))?,
            self.fetch_matrix(id(Role::V))?,
        ];
        let qkv = self.stack(hidden, &qkv)?;
        debug_assert_eq!(qkv.rows(), q_dim + 2 * kv_dim);
        let qkv_bias = if cfg.qkv_bias {
            let mut bias = self.fetch(id(Role::QBias))?;
            bias.extend(self.fetch(id(Role::KBias))?);
            bias.extend(self.fetch(id(Role::VBias))?);
            Some(bias)
        } else {
            None
        };
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(self.fetch(id(Role::QNorm))?),
                Some(self.fetch(id(Role::KNorm))?),
            )
        } else {
            (None, None)
        };
        let o = self.fetch_matrix(id(Role::O))?;
        let o = self.stack(q_dim, &[o])?;
        let ffn_norm = self.fetch(id(Role::FfnNorm))?;
        let gate_up = [
            self.fetch_matrix(id(Role::Gate))?,
            self.fetch_matrix(id(Role::Up))?,
        ];
        let gate_up = self.stack(hidden, &gate_up)?;
        debug_assert_eq!(gate_up.rows(), 2 * inter);
        let down = self.fetch_matrix(id(Role::Down))?;
        let down = self.stack(inter, &[down])?;
        Ok(LayerWeights {
            attn_norm,
            qkv,
            qkv_bias,
            q_norm,
            k_norm,
            o,
            ffn_norm,
            gate_up,
            down,
        })
    }
}
