//! Shared test support: seeded inputs, random weights, small model shapes, an f64 reference
//! forward pass, and helpers that drive a backend the way the engine does.
#![allow(dead_code, unused_imports)]

pub mod configs;
pub mod quant_source;
pub mod random_source;
pub mod reference;
pub mod rng;

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};

pub use random_source::RandomSource;
pub use rng::Rng;

/// A backend whose KV pool is poisoned, so that reading a slot no step wrote shows as NaN.
pub fn backend(src: &dyn WeightSource, kv_blocks: usize, block_size: usize) -> CpuBackend {
    let opts = CpuOptions {
        kv_blocks,
        block_size,
        threads: None,
        host_blocks: 0,
        fp8: false,
    };
    let mut b = CpuBackend::new(src, opts, None).unwrap();
    b.poison_kv_cache();
    b
}

/// Every block id of a pool of `pool` blocks, in shuffled order.
pub fn shuffled_blocks(pool: usize, seed: u64) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..pool as u32).collect();
    Rng::new(seed).shuffle(&mut ids);
    ids
}

pub fn random_tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(vocab) as u32).collect()
}

/// Runs one sequence alone in chunks of the given sizes (which must sum to `tokens.len()`),
/// asking for logits at the end of every chunk; returns those rows.
pub fn run_in_chunks(
    b: &mut CpuBackend,
    tokens: &[u32],
    table: &[u32],
    sizes: &[usize],
) -> Vec<Vec<f32>> {
    assert_eq!(sizes.iter().sum::<usize>(), tokens.len());
    let mut start = 0;
    let mut rows = Vec::new();
    for &n in sizes {
        let chunk = ChunkInput {
            tokens: &tokens[start..start + n],
            start_pos: start,
            block_table: table,
            want_logits: true,
        };
        rows.push(b.forward(&[chunk]).unwrap());
        start += n;
    }
    rows
}

/// Prefills the first `sizes.iter().sum()` tokens in chunks of `sizes`, then decodes the rest
/// one by one. Returns the logits at the end of each chunk and of each decode step.
pub fn prefill_then_decode(
    b: &mut CpuBackend,
    tokens: &[u32],
    table: &[u32],
    sizes: &[usize],
) -> Vec<Vec<f32>> {
    let prompt: usize = sizes.iter().sum();
    let mut rows = run_in_chunks(b, &tokens[..prompt], table, sizes);
    for pos in prompt..tokens.len() {
        let step = ChunkInput {
            tokens: &tokens[pos..pos + 1],
            start_pos: pos,
            block_table: table,
            want_logits: true,
        };
        rows.push(b.forward(&[step]).unwrap());
    }
    rows
}

/// Whether two logit rows are the same bits.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Largest `|a - b|` relative to the largest `|b|`.
pub fn max_rel_diff(a: &[f32], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((*x as f64 - y).abs()));
    if a.iter().any(|x| !x.is_finite()) {
        f64::INFINITY
    } else {
        diff / scale
    }
}

/// Runs test `test_name` of module `module` (the caller's `module_path!()`) of this test binary
/// again in a child process with the portable kernels (`KILN_CPU_SIMD=portable`), so the
/// exactness contract is checked for both instruction sets. Does nothing inside that child.
pub fn rerun_with_portable_kernels(module: &str, test_name: &str) {
    if std::env::var("KILN_CPU_SIMD").is_ok_and(|v| v == "portable") {
        return;
    }
    // The harness names a test by its path below the crate root.
    let module = module
        .split_once("::")
        .map_or("", |(_, below_root)| below_root);
    let test_name = format!("{module}::{test_name}");
    let exe = std::env::current_exe().expect("test binary path");
    let output = std::process::Command::new(exe)
        .args([test_name.as_str(), "--exact", "--test-threads=1"])
        .env("KILN_CPU_SIMD", "portable")
        .output()
        .expect("child test process starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test_name} with portable kernels:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
