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
        // The split rule and the merge shared with the wide module (decode_simt.cuh starts
        // with its own #line).
        body: concat!(
            include_str!("../kernels/decode_simt.cuh"),
            include_str!("../kernels/decode_attn.cu")
        ),
        builds: Builds::Typed,
    },
    KernelSource {
        name: "flash_sm90",
        body: concat!(
            include_str!("../kernels/wgmma.cuh"),
            include_str!("../kernels/flash_sm90.cu"),
            include_str!("../kernels/flash_sm90_wide.cu")
        ),
        builds: Builds::Bf16Only,
    },
    KernelSource {
        name: "decode_mma",
        // The split rule shared with the other tensor-core decode module (decode_split.cuh
        // starts with its own #line).
        body: concat!(
            include_str!("../kernels/decode_split.cuh"),
            include_str!("../kernels/decode_mmat.cuh"),
            include_str!("../kernels/decode_mma.cu"),
            include_str!("../kernels/decode_combine.cu")
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
        body: concat!(
            include_str!("../kernels/decode_simt.cuh"),
            include_str!("../kernels/decode_wide.cu")
        ),
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
#[path = "kernel_sources_tests.rs"]
mod tests;
