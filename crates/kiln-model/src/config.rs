//! Hyper-parameters of a decoder-only transformer, as the files give them.
//!
//! Parsing lives next door: [`crate::config_gguf`] reads GGUF metadata, [`crate::config_hf`]
//! reads a Hugging Face `config.json` (both with the defaults of [`crate::arch`]), and
//! [`crate::rope`] turns the RoPE settings into frequencies. What each layer computes is
//! derived from this once, in [`crate::spec`]; backends read that, not these fields.

use anyhow::{bail, ensure};

use crate::arch::Arch;
use crate::spec::Activation;

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
    /// Gemma 4's "proportional" RoPE: the first `rotated_pairs` pairs turn at the frequencies
    /// of the whole head (`theta^(-2i / head_dim)`, divided by `factor`), the rest not at all.
    /// (transformers: `partial_rotary_factor * head_dim / 2` pairs; llama.cpp's converter
    /// writes the same as `rope_freqs` factors of 1 and 1e30.)
    Proportional {
        rotated_pairs: usize,
        factor: f32,
    },
}

/// A RoPE base and its scaling, for layers whose RoPE is not the model's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RopeParams {
    pub theta: f32,
    pub scaling: RopeScaling,
}

/// One layer's attention shape where it differs from the model's (transformers'
/// `per_layer_config`; Gemma 4's full-attention layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerShape {
    pub head_dim: usize,
    pub num_kv_heads: usize,
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

/// A draft model's own options (Gemma 4's assistant, `gemma4_assistant`): it runs beside a
/// target, reads the target's KV cache and its last hidden state, and keeps no KV of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AssistantConfig {
    /// The hidden size of the target it was trained with (`backbone_hidden_size`).
    pub backbone_hidden_size: usize,
    /// The LM head scores only the tokens of the best centroids (`use_ordered_embeddings`).
    pub ordered_embeddings: Option<OrderedEmbeddings>,
}

/// `use_ordered_embeddings`: the vocabulary split into `centroids` equal clusters (an ordering
/// lists each cluster's token ids); a row's logits are those of the tokens of its `top_k`
/// best-scoring clusters, the rest below them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderedEmbeddings {
    /// `num_centroids`.
    pub centroids: usize,
    /// `centroid_intermediate_top_k`.
    pub top_k: usize,
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
    /// The feed-forward's activation (`hidden_act`; Gemma's `hidden_activation`).
    pub activation: Activation,
    /// Each layer's attention shape when layers differ (transformers' `per_layer_config`,
    /// Gemma 4's `global_head_dim`): empty, or one entry per layer.
    pub layer_shapes: Vec<LayerShape>,
    /// The RoPE of full-attention layers when it is not `rope_theta` / `rope_scaling` (Gemma 4's
    /// `rope_parameters` keyed by layer type).
    pub full_attention_rope: Option<RopeParams>,
    /// Values per layer of the per-layer inputs (Gemma 4's `hidden_size_per_layer_input`); 0:
    /// the model has none.
    pub per_layer_input: usize,
    /// The last this-many layers read the KV cache of the last earlier layer of their type and
    /// write none (`num_kv_shared_layers`).
    pub kv_shared_layers: usize,
    /// Full-attention layers take V from the K projection (`attention_k_eq_v`).
    pub full_attention_v_from_k: bool,
    /// KV-sharing layers have a feed-forward twice as wide (`use_double_wide_mlp`).
    pub double_wide_mlp: bool,
    /// logits = cap * tanh(logits / cap) (`final_logit_softcapping`).
    pub logit_softcap: Option<f32>,
    /// A draft model's options (Gemma 4's assistant); None for a model that runs alone.
    #[serde(default)]
    pub assistant: Option<AssistantConfig>,
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

    /// Number of weights, counting the tied LM head once: the sizes of the tensors the schema
    /// names.
    pub fn param_count(&self) -> u64 {
        let spec = self.spec();
        crate::schema::all_tensors(&spec)
            .iter()
            .map(|id| id.shape_in(&spec).iter().product::<usize>() as u64)
            .sum()
    }

    /// How layer `l` attends: its `layer_types` entry; without one, through the window when
    /// there is one.
    pub fn layer_type(&self, l: usize) -> LayerType {
        match self.layer_types.as_ref().and_then(|t| t.get(l)) {
            Some(t) => *t,
            None if self.sliding_window.is_some() => LayerType::SlidingAttention,
            None => LayerType::FullAttention,
        }
    }

    /// Whether layer `l` attends to every earlier token.
    pub fn is_full_attention(&self, l: usize) -> bool {
        self.layer_type(l) == LayerType::FullAttention
    }

    /// Layer `l`'s attention shape.
    pub fn layer_shape(&self, l: usize) -> LayerShape {
        self.layer_shapes.get(l).copied().unwrap_or(LayerShape {
            head_dim: self.head_dim,
            num_kv_heads: self.num_kv_heads,
        })
    }

    /// For each layer, the earlier layer whose KV cache it reads (None: its own). The last
    /// `kv_shared_layers` layers read the last layer before them of their own type, as
    /// transformers' Gemma 4 does; an error when one has no such layer.
    /// An assistant's layers all read its target's KV: each names itself here, which gives
    /// its shapes (no K or V of its own); [`ModelConfig::draft_spec`] names the target's layers.
    pub fn kv_sources(&self) -> anyhow::Result<Vec<Option<usize>>> {
        let n = self.num_layers;
        if self.assistant.is_some() {
            ensure!(
                self.kv_shared_layers == n,
                "all {n} layers of an assistant read its target's KV ('num_kv_shared_layers' is {})",
                self.kv_shared_layers
            );
            return Ok((0..n).map(Some).collect());
        }
        ensure!(
            self.kv_shared_layers < n || self.kv_shared_layers == 0,
            "{} KV-sharing layers leave none of the {n} layers to own a KV cache",
            self.kv_shared_layers
        );
        let first_shared = n - self.kv_shared_layers;
        (0..n)
            .map(|l| {
                if l < first_shared {
                    return Ok(None);
                }
                let full = self.is_full_attention(l);
                let source = (0..first_shared)
                    .rev()
                    .find(|&s| self.is_full_attention(s) == full)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "layer {l} shares the KV of an earlier {} layer, but the layers before {first_shared} have none",
                            if full { "full-attention" } else { "sliding" }
                        )
                    })?;
                ensure!(
                    self.layer_shape(source) == self.layer_shape(l),
                    "layer {l} shares the KV of layer {source}, whose heads differ ({:?} against {:?})",
                    self.layer_shape(source),
                    self.layer_shape(l)
                );
                Ok(Some(source))
            })
            .collect()
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
            self.layer_shapes.is_empty() || self.layer_shapes.len() == self.num_layers,
            "{origin}: {} layer shapes for {} layers",
            self.layer_shapes.len(),
            self.num_layers
        );
        for l in 0..self.num_layers {
            let LayerShape {
                head_dim,
                num_kv_heads,
            } = self.layer_shape(l);
            ensure!(
                head_dim > 0 && num_kv_heads > 0,
                "{origin}: layer {l}: head dim and KV head count must be positive"
            );
            ensure!(
                self.num_heads.is_multiple_of(num_kv_heads),
                "{origin}: {} heads are not a multiple of {num_kv_heads} KV heads (layer {l})",
                self.num_heads,
            );
            ensure!(
                head_dim.is_multiple_of(2),
                "{origin}: head dim {head_dim} is odd, RoPE needs pairs (layer {l})",
            );
        }
        if let Some(cap) = self.logit_softcap {
            ensure!(
                cap.is_finite() && cap > 0.0,
                "{origin}: final_logit_softcapping {cap} must be a positive number"
            );
        }
        self.kv_sources()
            .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        if let Some(full) = &self.full_attention_rope {
            ensure!(
                full.theta.is_finite() && full.theta > 1.0,
                "{origin}: full-attention RoPE base {} must be above 1",
                full.theta
            );
            for l in (0..self.num_layers).filter(|&l| self.is_full_attention(l)) {
                check_rope_scaling(origin, &full.scaling, self.layer_shape(l).head_dim)?;
            }
        }
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
        if let Some(a) = &self.assistant {
            self.check_assistant(origin, a)?;
        }
        check_rope_scaling(origin, &self.rope_scaling, self.head_dim)
    }

    /// What transformers' `Gemma4AssistantConfig` checks, and what its masked LM head needs.
    fn check_assistant(&self, origin: &str, a: &AssistantConfig) -> anyhow::Result<()> {
        ensure!(
            a.backbone_hidden_size > 0,
            "{origin}: 'backbone_hidden_size' must be positive"
        );
        ensure!(
            self.per_layer_input == 0 && !self.double_wide_mlp,
            "{origin}: an assistant has no per-layer inputs and no double-wide feed-forward"
        );
        if let Some(o) = a.ordered_embeddings {
            ensure!(
                o.centroids > 0 && self.vocab_size.is_multiple_of(o.centroids),
                "{origin}: {} centroids do not split the {}-token vocabulary evenly",
                o.centroids,
                self.vocab_size
            );
            ensure!(
                o.top_k > 0 && o.top_k <= o.centroids,
                "{origin}: 'centroid_intermediate_top_k' {} must be 1 to {}",
                o.top_k,
                o.centroids
            );
        }
        Ok(())
    }
}

/// Checks one RoPE scaling for layers with heads `head_dim` wide.
fn check_rope_scaling(origin: &str, scaling: &RopeScaling, head_dim: usize) -> anyhow::Result<()> {
    match scaling {
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
        RopeScaling::Proportional {
            rotated_pairs,
            factor,
        } => {
            ensure!(
                *rotated_pairs <= head_dim / 2,
                "{origin}: proportional RoPE turns {rotated_pairs} pairs of a {head_dim}-wide head"
            );
            ensure!(
                factor.is_finite() && *factor > 0.0,
                "{origin}: RoPE scaling factor {factor} must be positive"
            );
        }
        RopeScaling::FreqFactors(f) => {
            ensure!(
                f.len() == head_dim / 2,
                "{origin}: {} RoPE frequency factors for head dim {} (expected {})",
                f.len(),
                head_dim,
                head_dim / 2
            );
            ensure!(
                f.iter().all(|x| x.is_finite() && *x > 0.0),
                "{origin}: RoPE frequency factors must be positive numbers"
            );
        }
    }
    Ok(())
}
