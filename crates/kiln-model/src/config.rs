//! Hyper-parameters of a decoder-only transformer, as the files give them.
//!
//! Parsing lives next door: [`crate::config_gguf`] reads GGUF metadata, [`crate::config_hf`]
//! reads a Hugging Face `config.json` (both with the defaults of [`crate::arch`]), and
//! [`crate::rope`] turns the RoPE settings into frequencies. What each layer computes is
//! derived from this once, in [`crate::spec`]; backends read that, not these fields.

use anyhow::{bail, ensure};

use crate::arch::Arch;

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
/// [`ModelConfig::rope_inv_freq`] is the one place that turns these into frequencies.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RopeScaling {
    None,
    Linear {
        factor: f32,
    },
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: usize,
    },
    Yarn {
        factor: f32,
        original_max_position: usize,
        beta_fast: f32,
        beta_slow: f32,
        /// The factor applied to cos and sin (YaRN's mscale), already resolved.
        attn_factor: f32,
        /// Whether the correction range is rounded to whole dimensions (Hugging Face's
        /// `truncate`, default true; llama.cpp always rounds).
        truncate: bool,
    },
    /// One divisor per frequency (`head_dim / 2` of them): GGUF's `rope_freqs.weight`, which
    /// llama.cpp's converter writes for Llama 3.1-style scaling instead of the parameters.
    FreqFactors(Vec<f32>),
}

/// How one layer attends (transformers' `layer_types` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LayerType {
    /// Every earlier token.
    FullAttention,
    /// The last `sliding_window` tokens.
    SlidingAttention,
}

impl LayerType {
    /// Parses a `layer_types` entry.
    pub fn from_hf(name: &str) -> Option<LayerType> {
        match name {
            "full_attention" => Some(LayerType::FullAttention),
            "sliding_attention" => Some(LayerType::SlidingAttention),
            _ => None,
        }
    }
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
    /// Each token of a sliding layer attends to at most this many tokens (itself included).
    pub sliding_window: Option<usize>,
    /// Each layer's attention (transformers' `layer_types`); None: every layer slides when
    /// `sliding_window` is set.
    pub layer_types: Option<Vec<LayerType>>,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// The LM head reuses the token embedding.
    pub tie_embeddings: bool,
}

impl ModelConfig {
    /// Rows of the Q projection: `num_heads * head_dim`.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Rows of the K and V projections: `num_kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Query heads that share one KV head.
    pub fn gqa_group(&self) -> usize {
        self.num_heads / self.num_kv_heads.max(1)
    }

    /// Number of weights, counting the tied LM head once.
    pub fn param_count(&self) -> u64 {
        let (h, q, kv, f) = (
            self.hidden_size as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.intermediate_size as u64,
        );
        let mut layer = 2 * h // attention and FFN norms
            + h * q + 2 * h * kv + q * h // Q, K, V, O
            + 3 * h * f; // gate, up, down
        if self.qkv_bias {
            layer += q + 2 * kv;
        }
        if self.qk_norm {
            layer += 2 * self.head_dim as u64;
        }
        let embd = self.vocab_size as u64 * h;
        let head = if self.tie_embeddings { 0 } else { embd };
        embd + self.num_layers as u64 * layer + h + head
    }

    /// Checks that the shapes are usable by a forward pass; `origin` names where they came from.
    pub fn validate(&self, origin: &str) -> anyhow::Result<()> {
        let positive = [
            ("vocab size", self.vocab_size),
            ("hidden size", self.hidden_size),
            ("intermediate size", self.intermediate_size),
            ("layer count", self.num_layers),
            ("head count", self.num_heads),
            ("KV head count", self.num_kv_heads),
            ("head dim", self.head_dim),
        ];
        for (what, v) in positive {
            ensure!(v > 0, "{origin}: {what} must be positive");
        }
        ensure!(
            self.num_heads.is_multiple_of(self.num_kv_heads),
            "{origin}: {} heads are not a multiple of {} KV heads",
            self.num_heads,
            self.num_kv_heads
        );
        ensure!(
            self.head_dim.is_multiple_of(2),
            "{origin}: head dim {} is odd, RoPE needs pairs",
            self.head_dim
        );
        ensure!(
            self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0,
            "{origin}: RMSNorm epsilon {} must be positive",
            self.rms_norm_eps
        );
        ensure!(
            self.rope_theta.is_finite() && self.rope_theta > 1.0,
            "{origin}: RoPE base {} must be above 1",
            self.rope_theta
        );
        if self.sliding_window == Some(0) {
            bail!("{origin}: sliding window must be positive");
        }
        if let Some(types) = &self.layer_types {
            ensure!(
                types.len() == self.num_layers,
                "{origin}: {} layer types for {} layers",
                types.len(),
                self.num_layers
            );
        }
        match &self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => {
                ensure!(
                    *factor > 0.0,
                    "{origin}: RoPE scaling factor {factor} must be positive"
                )
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                ensure!(
                    *factor > 0.0,
                    "{origin}: RoPE scaling factor {factor} must be positive"
                );
                ensure!(
                    high_freq_factor > low_freq_factor && *low_freq_factor > 0.0,
                    "{origin}: llama3 RoPE needs 0 < low_freq_factor < high_freq_factor"
                );
                ensure!(
                    *original_max_position > 0,
                    "{origin}: original_max_position_embeddings must be positive"
                );
            }
            RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
                attn_factor,
                ..
            } => {
                ensure!(
                    *factor > 0.0,
                    "{origin}: RoPE scaling factor {factor} must be positive"
                );
                ensure!(
                    *original_max_position > 0,
                    "{origin}: original_max_position_embeddings must be positive"
                );
                ensure!(
                    *beta_fast > 0.0 && *beta_slow > 0.0 && attn_factor.is_finite(),
                    "{origin}: yarn beta_fast, beta_slow and attention factor must be positive numbers"
                );
            }
            RopeScaling::FreqFactors(f) => {
                ensure!(
                    f.len() == self.head_dim / 2,
                    "{origin}: {} RoPE frequency factors for head dim {} (expected {})",
                    f.len(),
                    self.head_dim,
                    self.head_dim / 2
                );
                ensure!(
                    f.iter().all(|x| x.is_finite() && *x > 0.0),
                    "{origin}: RoPE frequency factors must be positive numbers"
                );
            }
        }
        Ok(())
    }
}
