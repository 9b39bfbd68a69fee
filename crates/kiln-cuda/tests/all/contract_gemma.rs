//! Kernel contract for the block extras of Gemma 4 (kernels/gemma.cu): GeGLU, the norm of a
//! pending block output, the residual stream cast to the storage type, the per-layer inputs
//! (token table gathered by id, mixed with the projected embedding), the per-layer gate, the
//! layer output scale, the logits' soft cap and the post-norms fused with their consumers (also
//! bit for bit against the two launches they replace), against float64 host references on fresh
//! random inputs, odd sizes and poisoned outputs (bf16 kernels). `planted_bugs_fail` loads
//! gemma.cu with a bug planted in its text, one at a time, and checks that the contract fails.

use crate::common;

use common::{f32_bits, from_bf16, poisoned, round_bf16, timed, to_bf16, Checks, Rng};
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_model::{Activation, PerLayerInputSpec};

/// bf16 outputs: within a couple of bf16 ulps of the reference.
const BF16_RTOL: f64 = 1.0 / 128.0;

fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

fn silu_ref(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn rms_inv(v: &[f64], eps: f32) -> f64 {
    1.0 / (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64 + eps as f64).sqrt()
}

fn up_f32(gpu: &Gpu, v: &[f32]) -> DevBuf<f32> {
    let d = gpu.alloc::<f32>(v.len()).unwrap();
    d.upload(0, v).unwrap();
    d
}

fn up_bf16(gpu: &Gpu, v: &[f32]) -> DevBuf<u16> {
    let d = gpu.alloc::<u16>(v.len()).unwrap();
    d.upload(0, &to_bf16(v)).unwrap();
    d
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gemma_kernels_contract() {
    crate::common::run_contract("gemma_kernels_contract", "gemma", contract);
}

/// gemma.cu with one planted bug each: (text, replacement).
const PLANTED: &[(&str, &str)] = &[
    // GELU's cubic term off.
    ("0.044715f * (x * x * x)", "0.04715f * (x * x * x)"),
    // The post-norm forgets to normalise.
    (
        "d[i] = d[i] * inv * from_store(w[i]);",
        "d[i] = d[i] * from_store(w[i]);",
    ),
    // The per-layer inputs lose the token table's term.
    (
        "p[i] = (v + from_store(e[i]) * table_scale) * mix_scale;",
        "p[i] = v * mix_scale;",
    ),
    // The token table is read at the row index instead of the token id.
    ("table + (u64)tokens[t] * all", "table + (u64)t * all"),
    // The residual stream keeps its pending block output out.
    ("x[row + i] = v;", ""),
    // The layer output scale is not applied.
    ("x[i] = v * s;", "x[i] = v;"),
    // The soft cap forgets to divide by the cap.
    ("tanhf(logits[i] / cap) * cap", "tanhf(logits[i]) * cap"),
    // The fused post-norm forgets to normalise.
    (
        "__fmul_rn(__fmul_rn(d[i], inv_post), from_store(w_post[i]))",
        "__fmul_rn(d[i], from_store(w_post[i]))",
    ),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_bugs_fail() {
    common::planted::planted_bugs_fail("gemma planted bugs", "gemma", PLANTED, contract);
}

/// Every check of the contract on `g`'s kernels.
fn contract(g: &Gpu, rng: &mut Rng, c: &mut Checks) {
    // GeGLU, gates wide enough to reach both tails of the tanh.
    for (rows, inter) in [(19, 1336), (1, 9216), (5, 24)] {
        let gu = rng.vec(rows * 2 * inter, 8.0);
        let (dgu, dact) = (up_f32(g, &gu), poisoned::<u16>(g, rows * inter));
        let secs = timed(g, || g.geglu(dgu.ptr(), dact.ptr(), inter, rows));
        let want: Vec<f64> = (0..rows * inter)
            .map(|i| {
                let (r, j) = (i / inter, i % inter);
                gelu_ref(gu[r * 2 * inter + j] as f64) * gu[r * 2 * inter + inter + j] as f64
            })
            .collect();
        c.close(
            &format!("geglu rows={rows} inter={inter}"),
            &from_bf16(&dact.download(g, 0, rows * inter).unwrap()),
            &want,
            1e-6,
            BF16_RTOL,
            secs,
        );
    }

    // Norm of the pending block output, in place and in f32.
    for (rows, hidden) in [(1, 2304), (7, 1000), (33, 64), (3, 5120)] {
        let d = rng.vec(rows * hidden, 3.0);
        let w = round_bf16(&rng.vec(hidden, 1.5));
        let (dd, dw) = (up_f32(g, &d), up_bf16(g, &w));
        let eps = 1e-6;
        let secs = timed(g, || g.rmsnorm_delta(dd.ptr(), dw.ptr(), rows, hidden, eps));
        let want: Vec<f64> = d
            .chunks(hidden)
            .flat_map(|r| {
                let v: Vec<f64> = r.iter().map(|&x| x as f64).collect();
                let inv = rms_inv(&v, eps);
                v.iter()
                    .zip(&w)
                    .map(|(x, &g)| x * inv * g as f64)
                    .collect::<Vec<_>>()
            })
            .collect();
        c.close(
            &format!("rmsnorm_delta rows={rows} hidden={hidden}"),
            &dd.download(g, 0, d.len()).unwrap(),
            &want,
            1e-6,
            1e-5,
            secs,
        );
    }

    // The residual stream as a bf16 projection input, with and without a pending delta.
    for with_delta in [true, false] {
        let (rows, hidden) = (13, 2304);
        let x = rng.vec(rows * hidden, 4.0);
        let d = rng.vec(rows * hidden, 4.0);
        let (dx, dd, dout) = (up_f32(g, &x), up_f32(g, &d), poisoned::<u16>(g, x.len()));
        let delta = if with_delta { dd.ptr() } else { 0 };
        let secs = timed(g, || {
            g.residual_to_store(dx.ptr(), delta, dout.ptr(), rows, hidden)
        });
        let sum: Vec<f64> = x
            .iter()
            .zip(&d)
            .map(|(&a, &b)| if with_delta { (a + b) as f64 } else { a as f64 })
            .collect();
        c.close(
            &format!("residual_to_store x delta={with_delta}"),
            &dx.download(g, 0, x.len()).unwrap(),
            &sum,
            1e-6,
            1e-6,
            secs,
        );
        c.close(
            &format!("residual_to_store out delta={with_delta}"),
            &from_bf16(&dout.download(g, 0, x.len()).unwrap()),
            &sum,
            1e-6,
            1.0 / 256.0,
            secs,
        );
    }

    per_layer_cases(g, rng, c);
    fused_post_norm_cases(g, rng, c);

    // Layer output scale: x = (x + delta) * s, s a one-element bf16 weight.
    for with_delta in [true, false] {
        let n = 37 * 2304 + 5;
        let x = rng.vec(n, 4.0);
        let d = rng.vec(n, 4.0);
        let s = round_bf16(&[rng.uniform(0.05, 2.0)]);
        let (dx, dd, ds) = (up_f32(g, &x), up_f32(g, &d), up_bf16(g, &s));
        let delta = if with_delta { dd.ptr() } else { 0 };
        let secs = timed(g, || g.scale_residual(dx.ptr(), delta, ds.ptr(), n));
        let want: Vec<f64> = x
            .iter()
            .zip(&d)
            .map(|(&a, &b)| {
                let v = if with_delta { (a + b) as f64 } else { a as f64 };
                v * s[0] as f64
            })
            .collect();
        c.close(
            &format!("scale_residual n={n} delta={with_delta} scale={}", s[0]),
            &dx.download(g, 0, n).unwrap(),
            &want,
            1e-6,
            1e-6,
            secs,
        );
    }

    // Soft-capped logits, values far past the cap included.
    for cap in [30.0f32, 10.0] {
        let n = 3 * 262_144 + 17;
        let l = rng.vec(n, 200.0);
        let dl = up_f32(g, &l);
        let secs = timed(g, || g.softcap_logits(dl.ptr(), n, cap));
        let want: Vec<f64> = l
            .iter()
            .map(|&x| (x as f64 / cap as f64).tanh() * cap as f64)
            .collect();
        c.close(
            &format!("softcap_logits n={n} cap={cap}"),
            &dl.download(g, 0, n).unwrap(),
            &want,
            1e-5,
            1e-6,
            secs,
        );
    }
}

/// `post_norm_fused` in each mode against float64 and bit for bit against `rmsnorm_delta`
/// followed by the op it replaces.
fn fused_post_norm_cases(g: &Gpu, rng: &mut Rng, c: &mut Checks) {
    use kiln_cuda::kernels_gemma::PostNormThen;
    for (rows, hidden) in [(1, 2304), (9, 1000), (3, 5120)] {
        let (x, d) = (rng.vec(rows * hidden, 4.0), rng.vec(rows * hidden, 3.0));
        let wp = round_bf16(&rng.vec(hidden, 1.5));
        let w = round_bf16(&rng.vec(hidden, 1.5));
        let s = round_bf16(&[rng.uniform(0.05, 2.0)]);
        let (eps_post, eps) = (1e-6f32, 1e-5f32);
        let (dwp, dw, ds) = (up_bf16(g, &wp), up_bf16(g, &w), up_bf16(g, &s));
        // x + rmsnorm(d) * wp, in f64.
        let sum: Vec<f64> = x
            .chunks(hidden)
            .zip(d.chunks(hidden))
            .flat_map(|(xr, dr)| {
                let dv: Vec<f64> = dr.iter().map(|&v| v as f64).collect();
                let inv = rms_inv(&dv, eps_post);
                xr.iter()
                    .zip(&dv)
                    .zip(&wp)
                    .map(|((&a, b), &p)| a as f64 + b * inv * p as f64)
                    .collect::<Vec<_>>()
            })
            .collect();
        for mode in ["norm", "store", "scale"] {
            let (fx, fd, fout) = (up_f32(g, &x), up_f32(g, &d), poisoned::<u16>(g, x.len()));
            let (ux, ud, uout) = (up_f32(g, &x), up_f32(g, &d), poisoned::<u16>(g, x.len()));
            let then = match mode {
                "norm" => PostNormThen::Norm {
                    w: dw.ptr(),
                    out: fout.ptr(),
                    eps,
                },
                "store" => PostNormThen::Store { out: fout.ptr() },
                _ => PostNormThen::Scale { scale: ds.ptr() },
            };
            let secs = timed(g, || {
                g.post_norm_fused(fx.ptr(), fd.ptr(), dwp.ptr(), eps_post, then, rows, hidden)
            });
            g.rmsnorm_delta(ud.ptr(), dwp.ptr(), rows, hidden, eps_post)
                .unwrap();
            match mode {
                "norm" => {
                    g.rmsnorm_residual(ux.ptr(), ud.ptr(), dw.ptr(), uout.ptr(), rows, hidden, eps)
                }
                "store" => g.residual_to_store(ux.ptr(), ud.ptr(), uout.ptr(), rows, hidden),
                _ => g.scale_residual(ux.ptr(), ud.ptr(), ds.ptr(), rows * hidden),
            }
            .unwrap();
            let n = x.len();
            let (got_x, two_x) = (fx.download(g, 0, n).unwrap(), ux.download(g, 0, n).unwrap());
            let case = format!("post_norm_fused {mode} rows={rows} hidden={hidden}");
            let want_x: Vec<f64> = match mode {
                "scale" => sum.iter().map(|v| v * s[0] as f64).collect(),
                _ => sum.clone(),
            };
            c.close(&format!("{case} x"), &got_x, &want_x, 1e-5, 1e-5, secs);
            c.identical(
                &format!("{case} x == two launches"),
                &f32_bits(&got_x),
                &f32_bits(&two_x),
            );
            if mode == "scale" {
                continue;
            }
            let out = fout.download(g, 0, n).unwrap();
            c.identical(
                &format!("{case} out == two launches"),
                &out,
                &uout.download(g, 0, n).unwrap(),
            );
            let want: Vec<f64> = match mode {
                "store" => sum.clone(),
                _ => sum
                    .chunks(hidden)
                    .flat_map(|r| {
                        let inv = rms_inv(r, eps);
                        r.iter()
                            .zip(&w)
                            .map(|(v, &g)| v * inv * g as f64)
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            };
            c.close(
                &format!("{case} out"),
                &from_bf16(&out),
                &want,
                1e-5,
                BF16_RTOL,
                secs,
            );
        }
    }
}

/// The per-layer inputs and the per-layer gate, at a fixture's shape and at E4B's.
fn per_layer_cases(g: &Gpu, rng: &mut Rng, c: &mut Checks) {
    for (rows, layers, width, vocab) in [(23, 4, 8, 512), (5, 30, 256, 4099), (1, 7, 40, 97)] {
        let all = layers * width;
        let ple = PerLayerInputSpec {
            width,
            table_scale: (width as f64).sqrt() as f32,
            projection_scale: (1.0 / 2304f64.sqrt()) as f32,
            mix_scale: std::f64::consts::FRAC_1_SQRT_2 as f32,
            norm_eps: 1e-6,
            act: Activation::GeluTanh,
        };
        let proj = rng.vec(rows * all, 40.0);
        let table = round_bf16(&rng.vec(vocab * all, 0.05));
        let norm = round_bf16(&rng.vec(width, 1.5));
        let tokens: Vec<i32> = (0..rows).map(|_| rng.below(vocab) as i32).collect();
        let (dp, dt, dn) = (up_f32(g, &proj), up_bf16(g, &table), up_bf16(g, &norm));
        let dtok = g.alloc::<i32>(rows).unwrap();
        dtok.upload(0, &tokens).unwrap();
        let secs = timed(g, || {
            g.per_layer_mix(dp.ptr(), dt.ptr(), dtok.ptr(), dn.ptr(), rows, layers, &ple)
        });
        let mut want = Vec::with_capacity(rows * all);
        for (r, &tok) in tokens.iter().enumerate() {
            for l in 0..layers {
                let at = r * all + l * width;
                let v: Vec<f64> = proj[at..at + width]
                    .iter()
                    .map(|&x| x as f64 * ple.projection_scale as f64)
                    .collect();
                let inv = rms_inv(&v, ple.norm_eps);
                for i in 0..width {
                    let e = table[tok as usize * all + l * width + i] as f64;
                    let n = v[i] * inv * norm[i] as f64;
                    want.push((n + e * ple.table_scale as f64) * ple.mix_scale as f64);
                }
            }
        }
        let per_layer = dp.download(g, 0, rows * all).unwrap();
        c.close(
            &format!("per_layer_mix rows={rows} layers={layers} width={width} vocab={vocab}"),
            &per_layer,
            &want,
            1e-6,
            1e-5,
            secs,
        );

        // The gate of one layer's slice, both activations, the last layer's slice included.
        for (layer, act) in [(layers - 1, Activation::GeluTanh), (0, Activation::Silu)] {
            let gate = rng.vec(rows * width, 6.0);
            let (dg, dout) = (up_f32(g, &gate), poisoned::<u16>(g, rows * width));
            let secs = timed(g, || {
                g.per_layer_act(dg.ptr(), dp.ptr(), dout.ptr(), width, all, layer, rows, act)
            });
            let want: Vec<f64> = (0..rows * width)
                .map(|i| {
                    let (r, j) = (i / width, i % width);
                    let a = match act {
                        Activation::GeluTanh => gelu_ref(gate[i] as f64),
                        Activation::Silu => silu_ref(gate[i] as f64),
                    };
                    a * per_layer[r * all + layer * width + j] as f64
                })
                .collect();
            c.close(
                &format!("per_layer_act rows={rows} width={width} layer={layer} {act:?}"),
                &from_bf16(&dout.download(g, 0, rows * width).unwrap()),
                &want,
                1e-6,
                BF16_RTOL,
                secs,
            );
        }
    }
}
