//! `kiln_load::load` for each kind of spec: GGUF file, Hugging Face folder, dummy preset.

#[path = "../../kiln-model/tests/support/fixtures.rs"]
mod fixtures;

use fixtures::{Fixture, FIXTURES};
use kiln_load::load;
use kiln_model::{Arch, Role, TensorId};

#[test]
fn both_copies_of_each_fixture_load_with_the_same_tokenization() {
    for name in FIXTURES {
        let f = Fixture::load(name);
        let text = &f.prompt_text;
        let hf = load(f.hf_dir.to_str().unwrap()).unwrap();
        let gg = load(f.gguf.to_str().unwrap()).unwrap();
        assert_eq!(hf.config.arch, gg.config.arch);
        // transformers' tokenization of the prompt (truncated to 40) is what both tokenizers give.
        for m in [&hf, &gg] {
            let ids = m.tokenizer.encode(text, true).unwrap();
            assert_eq!(
                ids[..f.prompt_ids.len()],
                f.prompt_ids[..],
                "{name}: {}",
                m.tokenizer.kind()
            );
        }
        assert_eq!(gg.name, format!("kiln-fixture-{name}"));
        assert_eq!(hf.name, "hf");
        assert_eq!(gg.description.format, "GGUF v3");
        assert_eq!(hf.description.format, "safetensors (1 file)");
        assert_eq!(
            hf.description.tensor_types.keys().collect::<Vec<_>>(),
            vec!["F32"]
        );
        assert_eq!(hf.description.param_count, hf.config.param_count());
        // The weights handle is usable.
        let e = gg
            .weights
            .load_f32(TensorId::global(Role::TokenEmbd))
            .unwrap();
        assert_eq!(e.shape, vec![gg.config.vocab_size, gg.config.hidden_size]);
    }
}

#[test]
fn dummy_presets_load_with_a_byte_level_tokenizer() {
    let m = load("dummy:tiny").unwrap();
    assert_eq!(m.name, "dummy:tiny");
    assert_eq!(m.config.arch, Arch::Llama);
    assert_eq!(m.tokenizer.vocab_size(), m.config.vocab_size);
    assert!(m.description.has_chat_template);
    assert!(m.description.format.starts_with("dummy"));
    let shown = m.description.to_string();
    assert!(shown.contains("F32 x") && shown.contains("byte"), "{shown}");
    let big = load("dummy:qwen3-8b").unwrap();
    assert_eq!(big.config.arch, Arch::Qwen3);
    assert_eq!(
        big.weights.dummy_fill(TensorId::layer(0, Role::QNorm)),
        Some(kiln_model::DummyFill::Ones)
    );
}

#[test]
fn bad_specs_are_clear_errors() {
    let err = format!("{:#}", load("dummy:huge").unwrap_err());
    assert!(err.contains("huge") && err.contains("llama3-8b"), "{err}");
    let err = format!("{:#}", load("/no/such/model.gguf").unwrap_err());
    assert!(
        err.contains("/no/such/model.gguf") && err.contains("dummy:PRESET"),
        "{err}"
    );
    // A folder without config.json.
    let dir = fixtures::fixtures_dir();
    let err = format!("{:#}", load(dir.to_str().unwrap()).unwrap_err());
    assert!(err.contains("config.json"), "{err}");
    // A file that is not GGUF.
    let not_gguf = Fixture::load("llama").hf_dir.join("config.json");
    let err = format!("{:#}", load(not_gguf.to_str().unwrap()).unwrap_err());
    assert!(err.contains("config.json"), "{err}");
}
