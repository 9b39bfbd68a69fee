//! Canonical tensor names, their spelling in each file format, and their canonical shapes.

use crate::{Arch, ModelConfig, ModelSpec};

/// What a tensor does. Per-layer roles carry their layer in [`TensorId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    TokenEmbd,
    OutputNorm,
    /// The LM head; absent when embeddings are tied.
    Output,
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    /// Per-head RMSNorm weights of Q and K (Qwen3).
    QNorm,
    KNorm,
    O,
    FfnNorm,
    Gate,
    Up,
    Down,
    /// Gemma's norms of the attention and feed-forward outputs.
    PostAttnNorm,
    PostFfnNorm,
    /// Gemma 4's per-layer input gate `[width, hidden]`, projection `[hidden, width]` and the
    /// norm of its output.
    PerLayerGate,
    PerLayerProj,
    PerLayerPostNorm,
    /// Gemma 4's `layer_scalar`: one value the layer's output is multiplied by.
    LayerOutputScale,
    /// Gemma 4's per-layer inputs: the token table `[vocab, layers * width]`, the projection
    /// of the embedding `[layers * width, hidden]` and its norm `[width]`.
    PerLayerTokenEmbd,
    PerLayerModelProj,
    PerLayerProjNorm,
    /// Gemma 4's assistant: the projection of the target's embedding and hidden state into the
    /// assistant `[hidden, 2 backbone]`, of its output back to the target's width
    /// `[backbone, hidden]`, the centroids of its ordered LM head `[centroids, hidden]` and the
    /// token ids each centroid owns, in order `[vocab]` (integers in the files).
    DraftPreProjection,
    DraftPostProjection,
    Centroids,
    TokenOrdering,
}

/// GGUF's tensor of per-frequency RoPE divisors (Llama 3.1-style scaling).
pub const GGUF_ROPE_FREQS: &str = "rope_freqs.weight";

/// Global roles with their GGUF and Hugging Face names.
const GLOBAL: [(Role, &str, &str); 10] = [
    (
        Role::TokenEmbd,
        "token_embd.weight",
        "model.embed_tokens.weight",
    ),
    (Role::OutputNorm, "output_norm.weight", "model.norm.weight"),
    (Role::Output, "output.weight", "lm_head.weight"),
    (
        Role::PerLayerTokenEmbd,
        "per_layer_token_embd.weight",
        "model.embed_tokens_per_layer.weight",
    ),
    (
        Role::PerLayerModelProj,
        "per_layer_model_proj.weight",
        "model.per_layer_model_projection.weight",
    ),
    (
        Role::PerLayerProjNorm,
        "per_layer_proj_norm.weight",
        "model.per_layer_projection_norm.weight",
    ),
    (
        Role::DraftPreProjection,
        "nextn.pre_projection.weight",
        "pre_projection.weight",
    ),
    (
        Role::DraftPostProjection,
        "nextn.post_projection.weight",
        "post_projection.weight",
    ),
    (
        Role::Centroids,
        "masked_embd_centroids.weight",
        "masked_embedding.centroids.weight",
    ),
    (
        Role::TokenOrdering,
        "masked_embd_ordering",
        "masked_embedding.token_ordering",
    ),
];

/// Per-layer roles with the name suffixes after `blk.N.` (GGUF) and `model.layers.N.` (HF,
/// as Llama spells them; an architecture's `hf_names` override some, and an empty one exists
/// only there).
const PER_LAYER: [(Role, &str, &str); 20] = [
    (Role::AttnNorm, "attn_norm.weight", "input_layernorm.weight"),
    (Role::Q, "attn_q.weight", "self_attn.q_proj.weight"),
    (Role::K, "attn_k.weight", "self_attn.k_proj.weight"),
    (Role::V, "attn_v.weight", "self_attn.v_proj.weight"),
    (Role::QBias, "attn_q.bias", "self_attn.q_proj.bias"),
    (Role::KBias, "attn_k.bias", "self_attn.k_proj.bias"),
    (Role::VBias, "attn_v.bias", "self_attn.v_proj.bias"),
    (Role::QNorm, "attn_q_norm.weight", "self_attn.q_norm.weight"),
    (Role::KNorm, "attn_k_norm.weight", "self_attn.k_norm.weight"),
    (Role::O, "attn_output.weight", "self_attn.o_proj.weight"),
    (
        Role::FfnNorm,
        "ffn_norm.weight",
        "post_attention_layernorm.weight",
    ),
    (Role::Gate, "ffn_gate.weight", "mlp.gate_proj.weight"),
    (Role::Up, "ffn_up.weight", "mlp.up_proj.weight"),
    (Role::Down, "ffn_down.weight", "mlp.down_proj.weight"),
    (Role::PostAttnNorm, "post_attention_norm.weight", ""),
    (
        Role::PostFfnNorm,
        "post_ffw_norm.weight",
        "post_feedforward_layernorm.weight",
    ),
    (
        Role::PerLayerGate,
        "inp_gate.weight",
        "per_layer_input_gate.weight",
    ),
    (
        Role::PerLayerProj,
        "proj.weight",
        "per_layer_projection.weight",
    ),
    (
        Role::PerLayerPostNorm,
        "post_norm.weight",
        "post_per_layer_input_norm.weight",
    ),
    (
        Role::LayerOutputScale,
        "layer_output_scale.weight",
        "layer_scalar",
    ),
];

impl Role {
    /// Whether the role belongs to a layer (`blk.N.*`) rather than to the whole model.
    pub fn is_per_layer(self) -> bool {
        !GLOBAL.iter().any(|g| g.0 == self)
    }

    /// RMSNorm weights and scales (dummy sources fill them with ones).
    pub fn is_norm(self) -> bool {
        matches!(
            self,
            Role::AttnNorm
                | Role::FfnNorm
                | Role::OutputNorm
                | Role::QNorm
                | Role::KNorm
                | Role::PostAttnNorm
                | Role::PostFfnNorm
                | Role::PerLayerPostNorm
                | Role::PerLayerProjNorm
                | Role::LayerOutputScale
        )
    }

    /// A small stable number per role, used in dummy seeds (new roles go last, so that the
    /// others keep their numbers and their dummy weights).
    pub fn index(self) -> u64 {
        self as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorId {
    pub layer: Option<usize>,
    pub role: Role,
}

impl std::fmt::Display for TensorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.gguf_name())
    }
}

impl TensorId {
    pub fn global(role: Role) -> TensorId {
        TensorId { layer: None, role }
    }

    pub fn layer(layer: usize, role: Role) -> TensorId {
        TensorId {
            layer: Some(layer),
            role,
        }
    }

    /// The name llama.cpp gives this tensor in a GGUF file (`blk.3.attn_q.weight`).
    pub fn gguf_name(&self) -> String {
        self.spell()
    }

    /// The name transformers gives this tensor in a checkpoint of `arch`
    /// (`model.layers.3.self_attn.q_proj.weight`); None for a role the architecture does
    /// not spell.
    pub fn hf_name(&self, arch: Arch) -> Option<String> {
        match self.layer {
            Some(l) => {
                let suffix = hf_suffix(self.role, arch).filter(|s| !s.is_empty())?;
                Some(format!("model.layers.{l}.{suffix}"))
            }
            None => GLOBAL
                .iter()
                .find(|e| e.0 == self.role)
                .map(|e| e.2.to_string()),
        }
    }

    fn spell(&self) -> String {
        let table: &[(Role, &str, &str)] = if self.layer.is_some() {
            &PER_LAYER
        } else {
            &GLOBAL
        };
        let entry = table.iter().find(|e| e.0 == self.role);
        match (self.layer, entry) {
            (Some(l), Some(e)) => format!("blk.{l}.{}", e.1),
            (None, Some(e)) => e.1.to_string(),
            // A per-layer role without a layer (or the reverse) has no file name.
            _ => format!("<{:?} at layer {:?}>", self.role, self.layer),
        }
    }

    /// Parses a GGUF tensor name; None for names outside the table (e.g. `rope_freqs.weight`).
    pub fn from_gguf_name(name: &str) -> Option<TensorId> {
        if let Some(e) = GLOBAL.iter().find(|e| e.1 == name) {
            return Some(TensorId::global(e.0));
        }
        let (layer, suffix) = split_layer(name, "blk.")?;
        PER_LAYER
            .iter()
            .find(|e| e.1 == suffix)
            .map(|e| TensorId::layer(layer, e.0))
    }

    /// Parses a Hugging Face tensor name of a checkpoint of `arch`; None for names outside
    /// the table.
    pub fn from_hf_name(name: &str, arch: Arch) -> Option<TensorId> {
        if let Some(e) = GLOBAL.iter().find(|e| e.2 == name) {
            return Some(TensorId::global(e.0));
        }
        let (layer, suffix) = split_layer(name, "model.layers.")?;
        PER_LAYER
            .iter()
            .find(|e| hf_suffix(e.0, arch) == Some(suffix) && !suffix.is_empty())
            .map(|e| TensorId::layer(layer, e.0))
    }

    /// The canonical shape (Hugging Face orientation, `[out_features, in_features]`), as
    /// the schema of this configuration has it; empty for a tensor the model does not have.
    pub fn shape(&self, c: &ModelConfig) -> Vec<usize> {
        self.shape_in(&c.spec())
    }

    /// [`TensorId::shape`] from a spec already derived.
    pub fn shape_in(&self, spec: &ModelSpec) -> Vec<usize> {
        let found = |parts: &[crate::schema::Part], cols: Option<usize>| {
            let p = parts.iter().find(|p| p.id == *self)?;
            Some(match cols {
                Some(c) => vec![p.rows, c],
                None => vec![p.rows],
            })
        };
        match self.layer {
            Some(l) if l < spec.layers.len() => {
                crate::schema::layer_weights(l, &spec.layers[l], spec.hidden_size)
                    .iter()
                    .find_map(|f| found(&f.parts, f.cols))
            }
            Some(_) => None,
            None => crate::schema::global_weights(spec)
                .iter()
                .find_map(|f| found(&f.parts, f.cols)),
        }
        .unwrap_or_default()
    }

    /// Whether a model of this configuration has this tensor (the schema names it).
    pub fn exists_in(&self, c: &ModelConfig) -> bool {
        !self.shape(c).is_empty()
    }

    /// Every tensor a model of this configuration has, globals first, then layer by layer
    /// (the parts of [`crate::schema`]'s weights, in load order).
    pub fn all(c: &ModelConfig) -> Vec<TensorId> {
        crate::schema::all_tensors(&c.spec())
    }
}

/// The HF suffix of a per-layer role in `arch`'s checkpoints: its override, else Llama's.
fn hf_suffix(role: Role, arch: Arch) -> Option<&'static str> {
    let overridden = arch.info().hf_names.iter().find(|(r, _)| *r == role);
    match overridden {
        Some((_, name)) => Some(name),
        None => PER_LAYER.iter().find(|e| e.0 == role).map(|e| e.2),
    }
}

/// `prefix` N `.` rest -> (N, rest).
fn split_layer<'a>(name: &'a str, prefix: &str) -> Option<(usize, &'a str)> {
    let rest = name.strip_prefix(prefix)?;
    let (layer, suffix) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((layer.parse().ok()?, suffix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    #[test]
    fn names_round_trip_in_both_schemes() {
        let mut c = preset("tiny").unwrap();
        c.qkv_bias = true;
        c.qk_norm = true;
        let ids = TensorId::all(&c);
        assert_eq!(ids.len(), 3 + 4 * 14);
        for id in ids {
            assert_eq!(TensorId::from_gguf_name(&id.gguf_name()), Some(id));
            let hf = id.hf_name(c.arch).unwrap();
            assert_eq!(TensorId::from_hf_name(&hf, c.arch), Some(id));
        }
    }

    #[test]
    fn gemma4_names_round_trip_and_differ_from_llama_where_transformers_differs() {
        let c = crate::presets::preset("gemma4-tiny").unwrap();
        for id in TensorId::all(&c) {
            assert_eq!(TensorId::from_gguf_name(&id.gguf_name()), Some(id));
            let hf = id.hf_name(Arch::Gemma4).unwrap();
            assert_eq!(TensorId::from_hf_name(&hf, Arch::Gemma4), Some(id), "{hf}");
        }
        // Llama's FFN norm is Gemma's post-attention norm.
        let llama_ffn_norm = "model.layers.1.post_attention_layernorm.weight";
        assert_eq!(
            TensorId::from_hf_name(llama_ffn_norm, Arch::Llama),
            Some(TensorId::layer(1, Role::FfnNorm))
        );
        assert_eq!(
            TensorId::from_hf_name(llama_ffn_norm, Arch::Gemma4),
            Some(TensorId::layer(1, Role::PostAttnNorm))
        );
        assert_eq!(
            TensorId::layer(0, Role::PostAttnNorm).hf_name(Arch::Llama),
            None
        );
        assert_eq!(
            TensorId::layer(2, Role::LayerOutputScale).hf_name(Arch::Gemma4),
            Some("model.layers.2.layer_scalar".to_string())
        );
        assert_eq!(
            TensorId::global(Role::PerLayerTokenEmbd).gguf_name(),
            "per_layer_token_embd.weight"
        );
    }

    #[test]
    fn role_numbers_are_stable() {
        // Dummy weights are seeded by these numbers: the Llama family's must not move.
        assert_eq!((Role::TokenEmbd.index(), Role::Output.index()), (0, 2));
        assert_eq!((Role::AttnNorm.index(), Role::Down.index()), (3, 16));
        assert!(Role::PerLayerProjNorm.index() > Role::LayerOutputScale.index());
    }

    #[test]
    fn known_spellings() {
        let hf = |id: TensorId| id.hf_name(Arch::Llama).unwrap();
        let q = TensorId::layer(7, Role::Q);
        assert_eq!(q.gguf_name(), "blk.7.attn_q.weight");
        assert_eq!(hf(q), "model.layers.7.self_attn.q_proj.weight");
        assert_eq!(
            TensorId::layer(0, Role::KNorm).gguf_name(),
            "blk.0.attn_k_norm.weight"
        );
        assert_eq!(
            hf(TensorId::layer(2, Role::VBias)),
            "model.layers.2.self_attn.v_proj.bias"
        );
        assert_eq!(
            hf(TensorId::layer(1, Role::FfnNorm)),
            "model.layers.1.post_attention_layernorm.weight"
        );
        assert_eq!(TensorId::global(Role::Output).gguf_name(), "output.weight");
        assert_eq!(hf(TensorId::global(Role::Output)), "lm_head.weight");
        assert_eq!(
            hf(TensorId::global(Role::TokenEmbd)),
            "model.embed_tokens.weight"
        );
    }

    #[test]
    fn foreign_names_are_not_parsed() {
        for name in [
            GGUF_ROPE_FREQS,
            "blk.x.attn_q.weight",
            "blk..attn_q.weight",
            "blk.+1.attn_q.weight",
            "blk.1.attn_qq.weight",
            "model.layers.1.self_attn.rotary_emb.inv_freq",
            "model.layers.1.",
            "",
        ] {
            assert_eq!(TensorId::from_gguf_name(name), None, "{name}");
            for arch in [Arch::Llama, Arch::Gemma4] {
                assert_eq!(TensorId::from_hf_name(name, arch), None, "{name}");
            }
        }
    }

    #[test]
    fn tied_models_have_no_output_and_shapes_follow_config() {
        let c = preset("llama3-1b").unwrap();
        let ids = TensorId::all(&c);
        assert!(!ids.contains(&TensorId::global(Role::Output)));
        assert_eq!(TensorId::layer(0, Role::K).shape(&c), vec![512, 2048]);
        assert_eq!(TensorId::layer(0, Role::Down).shape(&c), vec![2048, 8192]);
        assert!(TensorId::layer(16, Role::K).shape(&c).is_empty());
        // Llama 3.2 1B's published parameter count, summed from the shapes.
        let total: usize = ids
            .iter()
            .map(|id| id.shape(&c).iter().product::<usize>())
            .sum();
        assert_eq!(total, 1_235_814_400);
        assert_eq!(total as u64, c.param_count());
    }
}
