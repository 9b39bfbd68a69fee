//! The CUDA backend behind kiln_engine's Backend trait: loads the weights, sizes every buffer
//! and the KV pool once, then runs each step with one input copy, the queued launches, one
//! result copy and one host synchronisation.

use anyhow::{bail, Context, Result};
use kiln_engine::{Backend, ChunkInput, KvGeometry};
use kiln_model::{ModelConfig, WeightSource};

use crate::device::{Gpu, PinnedBuf};
use crate::forward::{Activations, StepContext};
use crate::gemm_lt::LtGemm;
use crate::kv_cache::KvCache;
use crate::step_plan::{pack_step, StepLayout, StepPlan};
use crate::switches::Switches;
use crate::weights::{load_weights, ModelWeights};

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
        }
    }
}

pub struct CudaBackend {
    // Field order is drop order: everything on the device goes before the context in `gpu`.
    lt: LtGemm,
    act: Activations,
    kv: KvCache,
    weights: ModelWeights,
    step_host: PinnedBuf<i32>,
    logits_host: PinnedBuf<f32>,
    ids_host: PinnedBuf<i32>,
    layout: StepLayout,
    config: ModelConfig,
    switches: Switches,
    gpu: Gpu,
}

enum Output {
    Logits,
    Argmax,
}

impl CudaBackend {
    pub fn new(
        weights: &dyn WeightSource,
        opts: CudaOptions,
        progress: Option<&dyn Fn(usize, usize)>,
    ) -> Result<CudaBackend> {
        let config = weights.config().clone();
        config.validate("CUDA backend")?;
        if opts.block_size < 16 {
            bail!("KV block size must be 16 or more, got {}", opts.block_size);
        }
        if opts.max_seqs == 0 || opts.prefill_chunk == 0 {
            bail!("max_seqs and prefill_chunk must be positive");
        }
        if !crate::kernels::FLASH_HEAD_DIMS.contains(&config.head_dim) {
            bail!(
                "CUDA backend supports head dims {:?}, the model has {}",
                crate::kernels::FLASH_HEAD_DIMS,
                config.head_dim
            );
        }
        let max_context = opts.max_context.unwrap_or(config.max_position).max(1);
        let max_tokens = opts
            .max_batch_tokens
            .unwrap_or(opts.prefill_chunk + opts.max_seqs);
        let gpu = Gpu::new(opts.device)?;
        let weights_dev = load_weights(&gpu, weights, max_context, progress)?;
        let mut lt = LtGemm::new(&gpu, opts.prefill_chunk)?;
        for (n, k) in [
            (config.q_dim() + 2 * config.kv_dim(), config.hidden_size),
            (config.hidden_size, config.q_dim()),
            (2 * config.intermediate_size, config.hidden_size),
            (config.hidden_size, config.intermediate_size),
        ] {
            lt.pin_shape(&gpu, n, k)
                .with_context(|| format!("choosing the GEMM algorithm for {n}x{k}"))?;
        }
        // The block count is unknown until the budget is; size the step layout for the pool after.
        let probe = StepLayout::new(
            max_tokens,
            opts.max_seqs,
            max_context,
            opts.block_size,
            1,
            config.vocab_size,
        );
        let act = Activations::new(&gpu, &config, &probe)?;
        let (free, _) = gpu.mem_info()?;
        let budget = match opts.kv_cache_bytes {
            Some(b) => b,
            None => {
                ((free.saturating_sub(512 << 20)) as f64
                    * opts.kv_cache_fraction.clamp(0.0, 1.0) as f64) as usize
            }
        };
        let kv = KvCache::new(&gpu, &config, opts.block_size, budget)?;
        let layout = StepLayout::new(
            max_tokens,
            opts.max_seqs,
            max_context,
            opts.block_size,
            kv.num_blocks,
            config.vocab_size,
        );
        debug_assert_eq!(layout.len, probe.len);
        let step_host = PinnedBuf::new(&gpu, layout.len)?;
        let logits_host = PinnedBuf::new(&gpu, opts.max_seqs * config.vocab_size)?;
        let ids_host = PinnedBuf::new(&gpu, opts.max_seqs)?;
        Ok(CudaBackend {
            lt,
            act,
            kv,
            weights: weights_dev,
            step_host,
            logits_host,
            ids_host,
            layout,
            config,
            switches: Switches::from_env(),
            gpu,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// A few lines on what was set up: device, memory, switches, pinned GEMM algorithms.
    pub fn describe(&self) -> String {
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        let mut s = format!(
            "device {} (sm_{}, {} SMs); weights {:.2} GiB; buffers {:.2} GiB; KV cache {:.2} GiB = {} blocks of {} tokens; \
             max {} tokens / {} sequences per step, context {}\nswitches: {}",
            self.gpu.name,
            self.gpu.arch,
            self.gpu.sm_count,
            gib(self.weights.bytes),
            gib(self.act.bytes()),
            gib(self.kv.bytes()),
            self.kv.num_blocks,
            self.kv.block_size,
            self.layout.max_tokens,
            self.layout.max_seqs,
            self.layout.max_context,
            self.switches.describe()
        );
        for c in &self.lt.choices {
            s.push('\n');
            s.push_str(c);
        }
        s
    }

    fn step(&mut self, chunks: &[ChunkInput<'_>], out: Output) -> Result<StepPlan> {
        self.gpu.bind()?;
        let plan = pack_step(chunks, &self.layout, self.step_host.as_mut_slice())?;
        if plan.n_tokens == 0 {
            return Ok(plan);
        }
        self.step_host
            .copy_to_device(&self.gpu, self.act.step.ptr(), plan.upload_len)?;
        let ctx = StepContext {
            gpu: &self.gpu,
            cfg: &self.config,
            w: &self.weights,
            kv: &self.kv,
            a: &self.act,
            layout: &self.layout,
            sw: self.switches,
        };
        ctx.run(&mut self.lt, &plan)?;
        match out {
            Output::Logits => self.logits_host.copy_from_device(
                &self.gpu,
                self.act.logits.ptr(),
                plan.n_logits * self.config.vocab_size,
            )?,
            Output::Argmax => {
                self.ids_host
                    .copy_from_device(&self.gpu, self.act.ids.ptr(), plan.n_logits)?
            }
        }
        // The step's one host synchronisation.
        self.gpu
            .synchronize()
            .context("running the step on the GPU")?;
        Ok(plan)
    }

    /// Runs a step like [`Backend::forward`] but returns only the argmax token of each row that
    /// wants logits (chosen on the device; only the ids cross to the host).
    pub fn forward_greedy(&mut self, chunks: &[ChunkInput<'_>]) -> Result<Vec<u32>> {
        let plan = self.step(chunks, Output::Argmax)?;
        Ok(self.ids_host.as_slice()[..plan.n_logits]
            .iter()
            .map(|&i| i as u32)
            .collect())
    }
}

impl Backend for CudaBackend {
    fn kv_geometry(&self) -> KvGeometry {
        KvGeometry {
            block_size: self.kv.block_size,
            num_blocks: self.kv.num_blocks,
        }
    }

    fn forward(&mut self, chunks: &[ChunkInput<'_>]) -> Result<Vec<f32>> {
        let plan = self.step(chunks, Output::Logits)?;
        Ok(self.logits_host.as_slice()[..plan.n_logits * self.config.vocab_size].to_vec())
    }

    /// The argmax of each logits row, chosen on the device: only the ids cross to the host.
    fn forward_argmax(&mut self, chunks: &[ChunkInput<'_>]) -> Option<Result<Vec<u32>>> {
        Some(self.forward_greedy(chunks))
    }
}
