//! Reading the environment (a child module of switches.rs): every KILN_* variable parsed into
//! the switches and the kernel cache, once per process, from a function of the variable's name
//! so that the tests can give their own (switches_tests.rs).

use std::path::PathBuf;
use std::sync::OnceLock;

use super::{
    DecodeFold, DecodeFuse, KernelChoice, SkinnyTc, SplitCtas, Switches, WgCluster, WgMode,
    DECODE_MMA_DEFAULT, FLASH_SM90_DEFAULT, FP8_WIDE_FROM, SKINNY_TC_DEFAULT,
    SKINNY_TC_DEFAULT_ROWS, TC_SPLIT_FROM,
};
use crate::chain_gemm::CHAIN_MAX_ROWS;

/// Where compiled kernels are cached: KILN_KERNEL_CACHE=DIR, `off` (or 0) for nowhere, else
/// under the home folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelCache {
    Home,
    Off,
    Dir(PathBuf),
}

/// Everything read from the environment, once.
pub(super) struct Env {
    pub(super) switches: Switches,
    pub(super) kernel_cache: KernelCache,
}

pub(super) fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::read(|name| std::env::var(name).ok()))
}

impl Env {
    /// Parses the variables `var` gives (None: unset, or not Unicode, which counts as unset).
    pub(super) fn read(var: impl Fn(&str) -> Option<String>) -> Env {
        // On unless the variable is 0, off or false.
        let on = |name| !matches!(var(name).as_deref(), Some("0" | "off" | "false"));
        // Off unless the variable is 1, on or true.
        let opt_in = |name| matches!(var(name).as_deref(), Some("1" | "on" | "true"));
        let quant_decode_v2 = var("KILN_QUANT_DECODE").as_deref() != Some("v1");
        Env {
            switches: Switches {
                skinny_gemm: on("KILN_SKINNY_GEMM"),
                flash_attn: on("KILN_FLASH_ATTN"),
                split_decode: on("KILN_SPLIT_DECODE"),
                device_sampling: on("KILN_DEVICE_SAMPLING"),
                gemm_pin: var("KILN_GEMM_PIN").as_deref() != Some("0"),
                gemm_pin_m: var("KILN_GEMM_PIN_M")
                    .and_then(|v| v.parse().ok())
                    .filter(|&m| m > 0),
                gemm_add: on("KILN_GEMM_ADD"),
                gemm_tune: on("KILN_GEMM_TUNE"),
                gemm_short: on("KILN_GEMM_SHORT"),
                gemm_tail: on("KILN_GEMM_TAIL"),
                gemm_tier_m: var("KILN_GEMM_TIER_M")
                    .and_then(|v| v.parse().ok())
                    .filter(|m| (257..=1024).contains(m)),
                chain_gemm: opt_in("KILN_CHAIN_GEMM"),
                chain_rows: match var("KILN_CHAIN_ROWS").as_deref() {
                    None | Some("") | Some("auto") => None,
                    Some(v) => Some(v.parse::<usize>().unwrap_or(0).min(CHAIN_MAX_ROWS)),
                },
                cuda_graphs: on("KILN_CUDA_GRAPHS"),
                draft_graphs: on("KILN_DRAFT_GRAPHS"),
                gpu_quant: on("KILN_GPU_QUANT"),
                fp8: opt_in("KILN_FP8"),
                fp8_fuse: on("KILN_FP8_FUSE"),
                fp8_skinny: opt_in("KILN_FP8_SKINNY"),
                fp8_wg: on("KILN_FP8_WG"),
                bf16_wg: opt_in("KILN_BF16_WG"),
                wg_rows_ctas: var("KILN_WG_ROWS_CHOICE").as_deref() == Some("ctas"),
                fp8_wide_from: match var("KILN_FP8_WIDE").as_deref() {
                    None | Some("" | "on" | "auto") => Some(FP8_WIDE_FROM),
                    Some(v) => v.parse::<usize>().ok().filter(|&n| n > 0),
                },
                flash_fence: on("KILN_FLASH_FENCE"),
                quant_fence: opt_in("KILN_QUANT_FENCE"),
                quant_prefill_skinny: var("KILN_QUANT_PREFILL").as_deref() == Some("skinny"),
                quant_ahead: match var("KILN_QUANT_AHEAD").as_deref() {
                    Some("0" | "off" | "false") => None,
                    Some(n) => Some(n.parse().ok().filter(|n| (2..=64).contains(n)).unwrap_or(0)),
                    None => Some(0),
                },
                quant_embed_host: var("KILN_QUANT_EMBED").as_deref() != Some("device"),
                // The first decode family has no kernels for 256-k records.
                quant_q4k256: var("KILN_QUANT_Q4K").as_deref() != Some("128") && quant_decode_v2,
                quant_q6k256: var("KILN_QUANT_Q6K").as_deref() != Some("128") && quant_decode_v2,
                graph_prefill_max: var("KILN_CUDA_GRAPH_PREFILL").and_then(|v| v.parse().ok()),
                decode_mma_splits: var("KILN_DECODE_SPLITS")
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|n| n.is_power_of_two() && *n <= crate::kernels::DECODE_MMA_MAX_SPLITS),
                decode_long_from: var("KILN_DECODE_LONG")
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|n| n.is_power_of_two() && (1 << 10..=1 << 20).contains(n)),
                decode_min_span: var("KILN_DECODE_MIN_SPAN")
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|n| n.is_power_of_two() && (16..=8192).contains(n)),
                decode_span_pow2: var("KILN_DECODE_SPAN").as_deref() == Some("pow2"),
                decode_fold: match var("KILN_DECODE_FOLD").as_deref() {
                    Some("0") => DecodeFold::Never,
                    Some("1") => DecodeFold::Always,
                    _ => DecodeFold::Auto,
                },
                attn_early: on("KILN_ATTN_EARLY"),
                combine_early: on("KILN_COMBINE_EARLY"),
                combine_cols: on("KILN_COMBINE_COLS"),
                carveout_max: var("KILN_CARVEOUT").as_deref() == Some("max"),
                decode_lazy: opt_in("KILN_DECODE_LAZY"),
                decode_lean: on("KILN_DECODE_LEAN"),
                decode_transpose: opt_in("KILN_DECODE_TRANSPOSE"),
                decode_deep: on("KILN_DECODE_DEEP"),
                decode_deep_stages: var("KILN_DECODE_DEEP_STAGES").and_then(|v| v.parse().ok()),
                decode_lookahead: opt_in("KILN_DECODE_LOOKAHEAD"),
                decode_split_ctas: SplitCtas::parse(var("KILN_DECODE_SPLIT_CTAS").as_deref()),
                tc_split_from: match var("KILN_SKINNY_TC_SPLIT").as_deref() {
                    None | Some("") | Some("on") => Some(TC_SPLIT_FROM),
                    Some(v) => v.parse::<usize>().ok().filter(|&n| n > 0),
                },
                wg: match var("KILN_SKINNY_WG").as_deref() {
                    None | Some("") | Some("auto") => WgMode::Measured,
                    Some("on") => WgMode::From(64),
                    Some(v) => v
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .map_or(WgMode::Off, WgMode::From),
                },
                wg_cluster: match var("KILN_SKINNY_WG_CLUSTER").as_deref() {
                    None | Some("") | Some("auto") => WgCluster::Measured,
                    Some("2") => WgCluster::Twins(2),
                    Some("4") => WgCluster::Twins(4),
                    _ => WgCluster::Off,
                },
                gemma_fuse: on("KILN_GEMMA_FUSE"),
                gated_vec: on("KILN_GATED_VEC"),
                argmax_vec: on("KILN_ARGMAX_VEC"),
                flash_wide_split: var("KILN_FLASH_WIDE").as_deref() != Some("recompute"),
                flash_wide_sm90: matches!(
                    var("KILN_FLASH_WIDE").as_deref(),
                    None | Some("") | Some("sm90")
                ),
                decode_wide_mma: var("KILN_DECODE_WIDE").as_deref() == Some("mma"),
                fuse: var("KILN_DECODE_FUSE")
                    .map(|v| DecodeFuse::parse(&v))
                    .unwrap_or(DecodeFuse::DEFAULT),
                quant_fuse: var("KILN_QUANT_FUSE")
                    .map(|v| DecodeFuse {
                        norm: false,
                        ..DecodeFuse::parse(&v)
                    })
                    .unwrap_or(DecodeFuse::QUANT_DEFAULT),
                kv_ring: opt_in("KILN_KV_RING"),
                kernels: KernelChoice {
                    skinny_pipe: on("KILN_SKINNY_PIPE"),
                    flash_pairs: on("KILN_FLASH_PAIRS"),
                    pdl: on("KILN_PDL"),
                    skinny_wide: on("KILN_SKINNY_WIDE"),
                    skinny_deep: on("KILN_SKINNY_DEEP"),
                    flash_sm90: match var("KILN_FLASH_ATTN").as_deref() {
                        Some("sm90") => true,
                        Some("sm80") => false,
                        _ => FLASH_SM90_DEFAULT,
                    },
                    flash_overlap: on("KILN_FLASH_OVERLAP"),
                    flash_pingpong: if opt_in("KILN_FLASH_PINGPONG") {
                        Some(true)
                    } else if !on("KILN_FLASH_PINGPONG") {
                        Some(false)
                    } else {
                        None
                    },
                    flash_l2: on("KILN_FLASH_L2"),
                    decode_mma: match var("KILN_DECODE_ATTN").as_deref() {
                        Some("mma") => true,
                        Some("simt") => false,
                        _ => DECODE_MMA_DEFAULT,
                    },
                    quant_decode_v2,
                    quant_expand_words: var("KILN_QUANT_EXPAND").as_deref() == Some("words"),
                    quant_expand_vstore: var("KILN_QUANT_EXPAND").as_deref() != Some("c-stores"),
                    quant_tiles2: var("KILN_QUANT_TILES").as_deref() != Some("1"),
                    skinny_tc: match var("KILN_SKINNY_TC").as_deref() {
                        Some("on") => SkinnyTc::From(SKINNY_TC_DEFAULT_ROWS),
                        Some("auto") => SkinnyTc::Measured,
                        Some(v) => v
                            .parse::<usize>()
                            .ok()
                            .filter(|&n| n > 0)
                            .map_or(SkinnyTc::Off, SkinnyTc::From),
                        None => SKINNY_TC_DEFAULT,
                    },
                },
            },
            kernel_cache: match var("KILN_KERNEL_CACHE") {
                Some(v) if v == "off" || v == "0" => KernelCache::Off,
                Some(v) if !v.is_empty() => KernelCache::Dir(PathBuf::from(v)),
                _ => KernelCache::Home,
            },
        }
    }
}

/// The kernel cache the environment asks for.
pub fn kernel_cache() -> &'static KernelCache {
    &env().kernel_cache
}
