//! Kernel contract of the typed kernels (written once against `store_t`) in the storage types
//! other than bf16, f32 and f16, against float64 host references on fresh random inputs with
//! poisoned outputs: the row kernels and qkv_prepare (rows.rs), split-KV and reference
//! attention over prefill and decode rows alike, in windows of rows as the backend launches them
//! (attention.rs), and pinned cuBLASLt in f32 (no TF32) and f16 (gemm.rs). The bf16 builds of the
//! same kernels are checked by contract_rows, contract_attention and contract_gemm.

mod common;
#[path = "common/reference.rs"]
mod reference;

#[path = "contract_typed/attention.rs"]
mod attention;
#[path = "contract_typed/gemm.rs"]
mod gemm;
#[path = "contract_typed/rows.rs"]
mod rows;

use common::{gpu_with_store_or_skip, Checks, Rng};
use kiln_cuda::StoreType;

const FORMATS: [StoreType; 2] = [StoreType::F32, StoreType::F16];

/// (atol, rtol) of a value computed in f32 and rounded to `store` once: a few f32 ulps for f32
/// (the f32 sums of a row differ from float64 by that much), two half-ulps for f16.
fn rounded(store: StoreType) -> (f64, f64) {
    match store {
        StoreType::F32 => (1e-6, 1e-5),
        StoreType::F16 => (1e-6, 1.0 / 1024.0),
        StoreType::Bf16 => (1e-6, 1.0 / 128.0),
    }
}

/// Random values in [-amp, amp) as the device stores them.
fn stored_vec(rng: &mut Rng, store: StoreType, n: usize, amp: f32) -> Vec<f32> {
    rng.vec(n, amp)
        .into_iter()
        .map(|x| store.round(x))
        .collect()
}

fn run(test: &str, part: fn(&kiln_cuda::device::Gpu, &mut Rng, &mut Checks)) {
    for store in FORMATS {
        let name = format!("{test}_{store}");
        let Some(gpu) = gpu_with_store_or_skip(&name, store) else {
            return;
        };
        let mut rng = Rng::new(&name);
        let mut c = Checks::new(&name);
        part(&gpu, &mut rng, &mut c);
        c.finish();
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn typed_row_kernels_contract() {
    run("typed_rows", rows::row_kernels);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn typed_qkv_prepare_contract() {
    run("typed_qkv_prepare", rows::qkv_prepare);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn typed_attention_contract() {
    run("typed_attention", attention::attention);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn typed_gemm_contract() {
    run("typed_gemm", gemm::lt_gemm);
}
