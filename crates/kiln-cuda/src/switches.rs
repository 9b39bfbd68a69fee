//! Every KILN_* variable the CUDA backend reads, parsed here and only here, once per process,
//! so that an A/B run or a bisection is one environment variable away and every module sees
//! the same values.

use crate::store::StoreType;
pub use crate::switch_modes::{
    DecodeFold, DecodeFuse, SkinnyTc, SplitCtas, WgCluster, WgMode, SKINNY_TC_DEFAULT,
    SKINNY_TC_DEFAULT_ROWS,
};

// Every variable read, once: the switches and the kernel cache.
#[path = "switches_env.rs"]
mod environment;
use environment::env;
pub use environment::{kernel_cache, KernelCache};

/// The fewest decode rows the chain-split tensor-core GEMM takes by default: on the H200
/// (Llama-3-8B, 2026-12-02) decode at 128 streams 7,640 -> 8,499-8,547 tok/s with it from 64
/// rows, but 64 streams 6,318 -> 5,543 and 32 streams 4,356 -> 3,456 with it from 32.
pub const TC_SPLIT_FROM: usize = 128;
/// KILN_FP8_WIDE's default: past the skinny kernels' widest launch (64 rows), where a second
/// launch reads every weight again. On the H200 (2026-12-05) the wide kernels gave 128 streams
/// +22% and 32 streams -51%; between the two is not measured yet.
pub const FP8_WIDE_FROM: usize = 65;

/// Which fast paths are on. All default to on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// KILN_SKINNY_GEMM=0: decode rows go through cuBLASLt with the prefill rows.
    pub skinny_gemm: bool,
    /// KILN_FLASH_ATTN=0: every row (prefill and decode) uses the simple reference attention.
    pub flash_attn: bool,
    /// KILN_SPLIT_DECODE=0: decode rows use the reference attention instead of the split kernel.
    pub split_decode: bool,
    /// KILN_DEVICE_SAMPLING=0: logits rows go to the host to be sampled.
    pub device_sampling: bool,
    /// KILN_GEMM_PIN=0 (only "0"): cuBLASLt picks its algorithm per call instead of one pinned
    /// per weight shape.
    pub gemm_pin: bool,
    /// KILN_GEMM_PIN_M=N: choose each pinned algorithm for m = N rows instead of the prefill
    /// chunk (the algorithm then serves every m as before). For A/B runs of the choice.
    pub gemm_pin_m: Option<usize>,
    /// KILN_GEMM_ADD=0: a prefill step's o and down GEMMs write the block output to `delta` for
    /// the next norm to add, instead of adding it to the residual stream in cuBLASLt's epilogue
    /// (the same sum rounded once: the same bits, and the norm reads a third of the bytes).
    pub gemm_add: bool,
    /// KILN_GEMM_TUNE=0: each shape pins the heuristic's first candidate that passes the row
    /// check, instead of the fastest at the reference m of up to eight without split-K (timed
    /// once at start-up; another algorithm is another summation order, as invariant).
    pub gemm_tune: bool,
    /// KILN_GEMM_SHORT=0: steps of at most 1,024 rows take each shape's pinned algorithm
    /// instead of others chosen at 1, 8, 32, 128 and 512 rows, faster there and bit-identical to
    /// it (gemm_short.rs).
    pub gemm_short: bool,
    /// KILN_GEMM_TIER_M=N (257-1,024): the widest short tier (steps of 257-1,024 rows) is timed
    /// at N rows instead of 512, e.g. 520, a row past which 128-row tiles leave a row of tiles
    /// nearly empty (gemm_short.rs; the same bits: its choice is checked against the pinned one).
    pub gemm_tier_m: Option<usize>,
    /// KILN_GEMM_TAIL=0: a prompt GEMM whose last few rows would take a round of tiles of their
    /// own runs whole, instead of those rows in a second launch (gemm_tail.rs; the same bits).
    pub gemm_tail: bool,
    /// KILN_CHAIN_GEMM=1: decode rows of bf16 weights take the prefill GEMM's summation order
    /// (chain_gemm.rs) instead of the 16-warp skinny kernel's: a decode-only step of few rows
    /// (`chain_rows`) through the chain kernel, every other step's rows, decode and prompt
    /// alike, through the pinned cuBLASLt GEMM in one pass over the weights. Other bits than
    /// the default (another order), as invariant; off by default because batch 1 is slower
    /// (the chain's products wait on each other).
    pub chain_gemm: bool,
    /// With KILN_CHAIN_GEMM, the most rows of a decode-only step that take the chain kernel
    /// rather than the pinned GEMM: KILN_CHAIN_ROWS=auto (the default, None) each weight's own,
    /// timed at start-up (gemm_chain_rows.rs); N (at most CHAIN_MAX_ROWS) the same for every
    /// weight, 0 never. The same bits either way.
    pub chain_rows: Option<usize>,
    /// KILN_CUDA_GRAPHS=0: every step runs launch by launch.
    pub cuda_graphs: bool,
    /// KILN_DRAFT_GRAPHS=0: a draft model's calls (Gemma 4's assistant) run launch by launch
    /// instead of as one CUDA graph of all their steps per batch size.
    pub draft_graphs: bool,
    /// Block-quantised GGUF matrices are kept in their formats on the device (quant_weights.rs);
    /// KILN_GPU_QUANT=0 expands them to bf16 at load. On the H200 (2026-12-02) the Q4_K_M 8B
    /// file decodes at 343 tok/s kept (1.25x llama.cpp) against about 200 expanded.
    pub gpu_quant: bool,
    /// KILN_FP8=1: `--quantize fp8` where the caller does not say (CudaOptions::fp8), so the
    /// test suites and benchmarks run the fp8 GEMMs (gemm_fp8.rs) with one variable.
    pub fp8: bool,
    /// The RMSNorm before QKV and gate/up and the gated activation before down also quantise
    /// the rows they write for the fp8 GEMM (kernels/fp8.cu), one launch where there were two
    /// (same bits). KILN_FP8_FUSE=0: each fp8 GEMM quantises its input rows itself.
    pub fp8_fuse: bool,
    /// KILN_FP8_SKINNY=1: a step's decode rows of an fp8 projection through the fp8 skinny
    /// kernels (fp8_skinny.rs) instead of cuBLASLt's fp8 GEMM, as bf16's decode rows take the
    /// bf16 skinny kernels; prompt rows keep the fp8 GEMM. Opt-in until measured.
    pub fp8_skinny: bool,
    /// With KILN_FP8_SKINNY, the decode launches of at least this many rows take the wide fp8
    /// kernels (fp8_wide.cu: the skinny kernels' bits, x read once per CTA of 64-256 weight
    /// rows instead of once per 16). KILN_FP8_WIDE=N sets the rows, 0 none; default
    /// [`FP8_WIDE_FROM`].
    pub fp8_wide_from: Option<usize>,
    /// A step's decode rows of an fp8 projection through the fp8 wgmma kernels (wg_rows.rs,
    /// sm_90 GPUs; backend_open.rs turns it off elsewhere) in an order of their own, fixed by K
    /// alone; prompt rows keep the fp8 GEMM. KILN_FP8_WG=0: cuBLASLt's fp8 GEMM for every row
    /// (or, with KILN_FP8_SKINNY, the skinny kernels). On by default since the H200's decode
    /// grid (2026-12-05): batch 1 308 against 201 tok/s, 32 streams 7,944 against 6,376, 128
    /// streams 20,513 against 21,703.
    pub fp8_wg: bool,
    /// KILN_BF16_WG=1: a step's decode rows of a bf16 weight (and its logits rows) through the
    /// wgmma row order (wg_rows.rs's bf16 entries, sm_90 GPUs) instead of the skinny kernels,
    /// the fused decode epilogues with them but not the norm prologue: other bits, one order
    /// for every row count. Opt-in until measured.
    pub bf16_wg: bool,
    /// KILN_WG_ROWS_CHOICE=ctas: the wgmma row order's launches chosen by the first rule
    /// (wg_rows_choice.rs), not the regimes read off the GEMM lines. Same bits.
    pub wg_rows_ctas: bool,
    /// flash_sm90's overlapped loops keep tile i's softmax beside tile i - 1's P V: a block
    /// boundary ptxas keeps between them (flash_sm90.cu). KILN_FLASH_FENCE=0 builds the module
    /// without it (the wait for P V then lands before the softmax). Same bits either way.
    pub flash_fence: bool,
    /// KILN_QUANT_FENCE=1: the second quantised decode family's x loads (skinny2_*,
    /// quant_decode.cu) stay ahead of the wait for their weight record (a block boundary ptxas
    /// keeps; without it the loads follow the wait, as measured so far). Opt-in until measured:
    /// it adds a few spills. Same bits either way.
    pub quant_fence: bool,
    /// KILN_QUANT_PREFILL=skinny: every row of a quantised matrix, prefill rows too, through
    /// the quantised skinny kernels (in launches of 64 rows) instead of prefill rows through a
    /// bf16 expansion and cuBLASLt (`expand`, the default). Row-invariant either way.
    pub quant_prefill_skinny: bool,
    /// A step with prefill rows expands the next layer's quantised matrices on a second stream
    /// while this layer's launches run (quant_prefill.rs), into one of two layer-sized buffers
    /// (Some(0), the default: on the H200, Q8_0 8B prefill 2k +2.0-2.7%, 8k +0.7-1.1%, for
    /// 0.59 GiB more buffers). KILN_QUANT_AHEAD=0 / off / false (None): each matrix expanded
    /// into one scratch just before its GEMM; =N (2-64): also N multiprocessors left out of the
    /// cuBLASLt GEMMs for the expansion (slower there: -3 to -7% at N = 8-24); anything else
    /// is on. The same bits either way.
    pub quant_ahead: Option<u32>,
    /// A quantised embedding (with an LM head of its own) is kept in pinned host memory, as
    /// llama.cpp keeps it, and gathered over the bus: its bytes leave the GPU (0.29 GiB of the
    /// Q4_K_M 8B file; prefill and decode within 1% on the H200). KILN_QUANT_EMBED=device
    /// keeps it on the GPU.
    pub quant_embed_host: bool,
    /// Q4_K matrices in records of 256 k that keep the file's packed scales (GpuQuant::Q4K2,
    /// 4.5 bits a weight), read by the second decode family only: off with
    /// KILN_QUANT_DECODE=v1, and with KILN_QUANT_Q4K=128 (GpuQuant::Q4K, 4.75 bits). The
    /// default since the fused epilogues (H200, Q4_K_M 8B: batch 1 346.1 against 344.3 tok/s,
    /// 8 streams +3.7%, in 4.30 GiB of weights against 4.51).
    pub quant_q4k256: bool,
    /// Q6_K matrices in records of 256 k at the file's 6.5625 bits a weight (GpuQuant::Q6K2),
    /// read by the second decode family only, as Q4K2; KILN_QUANT_Q6K=128 keeps 128-k records
    /// (6.75 bits).
    pub quant_q6k256: bool,
    /// KILN_CUDA_GRAPH_PREFILL=N: the largest prefill bucket with a graph (0: none); None when
    /// unset or not a number, for the default of graphs_pad.rs.
    pub graph_prefill_max: Option<usize>,
    /// KILN_DECODE_SPLITS=N (a power of two, 1-256): decode_mma splits a row into at most N
    /// instead of 64: fewer and longer splits, or (above 64, with the partials sized for N)
    /// more and shorter ones, so more warps at batch 1 and depth (different bits, still a
    /// function of the row's length only). None when unset or invalid.
    pub decode_mma_splits: Option<usize>,
    /// KILN_DECODE_LONG=N (a power of two, 1024-1048576 keys): rows longer than N may take
    /// twice as many splits (kernels.rs's decode_mma_splits). Opt-in until measured.
    pub decode_long_from: Option<usize>,
    /// KILN_DECODE_MIN_SPAN=N (a power of two, 16-8192): decode_mma's splits cover at least N
    /// keys instead of 64: fewer, longer splits (or, under 64, more and shorter ones for more
    /// warps at small batches) for rows of a few hundred keys (different bits, still a function
    /// of the row's length only). None when unset or invalid.
    pub decode_min_span: Option<usize>,
    /// KILN_DECODE_SPAN=pow2: decode_mma's split spans are powers of two (pow2ceil(len) / 64)
    /// instead of ceil(len / 64) rounded up to 32 keys (different bits, each a function of
    /// the row's length only).
    pub decode_span_pow2: bool,
    /// KILN_DECODE_FOLD: whether decode_mma's CTAs fold a row's splits themselves (one CTA a
    /// row run and head group, no combine launch) or write them for decode_mma_combine; the
    /// same bits either way.
    pub decode_fold: DecodeFold,
    /// KILN_ATTN_EARLY (on; `0` off): decode_mma issues its first K/V steps of keys written
    /// before the step ahead of griddepcontrol.wait, so they stream in while the QKV GEMM
    /// before it ends (same bits: its whole contract, 1,965 checks, on the H200 2026-12-05),
    /// and decode_mma_combine loads its first partials before it computes the fold factors.
    /// H200, 2026-12-04: +0.1% at batch 1, +0.4% at depth 8k, +0.8% at 32 streams and 8k.
    pub attn_early: bool,
    /// KILN_COMBINE_EARLY=0: decode_mma_combine loads its partials after the fold factors even
    /// where KILN_ATTN_EARLY lets it load them first (an A/B of the combine's part alone).
    pub combine_early: bool,
    /// KILN_COMBINE_COLS (on; `0` off): decode_mma_combine_cols (decode_combine.cu) merges the
    /// splits, not decode_mma_combine; the same bits. H100: batch 1 +5.6% at depth 8k.
    pub combine_cols: bool,
    /// KILN_CARVEOUT=max: every kernel asks for the largest shared-memory carveout, so that a
    /// decode step's kernels (108 KB decode_mma, a 4 KB combine, norms with none) all run in
    /// one L1 / shared split: the driver may put a device-side synchronisation between
    /// launches of different preferences, which a programmatic dependent launch cannot
    /// overlap. No bit changes. Opt-in until measured.
    pub carveout_max: bool,
    /// KILN_DECODE_LAZY=1: decode_mma scales a step's outputs by the change of maximum only
    /// where a maximum moved, not in every step (same bits: o * 1 is o). Opt-in: no gain at
    /// batch 1 on the H100 (2026-12-06), where a CTA's empty slots, masked to -inf, moved
    /// every step; with KILN_DECODE_LEAN's unmasked steps they stop forcing it.
    pub decode_lazy: bool,
    /// KILN_DECODE_LEAN (on; 0 for off): decode_mma loads a step (16 keys of one KV block) from
    /// one table entry without shuffles and scores steps every row sees wholly without masks:
    /// fewer integer instructions in a warp's chain (same bits; batch 1 +0.7% at depth 0 and
    /// 512 on the H100, 2026-12-06).
    pub decode_lean: bool,
    /// KILN_DECODE_TRANSPOSE=1: decode_mma's transposed step (decode_mmat_*, kernels/
    /// decode_mmat.cuh): keys in the MMA's rows and 8 query slots in its columns, half the
    /// MMAs and exponentials a step where a row's GQA group fills 4 of the first form's 16
    /// slot rows, a run of half as many rows a CTA. Different bits, batch-invariant. Opt-in
    /// until measured; head dims 64-256 (others keep the first form).
    pub decode_transpose: bool,
    /// KILN_DECODE_DEEP (on; 0 for off): decode_mma launches of one wave that do not fold
    /// (batch 1) take deep rings (`decode_mma_deep_*`, `decode_mmat_deep_*`: hd 64 and 128),
    /// more K/V steps in flight a warp and issued before the wait on the kernel ahead, one CTA
    /// a multiprocessor. The same bits. H100 2026-12-06: batch 1 +0.3% at 8k, +2.4% at 32k,
    /// +5.7% at 64k (bf16), fp8 +0.9% / +4.2% at 8k / 32k.
    pub decode_deep: bool,
    /// KILN_DECODE_DEEP_STAGES=6 (experiment): with KILN_DECODE_DEEP, hd-128 rings of 6
    /// stages (213 KB a CTA) instead of 4 (144 KB), the first form only.
    pub decode_deep_stages: Option<usize>,
    /// KILN_DECODE_LOOKAHEAD=1: decode_mma computes each step's scores one step ahead, beside
    /// the previous step's softmax and P V (`decode_mma_la_*`, head dims up to 128, launches
    /// that do not fold; same bits). Opt-in until measured on a GPU.
    pub decode_lookahead: bool,
    /// KILN_DECODE_SPLIT_CTAS: CTAs decode attention gives each row's head group along its
    /// split slots (same bits whatever the count).
    pub decode_split_ctas: SplitCtas,
    /// Decode GEMM launches of [`TC_SPLIT_FROM`] rows (KILN_SKINNY_TC_SPLIT=N: N) up to
    /// [`crate::skinny_tc_split::SPLIT_UPTO_TOKENS`] on weights of at most 8,192 rows take the
    /// tensor-core kernel split along the chains (`skinny_tcs_*`, then the join), its
    /// partials reserved at start, unless KILN_SKINNY_TC=0 turns the tensor-core kernels off.
    /// Same bits. KILN_SKINNY_TC_SPLIT=0 (or off): never.
    pub tc_split_from: Option<usize>,
    /// Which decode GEMM launches take the wgmma kernel (skinny_wg.cu) on an sm_90 GPU, x
    /// rewritten into a workspace reserved at start, unless KILN_SKINNY_TC=0 turns the
    /// tensor-core kernels off: KILN_SKINNY_WG=auto (the default) those of
    /// `skinny_wg_measured::MEASURED`, N those of at least N rows (`on`: 64), 0 none. Same bits as the
    /// skinny kernel either way.
    pub wg: WgMode,
    /// Whether the wgmma launches run in clusters of CTAs sharing each k-tile of x
    /// (`skinny_wg_*_cN`: x read through L2 once per cluster). Same bits either way.
    pub wg_cluster: WgCluster,
    /// Gemma 4's post-norms fused into the op that consumes them (same bits, three launches
    /// fewer per layer; on the H200 3% faster decode at depth 0 and 8k). KILN_GEMMA_FUSE=0
    /// launches them apart.
    pub gemma_fuse: bool,
    /// The gated activations (swiglu, geglu) take four values a thread with 16-byte loads where
    /// the width allows (same bits). KILN_GATED_VEC=0: one value a thread.
    pub gated_vec: bool,
    /// argmax_rows reads four logits a load, four loads in flight a thread, where rows are
    /// 16-byte aligned (same ids). KILN_ARGMAX_VEC=0: one logit at a time.
    pub argmax_vec: bool,
    /// Prefill attention of 512-wide heads with the head's two halves in one CTA (8 warps),
    /// their partial scores summed through shared memory, instead of one CTA per output half
    /// recomputing the scores (KILN_FLASH_WIDE=recompute). Different bits, each
    /// chunk-invariant; on the H200 Gemma 4's prefill 1.45x faster at 8k and 1.98x at 32k.
    pub flash_wide_split: bool,
    /// 512-wide heads take the wgmma kernel (flash_sm90_wide.cu) where the sm90 family runs
    /// (KILN_FLASH_ATTN=sm90, an sm_90 device); KILN_FLASH_WIDE=split or recompute keeps
    /// them on that mma.sync kernel beside the sm90 kernels of the narrower heads, for A/B
    /// runs of the wide layers alone. Different bits, each chunk-invariant.
    pub flash_wide_sm90: bool,
    /// KILN_DECODE_WIDE=mma: with the tensor-core decode family (KILN_DECODE_ATTN=mma, the
    /// default), 512-wide heads take decode_mma_wide.cu instead of the CUDA-core
    /// decode_wide.cu. Opt-in: on the H200 Gemma 4's decode was 1-2% slower with it.
    pub decode_wide_mma: bool,
    /// KILN_DECODE_FUSE=glu,add,norm,rope | all | none: in decode-only steps, the kernels after
    /// a GEMM moved into it (docs/CUDA.md, "Fused decode launches"). The same bits either way.
    /// Default [`DecodeFuse::DEFAULT`] (`add,rope`).
    pub fuse: DecodeFuse,
    /// KILN_QUANT_FUSE=glu,add,rope | none: the same fusions for block-quantised matrices
    /// (quant_order.rs stores QKV and gate/up rows pair by pair for `rope` and `glu`); `norm`
    /// has no quantised form. Default [`DecodeFuse::QUANT_DEFAULT`].
    pub quant_fuse: DecodeFuse,
    /// KILN_KV_RING=1: sliding-window layers keep only their window, in a ring of blocks per
    /// sequence (kiln_step::KvRing; the prefix cache is off beside it). Off until the GPU test
    /// (tests/all/kv_ring.rs) has run; `CudaOptions::kv_ring` overrides it.
    pub kv_ring: bool,
    /// The kernel variants.
    pub kernels: KernelChoice,
}

/// Which variant of a kernel family a launch uses. The fast variants are the defaults; each
/// has an off switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelChoice {
    /// KILN_SKINNY_PIPE=0: the skinny GEMM without the cp.async weight ring (`skinny_gemm_*`).
    pub skinny_pipe: bool,
    /// KILN_FLASH_PAIRS=0: flash attention with one query head per CTA (`flash_attn_hd*`)
    /// instead of two heads of a GQA group sharing each K/V tile (`flash_attn2_hd*`).
    pub flash_pairs: bool,
    /// KILN_PDL=0: every kernel launched after its predecessor ends, instead of as a
    /// programmatic dependent launch (launch overlapped with the predecessor's tail; the skinny
    /// GEMM also streams its first weights meanwhile).
    pub pdl: bool,
    /// KILN_SKINNY_WIDE=0: the skinny GEMM runs 8 warps per CTA (`skinny_pipe_*`,
    /// `skinny_deep_*`) instead of 16 (`skinny_wide*_*`), a different summation order.
    pub skinny_wide: bool,
    /// KILN_SKINNY_DEEP=0: in the 8-warp family, long-K weights (k >= 8192) use the 8-stage
    /// ring instead of the 14-stage `skinny_deep_*` (same bits).
    pub skinny_deep: bool,
    /// KILN_FLASH_ATTN=sm90 | sm80: prefill attention with wgmma and a producer warpgroup
    /// (`flash_sm90_*`, sm_90 only) or with mma.sync (`flash_attn*`). Different bits, each
    /// chunk-invariant. sm80 until the sm90 kernel is measured on the GPU.
    pub flash_sm90: bool,
    /// KILN_FLASH_OVERLAP=0: the sm90 kernel runs each tile's softmax after the previous
    /// tile's P V product instead of beside it (same bits).
    pub flash_overlap: bool,
    /// KILN_FLASH_PINGPONG=1 | 0 (or on / off): the sm90 kernel's two consumer warpgroups take
    /// turns issuing their products, so one's softmax runs beside the other's, or never do
    /// (same bits). Unset (None): they do at head dims up to 256, where it measured faster (H200,
    /// 2026-12-03 19:25Z, with O's rescale beside Q K^T: hd 128 causal 2k / 8k / 32k +1-4% /
    /// +4% / +2%, hd 256 +5% / +5% / +1.5%; hd 512 runs flash_wide).
    pub flash_pingpong: Option<bool>,
    /// KILN_FLASH_L2=0: the sm90 kernel's CTAs start tile by tile over every head pair, even
    /// when the K/V of all heads outgrow L2, instead of a few KV heads' pairs at a time (same
    /// bits: only the order the CTAs start in changes).
    pub flash_l2: bool,
    /// KILN_DECODE_ATTN=mma | simt: decode attention on the tensor cores with the rows of one
    /// sequence sharing K/V reads (`decode_mma_*`, the default) or on CUDA cores
    /// (`decode_attn_*`). Different bits, each batch-invariant.
    pub decode_mma: bool,
    /// KILN_QUANT_DECODE=v1 | v2: decode rows of block-quantised matrices through the first
    /// family of quantised skinny kernels (`skinny_*`) or the second (`skinny2_*`, fewer
    /// instructions per record). Different bits, each batch-invariant.
    pub quant_decode_v2: bool,
    /// KILN_QUANT_EXPAND=words: the bf16 expansion of quantised matrices for prefill GEMMs
    /// through the first kernel (`quant_to_bf16_words_*`, a thread per 8 values with 64-bit
    /// index arithmetic) instead of `quant_to_bf16_*`. Same bits.
    pub quant_expand_words: bool,
    /// `quant_to_bf16_*` writes each run of eight values with one 16-byte store (`st_16`);
    /// KILN_QUANT_EXPAND=c-stores leaves the stores to the compiler, which split Q8_0's and
    /// Q4_0's into 4-byte ones (their expansions ran at 2.5 TB/s against Q4_K's 3.4-3.5 on the
    /// H200). Same bits.
    pub quant_expand_vstore: bool,
    /// KILN_QUANT_TILES=1: the second family's 9-32-row launches take one 16-row tile a CTA
    /// instead of two (`_t2`, x read once for both). Same bits.
    pub quant_tiles2: bool,
    /// KILN_SKINNY_TC=N | on | auto: decode GEMM launches on the tensor cores (`skinny_tc_*`),
    /// with the 16-warp skinny kernel's bits, so the row count may pick the kernel: from N rows
    /// (on: 64), or as the measured table says (auto, the default); 0 or off: the skinny
    /// kernel everywhere.
    pub skinny_tc: SkinnyTc,
}

/// The defaults of the attention families: flash_sm90 prefill where the GPU has it (on the
/// H200, 506 against 192 TFLOP/s at head dim 128 and 8k, prefill 8k 34,367 against 28,195
/// tok/s end to end); decode_mma (2.5x decode_attn's bandwidth at depth 128k on the H200).
pub const FLASH_SM90_DEFAULT: bool = true;
pub const DECODE_MMA_DEFAULT: bool = true;

impl Switches {
    /// Whether a backend of storage type `store` gives decode rows the prefill GEMM's order:
    /// `chain_gemm` with bf16 weights (the chain kernel is bf16-only, and other storage types
    /// take cuBLASLt for every row anyway).
    pub fn chain_order(&self, store: StoreType) -> bool {
        self.chain_gemm && store == StoreType::Bf16
    }

    /// The process-wide switches, read from the environment on first use.
    pub fn from_env() -> Switches {
        env().switches
    }

    /// One line for logs and reports, naming every switch.
    pub fn describe(&self) -> String {
        let k = self.kernels;
        let prefill = self
            .graph_prefill_max
            .map_or("default".to_string(), |n| n.to_string());
        let deep_stages = self
            .decode_deep_stages
            .map_or("default".to_string(), |n| n.to_string());
        let cache = match kernel_cache() {
            KernelCache::Home => "home".to_string(),
            KernelCache::Off => "off".to_string(),
            KernelCache::Dir(d) => d.display().to_string(),
        };
        let splits = self.decode_mma_splits.unwrap_or(64).to_string()
            + &self
                .decode_long_from
                .map_or(String::new(), |n| format!(" x2 past {n}"));
        let span = self
            .decode_min_span
            .map_or("64".to_string(), |n| n.to_string());
        let pin_m = self
            .gemm_pin_m
            .map_or("chunk".to_string(), |m| m.to_string());
        let tier_m = self
            .gemm_tier_m
            .map_or("512".to_string(), |m| m.to_string());
        let tc = match k.skinny_tc {
            SkinnyTc::Off => "off".to_string(),
            SkinnyTc::From(n) => format!("{n}+"),
            SkinnyTc::Measured => "auto".to_string(),
        };
        format!(
            "skinny_gemm={} flash_attn={} split_decode={} device_sampling={} gemm_pin={} gemm_pin_m={pin_m} gemm_add={} gemm_tune={} skinny_pipe={} skinny_deep={} skinny_wide={} skinny_tc={tc} decode_fuse={} quant_fuse={} flash_pairs={} flash={} flash_overlap={} flash_pingpong={} flash_l2={} decode={} decode_splits={splits} decode_min_span={span} decode_span_pow2={} decode_fold={:?} decode_split_ctas={} attn_early={} decode_lookahead={} tc_split={} skinny_wg={} skinny_wg_cluster={} pdl={} cuda_graphs={} draft_graphs={} gpu_quant={} fp8={} fp8_scales={} fp8_fuse={} fp8_skinny={} fp8_wide={} fp8_wg={} bf16_wg={} wg_rows_choice={} flash_fence={} quant_fence={} quant_prefill={} quant_ahead={} quant_embed={} quant_q4k={} quant_q6k={} quant_decode={} quant_expand={} quant_tiles={} graph_prefill={prefill} gemma_fuse={} gated_vec={} argmax_vec={} flash_wide={} decode_wide={} kv_ring={} chain_gemm={} chain_rows={} gemm_short={} gemm_tier_m={tier_m} gemm_tail={} combine_early={} combine_cols={} carveout_max={} decode_lazy={} decode_lean={} decode_transpose={} decode_deep={} decode_deep_stages={deep_stages} kernel_cache={cache}",
            self.skinny_gemm as u8,
            self.flash_attn as u8,
            self.split_decode as u8,
            self.device_sampling as u8,
            self.gemm_pin as u8,
            self.gemm_add as u8,
            self.gemm_tune as u8,
            k.skinny_pipe as u8,
            k.skinny_deep as u8,
            k.skinny_wide as u8,
            self.fuse.describe(),
            self.quant_fuse.describe(),
            k.flash_pairs as u8,
            if k.flash_sm90 { "sm90" } else { "sm80" },
            k.flash_overlap as u8,
            k.flash_pingpong.map_or("auto", |on| if on { "1" } else { "0" }),
            k.flash_l2 as u8,
            if k.decode_mma { "mma" } else { "simt" },
            self.decode_span_pow2 as u8,
            self.decode_fold,
            self.decode_split_ctas.describe(),
            self.attn_early as u8,
            self.decode_lookahead as u8,
            self.tc_split_from
                .map_or("off".to_string(), |n| format!("{n}+")),
            self.wg.describe(),
            self.wg_cluster.describe(),
            k.pdl as u8,
            self.cuda_graphs as u8,
            self.draft_graphs as u8,
            self.gpu_quant as u8,
            self.fp8 as u8,
            crate::gemm_fp8::Fp8Scales::from_env().map_or("auto".to_string(), |s| format!("{s:?}")),
            self.fp8_fuse as u8,
            self.fp8_skinny as u8,
            self.fp8_wide_from.map_or("0".to_string(), |n| n.to_string()),
            self.fp8_wg as u8,
            self.bf16_wg as u8,
            if self.wg_rows_ctas { "ctas" } else { "regimes" },
            self.flash_fence as u8,
            self.quant_fence as u8,
            if self.quant_prefill_skinny {
                "skinny"
            } else {
                "expand"
            },
            match self.quant_ahead {
                None => "off".to_string(),
                Some(0) => "on".to_string(),
                Some(n) => n.to_string(),
            },
            if self.quant_embed_host {
                "host"
            } else {
                "device"
            },
            if self.quant_q4k256 { 256 } else { 128 },
            if self.quant_q6k256 { 256 } else { 128 },
            if k.quant_decode_v2 { "v2" } else { "v1" },
            if k.quant_expand_words {
                "words"
            } else if k.quant_expand_vstore {
                "records"
            } else {
                "c-stores"
            },
            if k.quant_tiles2 { 2 } else { 1 },
            self.gemma_fuse as u8,
            self.gated_vec as u8,
            self.argmax_vec as u8,
            if self.flash_wide_sm90 {
                "sm90"
            } else if self.flash_wide_split {
                "split"
            } else {
                "recompute"
            },
            if self.decode_wide_mma { "mma" } else { "simt" },
            self.kv_ring as u8,
            self.chain_gemm as u8,
            self.chain_rows.map_or("auto".to_string(), |n| n.to_string()),
            self.gemm_short as u8,
            self.gemm_tail as u8,
            self.combine_early as u8,
            self.combine_cols as u8,
            self.carveout_max as u8,
            self.decode_lazy as u8,
            self.decode_lean as u8,
            self.decode_transpose as u8,
            self.decode_deep as u8,
        )
    }
}

impl KernelChoice {
    pub const ALL_FAST: KernelChoice = KernelChoice {
        skinny_pipe: true,
        flash_pairs: true,
        pdl: true,
        skinny_wide: true,
        skinny_deep: true,
        flash_sm90: FLASH_SM90_DEFAULT,
        flash_overlap: true,
        flash_pingpong: None,
        flash_l2: true,
        decode_mma: DECODE_MMA_DEFAULT,
        quant_decode_v2: true,
        quant_expand_words: false,
        quant_expand_vstore: true,
        quant_tiles2: true,
        skinny_tc: SKINNY_TC_DEFAULT,
    };
    pub const ALL_PLAIN: KernelChoice = KernelChoice {
        skinny_pipe: false,
        flash_pairs: false,
        pdl: false,
        skinny_wide: false,
        skinny_deep: false,
        flash_sm90: false,
        flash_overlap: false,
        flash_pingpong: Some(false),
        flash_l2: false,
        decode_mma: false,
        quant_decode_v2: false,
        quant_expand_words: true,
        // The words kernel has no vector-store switch (one KILN_QUANT_EXPAND picks either).
        quant_expand_vstore: true,
        quant_tiles2: false,
        skinny_tc: SkinnyTc::Off,
    };

    /// The process-wide choice, read from the environment on first use.
    pub fn from_env() -> KernelChoice {
        Switches::from_env().kernels
    }
}

#[cfg(test)]
#[path = "switches_tests.rs"]
mod tests;
