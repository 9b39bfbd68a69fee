//! The backend a benchmark drives, built with a KV pool sized to the run (memory is planned, so
//! the figures show what the run needs, not a default fraction of the device), plus what the
//! report says about the device: its name and the memory in use.

use std::time::Instant;

use anyhow::Context;
use kiln_engine::Backend;
use kiln_load::LoadedModel;

use crate::backend_choice::{DecodeGemm, DeviceArgs, Quantize, BLOCK_SIZE};
use crate::memory_fit::MemoryFit;

use super::plan::Plan;

/// A concrete backend, kept concrete so the report can ask it about its device.
pub enum Target {
    Cpu {
        backend: Box<kiln_cpu::CpuBackend>,
        threads: usize,
    },
    Cuda(Box<kiln_cuda::CudaBackend>),
}

/// Memory the run used, and what the number means on this device.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub bytes: u64,
    pub what: &'static str,
}

impl Target {
    /// Loads the weights onto the device `args` names, with a KV pool that fits `plan`.
    pub fn build(model: &LoadedModel, args: &DeviceArgs, plan: &Plan) -> anyhow::Result<Target> {
        let use_cuda = args.use_cuda(model)?;
        let started = Instant::now();
        eprintln!("loading {} ...", model.name);
        let target = if use_cuda {
            Target::Cuda(Box::new(build_cuda(model, plan, args)?))
        } else {
            Target::Cpu {
                backend: Box::new(build_cpu(model, args, plan)?),
                threads: args.threads.unwrap_or_else(default_threads),
            }
        };
        eprintln!(
            "loaded in {:.1} s on {}",
            started.elapsed().as_secs_f64(),
            target.device_name()
        );
        Ok(target)
    }

    pub fn backend(&mut self) -> &mut dyn Backend {
        match self {
            Target::Cpu { backend, .. } => backend.as_mut(),
            Target::Cuda(b) => b.as_mut(),
        }
    }

    /// "cuda" or "cpu".
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Cpu { .. } => "cpu",
            Target::Cuda(_) => "cuda",
        }
    }

    /// The GPU's name, or the CPU's model and thread count.
    pub fn device_name(&self) -> String {
        match self {
            Target::Cuda(b) => b.gpu().name.clone(),
            Target::Cpu { threads, .. } => {
                format!(
                    "{} ({threads} threads)",
                    cpu_model().unwrap_or_else(|| "CPU".into())
                )
            }
        }
    }

    /// CUDA: device memory in use (total - free; the backend allocates everything up front, so
    /// this is also the peak). CPU: the process's peak resident memory. None when unknown.
    pub fn memory(&self) -> Option<Memory> {
        match self {
            Target::Cuda(b) => {
                let (free, total) = b.gpu().mem_info().ok()?;
                Some(Memory {
                    bytes: total.saturating_sub(free) as u64,
                    what: "device memory in use after the run (total - free)",
                })
            }
            Target::Cpu { .. } => peak_rss().map(|bytes| Memory {
                bytes,
                what: "peak resident host memory of the process",
            }),
        }
    }
}

/// Refuses, before anything is allocated, a run whose largest case does not fit beside the
/// weights and buffers. The cases run one after another (prefill sequences are released
/// before the decode streams are filled, each depth's streams before the next depth's), so
/// the pool holds the largest one, not their sum.
fn check_memory(fit: &MemoryFit, plan: &Plan) -> anyhow::Result<()> {
    fit.check_fixed()?;
    let blocks = |tokens: usize| tokens.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
    let mut cases: Vec<(usize, usize, &str)> = Vec::new();
    if let Some(&len) = plan.prefill.iter().max() {
        cases.push((1, len, "--prefill"));
    }
    if plan.decode > 0 {
        let deepest = plan.depths.iter().copied().max().unwrap_or(0) + plan.decode;
        cases.push((plan.max_concurrency(), deepest, "--concurrency or --depth"));
    }
    if let Some(&h) = plan.resumed.iter().max() {
        // The cached history and the same prompt cold, side by side.
        cases.push((2, h + plan.new_turn, "--resumed or --new-turn"));
    }
    for (streams, tokens, lower) in cases {
        let kv = fit.kv_bytes(streams, blocks(tokens));
        fit.check_kv(kv, streams, tokens, lower)?;
    }
    Ok(())
}

fn build_cpu(
    model: &LoadedModel,
    args: &DeviceArgs,
    plan: &Plan,
) -> anyhow::Result<kiln_cpu::CpuBackend> {
    let streams = plan.max_concurrency();
    check_memory(&MemoryFit::cpu(model, plan.chunk + streams, streams)?, plan)
        .context("the run does not fit in host memory")?;
    let opts = kiln_cpu::CpuOptions {
        kv_blocks: plan.kv_blocks(BLOCK_SIZE),
        block_size: BLOCK_SIZE,
        threads: args.threads,
        host_blocks: plan.host_blocks(BLOCK_SIZE),
        fp8: args.quantize == Some(Quantize::Fp8),
    };
    kiln_cpu::CpuBackend::new(model.weights.as_ref(), opts, None)
        .with_context(|| format!("cannot start the CPU backend for `{}`", model.name))
}

fn build_cuda(
    model: &LoadedModel,
    plan: &Plan,
    args: &DeviceArgs,
) -> anyhow::Result<kiln_cuda::CudaBackend> {
    let dtype = args.dtype.cuda_store();
    let cfg = &model.config;
    let blocks = plan.kv_blocks(BLOCK_SIZE);
    let block_bytes = kiln_cuda::kv_cache::KvCache::block_bytes(&cfg.spec(), BLOCK_SIZE, dtype);
    let opts = kiln_cuda::CudaOptions {
        dtype,
        kv_cache_bytes: Some(blocks * block_bytes),
        host_cache_bytes: plan.host_blocks(BLOCK_SIZE) * block_bytes,
        block_size: BLOCK_SIZE,
        prefill_chunk: plan.chunk,
        max_seqs: plan.max_concurrency(),
        max_context: Some(plan.longest_sequence().max(1)),
        chain_gemm: args.decode_gemm.map(|d| d == DecodeGemm::PrefillOrder),
        fp8: args.quantize.map(|q| q == Quantize::Fp8),
        ..kiln_cuda::CudaOptions::default()
    };
    check_memory(&MemoryFit::cuda(model, &opts)?, plan)
        .context("the run does not fit in GPU memory")?;
    let backend = kiln_cuda::CudaBackend::new(model.weights.as_ref(), opts, None)
        .with_context(|| format!("cannot start the CUDA backend for `{}`", model.name))?;
    tracing::info!("{}", backend.describe());
    Ok(backend)
}

/// What the CPU backend's thread pool uses without --threads: RAYON_NUM_THREADS, else one
/// worker per core.
fn default_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The CPU's model name from /proc/cpuinfo (Linux).
fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// VmHWM from /proc/self/status (Linux), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
