//! Kernel contract of the typed kernels (written once against `store_t`) in the storage types
//! other than bf16, f32 and f16, against float64 host references on fresh random inputs with
//! poisoned outputs: the row kernels and qkv_prepare (rows.rs), split-KV and reference
//! attention over prefill and decode rows alike, in windows of rows as the backend launches them
//! (attention.rs), and pinned cuBLASLt in f32 (no TF32) and f16 (gemm.rs). The bf16 builds of the
//! same kernels are checked by contract_rows, contract_attention and contract_gemm.
//! `typed_planted_bugs_fail` builds the kernels in f32 with a bug planted in their text, one at a
//! time, and checks that the contract catches each.

use crate::common;
use crate::common::reference;

mod attention;
mod gemm;
mod rows;

use common::planted::{assert_planted_compiles, each_planted_bug_fails, planted_module, Bug};
use common::{gpu_with_store_or_skip, Checks, Rng};
use kiln_cuda::device::Gpu;
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

type Part = fn(&Gpu, &mut Rng, &mut Checks);

fn run(test: &str, part: Part) {
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

/// One planted bug each: (module, text, replacement, the contract part that must catch it).
const PLANTED: &[(&str, &str, &str, Part)] = &[
    // The norm forgets its weight.
    (
        "elementwise",
        "o[i] = to_store(v(j, i) * inv * from_store(wv[j]));",
        "o[i] = to_store(v(j, i) * inv);",
        rows::row_kernels,
    ),
    // SwiGLU without the sigmoid.
    (
        "elementwise",
        "return silu_mul(g, u);",
        "return g * u;",
        rows::row_kernels,
    ),
    // Dummy weights one index off.
    (
        "dummy_weights",
        "to_store(dummy_value(seed, i))",
        "to_store(dummy_value(seed, i + 1))",
        rows::row_kernels,
    ),
    // RoPE turning the wrong way.
    (
        "rope_kv",
        "rope_rotate(b[i1], b[i2], c, s, o1, o2);",
        "rope_rotate(b[i1], b[i2], c, -s, o1, o2);",
        rows::qkv_prepare,
    ),
    // The split kernel reads V from the K cache.
    (
        "decode_attn",
        "from_store_vec<PER>(v_cache + base, vf[j]);",
        "from_store_vec<PER>(k_cache + base, vf[j]);",
        attention::attention,
    ),
    // The reference attention forgets the softmax denominator.
    (
        "ref_attn",
        "to_store(l > 0.f ? o[e] / l : 0.f)",
        "to_store(o[e])",
        attention::attention,
    ),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn typed_planted_bugs_fail() {
    let bugs: Vec<Bug> = PLANTED
        .iter()
        .map(|&(m, from, to, _)| (m, from, to))
        .collect();
    each_planted_bug_fails(
        "typed planted bugs",
        StoreType::F32,
        &bugs,
        |bad, i, rng, c| (PLANTED[i].3)(bad, rng, c),
    );
}

/// Every planted bug's text is in its module once, and the planted module compiles into other
/// machine code than the module's (where NVRTC is present), checked without a GPU so that an
/// edit of a kernel shows here first.
#[test]
fn typed_planted_bugs_are_in_the_sources() {
    for &(module, from, to, _) in PLANTED {
        assert_planted_compiles(&planted_module(module, from, to), StoreType::F32, to);
    }
}
