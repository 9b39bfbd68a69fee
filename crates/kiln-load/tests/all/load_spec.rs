//! `kiln_load::load` for each kind of spec: GGUF file, Hugging Face folder, dummy preset.

use crate::fixtures;
use crate::test_data;

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

/// `dummy:PRESET:FORMAT` offers its matrices as blocks and says so: the header counts the
/// tensor types and the bytes as stored; an unknown format is named in the error.
#[test]
fn quantised_dummies_describe_their_blocks() {
    let m = load("dummy:tiny:q4_k_m").unwrap();
    assert_eq!(m.name, "dummy:tiny:q4_k_m");
    let types = &m.description.tensor_types;
    assert!(
        types.contains_key("Q4_K") && types.contains_key("Q6_K"),
        "{types:?}"
    );
    let plain = load("dummy:tiny").unwrap();
    assert!(m.description.weight_bytes * 4 < plain.description.weight_bytes);
    let v = TensorId::layer(3, Role::V);
    let q = m.weights.load_quantized(v).unwrap().unwrap();
    assert_eq!(q.dtype, kiln_formats::DType::Q6K);
    let err = format!("{:#}", load("dummy:tiny:q5_k").unwrap_err());
    assert!(err.contains("q5_k") && err.contains("q4_k_m"), "{err}");
}

/// A Gemma 4 folder loads its tokenizer and chat template the usual way: the fixture's
/// tokenizer.json, and the Gemma 4 template of the test data as chat_template.jinja beside it,
/// rendering Gemma's turns with the tokenizer's BOS.
#[test]
fn a_gemma4_folder_loads_its_tokenizer_and_chat_template() {
    let f = Fixture::load("gemma4");
    let dir = std::env::temp_dir().join(format!("kiln-gemma4-folder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&f.hf_dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let template = test_data::templates_dir().join("google-gemma-4-31B-it.jinja");
    std::fs::copy(&template, dir.join("chat_template.jinja")).unwrap();
    let m = load(dir.to_str().unwrap()).unwrap();
    assert_eq!(m.config.arch, Arch::Gemma4);
    assert_eq!(m.tokenizer.bos_id(), Some(2));
    assert!(m.description.has_chat_template);
    let chat = m.tokenizer.chat_template().unwrap();
    let text = chat
        .render(
            &[kiln_tokenizer::ChatMessage::new("user", "Fire the kiln.")],
            true,
        )
        .unwrap();
    assert!(
        text.starts_with("<bos><|turn>user\nFire the kiln.<turn|>\n<|turn>model\n"),
        "{text:?}"
    );
    let ids = m.tokenizer.encode(&f.prompt_text, true).unwrap();
    assert_eq!(ids[..f.prompt_ids.len()], f.prompt_ids[..]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The Gemma 4 text model of a Gemma4ForConditionalGeneration checkpoint loads with notes
/// that say what is not run.
#[test]
fn a_gemma4_multimodal_checkpoint_loads_its_text_model_with_notes() {
    let f = Fixture::load("gemma4");
    let folder = load(f.hf_dir.to_str().unwrap()).unwrap();
    let mm = load(f.hf_dir.with_file_name("multimodal").to_str().unwrap()).unwrap();
    assert_eq!(mm.config, folder.config);
    assert!(folder.notes.is_empty());
    let notes = mm.notes.join("\n");
    for needle in [
        "Gemma4ForConditionalGeneration",
        "vision tower",
        "audio tower",
    ] {
        assert!(notes.contains(needle), "{notes}");
    }
    assert!(mm.description.param_count == folder.description.param_count);
}
