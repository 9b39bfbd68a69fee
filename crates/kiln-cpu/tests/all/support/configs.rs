//! Small model shapes that cover every switch of the forward pass, with sizes that are not
//! multiples of the kernels' tiles.

use kiln_model::{
    Activation, Arch, LayerShape, LayerType, ModelConfig, RopeParams, RopeScaling, RopeStyle,
};

fn base() -> ModelConfig {
    ModelConfig {
        arch: Arch::Llama,
        vocab_size: 101,
        hidden_size: 72,
        intermediate_size: 100,
        num_layers: 2,
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 12,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::None,
        rope_style: RopeStyle::Neox,
        max_position: 512,
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
    }
}

/// Llama with GQA 4, llama3 rope scaling, untied head.
pub fn llama() -> ModelConfig {
    ModelConfig {
        rope_scaling: RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 64,
        },
        ..base()
    }
}

/// Mistral with a window of 5 (shorter than the prompts), GQA 8, adjacent-pair RoPE, and an
/// FFN wider than one k block of the matmul.
pub fn mistral() -> ModelConfig {
    ModelConfig {
        arch: Arch::Mistral,
        num_kv_heads: 1,
        intermediate_size: 300,
        sliding_window: Some(5),
        layer_types: None,
        rope_style: RopeStyle::Normal,
        ..base()
    }
}

/// Qwen2: QKV bias, tied embeddings, no GQA, linear rope scaling.
pub fn qwen2() -> ModelConfig {
    ModelConfig {
        arch: Arch::Qwen2,
        num_heads: 6,
        num_kv_heads: 6,
        qkv_bias: true,
        tie_embeddings: true,
        rope_scaling: RopeScaling::Linear { factor: 2.0 },
        ..base()
    }
}

/// Qwen3: per-head Q/K norm, head_dim wider than hidden / heads, YaRN scaling.
pub fn qwen3() -> ModelConfig {
    ModelConfig {
        arch: Arch::Qwen3,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 20,
        qk_norm: true,
        rms_norm_eps: 1e-6,
        rope_scaling: RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 64,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attn_factor: 1.1386,
            truncate: true,
        },
        ..base()
    }
}

/// Gemma 4 with every option: sliding layers (window 5) of head dim 12 and 2 KV heads, full
/// ones of head dim 20 with one KV head and V from K under proportional RoPE, per-layer
/// inputs, the last two layers sharing KV with double-wide feed-forwards, soft-capped logits.
pub fn gemma4() -> ModelConfig {
    let (s, f) = (LayerType::SlidingAttention, LayerType::FullAttention);
    let types = vec![s, f, s, s, f];
    let shape = |t: &LayerType| match t {
        LayerType::SlidingAttention => LayerShape {
            head_dim: 12,
            num_kv_heads: 2,
        },
        LayerType::FullAttention => LayerShape {
            head_dim: 20,
            num_kv_heads: 1,
        },
    };
    ModelConfig {
        arch: Arch::Gemma4,
        num_layers: types.len(),
        sliding_window: Some(5),
        layer_shapes: types.iter().map(shape).collect(),
        layer_types: Some(types),
        qk_norm: true,
        tie_embeddings: true,
        activation: Activation::GeluTanh,
        full_attention_rope: Some(RopeParams {
            theta: 1_000_000.0,
            scaling: RopeScaling::Proportional {
                rotated_pairs: 3,
                factor: 1.0,
            },
        }),
        per_layer_input: 7,
        kv_shared_layers: 2,
        full_attention_v_from_k: true,
        double_wide_mlp: true,
        logit_softcap: Some(15.0),
        ..base()
    }
}

/// [`all`] and [`gemma4`]: for the tests that need no f64 reference of the model.
pub fn all_with_gemma4() -> Vec<(&'static str, ModelConfig)> {
    let mut v = all();
    v.push(("gemma4", gemma4()));
    v
}

pub fn all() -> Vec<(&'static str, ModelConfig)> {
    vec![
        ("llama", llama()),
        ("mistral", mistral()),
        ("qwen2", qwen2()),
        ("qwen3", qwen3()),
    ]
}
