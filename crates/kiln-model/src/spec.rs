//! What each layer computes, derived once from a [`ModelConfig`]: the per-layer spec that the
//! layer program ([`crate::program`]) and the fused weight schema ([`crate::schema`]) read, and
//! that backends size their buffers from. Layers may differ (a window on some, other head
//! shapes); nothing below reads a global switch instead.

use crate::rope::{attention_factor, inv_freq};
use crate::{ModelConfig, OrderedEmbeddings, RopeScaling, RopeStyle};

/// A whole model: its layers and what surrounds them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// The LM head reuses the token embedding.
    pub tie_embeddings: bool,
    /// Epsilon of the final norm.
    pub norm_eps: f32,
    /// Embedding rows are multiplied by this (Gemma: sqrt(hidden_size), rounded to f32).
    pub embed_scale: Option<f32>,
    /// The per-layer inputs (Gemma 4's PLE), when the model has them.
    pub per_layer_input: Option<PerLayerInputSpec>,
    /// logits = cap * tanh(logits / cap).
    pub logit_softcap: Option<f32>,
    /// The RoPE settings the layers use, each once ([`AttnSpec::rope`] indexes them).
    pub ropes: Vec<RopeSpec>,
    pub layers: Vec<LayerSpec>,
    /// A draft model that reads its target (Gemma 4's assistant); None for a model that runs
    /// alone.
    pub draft: Option<DraftSpec>,
}

/// A draft model that reads its target instead of keeping a KV cache (Gemma 4's assistant).
/// One draft step of a row whose token sits at position `p` (its KV not yet in the cache),
/// the target's last hidden state being that of position `p - 1`:
/// `x = pre_projection([target_embedding(token) * input_embed_scale, hidden])`, the layers,
/// the final norm, the LM head (only the tokens of the best centroids when `ordered`), and
/// `hidden = post_projection(normed)` for the next step, which drafts at the same position
/// from the token just drafted. Each layer reads the target's KV of layer `kv_from`, at the
/// positions before `p`, as the target's row at `p - 1` attends; a sliding layer's window is
/// one wider than its `sliding_window` (transformers' assistant mask keeps the keys within
/// that distance of the last one, bounds included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftSpec {
    /// The target's hidden size: its embedding rows and hidden states are this wide.
    pub backbone_hidden: usize,
    /// The target's embedding scale (Gemma: sqrt of its hidden size).
    pub input_embed_scale: f32,
    pub ordered: Option<OrderedEmbeddings>,
}

/// Gemma 4's per-layer inputs: for each token and layer, `width` values mixed from a token
/// table (`[vocab, layers * width]`, gathered by id) and a projection of the scaled embedding:
/// `(rmsnorm(proj(x) * projection_scale) + table[token] * table_scale) * mix_scale`. Each
/// layer gates its slice with its residual stream after the feed-forward
/// (`act(gate(x)) * input`), projects it back to the hidden size and adds it, normalised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerLayerInputSpec {
    pub width: usize,
    /// sqrt(width), rounded to f32.
    pub table_scale: f32,
    /// 1 / sqrt(hidden_size).
    pub projection_scale: f32,
    /// 1 / sqrt(2).
    pub mix_scale: f32,
    /// Epsilon of the projection's norm.
    pub norm_eps: f32,
    /// The gate's activation.
    pub act: Activation,
}

/// One decoder layer: attention then feed-forward, each behind an RMSNorm with a residual.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    pub attn: AttnSpec,
    pub ffn: FfnSpec,
    /// Epsilon of this layer's RMSNorms (and its Q/K/V norms).
    pub norm_eps: f32,
    /// RMSNorm on the attention and feed-forward outputs before each residual add (Gemma).
    pub post_norms: bool,
    /// The width of the per-layer input the layer adds after the feed-forward
    /// ([`PerLayerInputSpec`]); None: it adds none.
    pub per_layer_input: Option<usize>,
    /// The residual stream is multiplied by a learned scalar at the end of the layer.
    pub output_scale: bool,
}

/// One layer's attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnSpec {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Each token attends to at most this many tokens (itself included); None: all before it.
    /// (A draft model's row attends as the target's row before it: see [`DraftSpec`].)
    pub window: Option<usize>,
    /// The softmax scale of Q.K: `1 / sqrt(head_dim)` rounded once from f64 (1 for Gemma 4).
    pub scale: f32,
    /// Q, K and V projections carry a bias.
    pub qkv_bias: bool,
    /// RMSNorm on each head of Q and K before RoPE.
    pub qk_norm: bool,
    /// RMSNorm without a weight on each V head.
    pub v_norm: bool,
    /// V is the K projection itself, taken before K's norm and RoPE (`attention_k_eq_v`).
    pub v_from_k: bool,
    /// The earlier layer whose KV cache this layer reads; None: its own. A layer that reads
    /// another's projects only Q and writes no KV. (A draft model's layers read its target's
    /// layers: [`ModelConfig::draft_spec`] names them.)
    pub kv_from: Option<usize>,
    /// Index of this layer's RoPE in [`ModelSpec::ropes`].
    pub rope: usize,
}

impl AttnSpec {
    /// Rows of the Q projection.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Elements of one token's K (or V) in the KV cache this layer reads.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Whether the layer computes and stores its own K and V.
    pub fn writes_kv(&self) -> bool {
        self.kv_from.is_none()
    }

    /// Elements of one token's K (or V) in this layer's own KV cache: 0 for a layer that
    /// reads another's.
    pub fn cache_kv_dim(&self) -> usize {
        match self.writes_kv() {
            true => self.kv_dim(),
            false => 0,
        }
    }

    /// Rows of the K projection (0 when the layer reads another's KV).
    pub fn k_rows(&self) -> usize {
        self.cache_kv_dim()
    }

    /// Rows of the V projection (0 when V is K, or the layer reads another's KV).
    pub fn v_rows(&self) -> usize {
        match self.v_from_k {
            true => 0,
            false => self.cache_kv_dim(),
        }
    }

    /// Rows of the fused QKV projection: Q, then K, then V (those the layer has).
    pub fn qkv_rows(&self) -> usize {
        self.q_dim() + self.k_rows() + self.v_rows()
    }

    /// The layer whose KV cache attention reads, this layer being `layer`.
    pub fn kv_layer(&self, layer: usize) -> usize {
        self.kv_from.unwrap_or(layer)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    /// x * sigmoid(x) (SwiGLU).
    Silu,
    /// GELU with the tanh approximation, `gelu_pytorch_tanh` (GeGLU).
    GeluTanh,
}

impl Activation {
    /// The activation of a Hugging Face `hidden_act` name, if kiln has it.
    pub fn from_hf(name: &str) -> Option<Activation> {
        match name {
            "silu" | "swish" => Some(Activation::Silu),
            "gelu_pytorch_tanh" => Some(Activation::GeluTanh),
            _ => None,
        }
    }
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

    pub fn activation(&self) -> Activation {
        match self {
            FfnSpec::Gated { act, .. } => *act,
        }
    }
}

impl ModelConfig {
    /// The per-layer spec of this model. Call [`ModelConfig::validate`] first: a layer that
    /// shares a KV cache no earlier layer has is left reading its own.
    pub fn spec(&self) -> ModelSpec {
        let block = self.arch.info().block;
        let kv_sources = self
            .kv_sources()
            .unwrap_or_else(|_| vec![None; self.num_layers]);
        let first_shared = self.num_layers - self.kv_shared_layers.min(self.num_layers);
        let mut ropes: Vec<RopeSpec> = Vec::new();
        let layers = (0..self.num_layers)
            .map(|l| {
                let shape = self.layer_shape(l);
                let full = self.is_full_attention(l);
                let (theta, scaling) = match (&self.full_attention_rope, full) {
                    (Some(r), true) => (r.theta, &r.scaling),
                    _ => (self.rope_theta, &self.rope_scaling),
                };
                let rope = rope_index(&mut ropes, self.rope_spec(shape.head_dim, theta, scaling));
                let scale = match block.unscaled_attention {
                    true => 1.0,
                    false => (1.0 / (shape.head_dim as f64).sqrt()) as f32,
                };
                let wide = self.double_wide_mlp && l >= first_shared && self.kv_shared_layers > 0;
                // transformers' assistant mask lets a sliding layer see one key more.
                let window = match self.assistant {
                    Some(_) => self.sliding_window.map(|w| w + 1),
                    None => self.sliding_window,
                };
                LayerSpec {
                    attn: AttnSpec {
                        num_heads: self.num_heads,
                        num_kv_heads: shape.num_kv_heads,
                        head_dim: shape.head_dim,
                        window: window.filter(|_| !full),
                        scale,
                        qkv_bias: self.qkv_bias,
                        qk_norm: self.qk_norm,
                        v_norm: block.v_norm,
                        v_from_k: self.full_attention_v_from_k && full,
                        kv_from: kv_sources[l],
                        rope,
                    },
                    ffn: FfnSpec::Gated {
                        intermediate: self.intermediate_size * if wide { 2 } else { 1 },
                        act: self.activation,
                    },
                    norm_eps: self.rms_norm_eps,
                    post_norms: block.post_norms,
                    per_layer_input: (self.per_layer_input > 0).then_some(self.per_layer_input),
                    output_scale: block.layer_output_scale,
                }
            })
            .collect();
        let per_layer_input = (self.per_layer_input > 0).then(|| PerLayerInputSpec {
            width: self.per_layer_input,
            table_scale: (self.per_layer_input as f64).sqrt() as f32,
            projection_scale: (1.0 / (self.hidden_size as f64).sqrt()) as f32,
            mix_scale: std::f64::consts::FRAC_1_SQRT_2 as f32,
            norm_eps: self.rms_norm_eps,
            act: self.activation,
        });
        // An assistant's input is the target's embedding, and its logits are never capped
        // (transformers' Gemma4AssistantForCausalLM applies no final_logit_softcapping).
        let draft = self.assistant.map(|a| DraftSpec {
            backbone_hidden: a.backbone_hidden_size,
            input_embed_scale: (a.backbone_hidden_size as f64).sqrt() as f32,
            ordered: a.ordered_embeddings,
        });
        ModelSpec {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            tie_embeddings: self.tie_embeddings,
            norm_eps: self.rms_norm_eps,
            embed_scale: (block.scaled_embedding && draft.is_none())
                .then(|| (self.hidden_size as f64).sqrt() as f32),
            per_layer_input,
            logit_softcap: self.logit_softcap.filter(|_| draft.is_none()),
            ropes,
            layers,
            draft,
        }
    }

    fn rope_spec(&self, head_dim: usize, theta: f32, scaling: &RopeScaling) -> RopeSpec {
        RopeSpec {
            inv_freq: inv_freq(head_dim, theta, scaling),
            attention_factor: attention_factor(scaling),
            style: self.rope_style,
        }
    }
}

/// The index of `rope` in `ropes`, adding it when it is new.
fn rope_index(ropes: &mut Vec<RopeSpec>, rope: RopeSpec) -> usize {
    match ropes.iter().position(|r| *r == rope) {
        Some(i) => i,
        None => {
            ropes.push(rope);
            ropes.len() - 1
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
    use crate::presets::preset;
    use crate::LayerType;

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

    #[test]
    fn gemma4_layers_differ_by_type_and_share_kv() {
        let c = preset("gemma4-tiny").unwrap();
        c.validate("gemma4-tiny").unwrap();
        let s = c.spec();
        // Layers 0, 1, 3, 4 slide; 2 and 5 are full; 4 and 5 share the KV of 3 and 2.
        let kv: Vec<_> = s.layers.iter().map(|l| l.attn.kv_from).collect();
        assert_eq!(kv, [None, None, None, None, Some(3), Some(2)]);
        let (slide, full) = (s.layers[0].attn, s.layers[2].attn);
        assert_eq!(
            (slide.head_dim, slide.num_kv_heads, slide.window),
            (32, 2, Some(64))
        );
        assert_eq!(
            (full.head_dim, full.num_kv_heads, full.window),
            (64, 1, None)
        );
        assert!(full.v_from_k && !slide.v_from_k && slide.v_norm && slide.scale == 1.0);
        // Q and K rows only on a full layer (V is K), Q only on a sharing one.
        assert_eq!(full.qkv_rows(), 8 * 64 + 64);
        assert_eq!(s.layers[5].attn.qkv_rows(), 8 * 64);
        assert_eq!(s.layers[5].attn.cache_kv_dim(), 0);
        // Two RoPEs: sliding plain, full proportional over the wider head.
        assert_eq!(s.ropes.len(), 2);
        assert_eq!(s.rope(0).inv_freq.len(), 16);
        let full_rope = &s.rope(2).inv_freq;
        assert_eq!(full_rope.len(), 32);
        assert!(
            full_rope[..8].iter().all(|f| *f > 0.0) && full_rope[8..].iter().all(|f| *f == 0.0)
        );
        // Double-wide feed-forward on the sharing layers only.
        let widths: Vec<_> = s.layers.iter().map(|l| l.ffn.intermediate()).collect();
        assert_eq!(widths, [768, 768, 768, 768, 1536, 1536]);
        assert_eq!(s.embed_scale, Some(16.0));
        assert_eq!(s.per_layer_input.unwrap().width, 16);
        assert_eq!(s.logit_softcap, Some(30.0));
        assert!(s.layers.iter().all(|l| l.post_norms && l.output_scale));
    }

    #[test]
    fn a_shared_layer_without_an_earlier_one_of_its_type_is_refused() {
        let mut c = preset("gemma4-tiny").unwrap();
        // Only the last layer is full: sharing it leaves no earlier full layer.
        let mut types = vec![LayerType::SlidingAttention; 6];
        types[5] = LayerType::FullAttention;
        c.layer_types = Some(types);
        c.layer_shapes.clear();
        c.kv_shared_layers = 1;
        let err = format!("{:#}", c.validate("cfg").unwrap_err());
        assert!(
            err.contains("layer 5 shares the KV") && err.contains("full-attention"),
            "{err}"
        );
        c.kv_shared_layers = 6;
        assert!(c.validate("cfg").is_err());
    }
}
