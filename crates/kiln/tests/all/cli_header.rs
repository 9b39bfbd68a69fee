//! `kiln tokenize`, `kiln detokenize` and `kiln info` from the header alone: every vocabulary-only
//! GGUF of the test data (llama.cpp's own tokenizer cases as the expected ids), a Hugging Face
//! folder without its safetensors, and architectures kiln does not run.

use crate::support::{kiln, text};
use crate::test_data;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every `ggml-vocab-*.gguf` of the test data, by name.
fn vocabularies() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(test_data::vocab_dir())
        .expect("the vocabulary folder")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let file = path.file_name()?.to_str()?.to_string();
            let name = file.strip_prefix("ggml-vocab-")?.strip_suffix(".gguf")?;
            Some((name.to_string(), path))
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 12,
        "expected the 12 vocabularies, found {out:?}"
    );
    out
}

/// llama.cpp's expected ids of the case "Hello world" (its test-tokenizer-0 cases).
fn hello_world_ids(vocab: &Path) -> Vec<u64> {
    let inp = std::fs::read_to_string(vocab.with_extension("gguf.inp")).expect(".inp");
    let out = std::fs::read_to_string(vocab.with_extension("gguf.out")).expect(".out");
    let i = inp
        .split("\n__ggml_vocab_test__\n")
        .position(|c| c == "Hello world")
        .expect("a \"Hello world\" case");
    out.lines()
        .nth(i)
        .expect("its ids")
        .split_whitespace()
        .map(|t| t.parse().expect("an id"))
        .collect()
}

#[test]
fn tokenize_and_info_read_every_vocabulary_only_file() {
    for (name, path) in vocabularies() {
        let p = path.to_str().unwrap();
        let info = kiln(&["info", "--model", p]);
        let shown = text(&info.stdout);
        assert!(
            info.status.success(),
            "{name}: info failed: {}",
            text(&info.stderr)
        );
        for needle in [
            "architecture:",
            "shape:",
            "layers",
            "runs:          no",
            "vocabulary only",
        ] {
            assert!(shown.contains(needle), "{name}: no {needle:?} in\n{shown}");
        }
        let tok = kiln(&["tokenize", "--model", p, "--no-special", "Hello world"]);
        assert!(
            tok.status.success(),
            "{name}: tokenize failed: {}",
            text(&tok.stderr)
        );
        let ids: Vec<u64> = serde_json::from_str(text(&tok.stdout).trim()).expect("a JSON array");
        assert_eq!(ids, hello_world_ids(&path), "{name}");
        // And back: the ids give the text again (on two vocabularies: each load costs a second).
        if !matches!(name.as_str(), "llama-spm" | "llama-bpe") {
            continue;
        }
        let words: Vec<String> = ids.iter().map(u64::to_string).collect();
        let mut args = vec!["detokenize", "--model", p, "--json"];
        args.extend(words.iter().map(String::as_str));
        let back = kiln(&args);
        assert!(back.status.success(), "{name}: {}", text(&back.stderr));
        let s: String = serde_json::from_str(text(&back.stdout).trim()).expect("a JSON string");
        assert_eq!(s.trim_start(), "Hello world", "{name}");
    }
    // WordPiece frames the input in [CLS] ... [SEP] when special tokens are added.
    let bert = test_data::vocab("bert-bge");
    let out = kiln(&["tokenize", "--model", bert.to_str().unwrap(), "Hello world"]);
    let ids: Vec<u64> = serde_json::from_str(text(&out.stdout).trim()).expect("a JSON array");
    assert_eq!(ids, [101, 7592, 2088, 102]);
}

#[test]
fn info_names_what_kiln_lacks_for_a_model_it_does_not_run() {
    // The gemma-4 vocabulary file carries the header of the 26B-A4B model: Mixture-of-Experts.
    let gemma = test_data::vocab("gemma-4");
    let out = kiln(&["info", "--model", gemma.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["architecture"], "gemma4");
    assert_eq!(v["supported_architecture"], false);
    assert_eq!(v["runnable"], false);
    assert_eq!(v["shape"]["layers"], 30);
    assert_eq!(v["vocab_size"], 262_144);
    let missing = v["missing"].as_array().unwrap();
    assert!(
        missing.iter().any(|m| m
            .as_str()
            .unwrap()
            .contains("Mixture-of-Experts gemma4 models (128 experts)")),
        "{v}"
    );
    assert!(
        missing
            .iter()
            .any(|m| m.as_str().unwrap().contains("vocabulary only")),
        "{v}"
    );
    // Generating from it is refused with the same reasons and what still works.
    let gen = kiln(&[
        "generate",
        "--model",
        gemma.to_str().unwrap(),
        "-p",
        "x",
        "-n",
        "1",
    ]);
    let err = text(&gen.stderr);
    assert!(!gen.status.success());
    assert!(err.contains("gemma4") && err.contains("kiln info"), "{err}");
    // A vocabulary-only file of an architecture kiln runs: only the weights are missing.
    let llama = test_data::vocab("llama-bpe");
    let gen = kiln(&[
        "generate",
        "--model",
        llama.to_str().unwrap(),
        "-p",
        "x",
        "-n",
        "1",
    ]);
    let err = text(&gen.stderr);
    assert!(!gen.status.success());
    assert!(
        err.contains("vocabulary only") && err.contains("full GGUF"),
        "{err}"
    );
}

#[test]
fn a_hugging_face_folder_without_weights_tokenizes_and_says_what_is_missing() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/kiln-4m/hf");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-4m-no-weights");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        std::fs::copy(shipped.join(f), dir.join(f)).unwrap();
    }
    let d = dir.to_str().unwrap();
    let gguf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/kiln-4m/kiln-4m-f16.gguf");
    let from_folder = kiln(&["tokenize", "--model", d, "A file descriptor is"]);
    let from_gguf = kiln(&[
        "tokenize",
        "--model",
        gguf.to_str().unwrap(),
        "A file descriptor is",
    ]);
    assert!(
        from_folder.status.success(),
        "{}",
        text(&from_folder.stderr)
    );
    assert_eq!(
        from_folder.stdout, from_gguf.stdout,
        "the folder's tokenizer is the GGUF's"
    );
    let info = kiln(&["info", "--model", d]);
    let shown = text(&info.stdout);
    assert!(info.status.success(), "{}", text(&info.stderr));
    assert!(
        shown.contains("architecture:  llama") && shown.contains("safetensors"),
        "{shown}"
    );
    assert!(shown.contains("runs:          no"), "{shown}");
}

#[test]
fn detokenize_reads_ids_from_arguments_or_stdin_and_refuses_unknown_ones() {
    let ids = kiln(&[
        "tokenize",
        "--model",
        "dummy:tiny",
        "--no-special",
        "Hi there",
    ]);
    let list = text(&ids.stdout);
    let back = kiln(&["detokenize", "--model", "dummy:tiny", list.trim()]);
    assert!(back.status.success(), "{}", text(&back.stderr));
    assert_eq!(text(&back.stdout), "Hi there\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["detokenize", "--model", "dummy:tiny"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"72, 105\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "Hi\n");
    let bad = kiln(&["detokenize", "--model", "dummy:tiny", "99999"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("outside the vocabulary (512 tokens"),
        "{}",
        text(&bad.stderr)
    );
    let junk = kiln(&["detokenize", "--model", "dummy:tiny", "1", "two"]);
    assert!(text(&junk.stderr).contains("`two` is not a token id"));
}

#[test]
fn parameter_counts_read_in_human_units() {
    let out = kiln(&["info"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("parameters:    4.00M\n"), "{shown}");
    let tiny = text(&kiln(&["info", "--model", "dummy:llama3-8b"]).stdout);
    assert!(tiny.contains("parameters:    8.03B\n"), "{tiny}");
}
