//! The model's weights on the device, in bf16, laid out once at load: Q/K/V fused into one
//! matrix and gate/up into another, so a layer runs four GEMMs. Dummy models are generated on
//! the device by the same pure function the host uses, so an 8B dummy model loads in seconds.

use anyhow::{bail, ensure, Context, Result};
use kiln_model::{DummyFill, ModelConfig, Role, TensorId, WeightSource};

use crate::device::{DevBuf, Gpu};

/// f32 staging for file weights: uploaded in pieces of this many elements, converted on the device.
const STAGING_ELEMS: usize = 1 << 24;

pub struct LayerWeights {
    pub attn_norm: DevBuf<u16>,
    /// [q_dim + 2 kv_dim, hidden]: Q rows, then K, then V.
    pub wqkv: DevBuf<u16>,
    /// [q_dim + 2 kv_dim] when the model has QKV biases.
    pub qkv_bias: Option<DevBuf<u16>>,
    pub q_norm: Option<DevBuf<u16>>,
    pub k_norm: Option<DevBuf<u16>>,
    pub wo: DevBuf<u16>,
    pub ffn_norm: DevBuf<u16>,
    /// [2 intermediate, hidden]: gate rows, then up.
    pub w_gate_up: DevBuf<u16>,
    pub w_down: DevBuf<u16>,
}

pub struct ModelWeights {
    pub embed: DevBuf<u16>,
    pub out_norm: DevBuf<u16>,
    /// None when the LM head is the embedding.
    pub lm_head: Option<DevBuf<u16>>,
    pub layers: Vec<LayerWeights>,
    /// cos/sin per (position, pair), times the attention factor: [max_pos][head_dim / 2][2].
    pub rope: DevBuf<f32>,
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
    fn alloc(&mut self, len: usize) -> Result<DevBuf<u16>> {
        self.bytes += len * 2;
        self.gpu.alloc(len)
    }

    /// Writes tensor `id` (expected `len` elements) into `dst` at element `offset`.
    fn put(&mut self, id: TensorId, dst: &DevBuf<u16>, offset: usize, len: usize) -> Result<()> {
        match self.src.dummy_fill(id) {
            Some(DummyFill::Random { seed }) => self.gpu.dummy_fill(dst.at(offset), len, seed)?,
            Some(DummyFill::Ones) => self.gpu.fill_bf16(dst.at(offset), len, 1.0)?,
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
                    self.gpu.f32_to_bf16(
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

    fn tensor(&mut self, id: TensorId, len: usize) -> Result<DevBuf<u16>> {
        let buf = self.alloc(len)?;
        self.put(id, &buf, 0, len)?;
        Ok(buf)
    }

    fn optional(&mut self, id: TensorId, len: usize) -> Result<Option<DevBuf<u16>>> {
        if self.src.has(id) {
            Ok(Some(self.tensor(id, len)?))
        } else {
            Ok(None)
        }
    }
}

fn tensor_count(c: &ModelConfig, src: &dyn WeightSource) -> usize {
    let mut n = 2 + usize::from(src.has(TensorId::global(Role::Output)));
    for l in 0..c.num_layers {
        for role in [
            Role::AttnNorm,
            Role::Q,
            Role::K,
            Role::V,
            Role::QBias,
            Role::KBias,
            Role::VBias,
            Role::QNorm,
            Role::KNorm,
            Role::O,
            Role::FfnNorm,
            Role::Gate,
            Role::Up,
            Role::Down,
        ] {
            n += usize::from(src.has(TensorId::layer(l, role)));
        }
    }
    n
}

/// Loads every weight of `src` onto the device, and builds the RoPE table for `rope_positions`.
pub fn load_weights(
    gpu: &Gpu,
    src: &dyn WeightSource,
    rope_positions: usize,
    progress: Option<&dyn Fn(usize, usize)>,
) -> Result<ModelWeights> {
    let c = src.config().clone();
    let (h, q, kv, inter, hd) = (
        c.hidden_size,
        c.q_dim(),
        c.kv_dim(),
        c.intermediate_size,
        c.head_dim,
    );
    for (what, v) in [
        ("hidden size", h),
        ("intermediate size", inter),
        ("q dim", q),
        ("kv dim", kv),
    ] {
        if !v.is_multiple_of(8) {
            bail!("CUDA backend needs the {what} to be a multiple of 8, the model has {v}");
        }
    }
    let mut ld = Loader {
        gpu,
        src,
        staging: None,
        done: 0,
        total: tensor_count(&c, src),
        progress,
        bytes: 0,
    };
    let embed = ld.tensor(TensorId::global(Role::TokenEmbd), c.vocab_size * h)?;
    let out_norm = ld.tensor(TensorId::global(Role::OutputNorm), h)?;
    let lm_head = if c.tie_embeddings {
        None
    } else {
        Some(ld.tensor(TensorId::global(Role::Output), c.vocab_size * h)?)
    };
    let mut layers = Vec::with_capacity(c.num_layers);
    for l in 0..c.num_layers {
        let id = |role| TensorId::layer(l, role);
        let attn_norm = ld.tensor(id(Role::AttnNorm), h)?;
        let wqkv = ld.alloc((q + 2 * kv) * h)?;
        ld.put(id(Role::Q), &wqkv, 0, q * h)?;
        ld.put(id(Role::K), &wqkv, q * h, kv * h)?;
        ld.put(id(Role::V), &wqkv, (q + kv) * h, kv * h)?;
        let qkv_bias = if [Role::QBias, Role::KBias, Role::VBias]
            .iter()
            .any(|r| src.has(id(*r)))
        {
            // A missing part stays zero (the buffer starts cleared).
            let b = ld.alloc(q + 2 * kv)?;
            for (role, off, len) in [
                (Role::QBias, 0, q),
                (Role::KBias, q, kv),
                (Role::VBias, q + kv, kv),
            ] {
                if src.has(id(role)) {
                    ld.put(id(role), &b, off, len)?;
                }
            }
            Some(b)
        } else {
            None
        };
        let q_norm = ld.optional(id(Role::QNorm), hd)?;
        let k_norm = ld.optional(id(Role::KNorm), hd)?;
        let wo = ld.tensor(id(Role::O), h * q)?;
        let ffn_norm = ld.tensor(id(Role::FfnNorm), h)?;
        let w_gate_up = ld.alloc(2 * inter * h)?;
        ld.put(id(Role::Gate), &w_gate_up, 0, inter * h)?;
        ld.put(id(Role::Up), &w_gate_up, inter * h, inter * h)?;
        let w_down = ld.tensor(id(Role::Down), h * inter)?;
        layers.push(LayerWeights {
            attn_norm,
            wqkv,
            qkv_bias,
            q_norm,
            k_norm,
            wo,
            ffn_norm,
            w_gate_up,
            w_down,
        });
    }
    let inv_freq = c.rope_inv_freq();
    ensure!(
        inv_freq.len() == hd / 2,
        "RoPE gave {} frequencies for head dim {hd}",
        inv_freq.len()
    );
    let freq = gpu.alloc::<f32>(inv_freq.len())?;
    freq.upload(0, &inv_freq)?;
    let rope = gpu.alloc::<f32>(rope_positions * hd)?;
    gpu.rope_table_build(
        rope.ptr(),
        freq.ptr(),
        rope_positions,
        hd / 2,
        c.rope_attention_factor(),
    )?;
    gpu.synchronize()
        .context("building the weights on the device")?;
    let bytes = ld.bytes + rope.bytes();
    Ok(ModelWeights {
        embed,
        out_norm,
        lm_head,
        layers,
        rope,
        rope_positions,
        bytes,
    })
}
