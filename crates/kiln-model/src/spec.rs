//! What each layer computes, derived once from a [`ModelConfig`]: the per-layer spec that the
//! layer program ([`crate::program`]) and the fused weight schema ([`crate::schema`]) read, and
//! that backends size their buffers from. Layers may differ (a window on some, other head
//! shapes); nothing below reads a global switch instead.

use crate::{LayerType, ModelConfig, RopeStyle};

/// A whole model: its layers and what surrounds them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// The LM head reuses the token embedding.
    pub tie_embeddings: bool,
    /// Epsilon of the final norm.
    pub norm_eps: f32,
    /// The RoPE settings the layers use, each once ([`AttnSpec::rope`] indexes them).
    pub ropes: Vec<RopeSpec>,
    pub layers: Vec<LayerSpec>,
}

/// One decoder layer: attention then feed-forward, each behind an RMSNorm with a residual.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    pub attn: AttnSpec,
    pub ffn: FfnSpec,
    /// Epsilon of this layer's RMSNorms (and its Q/K norms).
    pub norm_eps: f32,
}

/// One layer's attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnSpec {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Each token attends to at most this many tokens (itself included); None: all before it.
    pub window: Option<usize>,
    /// The softmax scale of Q.K: `1 / sqrt(head_dim)`, rounded once from f64.
    pub scale: f32,
    /// Q, K and V projections carry a bias.
    pub qkv_bias: bool,
    /// RMSNorm on each head of Q and K before RoPE.
    pub qk_norm: bool,
    /// Index of this layer's RoPE in [`ModelSpec::ropes`].
    pub rope: usize,
}

impl AttnSpec {
    /// Rows of the Q projection.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Rows of the K and V projections each.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Rows of the fused QKV projection: Q, then K, then V.
    pub fn qkv_rows(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim()
    }
}

/// The rotation applied to Q and K: one inverse frequency per rotated pair and the factor on
/// cos and sin, computed once (see rope.rs) so that every backend turns by the same angles.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    pub inv_freq: Vec<f32>,
    pub attention_factor: f32,
    pub style: RopeStyle,
}

/// The nonlinearity of a gated feed-forward: `act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// x * sigmoid(x) (SwiGLU).
    Silu,
}

/// One layer's feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnSpec {
    /// `down(act(gate(x)) * up(x))`.
    Gated {
        intermediate: usize,
        act: Activation,
    },
}

impl FfnSpec {
    /// Width of the hidden activation.
    pub fn intermediate(&self) -> usize {
        match self {
            FfnSpec::Gated { intermediate, .. } => *intermediate,
        }
    }
}

impl ModelConfig {
    /// The per-layer spec of this model.
    pub fn spec(&self) -> ModelSpec {
        let rope = RopeSpec {
            inv_freq: self.rope_inv_freq(),
            attention_factor: self.rope_attention_factor(),
            style: self.rope_style,
        };
        let layers = (0..self.num_layers)
            .map(|l| {
                let slides = self
                    .layer_types
                    .as_ref()
                    .and_then(|t| t.get(l))
                    .is_none_or(|t| *t == LayerType::SlidingAttention);
                LayerSpec {
                    attn: AttnSpec {
                        num_heads: self.num_heads,
                        num_kv_heads: self.num_kv_heads,
                        head_dim: self.head_dim,
                        window: self.sliding_window.filter(|_| slides),
                        scale: (1.0 / (self.head_dim as f64).sqrt()) as f32,
                        qkv_bias: self.qkv_bias,
                        qk_norm: self.qk_norm,
                        rope: 0,
                    },
                    ffn: FfnSpec::Gated {
                        intermediate: self.intermediate_size,
                        act: Activation::Silu,
                    },
                    norm_eps: self.rms_norm_eps,
                }
            })
            .collect();
        ModelSpec {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            tie_embeddings: self.tie_embeddings,
            norm_eps: self.rms_norm_eps,
            ropes: vec![rope],
            layers,
        }
    }
}

impl ModelSpec {
    /// The largest value of `f` over the layers (0 for none): buffers sized once for any layer.
    pub fn max_over_layers(&self, f: impl Fn(&LayerSpec) -> usize) -> usize {
        self.layers.iter().map(f).max().unwrap_or(0)
    }

    /// The RoPE of layer `layer`.
    pub fn rope(&self, layer: usize) -> &RopeSpec {
        &self.ropes[self.layers[layer].attn.rope]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    #[test]
    fn windows_follow_the_layer_types() {
        let mut c = preset("mistral-7b").unwrap();
        assert!(c.spec().layers.iter().all(|l| l.attn.window == Some(4096)));
        c.num_layers = 3;
        c.layer_types = Some(vec![
            LayerType::FullAttention,
            LayerType::SlidingAttention,
            LayerType::FullAttention,
        ]);
        let windows: Vec<_> = c.spec().layers.iter().map(|l| l.attn.window).collect();
        assert_eq!(windows, [None, Some(4096), None]);
        c.sliding_window = None;
        assert!(c.spec().layers.iter().all(|l| l.attn.window.is_none()));
    }

    #[test]
    fn every_layer_reads_the_config() {
        let c = preset("qwen3-8b").unwrap();
        let s = c.spec();
        assert_eq!(s.layers.len(), 36);
        let a = s.layers[7].attn;
        assert_eq!((a.q_dim(), a.kv_dim(), a.qkv_rows()), (4096, 1024, 6144));
        assert!(a.qk_norm && !a.qkv_bias);
        assert_eq!(a.scale, 1.0 / (128f32).sqrt());
        assert_eq!(s.layers[0].ffn.intermediate(), 12_288);
        assert_eq!(s.rope(35).inv_freq, c.rope_inv_freq());
        assert_eq!(s.max_over_layers(|l| l.attn.qkv_rows()), 6144);
    }
}
