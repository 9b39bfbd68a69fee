//! Opening the CUDA backend (a child module of backend.rs): the model checked, the weights
//! loaded, a cuBLASLt algorithm pinned for every weight shape, then every buffer, the KV pool
//! and the host staging sized once, and the start-up CUDA graphs captured when graphs are on.

use anyhow::{bail, Context, Result};
use kiln_model::{ModelSpec, WeightSource};
use kiln_step::KvRing;

use super::{kv_budget, kv_pool, CudaBackend, CudaOptions};
use crate::device::{Gpu, PinnedBuf};
use crate::forward::Activations;
use crate::gemm_lt::LtGemm;
use crate::graphs::{graphs_enabled_by_env, prefill_max_from_env, GraphCache};
use crate::graphs_pad::GraphBuckets;
use crate::host_tier::HostTier;
use crate::kv_cache::RingAsk;
use crate::pipeline::Pipeline;
use crate::sampling::SamplingBuffers;
use crate::step_plan::StepLayout;
use crate::store::StoreType;
use crate::switches::Switches;
use crate::weights::load_weights;

impl CudaBackend {
    pub fn new(
        weights: &dyn WeightSource,
        opts: CudaOptions,
        progress: Option<&dyn Fn(usize, usize)>,
    ) -> Result<CudaBackend> {
        let config = weights.config().clone();
        config.validate("CUDA backend")?;
        let spec = config.spec();
        if let Some(why) = crate::model_support::refusal(&spec, config.arch) {
            bail!(why);
        }
        if opts.block_size < 16 {
            bail!("KV block size must be 16 or more, got {}", opts.block_size);
        }
        if opts.max_seqs == 0 || opts.prefill_chunk == 0 {
            bail!("max_seqs and prefill_chunk must be positive");
        }
        let max_context = opts.max_context.unwrap_or(config.max_position).max(1);
        let max_tokens = opts
            .max_batch_tokens
            .unwrap_or(opts.prefill_chunk + opts.max_seqs);
        let gpu = Gpu::with_store(opts.device, opts.dtype)?;
        // The environment's switches, with what the options say instead where they say it.
        let mut switches = Switches::from_env();
        if let Some(on) = opts.chain_gemm {
            switches.chain_gemm = on;
        }
        if let Some(on) = opts.fp8 {
            switches.fp8 = on;
        }
        let fp8 = switches.fp8;
        // The wgmma row order is built for sm_90 only (wg_rows.rs): elsewhere its switches
        // leave the paths they would replace as they are.
        switches.fp8_wg &= gpu.has_wg_rows();
        switches.bf16_wg &= gpu.has_wg_rows() && gpu.store == crate::store::StoreType::Bf16;
        let weights_dev = load_weights(&gpu, weights, &spec, max_context, true, fp8, progress)?;
        let mut lt = LtGemm::new(&gpu, opts.prefill_chunk)?;
        // KILN_QUANT_AHEAD=N: N multiprocessors left to the expansion one layer ahead.
        match (&weights_dev.ahead, switches.quant_ahead) {
            (Some(_), Some(n)) if n > 0 => lt.leave_sms(&gpu, n)?,
            _ => {}
        }
        let chain = switches.chain_order(opts.dtype);
        for (n, k) in gemm_shapes(&spec, opts.dtype, switches.chain_gemm, fp8) {
            lt.pin_shape(&gpu, n, k)
                .with_context(|| format!("choosing the GEMM algorithm for {n}x{k}"))?;
            if chain {
                lt.pin_chain(&gpu, n, k)
                    .with_context(|| format!("timing the chain kernel for {n}x{k}"))?;
            }
        }
        if fp8 {
            let mut shapes: Vec<(usize, usize)> = Vec::new();
            for m in weights_dev.layers.iter().flat_map(|l| l.fp8()) {
                if !shapes.contains(&(m.rows, m.cols)) {
                    shapes.push((m.rows, m.cols));
                }
            }
            lt.enable_fp8_for(&gpu, &shapes)?;
        }
        let ring_on = opts.kv_ring.unwrap_or(switches.kv_ring);
        let (bs, seqs) = (opts.block_size, opts.max_seqs);
        let ask = RingAsk::for_model(&spec, ring_on, bs, max_tokens, seqs, max_context);
        // The block count is unknown until the budget is; size the step layout for the pool
        // after (a pool too small for the ring asked drops it, and the layout only shrinks).
        let probe_ring = ask.map(|a| KvRing {
            blocks: a.blocks,
            capable: a.blocks,
            window: a.window,
        });
        let vocab = config.vocab_size;
        let probe = StepLayout::with_ring(max_tokens, seqs, max_context, bs, 1, vocab, probe_ring);
        let act = Activations::new(&gpu, &spec, &probe, fp8)?;
        // Before the KV budget is taken from what is free.
        gpu.reserve_tc_split(opts.max_seqs)?;
        gpu.reserve_wg(&spec, opts.max_seqs)?;
        let wg_rows = crate::wg_rows::wg_rows_on(&switches, fp8, gpu.store);
        gpu.reserve_wg_rows(wg_rows, opts.max_seqs)?;
        let budget = kv_budget(&gpu, opts.kv_cache_bytes, opts.kv_cache_fraction)?;
        let (kv, ring) = kv_pool(&gpu, &spec, bs, budget, ask)?;
        // The last block is the scratch block: the engine sees the ones before it.
        let blocks = kv.num_blocks - 1;
        let layout = StepLayout::with_ring(max_tokens, seqs, max_context, bs, blocks, vocab, ring);
        debug_assert!(layout.len <= probe.len);
        // A ring holds no prefix: no prefix cache, so no host tier for it.
        let host_bytes = ring.map_or(opts.host_cache_bytes, |_| 0);
        let host_tier = HostTier::new(&gpu, &kv, host_bytes)?;
        let step_host = [
            PinnedBuf::new(&gpu, layout.len)?,
            PinnedBuf::new(&gpu, layout.len)?,
        ];
        let logits_host = PinnedBuf::new(&gpu, opts.max_seqs * config.vocab_size)?;
        let ids_host = [
            PinnedBuf::new(&gpu, opts.max_seqs)?,
            PinnedBuf::new(&gpu, opts.max_seqs)?,
        ];
        let sampling = SamplingBuffers::new(&gpu, opts.max_seqs)?;
        let pipe = Pipeline::new(&gpu, opts.max_seqs)?;
        let graphs = GraphCache::new(
            GraphBuckets::new(&layout, prefill_max_from_env()),
            graphs_enabled_by_env(),
        );
        let mut backend = CudaBackend {
            graphs,
            lt,
            draft: None,
            act,
            host_tier,
            kv,
            weights: weights_dev,
            step_host,
            logits_host,
            ids_host,
            sampling,
            pipe,
            layout,
            config,
            spec,
            switches,
            opts,
            hidden_rows: 0,
            gpu,
        };
        if backend.graphs.enabled() {
            backend.capture_startup_graphs();
        }
        Ok(backend)
    }
}

/// The (n, k) of every projection of the model, each once: the shapes cuBLASLt pins (not the
/// fp8 projections' with `fp8`: the fp8 GEMM pins those); with a storage type other than bf16
/// also the LM head's (it has no skinny kernel then).
pub(super) fn gemm_shapes(
    spec: &ModelSpec,
    store: StoreType,
    chain_gemm: bool,
    fp8: bool,
) -> Vec<(usize, usize)> {
    let h = spec.hidden_size;
    let mut shapes = Vec::new();
    let (all, width) = crate::forward::per_layer_widths(spec);
    if all > 0 {
        shapes.push((all, h));
    }
    for l in &spec.layers {
        let inter = l.ffn.intermediate();
        // fp8 projections take the fp8 GEMM (gemm_fp8.rs), pinned on its own.
        let mut layer = match fp8 {
            true => Vec::new(),
            false => vec![
                (l.attn.qkv_rows(), h),
                (h, l.attn.q_dim()),
                (2 * inter, h),
                (h, inter),
            ],
        };
        if l.per_layer_input.is_some() {
            layer.extend([(width, h), (h, width)]);
        }
        for s in layer {
            if !shapes.contains(&s) {
                shapes.push(s);
            }
        }
    }
    // The LM head takes cuBLASLt when the skinny kernel does not: other storage types, and
    // steps of many rows in the prefill's order (KILN_CHAIN_GEMM).
    let lm_head = (spec.vocab_size, h);
    let lt_head = store != StoreType::Bf16 || chain_gemm;
    if lt_head && !shapes.contains(&lm_head) {
        shapes.push(lm_head);
    }
    shapes
}
