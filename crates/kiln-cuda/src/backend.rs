//! The CUDA backend behind kiln_step's Backend trait: loads the weights, sizes every buffer
//! and the KV pool once, then runs each step with one input copy, the queued launches (or one
//! CUDA graph launch, graphs.rs), one result copy and one host synchronisation.

use anyhow::{bail, Result};
use kiln_model::{ModelConfig, ModelSpec};
use kiln_step::{
    Backend, ChunkInput, DeviceTiming, Feed, KvGeometry, KvRing, Launched, RowSampling,
    SampleError, Sampled, StepCapacity, StepOutput, Want,
};

use crate::device::{Gpu, PinnedBuf};
use crate::forward::{Activations, StepContext};
use crate::gemm_lt::LtGemm;
use crate::graphs::{GraphCache, GraphCounters};
use crate::graphs_pad::{GraphBuckets, GraphShape};
use crate::host_tier::HostTier;
use crate::kv_cache::{KvCache, RingAsk};
use crate::pipeline::Pipeline;
use crate::sampling::SamplingBuffers;
use crate::step_plan::{StepLayout, StepPlan};
use crate::store::StoreType;
use crate::switches::Switches;
use crate::weights::ModelWeights;

// Opening a backend: the weights loaded, GEMM algorithms pinned, every buffer sized.
#[path = "backend_open.rs"]
mod open;

// Launching a step and collecting it (Backend::launch / collect).
#[path = "backend_queue.rs"]
mod queue;

// A draft model that reads this backend's KV cache (Backend::draft).
#[path = "backend_draft.rs"]
mod draft;
pub use draft::Drafted;

/// How the backend sizes itself. Everything is allocated once, in `CudaBackend::new`.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// KV cache size in bytes; None: `kv_cache_fraction` of the memory left after weights and buffers.
    pub kv_cache_bytes: Option<usize>,
    pub kv_cache_fraction: f32,
    /// Tokens per KV block (16 or more).
    pub block_size: usize,
    /// The engine's prefill chunk; cuBLASLt algorithms are chosen for this row count.
    pub prefill_chunk: usize,
    /// Most sequences in one step.
    pub max_seqs: usize,
    /// Most tokens in one step; None: prefill_chunk + max_seqs.
    pub max_batch_tokens: Option<usize>,
    /// Longest sequence; None: the model's max_position.
    pub max_context: Option<usize>,
    /// Pinned host memory for the prefix cache's host tier, in bytes (0: none).
    pub host_cache_bytes: usize,
    /// The number format of weights, GEMM inputs, Q and the KV cache (store.rs).
    pub dtype: StoreType,
    /// Sliding-window layers keep only their window, in a ring of blocks per sequence
    /// (kiln_step::KvRing); None: as KILN_KV_RING says (off unless 1). No host tier beside it.
    pub kv_ring: Option<bool>,
    /// Decode rows of bf16 weights in the prefill GEMM's order (docs/CUDA.md, "Decode in the
    /// prefill GEMM's order"); None: as KILN_CHAIN_GEMM says (off unless 1).
    pub chain_gemm: Option<bool>,
    /// `--quantize fp8`: each layer's projections in fp8 rows, multiplied by the fp8 GEMM
    /// (gemm_fp8.rs); None: as KILN_FP8 says (off unless 1).
    pub fp8: Option<bool>,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            device: 0,
            kv_cache_bytes: None,
            kv_cache_fraction: 0.9,
            block_size: 16,
            prefill_chunk: 2048,
            max_seqs: 256,
            max_batch_tokens: None,
            max_context: None,
            host_cache_bytes: 0,
            dtype: StoreType::Bf16,
            kv_ring: None,
            chain_gemm: None,
            fp8: None,
        }
    }
}

pub struct CudaBackend {
    // Field order is drop order: everything on the device goes before the context in `gpu`.
    graphs: GraphCache,
    lt: LtGemm,
    /// A draft model that reads this backend's KV cache (Gemma 4's assistant).
    draft: Option<draft::DraftModel>,
    act: Activations,
    host_tier: Option<HostTier>,
    kv: KvCache,
    weights: ModelWeights,
    /// Host staging of a step's inputs and argmax picks: two slots, one per launched step.
    step_host: [PinnedBuf<i32>; 2],
    logits_host: PinnedBuf<f32>,
    ids_host: [PinnedBuf<i32>; 2],
    sampling: SamplingBuffers,
    pipe: Pipeline,
    layout: StepLayout,
    config: ModelConfig,
    spec: ModelSpec,
    switches: Switches,
    opts: CudaOptions,
    /// Logits rows of the step last finished: the final-normed rows in `act.logit_in` a draft
    /// may start from.
    hidden_rows: usize,
    gpu: Gpu,
}

/// Builds the StepContext of a backend from its fields, so that the graph cache and the GEMM
/// state stay free to borrow mutably beside it.
macro_rules! step_context {
    ($b:expr) => {
        StepContext {
            gpu: &$b.gpu,
            spec: &$b.spec,
            w: &$b.weights,
            kv: &$b.kv,
            a: &$b.act,
            layout: &$b.layout,
            sw: $b.switches,
            draft: None,
        }
    };
}

/// The KV budget in bytes: as asked, else a fraction of the free device memory.
fn kv_budget(gpu: &Gpu, bytes: Option<usize>, fraction: f32) -> Result<usize> {
    Ok(match bytes {
        Some(b) => b,
        None => {
            let (free, _) = gpu.mem_info()?;
            ((free.saturating_sub(512 << 20)) as f64 * fraction.clamp(0.0, 1.0) as f64) as usize
        }
    })
}

/// The KV pool for `budget` bytes plus one scratch block past the engine's blocks, which the
/// inert padding rows of a graph step write to; with a ring when `ring` asks for one and the
/// budget holds one (kv_cache.rs).
fn kv_pool(
    gpu: &Gpu,
    c: &ModelSpec,
    block_size: usize,
    budget: usize,
    ring: Option<RingAsk>,
) -> Result<(KvCache, Option<KvRing>)> {
    if let Some(ask) = ring {
        if KvCache::ring_sizing(c, block_size, gpu.store, budget, ask).is_some() {
            let (kv, ring) = KvCache::with_ring(gpu, c, block_size, budget, ask)?;
            return Ok((kv, Some(ring)));
        }
        tracing::warn!(
            "the KV budget holds no ring of {} blocks: sliding-window layers keep all their KV",
            ask.blocks
        );
    }
    let per_block = KvCache::block_bytes(c, block_size, gpu.store);
    if budget < per_block {
        bail!("KV cache budget of {budget} bytes holds no block of {block_size} tokens ({per_block} bytes each)");
    }
    Ok((KvCache::new(gpu, c, block_size, budget + per_block)?, None))
}

impl CudaBackend {
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The switches this backend runs with: the environment's, with the options' overrides and
    /// the paths this GPU cannot build turned off (backend_open.rs).
    pub fn switches(&self) -> &Switches {
        &self.switches
    }

    /// Bytes of the KV pool (its scratch blocks too).
    pub fn kv_cache_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// What was allocated, in the terms of [`crate::Footprint`] (which predicts it).
    pub fn allocated(&self) -> crate::Footprint {
        crate::Footprint {
            weights: self.weights.bytes,
            buffers: self.act.bytes()
                + self.sampling.bytes()
                + self.pipe.bytes()
                + crate::gemm_lt::WORKSPACE_BYTES
                + if self.lt.fp8.is_some() {
                    crate::gemm_fp8::WORKSPACE_BYTES
                } else {
                    0
                }
                + self.weights.scratch_bytes()
                + self.gpu.reserved_scratch_bytes(),
            kv_block: KvCache::block_bytes(&self.spec, self.kv.block_size, self.gpu.store),
        }
    }

    /// A few lines on what was set up: device, memory, switches, CUDA graphs, pinned GEMM
    /// algorithms.
    pub fn describe(&self) -> String {
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        let mut s = format!(
            "device {} (sm_{}, {} SMs); storage {}; weights {:.2} GiB{}; buffers {:.2} GiB; KV cache {:.2} GiB = {} blocks of {} tokens (+1 scratch), host tier {:.2} GiB; \
             max {} tokens / {} sequences per step, context {}\nswitches: {}",
            self.gpu.name,
            self.gpu.arch,
            self.gpu.sm_count,
            self.gpu.store,
            gib(self.weights.bytes),
            crate::quant_weights::describe(&self.weights),
            gib(self.act.bytes() + self.sampling.bytes() + self.weights.scratch_bytes()),
            gib(self.kv.bytes()),
            self.layout.num_blocks,
            self.kv.block_size,
            gib(self.host_tier.as_ref().map_or(0, HostTier::bytes)),
            self.layout.max_tokens,
            self.layout.max_seqs,
            self.layout.max_context,
            self.switches.describe()
        );
        let fp8: usize = self
            .weights
            .layers
            .iter()
            .flat_map(|l| l.fp8())
            .map(|m| m.bytes())
            .sum();
        if fp8 > 0 {
            s.push_str(&format!(
                "\nfp8 projections (--quantize fp8): {:.2} GiB of the weights",
                gib(fp8)
            ));
        }
        s.push('\n');
        s.push_str(&self.graphs.describe());
        let fp8_choices = self.lt.fp8.iter().flat_map(|f| &f.choices);
        for c in self.lt.choices.iter().chain(fp8_choices) {
            s.push('\n');
            s.push_str(c);
        }
        s
    }

    /// Queues a step whose inputs are on the device: its shape's graph when there is one (a
    /// shape seen for the first time is captured first), else every launch one by one.
    fn launch_step(&mut self, shape: Option<GraphShape>, run: &StepPlan) -> Result<()> {
        if let Some(s) = shape {
            if !self.graphs.holds(s) {
                let ctx = step_context!(self);
                let lt = &mut self.lt;
                if let Err(e) = self.graphs.capture(&self.gpu, s, || ctx.run(lt, run)) {
                    let why = format!("{s:?}: {e:#}");
                    tracing::warn!("CUDA graph capture failed, running eagerly from now: {why}");
                    self.graphs.fail(why);
                }
            }
            if self.graphs.holds(s) {
                return self.graphs.replay(&self.gpu, s);
            }
        }
        self.graphs.count_eager();
        let ctx = step_context!(self);
        ctx.run(&mut self.lt, run)
    }

    /// The KV slot that padding rows write to: the first of the scratch block.
    fn scratch_slot(&self) -> Result<i32> {
        i32::try_from(self.layout.num_blocks * self.layout.block_size)
            .map_err(|_| anyhow::anyhow!("KV pool too large for 32-bit slot indices"))
    }

    /// Captures the decode and prefill buckets (time in the log and in describe()). A failure
    /// turns graphs off with the reason and leaves the backend running eagerly.
    fn capture_startup_graphs(&mut self) {
        let shapes = self.graphs.buckets.startup_shapes();
        self.capture_shapes(&shapes, "start-up");
    }

    /// Records every shape in `shapes` again (or for the first time).
    fn capture_shapes(&mut self, shapes: &[GraphShape], why: &str) {
        if shapes.is_empty() {
            return;
        }
        let buckets = self.graphs.buckets.clone();
        let ctx = step_context!(self);
        let lt = &mut self.lt;
        let captured = self.graphs.capture_all(&self.gpu, shapes, |s| {
            // The inputs are not read while recording; the plan fixes every launch.
            ctx.run(lt, &buckets.plan(s, 0))
        });
        match captured {
            Ok(()) => tracing::info!("{why} capture: {}", self.graphs.describe()),
            Err(e) => {
                let why = format!("{why} capture: {e:#}");
                tracing::warn!("CUDA graphs off: {why}");
                self.graphs.fail(why);
            }
        }
    }

    /// Turns CUDA graphs on or off for the following steps (KILN_CUDA_GRAPHS=0 starts with
    /// them off); turning them on captures the start-up buckets if that was not done yet.
    pub fn set_graphs(&mut self, on: bool) -> Result<()> {
        self.gpu.bind()?;
        self.graphs.set_enabled(on);
        if on && self.graphs.held_shapes().is_empty() {
            self.capture_startup_graphs();
        }
        Ok(())
    }

    /// Whether steps may run as CUDA graphs.
    pub fn graphs_on(&self) -> bool {
        self.graphs.enabled()
    }

    pub fn graph_counters(&self) -> GraphCounters {
        self.graphs.counters()
    }

    /// Shapes that hold a graph, in order.
    pub fn graph_shapes(&self) -> Vec<GraphShape> {
        self.graphs.held_shapes()
    }

    pub fn graph_buckets(&self) -> &GraphBuckets {
        &self.graphs.buckets
    }

    /// Frees the KV pool and allocates a new one of `kv_cache_bytes` (None: the fraction of
    /// free memory given at start), then records every held graph again, updated in place for
    /// the new pool. Every sequence's cache is lost: the engine must start over.
    pub fn rebuild_kv_cache(&mut self, kv_cache_bytes: Option<usize>) -> Result<KvGeometry> {
        anyhow::ensure!(
            self.pipe.is_empty(),
            "the KV pool cannot be rebuilt while launched steps wait to be collected"
        );
        self.gpu.bind()?;
        self.gpu.synchronize()?;
        let bs = self.opts.block_size;
        // A one-block stand-in, so the old pool's memory is free before the new one is sized.
        let stand_in = KvCache::new(
            &self.gpu,
            &self.spec,
            bs,
            KvCache::block_bytes(&self.spec, bs, self.gpu.store),
        )?;
        drop(std::mem::replace(&mut self.kv, stand_in));
        let budget = kv_budget(&self.gpu, kv_cache_bytes, self.opts.kv_cache_fraction)?;
        let l = self.layout;
        let on = l.ring.is_some();
        let ask = RingAsk::for_model(&self.spec, on, bs, l.max_tokens, l.max_seqs, l.max_context);
        let (kv, ring) = kv_pool(&self.gpu, &self.spec, bs, budget, ask)?;
        self.kv = kv;
        let blocks = self.kv.num_blocks - 1;
        let (seqs, ctx, vocab) = (l.max_seqs, l.max_context, l.vocab_size);
        self.layout = StepLayout::with_ring(l.max_tokens, seqs, ctx, bs, blocks, vocab, ring);
        // No step has run on the new pool: nothing a draft could start from.
        self.hidden_rows = 0;
        let held = self.graphs.held_shapes();
        self.capture_shapes(&held, "KV pool rebuild");
        self.forget_draft_graphs();
        Ok(self.kv_geometry())
    }

    /// Runs a step like [`Backend::forward`] but returns only the argmax token of each row that
    /// wants logits (chosen on the device; only the ids cross to the host).
    pub fn forward_greedy(&mut self, chunks: &[ChunkInput<'_>]) -> Result<Vec<u32>> {
        match self.run_whole(chunks, Want::Argmax, false)? {
            StepOutput::Tokens(t) => Ok(t.into_iter().map(|r| r.map_or(0, |s| s.id)).collect()),
            StepOutput::Logits(_) => bail!("the argmax step returned logits"),
        }
    }

    /// Runs a step like [`Backend::forward`] and samples each row that wants logits on the
    /// device with `rows`; only the chosen tokens and their log-probabilities reach the host.
    pub fn forward_sampled(
        &mut self,
        chunks: &[ChunkInput<'_>],
        rows: &[RowSampling],
    ) -> Result<Vec<Result<Sampled, SampleError>>> {
        self.sampled_on_device(chunks, Want::Sample(rows))
    }

    /// Like [`CudaBackend::forward_sampled`], each row first adjusted by its entry of `adjust`
    /// (a logit bias, a grammar's allowed tokens) on the device.
    pub fn forward_sampled_adjusted(
        &mut self,
        chunks: &[ChunkInput<'_>],
        rows: &[RowSampling],
        adjust: &kiln_step::StepAdjust,
    ) -> Result<Vec<Result<Sampled, SampleError>>> {
        self.sampled_on_device(chunks, Want::SampleAdjusted(rows, adjust))
    }

    fn sampled_on_device(
        &mut self,
        chunks: &[ChunkInput<'_>],
        want: Want<'_>,
    ) -> Result<Vec<Result<Sampled, SampleError>>> {
        let (Want::Sample(rows) | Want::SampleAdjusted(rows, _)) = want else {
            bail!("not a sampling step");
        };
        // Checked before the step runs: a mismatch is the caller's bug, not the GPU's.
        let wanted = chunks.iter().filter(|c| c.want_logits).count();
        if rows.len() != wanted {
            bail!("{} sampling rows for {wanted} logits rows", rows.len());
        }
        match self.run_whole(chunks, want, false)? {
            StepOutput::Tokens(t) => Ok(t),
            StepOutput::Logits(_) => bail!("the sampling step returned logits"),
        }
    }
}

impl Backend for CudaBackend {
    fn kv_geometry(&self) -> KvGeometry {
        KvGeometry {
            block_size: self.kv.block_size,
            num_blocks: self.layout.num_blocks,
        }
    }

    fn step_capacity(&self) -> Option<StepCapacity> {
        Some(StepCapacity {
            max_seqs: self.layout.max_seqs,
            max_tokens: self.layout.max_tokens,
        })
    }

    fn host_blocks(&self) -> usize {
        self.host_tier.as_ref().map_or(0, |h| h.slots)
    }

    fn kv_ring(&self) -> Option<KvRing> {
        self.layout.ring
    }

    /// Queued on the step stream: the next step's kernels run after them.
    fn copy_blocks(&mut self, copies: &[kiln_step::BlockCopy]) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        self.gpu.bind()?;
        match self.host_tier.as_mut() {
            Some(h) => h.copy(&self.gpu, &self.kv, copies),
            None => bail!("the CUDA backend was started without a host tier"),
        }
    }

    /// Logits and argmax come from the device as asked. Sampling runs on the device (the host
    /// sampler's arithmetic, bit for bit) unless `KILN_DEVICE_SAMPLING=0` or the rows ask for
    /// more than the kernel does; then the logits come to the host and the reference sampler
    /// picks.
    fn step(&mut self, chunks: &[ChunkInput<'_>], want: Want<'_>) -> Result<StepOutput> {
        let on_host = self.picks_on_host(&want);
        self.run_whole(chunks, want, on_host)
    }

    fn pipelined(&self) -> bool {
        true
    }

    /// Queued on the step stream after the steps before; a feed's token is copied on the
    /// device from the picks of the step launched before, after this step's inputs are
    /// uploaded and before its forward pass.
    fn launch(
        &mut self,
        chunks: &[ChunkInput<'_>],
        want: Want<'_>,
        feeds: &[Feed],
    ) -> Result<Launched> {
        let on_host = self.picks_on_host(&want);
        self.queue_step(chunks, &want, feeds, on_host)?;
        Ok(Launched {
            feeds_next: self.pipe.last_picks.is_some(),
        })
    }

    fn collect(&mut self) -> Result<StepOutput> {
        self.gpu.bind()?;
        self.finish_oldest()
    }

    fn device_timing(&mut self) -> Option<DeviceTiming> {
        self.pipe.take_timing()
    }

    fn has_draft_model(&self) -> bool {
        self.has_draft()
    }

    fn draft(&mut self, rows: &[kiln_step::DraftRow<'_>], k: usize) -> Result<Vec<Vec<u32>>> {
        Ok(self.draft_with_logits(rows, k, false)?.tokens)
    }
}
