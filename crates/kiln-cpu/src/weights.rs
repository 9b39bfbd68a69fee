//! The model's weights as the CPU forward pass wants them: norms as plain vectors, every
//! projection packed for the matmul (16 bits a value when that is exact), Q/K/V and gate/up
//! fused into one matrix each.

use anyhow::Context;
use kiln_model::{ModelConfig, Role, TensorId, WeightSource};

use crate::kernels::PackedMatrix;

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
        };
        let (hidden, vocab) = (cfg.hidden_size, cfg.vocab_size);

        let embedding = loader.fetch(TensorId::global(Role::TokenEmbd))?;
        let (embedding, lm_head) = if cfg.tie_embeddings {
            (None, loader.pack(vocab, hidden, &embedding)?)
        } else {
            let embedding = loader.pack(vocab, hidden, &embedding)?;
            let head = loader.fetch(TensorId::global(Role::Output))?;
            (Some(embedding), loader.pack(vocab, hidden, &head)?)
        };
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
}

impl Loader<'_> {
    fn pack(&self, rows: usize, cols: usize, data: &[f32]) -> anyhow::Result<PackedMatrix> {
        self.pool.install(|| PackedMatrix::pack(rows, cols, data))
    }

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
        self.done += 1;
        if let Some(report) = self.progress {
            report(self.done, self.total);
        }
        Ok(t.data)
    }

    fn layer(&mut self, layer: usize) -> anyhow::Result<LayerWeights> {
        let cfg = self.cfg;
        let id = |role| TensorId::layer(layer, role);
        let hidden = cfg.hidden_size;
        let q_dim = cfg.num_heads * cfg.head_dim;
        let kv_dim = cfg.num_kv_heads * cfg.head_dim;
        let inter = cfg.intermediate_size;

        let attn_norm = self.fetch(id(Role::AttnNorm))?;
        let mut qkv = self.fetch(id(Role::Q))?;
        qkv.extend(self.fetch(id(Role::K))?);
        qkv.extend(self.fetch(id(Role::V))?);
        let qkv = self.pack(q_dim + 2 * kv_dim, hidden, &qkv)?;
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
        let o = self.fetch(id(Role::O))?;
        let o = self.pack(hidden, q_dim, &o)?;
        let ffn_norm = self.fetch(id(Role::FfnNorm))?;
        let mut gate_up = self.fetch(id(Role::Gate))?;
        gate_up.extend(self.fetch(id(Role::Up))?);
        let gate_up = self.pack(2 * inter, hidden, &gate_up)?;
        let down = self.fetch(id(Role::Down))?;
        let down = self.pack(hidden, inter, &down)?;
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
