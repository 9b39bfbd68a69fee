//! Canonical tensor names, their spelling in each file format, and their canonical shapes.

use crate::ModelConfig;

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
}

/// GGUF's tensor of per-frequency RoPE divisors (Llama 3.1-style scaling).
pub const GGUF_ROPE_FREQS: &str = "rope_freqs.weight";

/// Global roles with their GGUF and Hugging Face names.
const GLOBAL: [(Role, &str, &str); 3] = [
    (
        Role::TokenEmbd,
        "token_embd.weight",
        "model.embed_tokens.weight",
    ),
    (Role::OutputNorm, "output_norm.weight", "model.norm.weight"),
    (Role::Output, "output.weight", "lm_head.weight"),
];

/// Per-layer roles with the name suffixes after `blk.N.` (GGUF) and `model.layers.N.` (HF).
const PER_LAYER: [(Role, &str, &str); 14] = [
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
];

impl Role {
    /// Whether the role belongs to a layer (`blk.N.*`) rather than to the whole model.
    pub fn is_per_layer(self) -> bool {
        !matches!(self, Role::TokenEmbd | Role::OutputNorm | Role::Output)
    }

    /// RMSNorm weights (dummy sources fill them with ones).
    pub fn is_norm(self) -> bool {
        matches!(
            self,
            Role::AttnNorm | Role::FfnNorm | Role::OutputNorm | Role::QNorm | Role::KNorm
        )
    }

    /// A small stable number per role, used in dummy seeds.
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
        self.spell(|(_, g, _)| g, "blk.")
    }

    /// The name transformers gives this tensor in safetensors (`model.layers.3.self_attn.q_proj.weight`).
    pub fn hf_name(&self) -> String {
        self.spell(|(_, _, h)| h, "model.layers.")
    }

    fn spell(
        &self,
        pick: impl Fn(&(Role, &'static str, &'static str)) -> &'static str,
        prefix: &str,
    ) -> String {
        let table: &[(Role, &str, &str)] = if self.layer.is_some() {
            &PER_LAYER
        } else {
            &GLOBAL
        };
        let entry = table.iter().find(|e| e.0 == self.role);
        match (self.layer, entry) {
            (Some(l), Some(e)) => format!("{prefix}{l}.{}", pick(e)),
            (None, Some(e)) => pick(e).to_string(),
            // A per-layer role without a layer (or the reverse) has no file name.
            _ => format!("<{:?} at layer {:?}>", self.role, self.layer),
        }
    }

    /// Parses a GGUF tensor name; None for names outside the table (e.g. `rope_freqs.weight`).
    pub fn from_gguf_name(name: &str) -> Option<TensorId> {
        Self::parse(name, "blk.", |e| e.1)
    }

    /// Parses a Hugging Face tensor name; None for names outside the table.
    pub fn from_hf_name(name: &str) -> Option<TensorId> {
        Self::parse(name, "model.layers.", |e| e.2)
    }

    fn parse(
        name: &str,
        prefix: &str,
        pick: impl Fn(&(Role, &'static str, &'static str)) -> &'static str,
    ) -> Option<TensorId> {
        if let Some(e) = GLOBAL.iter().find(|e| pick(e) == name) {
            return Some(TensorId::global(e.0));
        }
        let rest = name.strip_prefix(prefix)?;
        let (layer, suffix) = rest.split_once('.')?;
        if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let layer = layer.parse().ok()?;
        PER_LAYER
            .iter()
            .find(|e| pick(e) == suffix)
            .map(|e| TensorId::layer(layer, e.0))
    }

    /// The canonical shape (Hugging Face orientation, `[out_features, in_features]`).
    pub fn shape(&self, c: &ModelConfig) -> Vec<usize> {
        let (h, q, kv, f) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size);
        match self.role {
            Role::TokenEmbd | Role::Output => vec![c.vocab_size, h],
            Role::OutputNorm | Role::AttnNorm | Role::FfnNorm => vec![h],
            Role::Q => vec![q, h],
            Role::K | Role::V => vec![kv, h],
            Role::QBias => vec![q],
            Role::KBias | Role::VBias => vec![kv],
            Role::QNorm | Role::KNorm => vec![c.head_dim],
            Role::O => vec![h, q],
            Role::Gate | Role::Up => vec![f, h],
            Role::Down => vec![h, f],
        }
    }

    /// Whether a model of this configuration has this tensor (the schema names it).
    pub fn exists_in(&self, c: &ModelConfig) -> bool {
        let spec = c.spec();
        match self.layer {
            Some(l) if l < spec.layers.len() && self.role.is_per_layer() => {
                crate::schema::layer_weights(l, &spec.layers[l], spec.hidden_size)
                    .iter()
                    .any(|f| f.parts.iter().any(|p| p.id == *self))
            }
            Some(_) => false,
            None => crate::schema::global_weights(&spec)
                .iter()
                .any(|f| f.parts.iter().any(|p| p.id == *self)),
        }
    }

    /// Every tensor a model of this configuration has, globals first, then layer by layer
    /// (the parts of [`crate::schema`]'s weights, in load order).
    pub fn all(c: &ModelConfig) -> Vec<TensorId> {
        crate::schema::all_tensors(&c.spec())
    }
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
            assert_eq!(TensorId::from_hf_name(&id.hf_name()), Some(id));
        }
    }

    #[test]
    fn known_spellings() {
        let q = TensorId::layer(7, Role::Q);
        assert_eq!(q.gguf_name(), "blk.7.attn_q.weight");
        assert_eq!(q.hf_name(), "model.layers.7.self_attn.q_proj.weight");
        assert_eq!(
            TensorId::layer(0, Role::KNorm).gguf_name(),
            "blk.0.attn_k_norm.weight"
        );
        assert_eq!(
            TensorId::layer(2, Role::VBias).hf_name(),
            "model.layers.2.self_attn.v_proj.bias"
        );
        assert_eq!(
            TensorId::layer(1, Role::FfnNorm).hf_name(),
            "model.layers.1.post_attention_layernorm.weight"
        );
        assert_eq!(TensorId::global(Role::Output).gguf_name(), "output.weight");
        assert_eq!(TensorId::global(Role::Output).hf_name(), "lm_head.weight");
        assert_eq!(
            TensorId::global(Role::TokenEmbd).hf_name(),
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
            "",
        ] {
            assert_eq!(TensorId::from_gguf_name(name), None, "{name}");
            assert_eq!(TensorId::from_hf_name(name), None, "{name}");
        }
    }

    #[test]
    fn tied_models_have_no_output_and_shapes_follow_config() {
        let c = preset("llama3-1b").unwrap();
        let ids = TensorId::all(&c);
        assert!(!ids.contains(&TensorId::global(Role::Output)));
        assert_eq!(TensorId::layer(0, Role::K).shape(&c), vec![512, 2048]);
        assert_eq!(TensorId::layer(0, Role::Down).shape(&c), vec![2048, 8192]);
        let total: usize = ids
            .iter()
            .map(|id| id.shape(&c).iter().product::<usize>())
            .sum();
        assert_eq!(total as u64, c.param_count());
    }
}
