//! [`CpuBackend`]: weights, KV pool and thread pool, behind `kiln_step::Backend`. A step runs
//! the layer program (`kiln_model::run_step`) through the CPU's ops; argmax and sampling, when
//! asked, are the reference sampler's on the step's logits.

use anyhow::Context;
use kiln_model::program::run_draft_step;
use kiln_model::{run_step, ModelConfig, ModelSpec, WeightSource};
use kiln_step::{
    Backend, ChunkInput, DraftRow, KvGeometry, KvRing, StepCapacity, StepLimits, StepOutput, Want,
};

use crate::forward::{CpuOps, DraftIo, RingLayers};
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
    /// `--quantize fp8`: a layer's projections in fp8 rows, their inputs rounded to fp8 rows
    /// before each product (kiln_formats::fp8), as the GPU's fp8 GEMMs read them.
    pub fp8: bool,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            kv_blocks: 256,
            block_size: 16,
            threads: None,
            host_blocks: 0,
            fp8: false,
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
    /// A draft model that reads this backend's KV cache (Gemma 4's assistant).
    draft: Option<DraftModel>,
    /// The final-normed logits rows of the step last run, `[rows, hidden]`, kept while a draft
    /// model is attached: its first step starts from them.
    last_hidden: Vec<f32>,
    /// The sliding-window layers' KV ring, when enabled ([`CpuBackend::enable_kv_ring`]).
    ring: Option<Ring>,
}

struct Ring {
    kv: KvRing,
    layers: RingLayers,
    capacity: StepCapacity,
}

struct DraftModel {
    spec: ModelSpec,
    weights: ModelWeights,
}

/// A draft call's answer with the logits behind it (for parity tests).
pub struct Drafted {
    /// Per row, its `k` draft tokens.
    pub tokens: Vec<Vec<u32>>,
    /// `[k][rows * vocab]`: each draft step's logits rows.
    pub logits: Vec<Vec<f32>>,
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
        let weights = ModelWeights::load(weights, &spec, &pool, progress, opts.fp8)?;
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
            draft: None,
            last_hidden: Vec::new(),
            ring: None,
        })
    }

    /// Keeps the sliding-window layers' KV in a ring of blocks per sequence
    /// ([`kiln_step::KvRing`]) for up to `max_seqs` sequences and steps of up to `max_chunk`
    /// tokens: those layers hold only blocks `0..max_seqs * ring length` (fewer rings when the
    /// pool holds fewer). The KV pool is allocated again (empty), and the backend then has a
    /// step capacity and no host tier.
    pub fn enable_kv_ring(&mut self, max_seqs: usize, max_chunk: usize) -> anyhow::Result<KvRing> {
        let window = self
            .spec
            .ring_window()
            .context("no layer of this model attends within a window")?;
        anyhow::ensure!(
            self.draft.is_none(),
            "a draft model reads the KV cache whole"
        );
        anyhow::ensure!(max_seqs > 0 && max_chunk > 0, "an empty step capacity");
        let geometry = self.kv.geometry;
        let blocks = KvRing::blocks_for(window, max_chunk, geometry.block_size);
        // A sequence needs a whole ring: as many rings as the pool holds, up to one each.
        let rings = max_seqs.min(geometry.num_blocks / blocks);
        anyhow::ensure!(
            rings > 0,
            "a KV ring of {blocks} blocks does not fit a pool of {}",
            geometry.num_blocks
        );
        let kv = KvRing {
            blocks,
            capable: rings * blocks,
            window,
        };
        let layers = RingLayers {
            caches: self.spec.ring_caches(),
            reads: self.spec.reads_ring(),
        };
        let kv_dims: Vec<usize> = self
            .spec
            .layers
            .iter()
            .map(|l| l.attn.cache_kv_dim())
            .collect();
        self.kv = PagedKvCache::with_ring(&kv_dims, &layers.caches, geometry, kv.capable)?;
        let capacity = StepCapacity {
            max_seqs,
            max_tokens: max_chunk,
        };
        self.ring = Some(Ring {
            kv,
            layers,
            capacity,
        });
        Ok(kv)
    }

    /// Rounds activations where a backend storing a narrower format does ([`Rounding`]), so
    /// that this backend is the reference such a backend is held to; None: plain f32.
    pub fn set_rounding(&mut self, rounding: Option<Rounding>) {
        self.rounding = rounding;
    }

    /// Loads a draft model that reads this backend's KV cache and hidden states (Gemma 4's
    /// assistant); an error says why it does not fit this model.
    pub fn attach_draft_model(
        &mut self,
        weights: &dyn WeightSource,
        progress: Option<&dyn Fn(usize, usize)>,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.ring.is_none(),
            "a draft model reads the KV cache whole, and this backend keeps a ring"
        );
        let config = weights.config().clone();
        config.validate("draft model config")?;
        let spec = config
            .draft_spec(&self.config)
            .context("the draft model does not fit the model")?;
        // A draft model keeps its own format: fp8 is the target's (`CpuOptions::fp8`).
        let weights = ModelWeights::load(weights, &spec, &self.pool, progress, false)?;
        self.draft = Some(DraftModel { spec, weights });
        Ok(())
    }

    /// [`Backend::draft`] with each draft step's logits.
    pub fn draft_with_logits(
        &mut self,
        rows: &[DraftRow<'_>],
        k: usize,
    ) -> anyhow::Result<Drafted> {
        let d = self.draft.as_ref().context("no draft model is attached")?;
        let h = self.spec.hidden_size;
        self.limits()
            .check_draft(rows, self.last_hidden.len() / h.max(1))?;
        let mut hidden: Vec<f32> = rows
            .iter()
            .flat_map(|r| &self.last_hidden[r.hidden_row * h..][..h])
            .copied()
            .collect();
        let mut tokens: Vec<u32> = rows.iter().map(|r| r.token).collect();
        let mut out = Drafted {
            tokens: vec![Vec::with_capacity(k); rows.len()],
            logits: Vec::with_capacity(k),
        };
        let vocab = d.spec.vocab_size;
        for _ in 0..k {
            let plan = StepPlan::draft(&tokens, rows);
            let (spec, weights, target, kv) = (&d.spec, &d.weights, &self.weights, &mut self.kv);
            let rounding = self.rounding;
            let (logits, next) = self.pool.install(|| -> anyhow::Result<_> {
                let mut ops = CpuOps::new(spec, weights, kv, &plan, rounding);
                ops.draft = Some(DraftIo { target, hidden });
                run_draft_step(spec, &mut ops)?;
                let io = ops.draft.take().context("the draft step lost its state")?;
                Ok((ops.logits, io.hidden))
            })?;
            hidden = next;
            let picks = match Want::Argmax.from_logits(logits.clone(), vocab)? {
                StepOutput::Tokens(t) => t,
                StepOutput::Logits(_) => anyhow::bail!("argmax gave logits"),
            };
            for (i, p) in picks.into_iter().enumerate() {
                tokens[i] = p.map_err(|e| anyhow::anyhow!("draft row {i}: {e}"))?.id;
                out.tokens[i].push(tokens[i]);
            }
            out.logits.push(logits);
        }
        Ok(out)
    }

    fn limits(&self) -> StepLimits {
        StepLimits {
            kv: self.kv.geometry,
            vocab_size: self.spec.vocab_size,
            max_context: None,
            capacity: self.ring.as_ref().map(|r| r.capacity),
            ring: self.ring.as_ref().map(|r| r.kv),
        }
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

    fn step_capacity(&self) -> Option<StepCapacity> {
        self.ring.as_ref().map(|r| r.capacity)
    }

    fn kv_ring(&self) -> Option<KvRing> {
        self.ring.as_ref().map(|r| r.kv)
    }

    fn copy_blocks(&mut self, copies: &[kiln_step::BlockCopy]) -> anyhow::Result<()> {
        copies.iter().try_for_each(|&c| self.kv.copy_block(c))
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> anyhow::Result<StepOutput> {
        let plan = StepPlan::new(chunks, &self.limits())?;
        self.last_hidden.clear();
        if plan.tokens.is_empty() {
            return want.from_logits(Vec::new(), self.spec.vocab_size);
        }
        let (spec, weights, kv, rounding) =
            (&self.spec, &self.weights, &mut self.kv, self.rounding);
        let ring_rows = plan.ring_rows();
        let ring = self.ring.as_ref().map(|r| &r.layers);
        let (logits, normed) = self.pool.install(|| -> anyhow::Result<_> {
            let mut ops = CpuOps::new(spec, weights, kv, &plan, rounding);
            if let Some(layers) = ring {
                ops = ops.with_ring(layers, &ring_rows);
            }
            run_step(spec, &mut ops)?;
            Ok((ops.logits, ops.final_normed))
        })?;
        if self.draft.is_some() {
            self.last_hidden = normed;
        }
        want.from_logits(logits, self.spec.vocab_size)
    }

    fn has_draft_model(&self) -> bool {
        self.draft.is_some()
    }

    fn draft(&mut self, rows: &[DraftRow<'_>], k: usize) -> anyhow::Result<Vec<Vec<u32>>> {
        Ok(self.draft_with_logits(rows, k)?.tokens)
    }
}
