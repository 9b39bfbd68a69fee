//! What bf16 and f16 storage legitimately costs, measured on the CPU (no GPU needed): the CPU
//! backend emulating a narrow GPU's rounding points (kiln_cpu::Rounding) against the f32
//! reference. backend_parity holds the GPU to this emulation; these tests show why that is the
//! right judge and that it still catches a planted bug.
//!
//! - `budget_by_rounding_point`: the error each rounding point brings alone, all of them, and
//!   all but one, on the Gemma 4 models and a Llama-shaped control (the table of docs/CUDA.md).
//! - `gemma_amplifies_rounding_through_unscaled_attention`: Gemma 4 attends without a 1/sqrt(hd)
//!   scale over RMS-normed Q and K; with unit norm weights (the dummies, transformers' initial
//!   weights) the softmax is so sharp that the same rounding moves the logits 9-37 times more
//!   than with Q/K norm weights of hd^-1/4 (the scale every other model applies).
//! - `the_emulation_check_separates_kernels_from_bugs`: two valid GPU configurations (decode
//!   probabilities rounded or not: the two decode attention families) stay within half the
//!   check's tolerance of each other; a planted mask bug (a window one key short) falls
//!   outside it on every model with a window. Smaller planted bugs (a RoPE base or the soft
//!   cap 1% off) are printed: on these models they move the logits less than bf16 storage
//!   does, so no bf16 comparison can see them; the f32 parity run (1e-4 / 1e-5) does.

use crate::common::models;
use crate::common::parity;

use kiln_cpu::{Narrow, Rounding};
use kiln_cuda::StoreType;
use kiln_model::dummy::DummySource;
use kiln_model::{HostTensor, ModelConfig, Role, TensorId, WeightSource};
use models::{dummy_gemma_wide, fixture_sources, Rounded};
use parity::{emulate, greedy_run, logit_rtol, max_rel_err, reference_cpu};

/// A model's prompt and f32 reference run (its greedy tokens, which every run is fed).
struct Case {
    name: String,
    src: Box<dyn WeightSource>,
    prompt: Vec<u32>,
}

fn cases(fixtures: &[&str]) -> Vec<Case> {
    let ids = |n: u32, m: u32| (0..n).map(|i| (i * 37 + 11) % m).collect::<Vec<u32>>();
    let mut v = vec![
        Case {
            name: "dummy:gemma4-tiny".into(),
            src: Box::new(DummySource::preset("gemma4-tiny").unwrap()),
            prompt: ids(50, 512),
        },
        Case {
            name: "gemma4-tiny hd 512".into(),
            src: Box::new(dummy_gemma_wide()),
            prompt: ids(100, 512),
        },
        Case {
            name: "dummy:tiny".into(),
            src: Box::new(DummySource::preset("tiny").unwrap()),
            prompt: ids(40, 512),
        },
    ];
    for (name, src) in fixture_sources() {
        if fixtures.contains(&name.as_str()) {
            let prompt = models::fixture_prompt(&name).expect("fixture prompt");
            v.push(Case { name, src, prompt });
        }
    }
    v
}

fn narrow_of(dtype: StoreType) -> Narrow {
    match dtype {
        StoreType::F16 => Narrow::F16,
        _ => Narrow::Bf16,
    }
}

/// The weights as each run sees them: f16 runs (both sides) start from f16 weights, bf16 runs
/// from f32 ones (the GPU rounds them at load).
fn stored(src: &dyn WeightSource, dtype: StoreType) -> Rounded<'_> {
    let store = match dtype {
        StoreType::F16 => StoreType::F16,
        _ => StoreType::F32,
    };
    Rounded { inner: src, store }
}

#[test]
fn budget_by_rounding_point() {
    for dtype in [StoreType::Bf16, StoreType::F16] {
        for c in cases(&["gemma4/hf", "gemma4_wide/hf"]) {
            let src = stored(c.src.as_ref(), dtype);
            let (cl, ct) = greedy_run(&mut reference_cpu(&src, None), &c.prompt, None);
            let none = Rounding::none(narrow_of(dtype));
            let all = Rounding::of_gpu(narrow_of(dtype));
            type Set = fn(&mut Rounding, bool);
            let points: [(&str, Set); 4] = [
                ("projection inputs", |r, v| r.gemm_inputs = v),
                ("Q", |r, v| r.q = v),
                ("K and V", |r, v| r.kv = v),
                ("probabilities", |r, v| r.prefill_probs = v),
            ];
            let mut runs: Vec<(String, bool, Rounding)> = vec![("weights".into(), true, none)];
            for (p, set) in points {
                let mut r = none;
                set(&mut r, true);
                runs.push((format!("{p} alone"), false, r));
            }
            runs.push(("every point".into(), true, all));
            for (p, set) in points {
                let mut r = all;
                set(&mut r, false);
                runs.push((format!("all but {p}"), true, r));
            }
            for (label, weights, r) in runs {
                let el = emulate(&src, dtype, weights, r, &c.prompt, &ct);
                let (worst, first) = (max_rel_err(&el, &cl), max_rel_err(&el[..1], &cl[..1]));
                println!(
                    "BUDGET {} {dtype}: {label:<26} max rel err {worst:.3e} (prompt {first:.3e})",
                    c.name
                );
            }
        }
    }
}

/// `inner` with its Q and K norm weights multiplied by `factor`.
struct ScaledQk<'a> {
    inner: &'a dyn WeightSource,
    factor: f32,
}

impl WeightSource for ScaledQk<'_> {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }
    fn has(&self, id: TensorId) -> bool {
        self.inner.has(id)
    }
    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        let mut t = self.inner.load_f32(id)?;
        if matches!(id.role, Role::QNorm | Role::KNorm) {
            t.data.iter_mut().for_each(|x| *x *= self.factor);
        }
        Ok(t)
    }
}

/// Max rel err of the bf16 emulation against f32 on `src`.
fn bf16_budget(src: &dyn WeightSource, prompt: &[u32]) -> f64 {
    let (cl, ct) = greedy_run(&mut reference_cpu(src, None), prompt, None);
    let r = Rounding::of_gpu(Narrow::Bf16);
    max_rel_err(&emulate(src, StoreType::Bf16, true, r, prompt, &ct), &cl)
}

#[test]
fn gemma_amplifies_rounding_through_unscaled_attention() {
    for c in cases(&["gemma4_wide/hf"]) {
        if c.name == "dummy:tiny" {
            continue;
        }
        let spec = c.src.config().spec();
        let hd = spec.layers.iter().map(|l| l.attn.head_dim).max().unwrap();
        let unit = bf16_budget(c.src.as_ref(), &c.prompt);
        let scaled = ScaledQk {
            inner: c.src.as_ref(),
            factor: (hd as f32).powf(-0.25),
        };
        let small = bf16_budget(&scaled, &c.prompt);
        println!(
            "AMPLIFY {}: bf16 budget {unit:.3e} as it is, {small:.3e} with Q/K norms x hd^-1/4 \
             ({:.1}x)",
            c.name,
            unit / small
        );
        assert!(
            unit > 2e-2 && small < 2e-2 && unit > 4.0 * small,
            "{}: the bf16 budget {unit:.3e} should exceed 2e-2 and shrink below it (and 4x) \
             with scaled Q/K norms, got {small:.3e}",
            c.name
        );
    }
}

/// `inner` under another configuration (a planted bug in the model a "GPU" runs).
struct Reconfigured<'a> {
    inner: &'a dyn WeightSource,
    config: ModelConfig,
}

impl WeightSource for Reconfigured<'_> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn has(&self, id: TensorId) -> bool {
        self.inner.has(id)
    }
    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        self.inner.load_f32(id)
    }
}

#[test]
fn the_emulation_check_separates_kernels_from_bugs() {
    let dtype = StoreType::Bf16;
    for c in cases(&["gemma4/hf", "gemma4_wide/hf"]) {
        let src = stored(c.src.as_ref(), dtype);
        let (cl, ct) = greedy_run(&mut reference_cpu(&src, None), &c.prompt, None);
        let base = Rounding::of_gpu(Narrow::Bf16);
        let el = emulate(&src, dtype, true, base, &c.prompt, &ct);
        let budget = max_rel_err(&el, &cl);
        let tol = logit_rtol(dtype, c.name.ends_with("/hf")).max(budget);
        // Another valid GPU: decode attention on the tensor cores rounds decode rows' probabilities.
        let mma = Rounding {
            decode_probs_max_hd: 256,
            ..base
        };
        let valid = max_rel_err(&emulate(&src, dtype, true, mma, &c.prompt, &ct), &el);
        println!(
            "SEPARATE {}: budget {budget:.3e}, tol {tol:.3e}; valid kernels {valid:.3e}",
            c.name
        );
        assert!(
            valid <= 0.5 * tol,
            "{}: two valid roundings {valid:.3e} apart",
            c.name
        );
        let cfg = c.src.config().clone();
        let mut bugs: Vec<(&str, ModelConfig)> = Vec::new();
        let mut b = cfg.clone();
        b.rope_theta *= 1.01;
        bugs.push(("RoPE base 1% off", b));
        if let Some(w) = cfg.sliding_window {
            let mut b = cfg.clone();
            b.sliding_window = Some(w - 1);
            bugs.push(("window one key short", b));
        }
        if let Some(s) = cfg.logit_softcap {
            let mut b = cfg.clone();
            b.logit_softcap = Some(s * 0.99);
            bugs.push(("soft cap 1% off", b));
        }
        for (what, config) in bugs {
            let buggy = Reconfigured {
                inner: &src,
                config,
            };
            let d = max_rel_err(&emulate(&buggy, dtype, true, base, &c.prompt, &ct), &el);
            println!("SEPARATE {}: planted {what}: {d:.3e}", c.name);
            // Bugs below bf16's resolution on a model (a RoPE base 1% off moves its logits
            // less than storage does) are left to the f32 parity run; a mask one key off is not.
            assert!(
                !what.starts_with("window") || d > tol,
                "{}: planted {what} gives {d:.3e}, within the tolerance {tol:.3e}",
                c.name
            );
        }
    }
}
