//! The kernel sources' tests: every module's entries, what each build may name.

use super::*;

/// What each module exported when its entries were still listed by hand (the storage
/// copies and fills renamed since they became typed).
#[test]
fn every_module_has_the_entries_it_always_had() {
    let hd = |p: &str| [16, 32, 64, 128, 256].map(|d| format!("{p}{d}"));
    // The wgmma row order's two modules: the same shapes, each entry named by its module.
    let wg_rows = |m: &str| {
        [
            "1x1_n8",
            "2x1_n8",
            "1x1_n16",
            "1x1_n32",
            "1x1_n64",
            "2x1_n64",
            "1x2_n64",
            "2x2_n64",
            "1x1_n64_o",
            "1x1_n32_o",
        ]
        .map(|t| format!("{m}_{t}"))
        .to_vec()
    };
    let skinny = [
        "skinny_gemm_8",
        "skinny_gemm_16",
        "skinny_gemm_32",
        "skinny_gemm_64",
        "skinny_pipe_8",
        "skinny_pipe_16",
        "skinny_pipe_32",
        "skinny_pipe_64",
        "skinny_deep_8",
        "skinny_deep_16",
        "skinny_wide_8",
        "skinny_wide4_8",
        "skinny_wide_16",
        "skinny_wide_32",
        "skinny_wide_64",
        "skinny_fused_8",
        "skinny_fused4_8",
        "skinny_fused_16",
        "skinny_fused_32",
        "skinny_fused_64",
        "skinny_fusedn_8",
        "skinny_fusedn4_8",
    ];
    let flash = [hd("flash_attn_hd"), hd("flash_attn2_hd")].concat();
    let formats = ["q8_0", "q4_0", "q4_k", "q6_k"];
    let mut quant: Vec<String> = formats
        .iter()
        .flat_map(|f| [8, 16, 32, 64].map(|r| format!("skinny_{f}_{r}")))
        .collect();
    for f in formats.iter().chain(&["q4_k2", "q6_k2"]) {
        quant.push(format!("quant_to_bf16_{f}"));
        quant.push(format!("quant_embed_{f}"));
        quant.push(format!("quant_to_bf16_words_{f}"));
    }
    for f in ["q8_0", "q4_0", "q4_k", "q4_k2", "q6_k", "q6_k2"] {
        quant.extend([1, 8, 16, 32, 64].map(|r| format!("skinny2_{f}_{r}")));
        quant.extend([16, 32].map(|r| format!("skinny2_{f}_{r}_t2")));
    }
    let decode = [&hd("decode_attn_hd")[..], &["decode_attn_combine".into()]].concat();
    let flash_sm90 = ["flash_sm90_hd", "flash_sm90o_hd", "flash_sm90p_hd"]
        .iter()
        .flat_map(|p| [64, 128, 256].map(|d| format!("{p}{d}")))
        .chain(["flash_sm90_hd512".to_string()])
        .collect();
    let decode_mma = [16, 32, 64, 128, 256]
        .into_iter()
        .map(|d| format!("decode_mma_hd{d}"))
        .chain([16, 32, 64, 128].map(|d| format!("decode_mma_la_hd{d}")))
        .chain([64, 128, 256].map(|d| format!("decode_mmat_hd{d}")))
        .chain([64, 128].map(|d| format!("decode_mma_deep_hd{d}")))
        .chain([64, 128].map(|d| format!("decode_mmat_deep_hd{d}")))
        .chain(["decode_mma_deep6_hd128".to_string()])
        .chain(["decode_mma_combine", "decode_mma_combine_cols"].map(String::from))
        .collect();
    let expected: Vec<(&str, Vec<String>)> = vec![
        (
            "elementwise",
            [
                "embed_gather",
                "rmsnorm_residual",
                "final_norm_rows",
                "swiglu",
                "argmax_rows",
                "f32_to_store_copy",
                "store_to_f32_copy",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "rope_kv",
            vec!["rope_table_build".into(), "qkv_prepare".into()],
        ),
        ("skinny_gemm", skinny.map(String::from).to_vec()),
        ("flash_attn", flash),
        ("decode_attn", decode),
        ("flash_sm90", flash_sm90),
        ("decode_mma", decode_mma),
        (
            "dummy_weights",
            vec!["dummy_fill".into(), "fill_store".into()],
        ),
        (
            "sample",
            ["adjust_rows", "sample_rows", "feed_tokens"]
                .map(String::from)
                .to_vec(),
        ),
        ("ref_attn", vec!["ref_attn".into()]),
        (
            "gemma",
            [
                "geglu",
                "rmsnorm_delta",
                "residual_to_store",
                "per_layer_mix",
                "per_layer_act",
                "scale_residual",
                "softcap_logits",
                "post_norm_fused",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "flash_wide",
            vec![
                "flash_attn_wide_hd512".into(),
                "flash_attn_wide_split_hd512".into(),
            ],
        ),
        (
            "decode_wide",
            vec![
                "decode_attn_wide_hd512".into(),
                "decode_attn_wide_combine".into(),
            ],
        ),
        ("decode_mma_wide", vec!["decode_mma_hd512".into()]),
        ("quant_gemm", quant),
        (
            "draft",
            vec!["draft_concat".into(), "keep_best_centroids".into()],
        ),
        (
            "skinny_tc",
            [
                "4x1", "2x2", "1x4", "4x2", "2x4", "t2x4", "t2x2", "t1x4", "w4x4",
            ]
            .map(|t| format!("skinny_tc_{t}"))
            .into_iter()
            .chain(["t2x4", "t2x2", "2x2"].map(|t| format!("skinny_tcs_{t}")))
            .chain(["skinny_tc_join".to_string()])
            .collect(),
        ),
        (
            "skinny_wg",
            [
                "skinny_wg_x",
                "skinny_wg_xt",
                "skinny_wg_1x64",
                "skinny_wg_2x64",
                "skinny_wg_1x128",
                "skinny_wg_2x128",
                "skinny_wgs_1x64",
                "skinny_wgs_2x128",
            ]
            .map(String::from)
            .into_iter()
            .chain(["_c2", "_c4"].iter().flat_map(|c| {
                ["1x64", "2x64", "1x128", "2x128"].map(|t| format!("skinny_wg_{t}{c}"))
            }))
            .chain(
                ["_c2", "_c4"]
                    .iter()
                    .flat_map(|c| ["1x64", "2x128"].map(|t| format!("skinny_wgs_{t}{c}"))),
            )
            .collect(),
        ),
        (
            "fp8",
            vec![
                "fp8_quantize_rows".into(),
                "rmsnorm_residual_fp8".into(),
                "gated_fp8".into(),
                "fp8_apply_scales".into(),
                "skinny_fp8_8".into(),
                "skinny_fp8_16".into(),
                "skinny_fp8_32".into(),
                "skinny_fp8_64".into(),
            ],
        ),
        (
            "fp8_wide",
            vec![
                "skinny_fp8_wide_8x2".into(),
                "skinny_fp8_wide_8x1".into(),
                "skinny_fp8_wide_4x1".into(),
                "skinny_fp8_wide_8x2_u2".into(),
                "skinny_fp8_wide_8x1_u4".into(),
                "skinny_fp8_wide_4x1_u4".into(),
                "skinny_fp8_wide_4x1_u8".into(),
                "skinny_fp8_wide_2x1_u8".into(),
                "skinny_fp8_wide_4x1_u8_t32".into(),
                "skinny_fp8_wide_2x1_u8_t32".into(),
            ],
        ),
        ("fp8_wg", wg_rows("fp8_wg")),
        ("bf16_wg", wg_rows("bf16_wg")),
        (
            "chain_gemm",
            ["1x1", "1x2", "1x4", "2x4", "4x4"]
                .map(|t| format!("chain_gemm_{t}"))
                .to_vec(),
        ),
    ];
    let names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
    assert_eq!(names, expected.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    for (name, want) in expected {
        let got = source(name).unwrap().entries().unwrap();
        assert_eq!(got, want, "{name}.cu");
    }
}

/// A typed module converts only through the store_t helpers, or its f32 build would
/// compute on bf16 bits (a bf16-only kernel belongs in a `Builds::Bf16Only` module).
#[test]
fn typed_modules_name_no_bf16_helper() {
    for src in SOURCES.iter().filter(|s| s.builds == Builds::Typed) {
        for word in ["bf16_t", "bf16_to_f32", "f32_to_bf16", "bf16x2", "mma_bf16"] {
            assert!(
                !src.body.contains(word),
                "{}.cu is built for every storage type but names {word}: use store_t, \
                 from_store and to_store (common.cuh)",
                src.name
            );
        }
    }
}

#[test]
fn bf16_only_modules_are_not_built_for_other_formats() {
    let flash = source("flash_attn").unwrap();
    assert!(flash.builds_for(StoreType::Bf16) && !flash.builds_for(StoreType::F32));
    assert_eq!(flash.all_builds(), [StoreType::Bf16]);
    let rows = source("elementwise").unwrap();
    assert!(rows.builds_for(StoreType::F32));
    assert_eq!(rows.build_store(StoreType::F32), StoreType::F32);
    assert_eq!(rows.all_builds().len(), 3);
    let sample = source("sample").unwrap();
    assert_eq!(sample.build_store(StoreType::F32), StoreType::Bf16);
}
