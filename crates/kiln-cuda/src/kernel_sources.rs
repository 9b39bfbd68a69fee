//! The kernel sources compiled at start-up. Each module is the common prelude followed by one
//! `kernels/*.cu` file; sources are embedded in the binary so a release build needs no files.
//! A module's entry points are read from its text (kernel_entries.rs), never listed again.
//! Each module says which storage types it is built for (`Builds`): a typed module is written
//! once against `store_t` and built for the backend's format, with the same entry names in
//! every build.

use crate::kernel_entries::{entry_points, EntryPoint};
use crate::store::StoreType;

/// Which storage types a module is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builds {
    /// Written against `store_t` (common.cuh): built for whichever format the backend stores.
    Typed,
    /// bf16 by nature (tensor-core MMA on bf16 fragments): built for bf16 backends only; the
    /// others route its work through typed kernels or cuBLASLt.
    Bf16Only,
    /// Touches no stored tensor (f32 logits, token ids): one build serves every backend.
    Untyped,
}

/// One NVRTC compilation unit.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File stem, also the module's name in logs and cache files.
    pub name: &'static str,
    pub body: &'static str,
    pub builds: Builds,
}

pub const PRELUDE: &str = include_str!("../kernels/common.cuh");

pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise",
        // RMSNorm's row pieces first (norm_rows.cuh, shared with fp8.cu's fused norm).
        body: concat!(
            include_str!("../kernels/norm_rows.cuh"),
            include_str!("../kernels/elementwise.cu")
        ),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "rope_kv",
        body: include_str!("../kernels/rope_kv.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "skinny_gemm",
        // The epilogues of the fused entries first (skinny_epilogue.cu, shared with skinny_tc).
        body: concat!(
            include_str!("../kernels/skinny_epilogue.cu"),
            include_str!("../kernels/skinny_gemm.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "flash_attn",
        // The tile and a warp's softmax, P V and store, shared with the other mma.sync prefill
        // module (flash_tile.cuh starts with its own #line).
        body: concat!(
            include_str!("../kernels/flash_tile.cuh"),
            include_str!("../kernels/flash_attn.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "decode_attn",
        body: include_str!("../kernels/decode_attn.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "flash_sm90",
        body: concat!(
            include_str!("../kernels/wgmma.cuh"),
            include_str!("../kernels/flash_sm90.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "decode_mma",
        // The split rule shared with the other tensor-core decode module (decode_split.cuh
        // starts with its own #line).
        body: concat!(
            include_str!("../kernels/decode_split.cuh"),
            include_str!("../kernels/decode_mma.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "dummy_weights",
        body: include_str!("../kernels/dummy_weights.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "sample",
        body: include_str!("../kernels/sample.cu"),
        builds: Builds::Untyped,
    },
    KernelSource {
        name: "ref_attn",
        body: include_str!("../kernels/ref_attn.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "gemma",
        body: include_str!("../kernels/gemma.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "flash_wide",
        // The tile and a warp's softmax, P V and store, shared with the other mma.sync prefill
        // module (flash_tile.cuh starts with its own #line).
        body: concat!(
            include_str!("../kernels/flash_tile.cuh"),
            include_str!("../kernels/flash_wide.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "decode_wide",
        body: include_str!("../kernels/decode_wide.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "decode_mma_wide",
        // The split rule shared with the other tensor-core decode module (decode_split.cuh
        // starts with its own #line).
        body: concat!(
            include_str!("../kernels/decode_split.cuh"),
            include_str!("../kernels/decode_mma_wide.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "quant_gemm",
        // One module in two files after the decode epilogues (skinny_epilogue.cu): the blocks,
        // the first decode family and the expansions; the second decode family (quant_decode.cu
        // starts with its own #line).
        body: concat!(
            include_str!("../kernels/skinny_epilogue.cu"),
            include_str!("../kernels/quant_gemm.cu"),
            include_str!("../kernels/quant_decode.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "draft",
        body: include_str!("../kernels/draft.cu"),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "skinny_tc",
        body: concat!(
            include_str!("../kernels/skinny_epilogue.cu"),
            include_str!("../kernels/skinny_tc.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "skinny_wg",
        body: concat!(
            include_str!("../kernels/skinny_epilogue.cu"),
            include_str!("../kernels/wgmma.cuh"),
            include_str!("../kernels/skinny_wg.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "fp8",
        // RMSNorm's row pieces first (norm_rows.cuh): rmsnorm_residual_fp8 norms as elementwise.cu.
        body: concat!(
            include_str!("../kernels/norm_rows.cuh"),
            include_str!("../kernels/fp8.cu")
        ),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "fp8_wide",
        body: include_str!("../kernels/fp8_wide.cu"),
        builds: Builds::Untyped,
    },
    KernelSource {
        name: "fp8_wg",
        body: concat!(
            include_str!("../kernels/wgmma.cuh"),
            include_str!("../kernels/wg_rows.cuh"),
            include_str!("../kernels/fp8_wg.cu")
        ),
        builds: Builds::Untyped,
    },
    KernelSource {
        name: "bf16_wg",
        body: concat!(
            include_str!("../kernels/skinny_epilogue.cu"),
            include_str!("../kernels/wgmma.cuh"),
            include_str!("../kernels/wg_rows.cuh"),
            include_str!("../kernels/bf16_wg.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "chain_gemm",
        body: concat!(
            include_str!("../kernels/chain_copy.cuh"),
            include_str!("../kernels/chain_gemm.cu")
        ),
        builds: Builds::Bf16Only,
    },
];

/// Modules written for one architecture only (wgmma, setmaxnreg; fp8_wide, whose bits are the
/// fp8 skinny kernels' only there: fp8_skinny.rs's wide_matches_skinny): NVRTC builds them for
/// the architecture-specific target `sm_90a`, and only for compute capability 9.0 devices.
const SM90A_ONLY: &[&str] = &["flash_sm90", "skinny_wg", "fp8_wide", "fp8_wg", "bf16_wg"];

/// Modules that convert to fp8 (E4M3), which compute capability 8.9 brought: not built before.
const SM89_UP: &[&str] = &["fp8"];

impl KernelSource {
    /// The NVRTC target for a device of compute capability `arch` (e.g. 90), or None when this
    /// module is not built for it.
    pub fn target(&self, arch: u32) -> Option<String> {
        if SM90A_ONLY.contains(&self.name) {
            (arch == 90).then(|| "sm_90a".to_string())
        } else if SM89_UP.contains(&self.name) {
            (arch >= 89).then(|| format!("sm_{arch}"))
        } else {
            Some(format!("sm_{arch}"))
        }
    }

    /// The full text handed to NVRTC.
    pub fn full_text(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}.cu\"\n{}", self.name, self.body)
    }

    /// Whether a backend storing `store` loads this module.
    pub fn builds_for(&self, store: StoreType) -> bool {
        match self.builds {
            Builds::Typed | Builds::Untyped => true,
            Builds::Bf16Only => store == StoreType::Bf16,
        }
    }

    /// The storage type this module is compiled with for a backend storing `store`: its own
    /// for a typed module, bf16 (no define) for the others, so every backend shares one build.
    pub fn build_store(&self, store: StoreType) -> StoreType {
        match self.builds {
            Builds::Typed => store,
            Builds::Bf16Only | Builds::Untyped => StoreType::Bf16,
        }
    }

    /// Every distinct build of this module: one per storage type for a typed module.
    pub fn all_builds(&self) -> Vec<StoreType> {
        match self.builds {
            Builds::Typed => StoreType::ALL.to_vec(),
            Builds::Bf16Only | Builds::Untyped => vec![StoreType::Bf16],
        }
    }

    /// The `extern "C"` kernels this module defines, in source order.
    pub fn entry_points(&self) -> anyhow::Result<Vec<EntryPoint>> {
        entry_points(self.body)
            .map_err(|e| anyhow::anyhow!("reading the entry points of {}.cu: {e}", self.name))
    }

    /// The names of [`KernelSource::entry_points`], which the backend loads.
    pub fn entries(&self) -> anyhow::Result<Vec<String>> {
        Ok(self.entry_points()?.into_iter().map(|e| e.name).collect())
    }
}

/// The module built from `kernels/{name}.cu`.
pub fn source(name: &str) -> Option<&'static KernelSource> {
    SOURCES.iter().find(|s| s.name == name)
}

/// The entry of `entries` named `prefix` and then the value of environment variable `var` (a
/// launcher's `KILN_*_TILE` switch, which forces one entry for A/B runs); None when it is unset
/// or names none.
pub fn entry_from_env<T>(
    entries: &'static [T],
    var: &str,
    prefix: &str,
    name: impl Fn(&T) -> &str,
) -> Option<&'static T> {
    let want = format!("{prefix}{}", std::env::var(var).ok()?);
    entries.iter().find(|e| name(e) == want)
}

/// The entries an entry macro makes in module `module`, each read by `parse` (the tables of
/// decode GEMM shapes the launchers choose from); panics on a module that does not read (each
/// table is unit-tested).
pub fn macro_entries<T>(module: &str, parse: fn(&EntryPoint) -> anyhow::Result<T>) -> Vec<T> {
    let src = source(module).unwrap_or_else(|| panic!("the {module} module"));
    src.entry_points()
        .and_then(|v| {
            v.iter()
                .filter(|p| !p.macro_args.is_empty())
                .map(parse)
                .collect()
        })
        .unwrap_or_else(|e| panic!("{module}.cu's entries: {e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each module exported when its entries were still listed by hand (the storage
    /// copies and fills renamed since they became typed).
    #[test]
    fn every_module_has_the_entries_it_always_had() {
        let hd = |p: &str| [16, 32, 64, 128, 256].map(|d| format!("{p}{d}"));
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
            .collect();
        let decode_mma = [16, 32, 64, 128, 256]
            .into_iter()
            .map(|d| format!("decode_mma_hd{d}"))
            .chain([16, 32, 64, 128].map(|d| format!("decode_mma_la_hd{d}")))
            .chain(["decode_mma_combine".to_string()])
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
            (
                "fp8_wg",
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
                .map(|t| format!("fp8_wg_{t}"))
                .to_vec(),
            ),
            (
                "bf16_wg",
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
                .map(|t| format!("bf16_wg_{t}"))
                .to_vec(),
            ),
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
}
