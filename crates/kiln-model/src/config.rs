//! Hyper-parameters of a decoder-only transformer, as every backend needs them.

/// The architectures kiln runs. Each row of the table differs in a few switches only
/// (see [`ModelConfig`]); there is one forward pass per backend, not one per model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama 2 / 3.x (and models shaped like them).
    Llama,
    /// Mistral: llama with a sliding attention window.
    Mistral,
    /// Qwen2 / Qwen2.5: bias on Q, K and V.
    Qwen2,
    /// Qwen3: RMSNorm on each head of Q and K, no QKV bias.
    Qwen3,
}

/// How RoPE pairs the elements of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1): GGML's "normal" mode, used by GGUF llama files whose Q/K rows
    /// were permuted by the converter.
    Normal,
    /// Halves (i, i + d/2): Hugging Face's rotate_half, GGML's NeoX mode.
    Neox,
}

/// Frequency scaling for long contexts (Hugging Face `rope_scaling` / GGUF `rope.scaling.*`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RopeScaling {
    None,
    Linear { factor: f32 },
    Llama3 { factor: f32, low_freq_factor: f32, high_freq_factor: f32, original_max_position: usize },
    Yarn { factor: f32, original_max_position: usize, beta_fast: f32, beta_slow: f32, attn_factor: f32 },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    /// The style the loaded weights expect. Loaders un-permute GGUF llama Q/K rows so that
    /// every source ends up Neox; Normal stays supported for completeness and tests.
    pub rope_style: RopeStyle,
    pub max_position: usize,
    /// Each token attends to at most this many tokens (itself included), when set.
    pub sliding_window: Option<usize>,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// The LM head reuses the token embedding.
    pub tie_embeddings: bool,
}
