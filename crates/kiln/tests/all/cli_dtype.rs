//! `--dtype` on the GPU as a user meets it: f32 runs an f32 checkpoint as the CPU does (the same
//! greedy tokens from `kiln generate`), f16 takes checkpoints stored in f16 and refuses others by
//! name, and without a GPU both say the GPU is what is missing.

use std::path::PathBuf;

use crate::support::generated_ids;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    p.to_string_lossy().into_owned()
}

/// `kiln generate` greedy on `model`; the generated ids, or the error text.
fn generate(model: &str, device: &str, dtype: &str) -> Result<Vec<u64>, String> {
    generated_ids(&[
        "--model",
        model,
        "--device",
        device,
        "--dtype",
        dtype,
        "--prompt",
        "The potter loads the kiln with care",
        "-n",
        "24",
        "--ignore-eos",
        "--temperature",
        "0",
        "--ignore-generation-config",
    ])
}

#[test]
fn dtype_on_the_gpu_says_what_is_missing_or_runs() {
    let model = fixture("llama/hf");
    let cpu = generate(&model, "cpu", "f32").expect("the CPU runs f32");
    assert_eq!(cpu.len(), 24);
    // --device auto: the GPU in f32 where there is one, else the CPU; the same tokens.
    assert_eq!(generate(&model, "auto", "f32"), Ok(cpu.clone()));
    match kiln_cuda::unavailable_reason() {
        Some(_) => {
            for dtype in ["f32", "f16"] {
                let err = generate(&model, "cuda", dtype).unwrap_err();
                assert!(
                    err.contains("CUDA backend not available") && err.contains("--device cpu"),
                    "{err}"
                );
            }
        }
        None => {
            // An f32 checkpoint in f32 on the GPU: the CPU's greedy tokens.
            assert_eq!(generate(&model, "cuda", "f32"), Ok(cpu));
            // It is not stored in f16: refused, naming what it stores.
            let err = generate(&model, "cuda", "f16").unwrap_err();
            assert!(
                err.contains("stored in f16") && err.contains("F32"),
                "{err}"
            );
        }
    }
}
