//! Which parts of a model's spec the CUDA backend has kernels for. A model that needs one it
//! lacks is refused before any GPU work, with the list (Gemma 4's per-layer inputs, shared KV,
//! GeGLU, ... run on the CPU backend until their kernels exist).

use kiln_model::{Activation, ModelSpec};

/// What the CUDA backend cannot run in `spec`, one phrase each; empty when it runs all of it.
pub fn missing_kernels(spec: &ModelSpec) -> Vec<&'static str> {
    let layers = &spec.layers;
    let any = |f: &dyn Fn(&kiln_model::LayerSpec) -> bool| layers.iter().any(f);
    let checks: [(bool, &'static str); 9] = [
        (
            spec.per_layer_input.is_some(),
            "per-layer inputs (the PLE table gather, projection and per-layer gate)",
        ),
        (spec.embed_scale.is_some(), "scaled token embeddings"),
        (spec.logit_softcap.is_some(), "final logit soft-capping"),
        (
            any(&|l| l.post_norms),
            "norms of the attention and feed-forward outputs",
        ),
        (any(&|l| l.output_scale), "layer output scales"),
        (
            any(&|l| l.attn.kv_from.is_some()),
            "layers that read another layer's KV cache",
        ),
        (any(&|l| l.attn.v_from_k), "V taken from the K projection"),
        (any(&|l| l.attn.v_norm), "RMSNorm of V"),
        (
            any(&|l| l.ffn.activation() != Activation::Silu),
            "GeGLU (gelu_pytorch_tanh) feed-forwards",
        ),
    ];
    checks
        .into_iter()
        .filter_map(|(missing, what)| missing.then_some(what))
        .collect()
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
    fn gemma4_is_refused_naming_every_missing_kernel() {
        let c = preset("gemma4-tiny").unwrap();
        let missing = missing_kernels(&c.spec());
        assert_eq!(missing.len(), 9, "{missing:?}");
        let err = refusal(&c.spec(), c.arch).unwrap();
        for needle in [
            "gemma4",
            "per-layer inputs",
            "another layer's KV",
            "GeGLU",
            "soft-capping",
            "--device cpu",
        ] {
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn the_llama_family_runs_and_each_gemma4_part_alone_is_named() {
        for name in ["tiny", "llama3-8b", "qwen3-8b", "mistral-7b"] {
            let c = preset(name).unwrap();
            assert_eq!(refusal(&c.spec(), c.arch), None, "{name}");
        }
        // One Gemma 4 trait on an otherwise plain model is enough to refuse it.
        let mut spec = preset("tiny").unwrap().spec();
        spec.logit_softcap = Some(30.0);
        assert_eq!(missing_kernels(&spec), ["final logit soft-capping"]);
        let err = refusal(&spec, Arch::Llama).unwrap();
        assert!(
            err.contains("llama model") && err.contains("soft-capping"),
            "{err}"
        );
    }
}
