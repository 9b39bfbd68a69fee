//! Model sources and step drivers shared by the backend tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kiln_cuda::{CudaBackend, CudaOptions, StoreType};
use kiln_model::dummy::DummySource;
use kiln_model::{
    Arch, DummyFill, HostTensor, ModelConfig, QuantTensor, RopeScaling, RopeStyle, TensorId,
    WeightSource,
};
use kiln_step::{Backend, ChunkInput};

/// tests/fixtures: $KILN_FIXTURES, else next to the sources this was built from, else under the
/// current directory (a prebuilt test binary run from the repository root elsewhere).
pub fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KILN_FIXTURES") {
        return PathBuf::from(dir);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    if built.is_dir() {
        built
    } else {
        PathBuf::from("tests/fixtures")
    }
}

/// Every fixture model: (name, source), GGUF and HF folder for each fixture that has them,
/// but those the CUDA backend refuses (their kernels do not exist yet; it says which).
pub fn fixture_sources() -> Vec<(String, Box<dyn WeightSource>)> {
    let mut runnable = all_fixture_sources();
    runnable.retain(|(name, src)| {
        let c = src.config();
        match kiln_cuda::model_support::refusal(&c.spec(), c.arch) {
            Some(why) => {
                eprintln!("SKIP fixture {name}: {why}");
                false
            }
            None => true,
        }
    });
    runnable
}

fn all_fixture_sources() -> Vec<(String, Box<dyn WeightSource>)> {
    let mut out: Vec<(String, Box<dyn WeightSource>)> = Vec::new();
    let Ok(entries) = std::fs::read_dir(fixtures_dir()) else {
        return out;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let gguf = dir.join("model.gguf");
        if gguf.exists() {
            match kiln_model::gguf_source::GgufSource::open(&gguf) {
                Ok(s) => out.push((format!("{name}/gguf"), Box::new(s))),
                Err(e) => panic!("fixture {}: {e:#}", gguf.display()),
            }
        }
        let hf = dir.join("hf");
        if hf.join("config.json").exists() {
            match kiln_model::hf_source::HfSource::open(&hf) {
                Ok(s) => out.push((format!("{name}/hf"), Box::new(s))),
                Err(e) => panic!("fixture {}: {e:#}", hf.display()),
            }
        }
    }
    out
}

/// `inner` with every tensor rounded to `store`, as a checkpoint stored in that format holds
/// it: the CPU then computes on exactly the values a GPU of that format stores (both round to
/// nearest even; generated weights are rounded where the GPU generates them, to the same bits).
pub struct Rounded<'a> {
    pub inner: &'a dyn WeightSource,
    pub store: StoreType,
}

impl WeightSource for Rounded<'_> {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn has(&self, id: TensorId) -> bool {
        self.inner.has(id)
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        let mut t = self.inner.load_f32(id)?;
        for x in &mut t.data {
            *x = self.store.round(*x);
        }
        Ok(t)
    }

    /// Block-quantised tensors pass through only where rounding changes nothing (f32).
    fn load_quantized(&self, id: TensorId) -> anyhow::Result<Option<QuantTensor>> {
        match self.store {
            StoreType::F32 => self.inner.load_quantized(id),
            _ => Ok(None),
        }
    }

    fn dummy_fill(&self, id: TensorId) -> Option<DummyFill> {
        self.inner.dummy_fill(id)
    }
}

/// The fixture's prompt ids (reference.json).
pub fn fixture_prompt(name: &str) -> Option<Vec<u32>> {
    let r = fixture_reference(name)?;
    r["prompt_ids"]
        .as_array()?
        .iter()
        .map(|v| v.as_u64().map(|v| v as u32))
        .collect()
}

/// The fixture's reference.json, when present.
pub fn fixture_reference(name: &str) -> Option<serde_json::Value> {
    let dir = name.split('/').next()?;
    let text = std::fs::read_to_string(fixtures_dir().join(dir).join("reference.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// A small model with the shapes the fast kernels are tuned for (head dim 128, GQA 4).
pub fn dummy_mid() -> DummySource {
    DummySource::new(ModelConfig {
        arch: Arch::Llama,
        vocab_size: 32_000,
        hidden_size: 2048,
        intermediate_size: 5632,
        num_layers: 3,
        num_heads: 16,
        num_kv_heads: 4,
        head_dim: 128,
        rms_norm_eps: 1e-5,
        rope_theta: 500_000.0,
        rope_scaling: RopeScaling::None,
        rope_style: RopeStyle::Neox,
        max_position: 8192,
        sliding_window: None,
        layer_types: None,
        qkv_bias: false,
        qk_norm: false,
        tie_embeddings: false,
        activation: kiln_model::Activation::Silu,
        layer_shapes: Vec::new(),
        full_attention_rope: None,
        per_layer_input: 0,
        kv_shared_layers: 0,
        full_attention_v_from_k: false,
        double_wide_mlp: false,
        logit_softcap: None,
        assistant: None,
    })
    .expect("dummy config")
}

/// dummy:gemma4-tiny with Gemma 4's real full-layer head (512 wide, a quarter of it turning):
/// every layer kind of the architecture with the wide attention kernels in the mix.
pub fn dummy_gemma_wide() -> DummySource {
    let mut c = kiln_model::presets::preset("gemma4-tiny").expect("gemma4-tiny");
    let types = c.layer_types.clone().expect("gemma4-tiny has layer types");
    for (shape, t) in c.layer_shapes.iter_mut().zip(&types) {
        if *t == kiln_model::LayerType::FullAttention {
            shape.head_dim = 512;
        }
    }
    c.full_attention_rope = Some(kiln_model::RopeParams {
        theta: 1_000_000.0,
        scaling: RopeScaling::Proportional {
            rotated_pairs: 64,
            factor: 1.0,
        },
    });
    DummySource::new(c).expect("gemma4-tiny with 512-wide full layers")
}

pub fn cuda_backend(src: &dyn WeightSource, max_tokens: usize) -> CudaBackend {
    cuda_backend_in(src, max_tokens, StoreType::Bf16)
}

/// [`cuda_backend`] storing weights, activations and KV cache as `dtype`.
pub fn cuda_backend_in(src: &dyn WeightSource, max_tokens: usize, dtype: StoreType) -> CudaBackend {
    let opts = CudaOptions {
        dtype,
        kv_cache_bytes: Some(1 << 30),
        prefill_chunk: 2048,
        max_seqs: 40,
        max_batch_tokens: Some(max_tokens),
        max_context: Some(src.config().max_position.min(8192)),
        ..CudaOptions::default()
    };
    CudaBackend::new(src, opts, None).expect("CUDA backend")
}

/// Hands out KV blocks from the pool, never reusing one.
pub struct Blocks {
    next: u32,
    total: u32,
}

impl Blocks {
    pub fn new(b: &dyn Backend) -> Blocks {
        Blocks {
            next: 0,
            total: b.kv_geometry().num_blocks as u32,
        }
    }

    pub fn take(&mut self, tokens: usize, block_size: usize) -> Vec<u32> {
        let n = tokens.div_ceil(block_size) as u32;
        assert!(self.next + n <= self.total, "test KV pool exhausted");
        let v = (self.next..self.next + n).collect();
        self.next += n;
        v
    }
}

/// A sequence under test: its tokens so far and its blocks.
pub struct Seq {
    pub tokens: Vec<u32>,
    pub table: Vec<u32>,
    pub done: usize,
}

impl Seq {
    pub fn new(tokens: Vec<u32>, blocks: &mut Blocks, capacity: usize, block_size: usize) -> Seq {
        Seq {
            tokens,
            table: blocks.take(capacity, block_size),
            done: 0,
        }
    }

    /// The next chunk of at most `n` tokens (all remaining when n is 0).
    pub fn chunk(&self, n: usize) -> ChunkInput<'_> {
        let end = if n == 0 {
            self.tokens.len()
        } else {
            (self.done + n).min(self.tokens.len())
        };
        ChunkInput {
            tokens: &self.tokens[self.done..end],
            start_pos: self.done,
            block_table: &self.table,
            want_logits: true,
        }
    }
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = (f32::NEG_INFINITY, 0usize);
    for (i, &v) in row.iter().enumerate() {
        if v > best.0 {
            best = (v, i);
        }
    }
    best.1 as u32
}

/// max |a - b| / max |b| over a row.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let scale = b
        .iter()
        .fold(0f64, |m, &x| m.max(x.abs() as f64))
        .max(1e-30);
    a.iter()
        .zip(b)
        .fold(0f64, |m, (&x, &y)| m.max((x as f64 - y as f64).abs()))
        / scale
}
