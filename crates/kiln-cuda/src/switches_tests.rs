//! The switches read from the environment: each variable's values and defaults.

use super::environment::Env;
use super::*;
use crate::chain_gemm::CHAIN_MAX_ROWS;

fn read(vars: &[(&str, &str)]) -> Env {
    Env::read(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    })
}

#[test]
fn everything_is_on_by_default() {
    let e = read(&[]);
    let s = e.switches;
    assert!(s.skinny_gemm && s.flash_attn && s.split_decode && s.device_sampling);
    assert!(s.gemm_pin && s.cuda_graphs && s.gpu_quant && s.quant_embed_host && s.gemm_add);
    assert!(s.gemm_tune);
    assert_eq!(s.graph_prefill_max, None);
    assert_eq!(s.kernels, KernelChoice::ALL_FAST);
    assert_eq!(e.kernel_cache, KernelCache::Home);
}

#[test]
fn each_variable_turns_off_its_own_switch() {
    for off in ["0", "off", "false"] {
        let e = read(&[
            ("KILN_SKINNY_PIPE", off),
            ("KILN_FLASH_PAIRS", off),
            ("KILN_PDL", off),
            ("KILN_SKINNY_WIDE", off),
            ("KILN_SKINNY_DEEP", off),
            ("KILN_FLASH_OVERLAP", off),
            ("KILN_FLASH_PINGPONG", off),
            ("KILN_FLASH_L2", off),
            ("KILN_DECODE_ATTN", "simt"),
            ("KILN_FLASH_ATTN", "sm80"),
            ("KILN_SKINNY_TC", off),
            ("KILN_QUANT_DECODE", "v1"),
            ("KILN_QUANT_EXPAND", "words"),
            ("KILN_QUANT_TILES", "1"),
        ]);
        assert_eq!(e.switches.kernels, KernelChoice::ALL_PLAIN);
        assert!(e.switches.skinny_gemm && e.switches.cuda_graphs);
        let s = read(&[("KILN_CUDA_GRAPHS", off), ("KILN_DEVICE_SAMPLING", off)]).switches;
        assert!(!s.cuda_graphs && !s.device_sampling && s.flash_attn);
        assert!(!read(&[("KILN_GPU_QUANT", off)]).switches.gpu_quant);
        assert!(!read(&[("KILN_GEMM_ADD", off)]).switches.gemm_add);
        assert!(!read(&[("KILN_GEMM_TUNE", off)]).switches.gemm_tune);
    }
    // KILN_GEMM_PIN takes only 0.
    assert!(!read(&[("KILN_GEMM_PIN", "0")]).switches.gemm_pin);
    assert!(read(&[("KILN_GEMM_PIN", "off")]).switches.gemm_pin);
    assert!(read(&[("KILN_SKINNY_GEMM", "1")]).switches.skinny_gemm);
    for on in ["1", "on", "true"] {
        assert!(read(&[("KILN_GPU_QUANT", on)]).switches.gpu_quant);
    }
    let prefill = |v| {
        read(&[("KILN_QUANT_PREFILL", v)])
            .switches
            .quant_prefill_skinny
    };
    assert!(prefill("skinny") && !prefill("expand") && !prefill("1"));
    let v2 = |v| {
        read(&[("KILN_QUANT_DECODE", v)])
            .switches
            .kernels
            .quant_decode_v2
    };
    assert!(v2("v2") && v2("") && !v2("v1"));
    assert!(
        read(&[]).switches.gemma_fuse && !read(&[("KILN_GEMMA_FUSE", "0")]).switches.gemma_fuse
    );
    assert!(read(&[]).switches.gated_vec && !read(&[("KILN_GATED_VEC", "0")]).switches.gated_vec);
    let sw = |vars: &[(&str, &str)]| read(vars).switches;
    assert!(sw(&[]).argmax_vec && !sw(&[("KILN_ARGMAX_VEC", "0")]).argmax_vec);
    assert!(sw(&[]).fp8_fuse && !sw(&[("KILN_FP8_FUSE", "0")]).fp8_fuse);
    assert!(!sw(&[]).fp8_skinny && sw(&[("KILN_FP8_SKINNY", "1")]).fp8_skinny);
    assert!(sw(&[]).fp8_wg && !sw(&[("KILN_FP8_WG", "0")]).fp8_wg);
    assert!(!sw(&[]).bf16_wg && sw(&[("KILN_BF16_WG", "1")]).bf16_wg);
    let ctas = |v| sw(&[("KILN_WG_ROWS_CHOICE", v)]).wg_rows_ctas;
    assert!(!sw(&[]).wg_rows_ctas && ctas("ctas") && !ctas("regimes"));
    assert_eq!(sw(&[]).fp8_wide_from, Some(FP8_WIDE_FROM));
    assert_eq!(sw(&[("KILN_FP8_WIDE", "65")]).fp8_wide_from, Some(65));
    assert_eq!(sw(&[("KILN_FP8_WIDE", "0")]).fp8_wide_from, None);
    assert!(sw(&[]).flash_fence && !sw(&[("KILN_FLASH_FENCE", "0")]).flash_fence);
    assert!(!sw(&[]).quant_fence && sw(&[("KILN_QUANT_FENCE", "1")]).quant_fence);
    assert!(sw(&[]).attn_early && !sw(&[("KILN_ATTN_EARLY", "0")]).attn_early);
    assert!(sw(&[]).combine_early && !sw(&[("KILN_COMBINE_EARLY", "0")]).combine_early);
    assert!(sw(&[]).gemm_tail && !sw(&[("KILN_GEMM_TAIL", "off")]).gemm_tail);
    let tier_m = |v| sw(&[("KILN_GEMM_TIER_M", v)]).gemm_tier_m;
    assert_eq!((sw(&[]).gemm_tier_m, tier_m("520")), (None, Some(520)));
    assert_eq!(
        (tier_m("256"), tier_m("1025"), tier_m("x")),
        (None, None, None)
    );
    assert!(!sw(&[]).decode_lazy && sw(&[("KILN_DECODE_LAZY", "1")]).decode_lazy);
    assert!(sw(&[]).decode_lean && !sw(&[("KILN_DECODE_LEAN", "0")]).decode_lean);
    assert!(!sw(&[]).decode_transpose && sw(&[("KILN_DECODE_TRANSPOSE", "1")]).decode_transpose);
    assert!(sw(&[]).decode_deep && !sw(&[("KILN_DECODE_DEEP", "0")]).decode_deep);
    assert!(sw(&[]).combine_cols && !sw(&[("KILN_COMBINE_COLS", "0")]).combine_cols);
    assert!(!sw(&[]).carveout_max && sw(&[("KILN_CARVEOUT", "max")]).carveout_max);
    let long = |v| sw(&[("KILN_DECODE_LONG", v)]).decode_long_from;
    assert_eq!(
        (sw(&[]).decode_long_from, long("16384")),
        (None, Some(16384))
    );
    assert_eq!((long("512"), long("3000"), long("x")), (None, None, None));
    let splits = |vars: &[(&str, &str)]| crate::kernels::decode_mma_splits(&sw(vars));
    assert_eq!(splits(&[]), (64, 0));
    assert_eq!(splits(&[("KILN_DECODE_LONG", "16384")]), (128, 16384));
    let both = [("KILN_DECODE_LONG", "16384"), ("KILN_DECODE_SPLITS", "256")];
    assert_eq!(splits(&both), (256, 0));
    let la = |vars: &[(&str, &str)]| sw(vars).decode_lookahead;
    assert!(!la(&[]) && la(&[("KILN_DECODE_LOOKAHEAD", "on")]));
    let wide = |v| read(&[("KILN_FLASH_WIDE", v)]).switches.flash_wide_split;
    assert!(wide("split") && !wide("recompute") && read(&[]).switches.flash_wide_split);
    let w90 = |v| read(&[("KILN_FLASH_WIDE", v)]).switches.flash_wide_sm90;
    assert!(
        w90("sm90") && !w90("split") && !w90("recompute") && read(&[]).switches.flash_wide_sm90
    );
    let dw = |v| read(&[("KILN_DECODE_WIDE", v)]).switches.decode_wide_mma;
    assert!(dw("mma") && !dw("simt") && !read(&[]).switches.decode_wide_mma);
    // Q4_K and Q6_K in 256-k records: the default, 128 for the 128-k ones, and never with the
    // first decode family, which cannot read them.
    let q6k = |vars: &[(&str, &str)]| read(vars).switches.quant_q6k256;
    assert!(q6k(&[]) && !q6k(&[("KILN_QUANT_Q6K", "128")]));
    assert!(!q6k(&[("KILN_QUANT_DECODE", "v1")]));
    let q4k = |vars: &[(&str, &str)]| read(vars).switches.quant_q4k256;
    assert!(q4k(&[]) && !q4k(&[("KILN_QUANT_Q4K", "128")]));
    assert!(q4k(&[("KILN_QUANT_Q4K", "256")]));
    assert!(q4k(&[("KILN_QUANT_DECODE", "v2")]));
    assert!(!q4k(&[
        ("KILN_QUANT_Q4K", "256"),
        ("KILN_QUANT_DECODE", "v1")
    ]));
}

#[test]
fn attention_variants_are_named() {
    let k = |vars: &[(&str, &str)]| read(vars).switches;
    let s = k(&[("KILN_FLASH_ATTN", "sm90"), ("KILN_DECODE_ATTN", "mma")]);
    assert!(s.flash_attn && s.kernels.flash_sm90 && s.kernels.decode_mma);
    let s = k(&[("KILN_FLASH_ATTN", "sm80"), ("KILN_DECODE_ATTN", "simt")]);
    assert!(s.flash_attn && !s.kernels.flash_sm90 && !s.kernels.decode_mma);
    let s = k(&[("KILN_FLASH_ATTN", "0")]);
    assert!(!s.flash_attn && s.kernels.flash_sm90 == FLASH_SM90_DEFAULT);
    assert_eq!(k(&[]).kernels.decode_mma, DECODE_MMA_DEFAULT);
}

#[test]
fn decode_fusion_of_add_and_rope_and_the_measured_tc_table_are_the_defaults() {
    let s = read(&[]).switches;
    assert_eq!(s.fuse, DecodeFuse::DEFAULT);
    assert!(s.fuse.add && s.fuse.rope && !s.fuse.glu && !s.fuse.norm);
    assert_eq!(s.kernels.skinny_tc, SkinnyTc::Measured);
    let fuse = |v| read(&[("KILN_DECODE_FUSE", v)]).switches.fuse;
    assert_eq!(fuse("all"), DecodeFuse::ALL);
    assert_eq!(fuse("none"), DecodeFuse::default());
    assert!(!fuse("0").any());
    assert_eq!(fuse("add,rope"), DecodeFuse::DEFAULT);
    let f = fuse("glu, rope");
    assert!(f.glu && f.rope && !f.add && !f.norm);
    // The norm in a GEMM needs the residual add in the GEMM before it.
    let f = fuse("norm");
    assert!(f.norm && f.add && !f.glu);
    assert_eq!(f.describe(), "add,norm");
    let tc = |v| read(&[("KILN_SKINNY_TC", v)]).switches.kernels.skinny_tc;
    assert_eq!(tc("on"), SkinnyTc::From(SKINNY_TC_DEFAULT_ROWS));
    assert_eq!(tc("96"), SkinnyTc::From(96));
    assert_eq!(tc("auto"), SkinnyTc::Measured);
    assert_eq!(tc("0"), SkinnyTc::Off);
    assert_eq!(tc("off"), SkinnyTc::Off);
}

#[test]
fn values_parse_as_documented() {
    let prefill = |v| {
        read(&[("KILN_CUDA_GRAPH_PREFILL", v)])
            .switches
            .graph_prefill_max
    };
    assert_eq!(prefill("0"), Some(0));
    assert_eq!(prefill("2048"), Some(2048));
    assert_eq!(prefill("many"), None);
    let splits = |v| {
        read(&[("KILN_DECODE_SPLITS", v)])
            .switches
            .decode_mma_splits
    };
    assert_eq!(splits("16"), Some(16));
    assert_eq!(splits("24"), None);
    assert_eq!(splits("128"), Some(128));
    assert_eq!(splits("256"), Some(256));
    assert_eq!(splits("512"), None);
    assert_eq!(read(&[]).switches.decode_mma_splits, None);
    let span = |v| {
        read(&[("KILN_DECODE_MIN_SPAN", v)])
            .switches
            .decode_min_span
    };
    assert_eq!(span("256"), Some(256));
    assert_eq!(span("16"), Some(16));
    assert_eq!(span("8"), None);
    assert_eq!(span("96"), None);
    assert_eq!(span("16384"), None);
    assert_eq!(read(&[]).switches.decode_min_span, None);
    // Turns: forced either way, or chosen by head dim when unset (or not understood).
    let turns = |v| {
        read(&[("KILN_FLASH_PINGPONG", v)])
            .switches
            .kernels
            .flash_pingpong
    };
    assert_eq!(turns("1"), Some(true));
    assert_eq!(turns("on"), Some(true));
    assert_eq!(turns("0"), Some(false));
    assert_eq!(turns("maybe"), None);
    assert_eq!(read(&[]).switches.kernels.flash_pingpong, None);
    // The GEMM pin's m: a positive count, else the prefill chunk.
    let pin_m = |v| read(&[("KILN_GEMM_PIN_M", v)]).switches.gemm_pin_m;
    assert_eq!(pin_m("512"), Some(512));
    assert_eq!(pin_m("0"), None);
    assert_eq!(pin_m("big"), None);
    assert_eq!(read(&[]).switches.gemm_pin_m, None);
    let ctas = |v| {
        read(&[("KILN_DECODE_SPLIT_CTAS", v)])
            .switches
            .decode_split_ctas
    };
    assert_eq!(ctas("all"), SplitCtas::All);
    assert_eq!(ctas("16"), SplitCtas::Fixed(16));
    assert_eq!(ctas("0"), SplitCtas::Auto);
    assert_eq!(ctas("many"), SplitCtas::Auto);
    assert_eq!(read(&[]).switches.decode_split_ctas, SplitCtas::Auto);
    let split = |v| read(&[("KILN_SKINNY_TC_SPLIT", v)]).switches.tc_split_from;
    assert_eq!(split("64"), Some(64));
    assert_eq!(split("0"), None);
    assert_eq!(split("off"), None);
    assert_eq!(split("on"), Some(crate::switches::TC_SPLIT_FROM));
    assert_eq!(
        read(&[]).switches.tc_split_from,
        Some(crate::switches::TC_SPLIT_FROM)
    );
    let cache = |v| read(&[("KILN_KERNEL_CACHE", v)]).kernel_cache;
    assert_eq!(cache("off"), KernelCache::Off);
    assert_eq!(cache("0"), KernelCache::Off);
    assert_eq!(cache(""), KernelCache::Home);
    assert_eq!(cache("/tmp/k"), KernelCache::Dir("/tmp/k".into()));
}

#[test]
fn the_expansion_runs_a_layer_ahead_unless_turned_off() {
    let ahead = |v: Option<&str>| match v {
        None => read(&[]).switches.quant_ahead,
        Some(v) => read(&[("KILN_QUANT_AHEAD", v)]).switches.quant_ahead,
    };
    for on in [
        None,
        Some("on"),
        Some("1"),
        Some("true"),
        Some("65"),
        Some("yes"),
    ] {
        assert_eq!(ahead(on), Some(0), "{on:?}");
    }
    assert_eq!(ahead(Some("16")), Some(16));
    assert_eq!(ahead(Some("2")), Some(2));
    for off in ["off", "0", "false"] {
        assert_eq!(ahead(Some(off)), None, "{off}");
    }
    let line = read(&[]).switches.describe();
    assert!(line.contains("quant_ahead=on"), "{line}");
}

#[test]
fn the_prefill_order_is_opt_in_and_its_chain_rows_are_timed_unless_given() {
    let s = read(&[]).switches;
    assert!(!s.chain_gemm);
    assert_eq!(s.chain_rows, None);
    assert!(read(&[("KILN_CHAIN_GEMM", "1")]).switches.chain_gemm);
    let rows = |v| read(&[("KILN_CHAIN_ROWS", v)]).switches.chain_rows;
    assert_eq!(rows("auto"), None);
    assert_eq!(rows(""), None);
    assert_eq!(rows("8"), Some(8));
    assert_eq!(rows("0"), Some(0));
    // More than one launch of the widest entry holds: capped there.
    assert_eq!(rows("500"), Some(CHAIN_MAX_ROWS));
    let line = read(&[("KILN_CHAIN_ROWS", "16")]).switches.describe();
    assert!(line.contains("chain_gemm=0 chain_rows=16"), "{line}");
    assert!(read(&[]).switches.describe().contains("chain_rows=auto"));
}
