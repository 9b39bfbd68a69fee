//! GPU vs CPU reference: the same model through CudaBackend and kiln_cpu's CpuBackend: prompt
//! logits and every greedy step's logits within 1e-5 of the f32 CPU in f32 on the fixtures
//! (1e-4 on the larger dummy models); in bf16 and f16 within the storage budget of the CPU
//! emulating the GPU's rounding (common/parity.rs; at least 2e-2 in bf16); identical greedy
//! tokens; on dummy:tiny, a
//! head-dim-128 dummy model, Gemma 4 dummies (every layer kind; head dim 512 on full layers;
//! decode across the sliding window) and every fixture model (GGUF and HF folder); on the
//! fixtures also against the recorded transformers logits and continuations. In f32 every fixture's greedy
//! tokens must match, the small margins included (the f32 parity run of scripts/gpu-check.sh).
//! In f16 the models are first rounded to f16, as an f16 checkpoint holds them, and both
//! backends run those weights (the fixed part of the tolerance 5e-3 on the fixtures, 1e-2 on
//! the dummies).

use crate::common;
use crate::common::models;
use crate::common::parity;

use common::{gpu_or_skip, Checks};
use kiln_cuda::StoreType;
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use models::{
    cuda_backend_in, dummy_gemma_wide, dummy_mid, fixture_reference, fixture_sources, rel_err,
    Rounded,
};
use parity::{compare, greedy_run, logit_rtol};

/// The model as a checkpoint for `dtype` holds it: f16 weights rounded to f16 (an f16 GPU
/// then stores exactly the CPU's weights); f32 and bf16 runs start from the f32 weights.
fn as_stored(src: &dyn WeightSource, dtype: StoreType) -> Rounded<'_> {
    let store = match dtype {
        StoreType::F16 => StoreType::F16,
        _ => StoreType::F32,
    };
    Rounded { inner: src, store }
}

fn dummy_models(test: &str, dtype: StoreType) {
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut c = Checks::new(test);
    let tiny = DummySource::preset("tiny").expect("dummy:tiny");
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 37 + 11) % 512).collect();
    compare(
        &mut c,
        "dummy:tiny",
        &as_stored(&tiny, dtype),
        &prompt,
        false,
        dtype,
    );
    let mid = dummy_mid();
    let prompt: Vec<u32> = (0..300u32).map(|i| (i * 7919 + 13) % 32_000).collect();
    let name = "dummy mid (hd 128, GQA 4)";
    compare(&mut c, name, &as_stored(&mid, dtype), &prompt, false, dtype);
    // Gemma 4 (64-token window on the sliding layers): a 50-token prompt whose decode steps
    // cross the window's edge, and a 100-token one past it.
    let gemma = DummySource::preset("gemma4-tiny").expect("dummy:gemma4-tiny");
    let prompt: Vec<u32> = (0..50u32).map(|i| (i * 37 + 11) % 512).collect();
    compare(
        &mut c,
        "dummy:gemma4-tiny",
        &as_stored(&gemma, dtype),
        &prompt,
        false,
        dtype,
    );
    let prompt: Vec<u32> = (0..100u32).map(|i| (i * 37 + 11) % 512).collect();
    let wide = dummy_gemma_wide();
    let name = "dummy gemma4-tiny, full layers hd 512";
    compare(
        &mut c,
        name,
        &as_stored(&wide, dtype),
        &prompt,
        false,
        dtype,
    );
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_matches_cpu_on_dummy_models() {
    dummy_models("parity_dummy", StoreType::Bf16);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_f32_matches_cpu_on_dummy_models() {
    dummy_models("parity_dummy_f32", StoreType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_f16_matches_cpu_on_dummy_models() {
    dummy_models("parity_dummy_f16", StoreType::F16);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_matches_cpu_on_fixtures() {
    fixtures("parity_fixtures", StoreType::Bf16);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_f32_matches_cpu_on_fixtures() {
    fixtures("parity_fixtures_f32", StoreType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_f16_matches_cpu_on_fixtures() {
    fixtures("parity_fixtures_f16", StoreType::F16);
}

fn fixtures(test: &str, dtype: StoreType) {
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let sources = fixture_sources();
    if sources.is_empty() {
        let msg = format!(
            "no fixture models under {}",
            models::fixtures_dir().display()
        );
        assert!(
            std::env::var("KILN_REQUIRE_GPU").as_deref() != Ok("1"),
            "KILN_REQUIRE_GPU=1 but {msg}"
        );
        eprintln!("SKIP {test}: {msg}");
        return;
    }
    let mut c = Checks::new(test);
    for (name, src) in &sources {
        let Some(reference) = fixture_reference(name) else {
            c.check(
                false,
                format!("{name}: reference.json missing or unreadable"),
            );
            continue;
        };
        let prompt: Vec<u32> = reference["prompt_ids"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<u32> = reference["continuation_ids"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default();
        let stored = as_stored(src.as_ref(), dtype);
        let measured = compare(&mut c, name, &stored, &prompt, true, dtype);
        let gl = measured.logits;
        if dtype == StoreType::F16 || kiln_cuda::switches::Switches::from_env().fp8 {
            // transformers ran the f32 weights, not their f16 rounding nor fp8 projections
            // (with KILN_FP8=1 the reference is the CPU's fp8 emulation, compared above).
            continue;
        }
        // Free-running GPU greedy decoding reproduces transformers' continuation.
        let mut gpu = cuda_backend_in(src.as_ref(), 2048 + 40, dtype);
        let (_, gt) = greedy_run(&mut gpu, &prompt, None);
        let n = want.len().min(gt.len());
        c.check(
            gt[..n] == want[..n],
            format!(
                "{name} {dtype}: GPU greedy continuation vs transformers: {:?} vs {:?}",
                &gt[..n],
                &want[..n]
            ),
        );
        // The recorded logits: one row per continuation step.
        let dir = name.split('/').next().unwrap_or_default();
        let file = reference["logits_file"].as_str().unwrap_or("logits.f32");
        if let Ok(bytes) = std::fs::read(models::fixtures_dir().join(dir).join(file)) {
            let v = src.config().vocab_size;
            let rows: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let worst = (0..n.min(rows.len() / v))
                .map(|i| rel_err(&gl[i], &rows[i * v..(i + 1) * v]))
                .fold(0f64, f64::max);
            // As against the CPU's f32: the fixed tolerance or 1.5 storage budgets.
            let rtol = logit_rtol(dtype, true).max(1.5 * measured.budget);
            c.check(worst <= rtol, format!("{name} {dtype}: GPU vs transformers logits: max rel err {worst:.3e}, tol {rtol:.3e}"));
        }
    }
    c.finish();
}
