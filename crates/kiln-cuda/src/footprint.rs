//! What `CudaBackend::new` will allocate on the device for a model and options, worked out
//! on the host without a device. `kiln bench` and `kiln serve` compare it with the free memory
//! before anything is allocated, so a run that cannot fit is refused with the numbers instead
//! of failing in the driver. `CudaBackend::allocated` reports the same figures as allocated;
//! tests/all/footprint.rs checks the two agree.

use kiln_model::{schema, ModelSpec, WeightSource};

use crate::backend::CudaOptions;
use crate::gemm_lt::WORKSPACE_BYTES;
use crate::kernels::decode_part_splits;
use crate::kv_cache::KvCache;
use crate::sampling::{OUT_WORDS, PARAM_WORDS};
use crate::skinny_tc_split::split_reserve_bytes;
use crate::skinny_wg::wg_reserve_bytes;
use crate::step_plan::StepLayout;
use crate::store::StoreType;

/// Device bytes of a backend, apart from its KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// The weights (in the storage type, or in their block formats) and the RoPE tables.
    pub weights: usize,
    /// Activations, step inputs, sampler buffers, the cuBLASLt workspace and the prefill
    /// scratch of quantised weights.
    pub buffers: usize,
    /// One KV block across all layers, K and V.
    pub kv_block: usize,
}

/// Memory the driver and context keep that no allocation shows; the KV budget leaves it free.
pub const DRIVER_RESERVE: usize = 512 << 20;

impl Footprint {
    /// The footprint of `spec` (whose context is `max_position`) under `opts`: the sizes
    /// `CudaBackend::new` derives.
    pub fn of(spec: &ModelSpec, max_position: usize, opts: &CudaOptions) -> Footprint {
        let max_context = opts.max_context.unwrap_or(max_position).max(1);
        let max_tokens = opts
            .max_batch_tokens
            .unwrap_or(opts.prefill_chunk + opts.max_seqs);
        let store = opts.dtype;
        let fp8 = fp8_on(opts);
        // The wgmma row order's split workspace (as backend_open.rs reserves it on sm_90; this
        // counts it on any GPU).
        let wg_rows =
            crate::wg_rows::wg_rows_on(&crate::switches::Switches::from_env(), fp8, store);
        Footprint {
            weights: weight_bytes(spec, max_context, store, fp8),
            buffers: buffer_bytes(
                spec,
                max_tokens,
                opts.max_seqs,
                max_context,
                opts.block_size,
                store,
            ) + WORKSPACE_BYTES
                + crate::wg_rows::reserve_bytes(wg_rows, opts.max_seqs)
                + if fp8 {
                    fp8_buffer_bytes(spec, max_tokens)
                } else {
                    0
                },
            kv_block: KvCache::block_bytes(spec, opts.block_size, store),
        }
    }

    /// The footprint of the model `src` gives: [`Footprint::of`] with the weights as the
    /// backend will hold them: block-quantised matrices in their formats with bf16 storage and
    /// `KILN_GPU_QUANT=1` (quant_weights.rs decides for both).
    pub fn of_source(src: &dyn WeightSource, opts: &CudaOptions) -> Footprint {
        let config = src.config();
        let spec = config.spec();
        let mut fp = Footprint::of(&spec, config.max_position, opts);
        let sw = crate::switches::Switches::from_env();
        if sw.gpu_quant && opts.dtype == StoreType::Bf16 {
            let fp8 = fp8_on(opts);
            let (quant, scratch) = crate::quant_weights::weight_bytes(&spec, src, true, fp8);
            let (plain, _) = crate::quant_weights::weight_bytes(&spec, src, false, fp8);
            fp.weights = fp.weights - plain + quant;
            if !sw.quant_prefill_skinny {
                fp.buffers += scratch;
            }
        }
        fp
    }

    /// Weights and buffers together.
    pub fn fixed(&self) -> usize {
        self.weights + self.buffers
    }
}

/// Whether the backend keeps fp8 projections (`CudaOptions::fp8`, else KILN_FP8).
fn fp8_on(opts: &CudaOptions) -> bool {
    opts.fp8
        .unwrap_or_else(|| crate::switches::Switches::from_env().fp8)
}

/// The fp8 GEMMs' buffers: a step's input rows in fp8 and their scales (forward.rs
/// `Activations::new`) and the GEMM's workspace.
fn fp8_buffer_bytes(spec: &ModelSpec, max_tokens: usize) -> usize {
    let widest = |f: fn(&kiln_model::LayerSpec) -> usize| spec.max_over_layers(f);
    let k = widest(|l| l.ffn.intermediate())
        .max(widest(|l| l.attn.q_dim()))
        .max(spec.hidden_size);
    max_tokens * k + max_tokens * 4 + crate::gemm_fp8::WORKSPACE_BYTES
}

/// A matrix's bytes as the backend holds it: in the storage type, or in fp8 rows (a byte a
/// value and an f32 scale a row) for an fp8 projection.
fn matrix_bytes<W>(f: &schema::Fused<W>, store: StoreType, fp8: bool) -> usize {
    match fp8 {
        true => f.len() + f.rows() * 4,
        false => f.len() * store.bytes(),
    }
}

fn weight_bytes(spec: &ModelSpec, rope_positions: usize, store: StoreType, fp8: bool) -> usize {
    let h = spec.hidden_size;
    let globals: usize = schema::global_weights(spec)
        .iter()
        .map(|f| f.len() * store.bytes())
        .sum();
    let layers: usize = spec
        .layers
        .iter()
        .enumerate()
        .map(|(l, layer)| {
            schema::layer_weights(l, layer, h)
                .iter()
                .map(|f| matrix_bytes(f, store, fp8 && f.weight.fp8_projection()))
                .sum::<usize>()
        })
        .sum();
    let ropes: usize = spec
        .ropes
        .iter()
        .map(|r| rope_positions * 2 * r.inv_freq.len() * 4)
        .sum();
    globals + layers + ropes
}

/// The activation buffers (forward.rs `Activations::new`), the sampler's (sampling.rs) and the
/// fed tokens of launched-ahead steps (pipeline.rs).
fn buffer_bytes(
    spec: &ModelSpec,
    max_tokens: usize,
    max_seqs: usize,
    max_context: usize,
    block_size: usize,
    store: StoreType,
) -> usize {
    let (t, s, h) = (max_tokens, max_seqs, spec.hidden_size);
    let widest = |f: fn(&kiln_model::LayerSpec) -> usize| spec.max_over_layers(f);
    let q_dim = widest(|l| l.attn.q_dim());
    let heads = widest(|l| l.attn.num_heads);
    let head_dim = widest(|l| l.attn.head_dim);
    let inter = widest(|l| l.ffn.intermediate());
    let layout = StepLayout::new(
        max_tokens,
        max_seqs,
        max_context,
        block_size,
        1,
        spec.vocab_size,
    );
    let (pl_all, pl_width) = crate::forward::per_layer_widths(spec);
    let f32s = 2 * t * h // x, delta
        + t * widest(|l| l.attn.qkv_rows()) // qkv
        + t * 2 * inter // gu
        + s * heads * decode_part_splits() * head_dim // part_o
        + s * heads * decode_part_splits() * 2 // part_ml
        + s * spec.vocab_size // logits
        + t * (pl_all + pl_width); // per_layer, pl_gate
    let stored = t * h // normed
        + 2 * t * q_dim // q, attn
        + t * inter // act
        + s * h // logit_in
        + t * pl_width; // pl_act
    let i32s = s + layout.len // ids, step
        + 2 * s.max(1); // pipeline.rs feed_dev: a (sequence, token) pair a sequence
    let sampler = s * (PARAM_WORDS + OUT_WORDS) * 4;
    f32s * 4
        + stored * store.bytes()
        + i32s * 4
        + sampler
        + split_reserve_bytes(s)
        + wg_reserve_bytes(spec, store, s)
}
