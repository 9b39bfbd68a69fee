//! [`CpuBackend`]: weights, KV pool and thread pool, behind the engine's `Backend` trait.

use kiln_engine::{Backend, ChunkInput, KvGeometry};
use kiln_model::{ModelConfig, WeightSource};

use crate::forward::{Model, RopeFreqs};
use crate::kv_cache::PagedKvCache;
use crate::step_plan::StepPlan;
use crate::weights::ModelWeights;

/// How to size the CPU backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuOptions {
    /// KV blocks in the pool.
    pub kv_blocks: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Worker threads; `None` uses one per core.
    pub threads: Option<usize>,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            kv_blocks: 256,
            block_size: 16,
            threads: None,
        }
    }
}

/// The CPU reference backend: f32 weights and compute, batch invariant bit for bit.
pub struct CpuBackend {
    config: ModelConfig,
    weights: ModelWeights,
    rope: RopeFreqs,
    kv: PagedKvCache,
    pool: rayon::ThreadPool,
}

impl CpuBackend {
    /// Loads the weights (one tensor at a time, calling `progress(loaded, total)` after each)
    /// and allocates the KV pool.
    pub fn new(
        weights: &dyn WeightSource,
        opts: CpuOptions,
        progress: Option<&dyn Fn(usize, usize)>,
    ) -> anyhow::Result<CpuBackend> {
        let config = weights.config().clone();
        config.validate("model config")?;
        anyhow::ensure!(opts.block_size > 0, "the KV block size must be at least 1");
        anyhow::ensure!(opts.kv_blocks > 0, "the KV pool needs at least one block");
        anyhow::ensure!(
            opts.threads != Some(0),
            "the thread count must be at least 1"
        );
        let mut builder = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("kiln-cpu-{i}"));
        if let Some(n) = opts.threads {
            builder = builder.num_threads(n);
        }
        let pool = builder.build()?;
        let weights = ModelWeights::load(weights, &pool, progress)?;
        let geometry = KvGeometry {
            block_size: opts.block_size,
            num_blocks: opts.kv_blocks,
        };
        let kv = PagedKvCache::new(
            config.num_layers,
            geometry,
            config.num_kv_heads * config.head_dim,
        )?;
        let rope = RopeFreqs {
            inv_freq: config.rope_inv_freq(),
            attention_factor: config.rope_attention_factor(),
        };
        Ok(CpuBackend {
            config,
            weights,
            rope,
            kv,
            pool,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Fills the KV pool with NaN: any later read of a slot that no step wrote turns the
    /// logits into NaN. For tests of the block-table plumbing.
    pub fn poison_kv_cache(&mut self) {
        self.kv.poison();
    }
}

impl Backend for CpuBackend {
    fn kv_geometry(&self) -> KvGeometry {
        self.kv.geometry
    }

    fn forward(&mut self, chunks: &[ChunkInput<'_>]) -> anyhow::Result<Vec<f32>> {
        let plan = StepPlan::new(chunks, self.kv.geometry, self.config.vocab_size)?;
        if plan.tokens.is_empty() {
            return Ok(Vec::new());
        }
        let model = Model {
            cfg: &self.config,
            weights: &self.weights,
            rope: &self.rope,
        };
        let kv = &mut self.kv;
        Ok(self.pool.install(|| model.forward(kv, &plan)))
    }
}
