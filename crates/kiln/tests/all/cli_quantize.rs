//! `--quantize fp8` as a user meets it: on the CPU `kiln generate` and `kiln bench` run the
//! shipped model with fp8 projections (its tokens are not the unquantised run's: the flag reaches
//! the backend), and without a GPU `--device cuda` says the GPU is what is missing.

use crate::support::{generated_ids, kiln, text};

/// Greedy ids of `kiln generate` on the shipped model with `extra` arguments.
fn generate(extra: &[&str]) -> Result<Vec<u64>, String> {
    let mut args = vec![
        "--prompt",
        "A file descriptor is",
        "-n",
        "24",
        "--ignore-eos",
        "--temperature",
        "0",
    ];
    args.extend_from_slice(extra);
    generated_ids(&args)
}

#[test]
fn fp8_runs_on_the_cpu_and_changes_the_projections() {
    let plain = generate(&["--device", "cpu"]).expect("the CPU runs the shipped model");
    let fp8 = generate(&["--device", "cpu", "--quantize", "fp8"]).expect("the CPU runs fp8");
    assert_eq!(fp8.len(), 24);
    assert_eq!(
        generate(&["--device", "cpu", "--quantize", "fp8"]).unwrap(),
        fp8,
        "fp8 is deterministic"
    );
    assert_ne!(fp8, plain, "fp8 projections give the unquantised tokens");
}

#[test]
fn fp8_bench_runs_on_the_cpu_and_labels_its_rows() {
    let json = std::env::temp_dir().join(format!("kiln-fp8-bench-{}.json", std::process::id()));
    let out = kiln(&[
        "bench",
        "--json",
        json.to_str().unwrap(),
        "--device",
        "cpu",
        "--quantize",
        "fp8",
        "--prefill",
        "64",
        "--decode",
        "8",
        "--repeats",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the bench JSON")).unwrap();
    let _ = std::fs::remove_file(&json);
    let rows = doc["rows"].as_array().expect("rows");
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["weights"] == "fp8"), "{rows:?}");
    assert_eq!(doc["settings"]["quantize"], "fp8");
}

#[test]
fn fp8_on_a_missing_gpu_says_so() {
    if kiln_cuda::unavailable_reason().is_none() {
        return;
    }
    let err = generate(&["--device", "cuda", "--quantize", "fp8"]).unwrap_err();
    assert!(err.contains("CUDA backend not available"), "{err}");
}
