//! Which parts of a model's spec the CUDA backend has kernels for. A model that needs one it
//! lacks is refused before any GPU work, with the list, and `--device auto` runs it on the CPU.
//! What no backend runs (Gemma 4's mixture of experts, bidirectional attention, ...) never gets
//! this far: kiln-model refuses it by name when it reads the config.

use kiln_model::ModelSpec;

use crate::kernels::ATTN_HEAD_DIMS;

/// What the CUDA backend cannot run in `spec`, one phrase each; empty when it runs all of it.
pub fn missing_kernels(spec: &ModelSpec) -> Vec<String> {
    let mut missing = Vec::new();
    let mut dims: Vec<usize> = spec.layers.iter().map(|l| l.attn.head_dim).collect();
    dims.sort_unstable();
    dims.dedup();
    for hd in dims.into_iter().filter(|d| !ATTN_HEAD_DIMS.contains(d)) {
        let layers: Vec<String> = (0..spec.layers.len())
            .filter(|&l| spec.layers[l].attn.head_dim == hd)
            .map(|l| l.to_string())
            .collect();
        missing.push(format!(
            "attention with head dim {hd} (layers {}; it has head dims {ATTN_HEAD_DIMS:?})",
            layers.join(", ")
        ));
    }
    missing
}

/// The error for a model the CUDA backend cannot run, or None.
pub fn refusal(spec: &ModelSpec, arch: kiln_model::Arch) -> Option<String> {
    let missing = missing_kernels(spec);
    (!missing.is_empty()).then(|| {
        format!(
            "the CUDA backend cannot run this {arch} model yet: it has no kernels for {}; run it on the CPU (--device cpu)",
            missing.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_model::presets::preset;
    use kiln_model::Arch;

    #[test]
    fn gemma4_and_the_llama_family_run() {
        for name in kiln_model::presets::PRESETS {
            let c = preset(name).unwrap();
            assert_eq!(refusal(&c.spec(), c.arch), None, "{name}");
        }
    }

    #[test]
    fn a_head_dim_without_kernels_is_refused_by_name() {
        let mut spec = preset("gemma4-tiny").unwrap().spec();
        spec.layers[2].attn.head_dim = 80;
        spec.layers[5].attn.head_dim = 80;
        assert_eq!(
            missing_kernels(&spec),
            ["attention with head dim 80 (layers 2, 5; it has head dims [16, 32, 64, 128, 256, 512])"]
        );
        let err = refusal(&spec, Arch::Gemma4).unwrap();
        assert!(
            err.contains("gemma4 model")
                && err.contains("head dim 80")
                && err.contains("--device cpu"),
            "{err}"
        );
    }
}
