//! [`CpuBackend`]: weights, KV pool and thread pool, behind `kiln_step::Backend`. A step runs
//! the layer program (`kiln_model::run_step`) through the CPU's ops; argmax and sampling, when
//! asked, are the reference sampler's on the step's logits.

use kiln_model::{run_step, ModelConfig, ModelSpec, WeightSource};
use kiln_step::{Backend, ChunkInput, KvGeometry, StepLimits, StepOutput, Want};

use crate::forward::CpuOps;
use crate::kv_cache::PagedKvCache;
use crate::rounding::Rounding;
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
    /// Block copies the host tier of the prefix cache keeps (0: none). On the CPU the pool is
    /// host memory already; the tier is there so that the engine's use of it is the same (and
    /// tested) on every backend.
    pub host_blocks: usize,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            kv_blocks: 256,
            block_size: 16,
            threads: None,
            host_blocks: 0,
        }
    }
}

/// The CPU reference backend: f32 weights and compute, batch invariant bit for bit.
pub struct CpuBackend {
    config: ModelConfig,
    spec: ModelSpec,
    weights: ModelWeights,
    kv: PagedKvCache,
    pool: rayon::ThreadPool,
    /// A narrower backend's roundings, emulated (None: the f32 reference).
    rounding: Option<Rounding>,
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
        let spec = config.spec();
        let weights = ModelWeights::load(weights, &spec, &pool, progress)?;
        let geometry = KvGeometry {
            block_size: opts.block_size,
            num_blocks: opts.kv_blocks,
        };
        let kv_dims: Vec<usize> = spec.layers.iter().map(|l| l.attn.cache_kv_dim()).collect();
        let kv = PagedKvCache::new(&kv_dims, geometry, opts.host_blocks)?;
        Ok(CpuBackend {
            config,
            spec,
            weights,
            kv,
            pool,
            rounding: None,
        })
    }

    /// Rounds activations where a backend storing a narrower format does ([`Rounding`]), so
    /// that this backend is the reference such a backend is held to; None: plain f32.
    pub fn set_rounding(&mut self, rounding: Option<Rounding>) {
        self.rounding = rounding;
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

    fn host_blocks(&self) -> usize {
        self.kv.host_blocks
    }

    fn copy_blocks(&mut self, copies: &[kiln_step::BlockCopy]) -> anyhow::Result<()> {
        copies.iter().try_for_each(|&c| self.kv.copy_block(c))
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> anyhow::Result<StepOutput> {
        let limits = StepLimits {
            kv: self.kv.geometry,
            vocab_size: self.spec.vocab_size,
            max_context: None,
            capacity: None,
        };
        let plan = StepPlan::new(chunks, &limits)?;
        if plan.tokens.is_empty() {
            return want.from_logits(Vec::new(), self.spec.vocab_size);
        }
        let (spec, weights, kv, rounding) =
            (&self.spec, &self.weights, &mut self.kv, self.rounding);
        let logits = self.pool.install(|| -> anyhow::Result<Vec<f32>> {
            let mut ops = CpuOps::new(spec, weights, kv, &plan, rounding);
            run_step(spec, &mut ops)?;
            Ok(ops.logits)
        })?;
        want.from_logits(logits, self.spec.vocab_size)
    }
}
