//! Gemma 4's assistant (`gemma4_assistant`) as kiln-model reads it: transformers' config with
//! its blocks under `text_config`, the checks `Gemma4AssistantConfig` makes, the fixtures'
//! folders with their integer token ordering, and the binding to a target.

use crate::support::assistant_fixture;

use assistant_fixture::{AssistantFixture, ASSISTANT_FIXTURES};
use kiln_model::{Arch, HfSource, ModelConfig, OrderedEmbeddings, Role, TensorId, WeightSource};

fn assistant(top: &str, text: &str) -> anyhow::Result<ModelConfig> {
    ModelConfig::from_hf_config(&format!(
        r#"{{"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
            "backbone_hidden_size": 256 {top},
            "text_config": {{"model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 32, "global_head_dim": 64,
                "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64,
                "hidden_size_per_layer_input": 0 {text}}}}}"#
    ))
}

#[test]
fn an_assistant_config_reads_as_transformers_reads_it() {
    let c = assistant(
        r#", "use_ordered_embeddings": true, "num_centroids": 16, "centroid_intermediate_top_k": 4"#,
        "",
    )
    .unwrap();
    assert_eq!(c.arch, Arch::Gemma4Assistant);
    // num_kv_shared_layers absent: every layer reads the target's KV.
    assert_eq!(c.kv_shared_layers, 2);
    let a = c.assistant.unwrap();
    assert_eq!(a.backbone_hidden_size, 256);
    assert_eq!(
        a.ordered_embeddings,
        Some(OrderedEmbeddings {
            centroids: 16,
            top_k: 4
        })
    );
    assert!(c.tie_embeddings && c.per_layer_input == 0);
    // Without ordered embeddings, transformers' defaults stay unused.
    let plain = assistant("", r#", "num_kv_shared_layers": 2"#).unwrap();
    assert_eq!(plain.assistant.unwrap().ordered_embeddings, None);
    // Its tensors: Q only, the projections, the centroids and the ordering.
    let ids = TensorId::all(&c);
    assert!(ids.contains(&TensorId::global(Role::DraftPreProjection)));
    assert!(ids.contains(&TensorId::global(Role::TokenOrdering)));
    assert!(!ids.contains(&TensorId::layer(0, Role::K)));
    assert_eq!(
        TensorId::global(Role::DraftPreProjection).shape(&c),
        vec![64, 512]
    );
    assert_eq!(
        TensorId::global(Role::TokenOrdering)
            .hf_name(c.arch)
            .as_deref(),
        Some("masked_embedding.token_ordering")
    );
}

#[test]
fn what_transformers_refuses_is_refused_by_name() {
    let cases = [
        ("", r#", "num_kv_shared_layers": 1"#, "num_kv_shared_layers"),
        (
            "",
            r#", "hidden_size_per_layer_input": 8"#,
            "per-layer inputs",
        ),
        ("", r#", "use_double_wide_mlp": true"#, "double-wide"),
        (
            r#", "use_ordered_embeddings": true, "num_centroids": 15"#,
            "",
            "15 centroids",
        ),
        (
            r#", "use_ordered_embeddings": true, "num_centroids": 16, "centroid_intermediate_top_k": 17"#,
            "",
            "centroid_intermediate_top_k",
        ),
        ("", r#", "enable_moe_block": true"#, "Mixture-of-Experts"),
    ];
    for (top, text, want) in cases {
        let e = format!("{:#}", assistant(top, text).unwrap_err());
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn the_fixtures_load_and_bind_to_their_targets() {
    for name in ASSISTANT_FIXTURES {
        let f = AssistantFixture::load(name);
        let a = HfSource::open(&f.assistant_dir).unwrap();
        let target = HfSource::open(&f.target_dir).unwrap();
        let spec = a.config().draft_spec(target.config()).unwrap();
        // Two sliding layers read the target's layer 0, the full one its layer 1.
        let kv: Vec<_> = spec.layers.iter().map(|l| l.attn.kv_from).collect();
        assert_eq!(kv, [Some(0), Some(0), Some(1)], "{name}");
        assert!(spec.layers[0].attn.window.unwrap() < f.points[0], "{name}");
        let ordered = spec.draft.unwrap().ordered.is_some();
        assert_eq!(ordered, name == "gemma4_assistant");
        if ordered {
            // Stored as int64 ids: read exactly, a permutation of the vocabulary.
            let t = a.load_f32(TensorId::global(Role::TokenOrdering)).unwrap();
            kiln_model::draft_spec::token_ordering(&t.data, f.vocab).unwrap();
        }
    }
}
