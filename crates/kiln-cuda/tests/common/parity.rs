//! GPU against the CPU reference on one model, shared by the parity tests: a prompt and
//! STEPS greedy steps through both backends, logits within a tolerance per storage type, greedy
//! tokens equal where the CPU's margin exceeds the measured logit error.
#![allow(dead_code)]

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_cuda::StoreType;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};

use crate::common::Checks;
use crate::models::{argmax, cuda_backend_in, rel_err};

pub const STEPS: usize = 32;

/// Logits tolerance (max abs error over max abs logit) of a GPU storing `dtype` against the
/// CPU, on the small fixtures and on the larger dummy models.
pub fn logit_rtol(dtype: StoreType, fixture: bool) -> f64 {
    match (dtype, fixture) {
        (StoreType::F32, true) => 1e-5,
        (StoreType::F32, false) => 1e-4,
        (StoreType::F16, true) => 5e-3,
        (StoreType::F16, false) => 1e-2,
        (StoreType::Bf16, _) => 2e-2,
    }
}

/// Prefill `prompt`, then STEPS greedy steps; returns the logits of every step (prompt first)
/// and the greedy tokens. With `forced`, those tokens are fed instead of the backend's own
/// choices (teacher forcing), so two backends' logits stay comparable step by step.
pub fn greedy_run(
    b: &mut dyn Backend,
    prompt: &[u32],
    forced: Option<&[u32]>,
) -> (Vec<Vec<f32>>, Vec<u32>) {
    let bs = b.kv_geometry().block_size;
    let table: Vec<u32> = (0..(prompt.len() + STEPS + 1).div_ceil(bs) as u32).collect();
    let mut tokens = prompt.to_vec();
    let mut logits = Vec::new();
    let mut gen = Vec::new();
    let mut done = 0;
    for step in 0..STEPS {
        let row = b
            .forward(&[ChunkInput {
                tokens: &tokens[done..],
                start_pos: done,
                block_table: &table,
                want_logits: true,
            }])
            .expect("forward");
        done = tokens.len();
        let next = argmax(&row);
        logits.push(row);
        gen.push(next);
        tokens.push(forced.map_or(next, |f| f[step]));
    }
    (logits, gen)
}

/// Top-1 minus top-2 logit.
pub fn margin(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// GPU (storing `dtype`) vs CPU with the CPU's greedy tokens fed to both. A token choice may
/// differ only where the CPU's top-2 margin is within the measured logit error (a near-tie of
/// random weights); those are listed. With `strict`, every greedy token must match (fixtures
/// have margins by design).
pub fn compare(
    c: &mut Checks,
    name: &str,
    src: &dyn WeightSource,
    prompt: &[u32],
    strict: bool,
    dtype: StoreType,
) -> Vec<Vec<f32>> {
    let rtol = logit_rtol(dtype, strict);
    let mut cpu = CpuBackend::new(
        src,
        CpuOptions {
            kv_blocks: 64,
            block_size: 16,
            threads: None,
            host_blocks: 0,
        },
        None,
    )
    .expect("CPU backend");
    let (cl, ct) = greedy_run(&mut cpu, prompt, None);
    let mut gpu = cuda_backend_in(src, 2048 + 40, dtype);
    let t = std::time::Instant::now();
    let (gl, gt) = greedy_run(&mut gpu, prompt, Some(&ct));
    let gpu_secs = t.elapsed().as_secs_f64();
    let worst = gl
        .iter()
        .zip(&cl)
        .map(|(g, c)| rel_err(g, c))
        .fold(0f64, f64::max);
    c.check(worst <= rtol, format!("{name} {dtype}: GPU vs CPU logits over {STEPS} steps: max rel err {worst:.3e} (prompt {:.3e}), tol {rtol:.0e}, GPU run {:.1}ms", rel_err(&gl[0], &cl[0]), gpu_secs * 1e3));
    let mut ties = Vec::new();
    let mut real = Vec::new();
    for i in 0..STEPS {
        if gt[i] != ct[i] {
            let abs_err = gl[i]
                .iter()
                .zip(&cl[i])
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let m = margin(&cl[i]);
            if !strict && m <= 2.0 * abs_err {
                ties.push(format!(
                    "step {i}: margin {m:.2e} <= 2 x logit error {abs_err:.2e}"
                ));
            } else {
                real.push(format!(
                    "step {i}: GPU {} vs CPU {} (CPU margin {m:.2e}, logit error {abs_err:.2e})",
                    gt[i], ct[i]
                ));
            }
        }
    }
    c.check(real.is_empty(), format!("{name} {dtype}: greedy tokens, {} of {STEPS} equal; near-ties {ties:?}; real differences {real:?}", STEPS - ties.len() - real.len()));
    // The device argmax agrees with the host argmax of the same logits.
    let bs = gpu.kv_geometry().block_size;
    let table: Vec<u32> = (0..(prompt.len() + 1).div_ceil(bs) as u32).collect();
    let ids = gpu
        .forward_greedy(&[ChunkInput {
            tokens: prompt,
            start_pos: 0,
            block_table: &table,
            want_logits: true,
        }])
        .expect("forward_greedy");
    c.check(
        ids == vec![gt[0]],
        format!(
            "{name} {dtype}: forward_greedy {ids:?} vs argmax of forward {}",
            gt[0]
        ),
    );
    gl
}
