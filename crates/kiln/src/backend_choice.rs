//! `--model` and `--device`: load a model and build the backend that runs it, with a progress
//! bar while the weights load.

use std::time::Instant;

use anyhow::Context;
use clap::{Args, ValueEnum};
use kiln_engine::{Backend, EngineConfig};
use kiln_load::{LoadedModel, LoadedWeights};

use crate::dtype_choice::Dtype;
use crate::memory_fit::MemoryFit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// The GPU when one can be used, else the CPU.
    Auto,
    /// The CPU backend: f32, the exact reference.
    Cpu,
    /// The CUDA backend on GPU 0 (fails when none can be used).
    Cuda,
}

#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// A .gguf file, a Hugging Face model folder, or dummy:PRESET (tiny, llama3-1b, llama3-8b,
    /// qwen3-8b, mistral-7b, gemma4-tiny, gemma4-e4b), or dummy:PRESET:FORMAT with
    /// block-quantised matrices (q8_0, q4_0, q4_k, q6_k, q4_k_m).
    #[arg(long, short = 'm', default_value = crate::DEFAULT_MODEL)]
    pub model: String,
}

impl ModelArgs {
    pub fn load(&self) -> anyhow::Result<LoadedModel> {
        let spec = resolve_default(&self.model);
        let model =
            kiln_load::load(&spec).with_context(|| format!("cannot load model `{spec}`"))?;
        for note in &model.notes {
            tracing::info!("{note}");
        }
        Ok(model)
    }

    /// What `--model` names, with the shipped default found where kiln was built from.
    pub fn resolved(&self) -> String {
        resolve_default(&self.model)
    }

    /// The model's header (tokenizer, shape, tensor list) without its weights.
    pub fn inspect(&self) -> anyhow::Result<kiln_load::ModelHeader> {
        let spec = resolve_default(&self.model);
        kiln_load::inspect(&spec).with_context(|| format!("cannot read model `{spec}`"))
    }
}

/// The default model's path is relative to the repository; run from elsewhere, kiln finds the
/// shipped file where it was built from.
fn resolve_default(spec: &str) -> String {
    if spec != crate::DEFAULT_MODEL || std::path::Path::new(spec).exists() {
        return spec.to_string();
    }
    let built_from = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
    let shipped = std::path::Path::new(built_from).join(spec);
    if shipped.exists() {
        shipped.to_string_lossy().into_owned()
    } else {
        spec.to_string()
    }
}

#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
    /// The number format of weights and activations.
    #[arg(long, value_enum, default_value_t = Dtype::Auto)]
    pub dtype: Dtype,
    /// CPU worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// GPU memory for the KV cache, in GiB (default: 90% of what is free after the weights and
    /// step buffers).
    #[arg(long, value_parser = parse_gib)]
    pub kv_cache_gb: Option<f64>,
    /// Host memory, in GiB, for prefix-cache blocks the KV pool gives up: kept there and copied
    /// back when a later prompt starts with them, instead of computed again (default: none).
    #[arg(long, value_parser = parse_gib)]
    pub prefix_cache_host_gb: Option<f64>,
    /// How the GPU sums decode rows' products (default: `skinny`, unless KILN_CHAIN_GEMM=1).
    /// `prefill-order` gives about twice the tokens a second from ~128 sequences and 17-30%
    /// fewer for 1-32. Both give every sequence the tokens it gets alone; not the same bits as
    /// each other.
    #[arg(long, value_enum)]
    pub decode_gemm: Option<DecodeGemm>,
    /// Quantise at load. `fp8`: each layer's four projections in fp8 E4M3 with a scale per
    /// row, their input rows rounded to fp8 the same way, so the GPU multiplies them on its
    /// fp8 tensor cores and holds half their bytes (compute capability 8.9 or later; the CPU
    /// computes the same quantisation in f32). Logits move by about fp8's precision; tokens can
    /// differ from those without it.
    #[arg(long, value_enum)]
    pub quantize: Option<Quantize>,
}

/// `--quantize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Quantize {
    /// fp8 E4M3 projections with a scale per output row (kiln_formats::fp8).
    Fp8,
}

/// `--decode-gemm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DecodeGemm {
    /// The skinny kernels' order: fastest for 1-8 sequences.
    Skinny,
    /// The prefill GEMM's order: one pass over the weights for a step's decode and prompt
    /// rows; fastest from about 32 sequences.
    PrefillOrder,
}

fn parse_gib(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!("`{s}` is not a size in GiB (a positive number)")),
    }
}

/// Tokens per KV block.
pub const BLOCK_SIZE: usize = 16;

impl DeviceArgs {
    /// Whether `model` would run on the GPU, without a word: [`DeviceArgs::use_cuda`] says why
    /// not, and refuses what cannot run, when the backend is built.
    pub fn expects_cuda(&self, model: &LoadedModel) -> bool {
        let available = kiln_cuda::unavailable_reason().is_none();
        match self.device {
            Device::Cpu => false,
            Device::Cuda => available,
            Device::Auto => {
                let config = &model.config;
                available
                    && kiln_cuda::model_support::refusal(&config.spec(), config.arch).is_none()
            }
        }
    }

    /// Whether `model` runs on the GPU, with `--dtype` checked against the backend chosen and
    /// the checkpoint: `--device auto` picks the CPU for a model the CUDA backend has no
    /// kernels for (saying so); `--device cuda` leaves the refusal to it.
    pub fn use_cuda(&self, model: &LoadedModel) -> anyhow::Result<bool> {
        let config = &model.config;
        let cuda = match self.device {
            Device::Cpu => false,
            Device::Cuda => match kiln_cuda::unavailable_reason() {
                None => true,
                Some(why) => anyhow::bail!("CUDA backend not available: {why}; use --device cpu"),
            },
            Device::Auto => {
                let refused = kiln_cuda::model_support::refusal(&config.spec(), config.arch);
                match (kiln_cuda::unavailable_reason(), refused) {
                    (None, Some(why)) => {
                        tracing::warn!("{why}; running on the CPU");
                        false
                    }
                    (reason, _) => reason.is_none(),
                }
            }
        };
        self.dtype.check(cuda, &model.description.tensor_types)?;
        Ok(cuda)
    }
}

/// Builds the backend for `model`, sized for the engine limits in `cfg`: on the CPU a KV pool
/// of `kv_tokens` tokens; on the GPU step buffers for `cfg` and a KV pool that takes most of
/// the free memory, which must hold one sequence of `longest` tokens (checked before anything
/// is allocated). `inputs_per_seq`: backend inputs one sequence may take in a step (a
/// drafting sequence verifies its last token and its drafts as one input each).
pub fn build_backend_for(
    model: &LoadedModel,
    device: &DeviceArgs,
    cfg: &EngineConfig,
    kv_tokens: usize,
    longest: usize,
    inputs_per_seq: usize,
) -> anyhow::Result<Box<dyn Backend>> {
    build_backend_with(model, device, cfg, kv_tokens, longest, inputs_per_seq, None)
}

/// [`build_backend_for`], with a draft model that reads the target's KV cache (Gemma 4's
/// assistant, checked to fit by `DraftArgs::assistant`) attached to the backend.
pub fn build_backend_with(
    model: &LoadedModel,
    device: &DeviceArgs,
    cfg: &EngineConfig,
    kv_tokens: usize,
    longest: usize,
    inputs_per_seq: usize,
    assistant: Option<&LoadedWeights>,
) -> anyhow::Result<Box<dyn Backend>> {
    let use_cuda = device.use_cuda(model)?;
    let host_bytes = device
        .prefix_cache_host_gb
        .map_or(0, |gb| (gb * (1u64 << 30) as f64) as usize);
    let bar = LoadBar::new(&model.name);
    let progress = |done, total| bar.set(done, total);
    let backend: Box<dyn Backend> = if use_cuda {
        let opts = kiln_cuda::CudaOptions {
            block_size: BLOCK_SIZE,
            prefill_chunk: cfg.prefill_chunk,
            max_seqs: cfg.max_num_seqs * inputs_per_seq.max(1),
            max_batch_tokens: Some(cfg.max_batched_tokens),
            max_context: Some(cfg.max_context),
            kv_cache_bytes: device
                .kv_cache_gb
                .map(|gb| (gb * (1u64 << 30) as f64) as usize),
            host_cache_bytes: host_bytes,
            dtype: device.dtype.cuda_store(),
            // A draft model reads the KV cache whole: no ring beside one.
            kv_ring: assistant.map(|_| false),
            chain_gemm: device.decode_gemm.map(|d| d == DecodeGemm::PrefillOrder),
            fp8: device.quantize.map(|q| q == Quantize::Fp8),
            ..kiln_cuda::CudaOptions::default()
        };
        check_gpu_fit(model, &opts, longest)?;
        let mut backend =
            kiln_cuda::CudaBackend::new(model.weights.as_ref(), opts, Some(&progress))
                .with_context(|| format!("cannot start the CUDA backend for `{}`", model.name))?;
        if let Some(a) = assistant {
            backend
                .attach_draft_model(a.weights.as_ref(), Some(&progress))
                .with_context(|| format!("cannot attach the draft model `{}`", a.name))?;
        }
        Box::new(backend)
    } else {
        MemoryFit::cpu(model, cfg.max_batched_tokens, cfg.max_num_seqs)?
            .check_streams(1, kv_tokens, "--kv-blocks")
            .context("the KV cache does not fit in host memory")?;
        let opts = kiln_cpu::CpuOptions {
            kv_blocks: kv_tokens.div_ceil(BLOCK_SIZE).max(1),
            block_size: BLOCK_SIZE,
            threads: device.threads,
            // The host tier's slots hold f32 K and V of every layer.
            host_blocks: {
                let kv: usize = model
                    .config
                    .spec()
                    .layers
                    .iter()
                    .map(|l| l.attn.cache_kv_dim())
                    .sum();
                host_bytes / (2 * 4 * BLOCK_SIZE * kv).max(1)
            },
            fp8: device.quantize == Some(Quantize::Fp8),
        };
        let mut backend = kiln_cpu::CpuBackend::new(model.weights.as_ref(), opts, Some(&progress))
            .with_context(|| format!("cannot start the CPU backend for `{}`", model.name))?;
        if let Some(a) = assistant {
            backend
                .attach_draft_model(a.weights.as_ref(), Some(&progress))
                .with_context(|| format!("cannot attach the draft model `{}`", a.name))?;
        }
        // KILN_KV_RING=1: sliding-window layers keep only their window (a draft model reads
        // the cache whole, so not beside one).
        let windowed = model.config.spec().ring_window().is_some();
        if kiln_step::kv_ring_from_env() && windowed && assistant.is_none() {
            let seqs = cfg.max_num_seqs * inputs_per_seq.max(1);
            backend
                .enable_kv_ring(seqs, cfg.max_batched_tokens)
                .context("cannot keep the sliding-window layers' KV in a ring")?;
        }
        Box::new(backend)
    };
    bar.finish(if use_cuda { "cuda" } else { "cpu" });
    Ok(backend)
}

/// Refuses a GPU start whose KV pool (as given, or 90% of what the weights and buffers leave)
/// cannot hold one sequence of `longest` tokens.
fn check_gpu_fit(
    model: &LoadedModel,
    opts: &kiln_cuda::CudaOptions,
    longest: usize,
) -> anyhow::Result<()> {
    let fit = MemoryFit::cuda(model, opts)?;
    let ctx = || "the model does not fit in GPU memory".to_string();
    fit.check_fixed().with_context(ctx)?;
    let one = fit.kv_bytes(1, longest.div_ceil(BLOCK_SIZE) * BLOCK_SIZE);
    let (pool, flag) = match opts.kv_cache_bytes {
        Some(b) => (b as u64, "--kv-cache-gb"),
        None => (
            (fit.kv_room() as f64 * opts.kv_cache_fraction as f64) as u64,
            "free GPU memory",
        ),
    };
    if let Some(b) = opts.kv_cache_bytes {
        fit.check_kv(b as u64, 1, longest, "--kv-cache-gb")
            .with_context(ctx)?;
    }
    if one > pool {
        anyhow::bail!(
            "one sequence of {} tokens needs {} of KV cache; {} gives the pool {}: lower \
             --max-context{}",
            crate::memory_fit::thousands(longest as u64),
            crate::memory_fit::bytes(one),
            flag,
            crate::memory_fit::bytes(pool),
            if opts.kv_cache_bytes.is_some() {
                " or raise --kv-cache-gb"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// A progress bar on stderr while tensors load; indicatif hides it when stderr is not a
/// terminal.
struct LoadBar {
    bar: indicatif::ProgressBar,
    started: Instant,
}

impl LoadBar {
    fn new(name: &str) -> LoadBar {
        let bar = indicatif::ProgressBar::new(0);
        let style = indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} tensors {elapsed}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(format!("loading {name}"));
        LoadBar {
            bar,
            started: Instant::now(),
        }
    }

    fn set(&self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
    }

    fn finish(&self, device: &str) {
        self.bar.finish_and_clear();
        tracing::info!(
            "weights on {device} in {:.2}s",
            self.started.elapsed().as_secs_f64()
        );
    }
}
