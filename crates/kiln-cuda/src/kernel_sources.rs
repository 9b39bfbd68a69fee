//! The kernel sources compiled at start-up. Each module is the common prelude followed by one
//! `kernels/*.cu` file; sources are embedded in the binary so a release build needs no files.

/// One NVRTC compilation unit.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File stem, also the module's name in logs and cache files.
    pub name: &'static str,
    pub body: &'static str,
    /// The `extern "C"` entry points the backend loads from this module.
    pub entries: &'static [&'static str],
}

pub const PRELUDE: &str = include_str!("../kernels/common.cuh");

pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise",
        body: include_str!("../kernels/elementwise.cu"),
        entries: &[
            "embed_gather",
            "rmsnorm_residual",
            "final_norm_rows",
            "swiglu",
            "argmax_rows",
            "f32_to_bf16_copy",
            "bf16_to_f32_copy",
        ],
    },
    KernelSource {
        name: "rope_kv",
        body: include_str!("../kernels/rope_kv.cu"),
        entries: &["rope_table_build", "qkv_prepare"],
    },
    KernelSource {
        name: "skinny_gemm",
        body: include_str!("../kernels/skinny_gemm.cu"),
        entries: &[
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
        ],
    },
    KernelSource {
        name: "flash_attn",
        body: include_str!("../kernels/flash_attn.cu"),
        entries: &[
            "flash_attn_hd16",
            "flash_attn_hd32",
            "flash_attn_hd64",
            "flash_attn_hd128",
            "flash_attn_hd256",
            "flash_attn2_hd16",
            "flash_attn2_hd32",
            "flash_attn2_hd64",
            "flash_attn2_hd128",
            "flash_attn2_hd256",
        ],
    },
    KernelSource {
        name: "decode_attn",
        body: include_str!("../kernels/decode_attn.cu"),
        entries: &[
            "decode_attn_hd16",
            "decode_attn_hd32",
            "decode_attn_hd64",
            "decode_attn_hd128",
            "decode_attn_hd256",
            "decode_attn_combine",
        ],
    },
    KernelSource {
        name: "dummy_weights",
        body: include_str!("../kernels/dummy_weights.cu"),
        entries: &["dummy_fill_bf16", "fill_bf16"],
    },
    KernelSource {
        name: "sample",
        body: include_str!("../kernels/sample.cu"),
        entries: &["sample_rows"],
    },
    KernelSource {
        name: "ref_attn",
        body: include_str!("../kernels/ref_attn.cu"),
        entries: &["ref_attn"],
    },
];

impl KernelSource {
    /// The full text handed to NVRTC.
    pub fn full_text(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}.cu\"\n{}", self.name, self.body)
    }
}
