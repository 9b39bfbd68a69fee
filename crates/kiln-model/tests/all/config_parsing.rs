//! ModelConfig from config.json text and from GGUF metadata, including the error paths.

use kiln_formats::GgufFile;
use kiln_model::{Arch, GgufSource, ModelConfig, RopeScaling};

use crate::test_data;

/// A file of the read-only test material (../shared, or where tests/test_data.rs finds it).
fn shared(file: &str) -> std::path::PathBuf {
    test_data::dir().join(file)
}

fn hf(extra: &str) -> anyhow::Result<ModelConfig> {
    let json = format!(
        r#"{{"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 8, "vocab_size": 1000 {extra}}}"#
    );
    ModelConfig::from_hf_config(&json)
}

#[test]
fn llama_defaults() {
    let c = hf(r#", "model_type": "llama""#).unwrap();
    assert_eq!(c.arch, Arch::Llama);
    assert_eq!((c.num_kv_heads, c.head_dim), (8, 32));
    assert_eq!(c.rope_theta, 10_000.0);
    assert_eq!(c.rope_scaling, RopeScaling::None);
    assert!(!c.tie_embeddings && !c.qkv_bias && !c.qk_norm);
    assert_eq!(c.sliding_window, None);
}

#[test]
fn architecture_from_the_class_name() {
    let c = hf(r#", "architectures": ["Qwen2ForCausalLM"]"#).unwrap();
    assert_eq!(c.arch, Arch::Qwen2);
    assert!(c.qkv_bias);
}

#[test]
fn llama3_scaling_in_every_spelling() {
    let params = r#"{"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192"#;
    let want = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    };
    for spelling in [
        format!(r#", "rope_theta": 500000.0, "rope_scaling": {params}, "rope_type": "llama3"}}"#),
        format!(r#", "rope_theta": 500000.0, "rope_scaling": {params}, "type": "llama3"}}"#),
        format!(
            r#", "rope_parameters": {params}, "rope_type": "llama3", "rope_theta": 500000.0}}"#
        ),
    ] {
        let c = hf(&format!(
            r#", "model_type": "llama", "tie_word_embeddings": true {spelling}"#
        ))
        .unwrap();
        assert_eq!(c.rope_scaling, want, "{spelling}");
        assert_eq!(c.rope_theta, 500_000.0);
        assert!(c.tie_embeddings);
    }
}

#[test]
fn linear_and_yarn_scaling() {
    let c = hf(r#", "model_type": "qwen2", "rope_scaling": {"type": "linear", "factor": 2.0}"#)
        .unwrap();
    assert_eq!(c.rope_scaling, RopeScaling::Linear { factor: 2.0 });
    let c = hf(r#", "model_type": "qwen3", "max_position_embeddings": 131072,
                 "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#)
    .unwrap();
    match c.rope_scaling {
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            attn_factor,
            truncate,
        } => {
            assert_eq!((factor, original_max_position), (4.0, 32768));
            assert_eq!((beta_fast, beta_slow, truncate), (32.0, 1.0, true));
            assert!((attn_factor - (0.1 * 4f32.ln() + 1.0)).abs() < 1e-6);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.head_dim, 128, "qwen3's default head_dim");
    assert!(c.qk_norm);
}

#[test]
fn mistral_window_and_qwen_windows() {
    let c = hf(r#", "model_type": "mistral", "sliding_window": 4096"#).unwrap();
    assert_eq!((c.arch, c.sliding_window), (Arch::Mistral, Some(4096)));
    let c = hf(r#", "model_type": "mistral", "sliding_window": null"#).unwrap();
    assert_eq!(c.sliding_window, None);
    // Qwen's sliding_window is ignored unless use_sliding_window, and then windows the layers
    // from max_window_layers on (transformers' default window: 4096).
    let c = hf(r#", "model_type": "qwen2", "sliding_window": 4096"#).unwrap();
    assert_eq!(c.sliding_window, None);
    let c = hf(r#", "model_type": "qwen2", "use_sliding_window": true, "max_window_layers": 1"#)
        .unwrap();
    let windows: Vec<_> = c.spec().layers.iter().map(|l| l.attn.window).collect();
    assert_eq!(windows, [None, Some(4096)]);
    // transformers 5's layer_types, when given, say it directly.
    let c = hf(
        r#", "model_type": "qwen3", "use_sliding_window": true, "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"]"#,
    )
    .unwrap();
    let windows: Vec<_> = c.spec().layers.iter().map(|l| l.attn.window).collect();
    assert_eq!(windows, [Some(8), None]);
    let err = hf(r#", "model_type": "qwen3", "use_sliding_window": true,
        "layer_types": ["sliding_attention", "chunked_attention"]"#)
    .unwrap_err();
    assert!(format!("{err:#}").contains("chunked_attention"), "{err:#}");
    let err = hf(r#", "model_type": "qwen3", "use_sliding_window": true,
        "layer_types": ["sliding_attention"]"#)
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("1 layer types for 2 layers"),
        "{err:#}"
    );
}

#[test]
fn unsupported_inputs_are_clear_errors() {
    let cases = [
        (r#", "model_type": "gemma2""#, "unsupported architecture"),
        (
            r#", "model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2.0}"#,
            "dynamic",
        ),
        (
            r#", "model_type": "llama", "attention_bias": true"#,
            "attention_bias",
        ),
        (r#", "model_type": "llama", "hidden_act": "gelu""#, "gelu"),
        (
            r#", "model_type": "llama", "num_key_value_heads": 3"#,
            "multiple",
        ),
        (
            r#", "model_type": "llama", "vocab_size": "many""#,
            "vocab_size",
        ),
    ];
    for (extra, needle) in cases {
        let err = format!("{:#}", hf(extra).unwrap_err());
        assert!(err.contains(needle), "{extra}: {err}");
    }
    assert!(ModelConfig::from_hf_config("[1, 2]").is_err());
    assert!(ModelConfig::from_hf_config("{").is_err());
}

#[test]
fn hf_file_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("kiln-model-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, r#"{"model_type": "bert"}"#).unwrap();
    let err = format!("{:#}", ModelConfig::from_hf_file(&path).unwrap_err());
    assert!(
        err.contains(&path.display().to_string()) && err.contains("bert"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gguf_metadata_of_a_real_llama3_vocab_file() {
    // llama.cpp's vocab files carry the full Llama 3 8B hyper-parameters but no tensors.
    let path = shared("vocab/ggml-vocab-llama-bpe.gguf");
    let g = GgufFile::open(&path).unwrap();
    let c = ModelConfig::from_gguf(&g).unwrap();
    assert_eq!(c.arch, Arch::Llama);
    assert_eq!(
        (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads),
        (32, 4096, 32, 8)
    );
    assert_eq!(
        (c.head_dim, c.intermediate_size, c.vocab_size),
        (128, 14336, 128256)
    );
    assert_eq!(c.rope_theta, 500_000.0);
    // With no tensors, opening it as weights fails and says which tensor and file.
    let err = format!("{:#}", GgufSource::open(&path).err().unwrap());
    assert!(
        err.contains("token_embd.weight") && err.contains("ggml-vocab-llama-bpe.gguf"),
        "{err}"
    );
}

#[test]
fn gguf_unsupported_architecture_names_the_file() {
    let path = shared("vocab/ggml-vocab-bert-bge.gguf");
    let g = GgufFile::open(&path).unwrap();
    let err = format!("{:#}", ModelConfig::from_gguf(&g).unwrap_err());
    assert!(
        err.contains("unsupported architecture 'bert'") && err.contains("bert-bge.gguf"),
        "{err}"
    );
}

/// A Gemma 4 text config with what `extra` adds.
fn gemma4(extra: &str) -> anyhow::Result<ModelConfig> {
    let json = format!(
        r#"{{"model_type": "gemma4_text", "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 7, "num_attention_heads": 8, "num_key_value_heads": 4,
            "vocab_size": 1000, "vocab_size_per_layer_input": 1000 {extra}}}"#
    );
    ModelConfig::from_hf_config(&json)
}

#[test]
fn gemma4_defaults_are_transformers_defaults() {
    use kiln_model::{Activation, LayerType};
    let c = gemma4("").unwrap();
    assert_eq!(c.arch, Arch::Gemma4);
    // Five sliding layers to one full one; the last layer is full whatever the pattern says.
    let full: Vec<usize> = (0..7).filter(|&l| c.is_full_attention(l)).collect();
    assert_eq!(full, [5, 6]);
    assert_eq!(
        c.layer_types.as_ref().unwrap()[0],
        LayerType::SlidingAttention
    );
    assert_eq!((c.head_dim, c.layer_shape(5).head_dim), (256, 512));
    assert_eq!(c.layer_shape(5).num_kv_heads, 4);
    assert_eq!(c.sliding_window, Some(512));
    assert_eq!((c.per_layer_input, c.kv_shared_layers), (256, 0));
    assert!(c.tie_embeddings && !c.full_attention_v_from_k && !c.double_wide_mlp);
    assert_eq!(c.activation, Activation::GeluTanh);
    assert_eq!(
        (c.rope_theta, &c.rope_scaling),
        (10_000.0, &RopeScaling::None)
    );
    let full_rope = c.full_attention_rope.clone().unwrap();
    assert_eq!(full_rope.theta, 1_000_000.0);
    // partial_rotary_factor 0.25 of a 512-wide head: 64 of its 256 pairs turn.
    assert_eq!(
        full_rope.scaling,
        RopeScaling::Proportional {
            rotated_pairs: 64,
            factor: 1.0
        }
    );
    assert_eq!(c.logit_softcap, None);
}

#[test]
fn gemma4_full_layer_shape_in_both_spellings() {
    // The hub's global_head_dim / num_global_key_value_heads (read with attention_k_eq_v), and
    // transformers 5.17's own per_layer_config (zero-padded keys), give the same config.
    let types = r#", "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                   "full_attention", "sliding_attention", "sliding_attention", "full_attention"]"#;
    let hub = gemma4(&format!(
        r#"{types}, "attention_k_eq_v": true, "global_head_dim": 128, "num_global_key_value_heads": 2"#
    ))
    .unwrap();
    let saved = gemma4(&format!(
        r#"{types}, "attention_k_eq_v": true, "per_layer_config":
           {{"1": {{"head_dim": 128, "num_key_value_heads": 2}}, "3": {{"head_dim": 128, "num_key_value_heads": 2}},
             "6": {{"head_dim": 128, "num_key_value_heads": 2}}}}"#
    ))
    .unwrap();
    assert_eq!(hub, saved);
    assert_eq!(
        (hub.layer_shape(3).head_dim, hub.layer_shape(3).num_kv_heads),
        (128, 2)
    );
    assert_eq!(hub.layer_shape(4).head_dim, 256);
    assert!(hub.full_attention_v_from_k);
    // Without attention_k_eq_v, transformers ignores num_global_key_value_heads.
    let plain = gemma4(&format!(
        r#"{types}, "global_head_dim": 128, "num_global_key_value_heads": 2"#
    ))
    .unwrap();
    assert_eq!(plain.layer_shape(3).num_kv_heads, 4);
}

#[test]
fn gemma4_options_kiln_does_not_run_are_refused_by_name() {
    let cases = [
        (r#", "enable_moe_block": true"#, "enable_moe_block"),
        (
            r#", "use_bidirectional_attention": "all""#,
            "use_bidirectional_attention",
        ),
        (
            r#", "hidden_activation": "gelu""#,
            "hidden_activation 'gelu'",
        ),
        (r#", "attention_bias": true"#, "attention_bias"),
        (
            r#", "vocab_size_per_layer_input": 2000"#,
            "vocab_size_per_layer_input",
        ),
        (
            r#", "per_layer_config": {"6": {"intermediate_size": 64}}"#,
            "'intermediate_size' for layer 6",
        ),
        (
            r#", "per_layer_config": {"9": {"head_dim": 64}}"#,
            "layer 9 of 7",
        ),
        (
            r#", "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}"#,
            "'full_attention'",
        ),
        (
            r#", "rope_parameters": {"sliding_attention": {"rope_type": "dynamic", "factor": 2.0},
                 "full_attention": {"rope_type": "default"}}"#,
            "'dynamic'",
        ),
        // Six sharing layers leave layer 0 alone before them: no full layer to share.
        (r#", "num_kv_shared_layers": 6"#, "shares the KV"),
        (
            r#", "final_logit_softcapping": -1.0"#,
            "final_logit_softcapping",
        ),
    ];
    for (extra, needle) in cases {
        let err = format!("{:#}", gemma4(extra).unwrap_err());
        assert!(err.contains(needle), "{extra}: {err}");
    }
    // use_bidirectional_attention "vision" only concerns image tokens.
    assert!(gemma4(r#", "use_bidirectional_attention": "vision""#).is_ok());
    // Other architectures take no per_layer_config.
    let err = format!(
        "{:#}",
        hf(r#", "model_type": "llama", "per_layer_config": {"0": {"head_dim": 16}}"#).unwrap_err()
    );
    assert!(err.contains("per_layer_config"), "{err}");
}

#[test]
fn gemma4_multimodal_config_gives_its_text_model() {
    let text = r#"{"model_type": "gemma4_text", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
        "vocab_size": 1000, "vocab_size_per_layer_input": 1000,
        "layer_types": ["sliding_attention", "full_attention"]}"#;
    let json = format!(
        r#"{{"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": {text}, "vision_config": {{"hidden_size": 32}}, "tie_word_embeddings": true}}"#
    );
    let (c, layout) = ModelConfig::from_hf_config_with_layout(&json).unwrap();
    assert_eq!(c, ModelConfig::from_hf_config(text).unwrap());
    let mm = layout.multimodal.expect("a multimodal layout");
    assert_eq!(
        layout.tensor_name("model.layers.0.self_attn.q_proj.weight"),
        "model.language_model.layers.0.self_attn.q_proj.weight"
    );
    assert_eq!(layout.tensor_name("lm_head.weight"), "lm_head.weight");
    assert!(mm.skipped.iter().any(|(p, _)| *p == "model.vision_tower."));
    let err = format!(
        "{:#}",
        ModelConfig::from_hf_config(r#"{"model_type": "gemma4"}"#).unwrap_err()
    );
    assert!(err.contains("text_config"), "{err}");
}

#[test]
fn gguf_mixture_of_experts_gemma4_is_refused_naming_the_file() {
    // llama.cpp's gemma-4 vocab file carries the 26B-A4B header: 128 experts.
    let path = shared("vocab/ggml-vocab-gemma-4.gguf");
    let g = GgufFile::open(&path).unwrap();
    let err = format!("{:#}", ModelConfig::from_gguf(&g).unwrap_err());
    assert!(
        err.contains("Mixture-of-Experts") && err.contains("128") && err.contains("gemma-4.gguf"),
        "{err}"
    );
}
