//! The kernel sources compiled at start-up. Each module is the common prelude followed by one
//! `kernels/*.cu` file; sources are embedded in the binary so a release build needs no files.
//! A module's entry points are read from its text (kernel_entries.rs), never listed again.

use crate::kernel_entries::{entry_points, EntryPoint};

/// One NVRTC compilation unit.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File stem, also the module's name in logs and cache files.
    pub name: &'static str,
    pub body: &'static str,
}

pub const PRELUDE: &str = include_str!("../kernels/common.cuh");

pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise",
        body: include_str!("../kernels/elementwise.cu"),
    },
    KernelSource {
        name: "rope_kv",
        body: include_str!("../kernels/rope_kv.cu"),
    },
    KernelSource {
        name: "skinny_gemm",
        body: include_str!("../kernels/skinny_gemm.cu"),
    },
    KernelSource {
        name: "flash_attn",
        body: include_str!("../kernels/flash_attn.cu"),
    },
    KernelSource {
        name: "decode_attn",
        body: include_str!("../kernels/decode_attn.cu"),
    },
    KernelSource {
        name: "dummy_weights",
        body: include_str!("../kernels/dummy_weights.cu"),
    },
    KernelSource {
        name: "sample",
        body: include_str!("../kernels/sample.cu"),
    },
    KernelSource {
        name: "ref_attn",
        body: include_str!("../kernels/ref_attn.cu"),
    },
];

impl KernelSource {
    /// The full text handed to NVRTC.
    pub fn full_text(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}.cu\"\n{}", self.name, self.body)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What each module exported when its entries were still listed by hand.
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
        ];
        let flash = [hd("flash_attn_hd"), hd("flash_attn2_hd")].concat();
        let decode = [&hd("decode_attn_hd")[..], &["decode_attn_combine".into()]].concat();
        let expected: Vec<(&str, Vec<String>)> = vec![
            (
                "elementwise",
                [
                    "embed_gather",
                    "rmsnorm_residual",
                    "final_norm_rows",
                    "swiglu",
                    "argmax_rows",
                    "f32_to_bf16_copy",
                    "bf16_to_f32_copy",
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
            (
                "dummy_weights",
                vec!["dummy_fill_bf16".into(), "fill_bf16".into()],
            ),
            ("sample", vec!["adjust_rows".into(), "sample_rows".into()]),
            ("ref_attn", vec!["ref_attn".into()]),
        ];
        let names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
        assert_eq!(names, expected.iter().map(|(n, _)| *n).collect::<Vec<_>>());
        for (name, want) in expected {
            let got = source(name).unwrap().entries().unwrap();
            assert_eq!(got, want, "{name}.cu");
        }
    }
}
