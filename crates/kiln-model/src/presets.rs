//! Named model shapes for `dummy:PRESET`: a tiny one for tests and the real shapes of popular
//! models for benchmarks and demos without files.

use crate::{
    Activation, Arch, AssistantConfig, LayerShape, LayerType, ModelConfig, OrderedEmbeddings,
    RopeParams, RopeScaling, RopeStyle,
};

/// Every preset name, in the order `kiln` lists them.
pub const PRESETS: [&str; 9] = [
    "tiny",
    "llama3-1b",
    "llama3-8b",
    "qwen3-8b",
    "mistral-7b",
    "gemma4-tiny",
    "gemma4-e4b",
    "gemma4-tiny-assistant",
    "gemma4-e4b-assistant",
];

/// The configuration of a named preset, or None for an unknown name.
pub fn preset(name: &str) -> Option<ModelConfig> {
    let llama3_rope = |factor| RopeScaling::Llama3 {
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    };
    let base = ModelConfig {
        arch: Arch::Llama,
        vocab_size: 128_256,
        hidden_size: 4096,
        intermediate_size: 14_336,
        num_layers: 32,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        rms_norm_eps: 1e-5,
        rope_theta: 500_000.0,
        rope_scaling: llama3_rope(8.0),
        rope_style: RopeStyle::Neox,
        max_position: 131_072,
        sliding_window: None,
        layer_types: None,
        qkv_bias: false,
        qk_norm: false,
        tie_embeddings: false,
        activation: Activation::Silu,
        layer_shapes: Vec::new(),
        full_attention_rope: None,
        per_layer_input: 0,
        kv_shared_layers: 0,
        full_attention_v_from_k: false,
        double_wide_mlp: false,
        logit_softcap: None,
        assistant: None,
    };
    Some(match name {
        // Small enough that a CI test runs a forward pass in milliseconds.
        "gemma4-tiny" => gemma4_tiny(),
        "gemma4-e4b" => gemma4_e4b(),
        "gemma4-tiny-assistant" => gemma4_tiny_assistant(),
        "gemma4-e4b-assistant" => gemma4_e4b_assistant(),
        "tiny" => ModelConfig {
            vocab_size: 512,
            hidden_size: 256,
            intermediate_size: 768,
            num_layers: 4,
            num_heads: 8,
            num_kv_heads: 2,
            head_dim: 32,
            rope_theta: 10_000.0,
            rope_scaling: RopeScaling::None,
            max_position: 4096,
            ..base
        },
        // Llama 3.2 1B.
        "llama3-1b" => ModelConfig {
            hidden_size: 2048,
            intermediate_size: 8192,
            num_layers: 16,
            num_heads: 32,
            head_dim: 64,
            rope_scaling: llama3_rope(32.0),
            tie_embeddings: true,
            ..base
        },
        // Llama 3.1 8B.
        "llama3-8b" => base,
        // Qwen3 8B.
        "qwen3-8b" => ModelConfig {
            arch: Arch::Qwen3,
            vocab_size: 151_936,
            intermediate_size: 12_288,
            num_layers: 36,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_scaling: RopeScaling::None,
            max_position: 40_960,
            qk_norm: true,
            ..base
        },
        // Mistral 7B v0.1, the release with a 4096-token sliding window.
        "mistral-7b" => ModelConfig {
            arch: Arch::Mistral,
            vocab_size: 32_000,
            rope_theta: 10_000.0,
            rope_scaling: RopeScaling::None,
            max_position: 32_768,
            sliding_window: Some(4096),
            ..base
        },
        _ => return None,
    })
}

/// Gemma 4 at the size of "tiny", with every option it has: sliding layers (window 64) and
/// full ones with twice the head dim, one KV head and V taken from K, proportional RoPE,
/// per-layer inputs, the last two layers sharing KV with a double-wide feed-forward, and
/// soft-capped logits.
fn gemma4_tiny() -> ModelConfig {
    let (s, f) = (LayerType::SlidingAttention, LayerType::FullAttention);
    let types = vec![s, s, f, s, s, f];
    let shape = |t: &LayerType| match t {
        LayerType::SlidingAttention => LayerShape {
            head_dim: 32,
            num_kv_heads: 2,
        },
        LayerType::FullAttention => LayerShape {
            head_dim: 64,
            num_kv_heads: 1,
        },
    };
    ModelConfig {
        arch: Arch::Gemma4,
        vocab_size: 512,
        hidden_size: 256,
        intermediate_size: 768,
        num_layers: types.len(),
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 32,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::None,
        rope_style: RopeStyle::Neox,
        max_position: 4096,
        sliding_window: Some(64),
        layer_shapes: types.iter().map(shape).collect(),
        layer_types: Some(types),
        qkv_bias: false,
        qk_norm: true,
        tie_embeddings: true,
        activation: Activation::GeluTanh,
        full_attention_rope: Some(RopeParams {
            theta: 1_000_000.0,
            scaling: RopeScaling::Proportional {
                rotated_pairs: 8,
                factor: 1.0,
            },
        }),
        per_layer_input: 16,
        kv_shared_layers: 2,
        full_attention_v_from_k: true,
        double_wide_mlp: true,
        logit_softcap: Some(30.0),
        assistant: None,
    }
}

/// A dense Gemma 4 text model of the E-series kind, at the defaults of transformers'
/// `Gemma4TextConfig` (the shape scripts/bench/make_random_gemma4_gguf.py writes for the
/// side-by-side runs): 30 layers of width 2304, every sixth a full-attention layer (512-wide
/// heads, proportional RoPE over a quarter of the head, theta 1e6), the others sliding over 512
/// tokens (256-wide heads, theta 1e4); 8 query and 4 KV heads; GeGLU of 9216; per-layer inputs
/// of 256 over the 262,144-token vocabulary; tied embeddings; no KV sharing, no soft cap (the
/// defaults have neither). For benchmarks (`dummy:gemma4-e4b`).
fn gemma4_e4b() -> ModelConfig {
    let (s, f) = (LayerType::SlidingAttention, LayerType::FullAttention);
    let types: Vec<LayerType> = (0..30).map(|l| if l % 6 == 5 { f } else { s }).collect();
    let shape = |t: &LayerType| LayerShape {
        head_dim: if *t == f { 512 } else { 256 },
        num_kv_heads: 4,
    };
    ModelConfig {
        vocab_size: 262_144,
        hidden_size: 2304,
        intermediate_size: 9216,
        num_layers: types.len(),
        num_heads: 8,
        num_kv_heads: 4,
        head_dim: 256,
        max_position: 131_072,
        sliding_window: Some(512),
        layer_shapes: types.iter().map(shape).collect(),
        layer_types: Some(types),
        full_attention_rope: Some(RopeParams {
            theta: 1_000_000.0,
            scaling: RopeScaling::Proportional {
                rotated_pairs: 64,
                factor: 1.0,
            },
        }),
        per_layer_input: 256,
        kv_shared_layers: 0,
        full_attention_v_from_k: false,
        double_wide_mlp: false,
        logit_softcap: None,
        ..gemma4_tiny()
    }
}

/// An assistant (draft model) for `gemma4-tiny`: two layers of width 64, sliding (the
/// target's window) then full, with the target's KV heads; an ordered LM head of 16 centroids
/// of which 4 are scored.
fn gemma4_tiny_assistant() -> ModelConfig {
    let (s, f) = (LayerType::SlidingAttention, LayerType::FullAttention);
    let target = gemma4_tiny();
    let types = vec![s, f];
    let shapes = vec![target.layer_shapes[0], target.layer_shapes[2]];
    ModelConfig {
        arch: Arch::Gemma4Assistant,
        hidden_size: 64,
        intermediate_size: 128,
        num_layers: types.len(),
        num_heads: 4,
        layer_shapes: shapes,
        layer_types: Some(types),
        per_layer_input: 0,
        kv_shared_layers: 2,
        full_attention_v_from_k: false,
        double_wide_mlp: false,
        logit_softcap: None,
        assistant: Some(AssistantConfig {
            backbone_hidden_size: target.hidden_size,
            ordered_embeddings: Some(OrderedEmbeddings {
                centroids: 16,
                top_k: 4,
            }),
        }),
        ..target
    }
}

/// An assistant for `gemma4-e4b` of the released E4B assistant's kind: four layers of width
/// 256 (three sliding, one full), GeGLU of 2048, an ordered LM head of 2048 centroids of which
/// 32 are scored; the target's KV heads. For the mechanism's cost in benchmarks.
fn gemma4_e4b_assistant() -> ModelConfig {
    let (s, f) = (LayerType::SlidingAttention, LayerType::FullAttention);
    let target = gemma4_e4b();
    let types = vec![s, s, s, f];
    let shape = |t: &LayerType| target.layer_shapes[if *t == f { 5 } else { 0 }];
    ModelConfig {
        arch: Arch::Gemma4Assistant,
        hidden_size: 256,
        intermediate_size: 2048,
        num_layers: types.len(),
        num_heads: 4,
        layer_shapes: types.iter().map(shape).collect(),
        layer_types: Some(types),
        per_layer_input: 0,
        kv_shared_layers: 4,
        assistant: Some(AssistantConfig {
            backbone_hidden_size: target.hidden_size,
            ordered_embeddings: Some(OrderedEmbeddings {
                centroids: 2048,
                top_k: 32,
            }),
        }),
        ..target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_has_its_known_size() {
        for name in PRESETS {
            let c = preset(name).unwrap();
            c.validate(name).unwrap();
        }
        // Published parameter counts, to the nearest hundred million.
        let billions = |n: &str| (preset(n).unwrap().param_count() as f64 / 1e8).round() / 10.0;
        assert_eq!(billions("llama3-1b"), 1.2);
        assert_eq!(billions("llama3-8b"), 8.0);
        assert_eq!(billions("qwen3-8b"), 8.2);
        assert_eq!(billions("mistral-7b"), 7.2);
        // Of which 2.0B the per-layer token table and 0.6B the embedding.
        assert_eq!(billions("gemma4-e4b"), 5.1);
        assert!(preset("gpt-9").is_none());
    }
}
