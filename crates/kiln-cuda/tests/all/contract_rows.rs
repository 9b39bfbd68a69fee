//! Kernel contract for the row-wise kernels (embedding gather, RMSNorm with residual, final norm
//! of selected rows, SwiGLU, argmax, RoPE table, QKV finish + KV write with its Gemma 4 kinds,
//! dummy weights) against float64 host references on fresh random inputs with poisoned outputs
//! and odd sizes.

use crate::common;

use common::planted::planted_bugs_fail;
use common::{bf16_bits, from_bf16, gpu_or_skip, round_bf16, timed, to_bf16, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::kernels::{KvView, QkvKind};

/// bf16 outputs: within a couple of bf16 ulps of the reference.
const BF16_RTOL: f64 = 1.0 / 128.0;

fn rmsnorm_ref(x: &[f64], w: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter().zip(w).map(|(v, &g)| v * inv * g as f64).collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn row_kernels_contract() {
    let Some(gpu) = gpu_or_skip("row_kernels_contract") else {
        return;
    };
    let mut rng = Rng::new("row_kernels_contract");
    let mut c = Checks::new("rows");

    // Embedding gather: exact.
    let (vocab, hidden, t) = (1003, 520, 37);
    let emb = to_bf16(&rng.vec(vocab * hidden, 1.0));
    let tokens: Vec<i32> = (0..t).map(|_| rng.below(vocab) as i32).collect();
    let (d_emb, d_tok, d_x) = (
        gpu.alloc::<u16>(emb.len()).unwrap(),
        gpu.alloc::<i32>(t).unwrap(),
        gpu.alloc::<f32>(t * hidden).unwrap(),
    );
    d_emb.upload(0, &emb).unwrap();
    d_tok.upload(0, &tokens).unwrap();
    // Unscaled rows are exact; a scale (Gemma's sqrt(hidden)) costs one f32 rounding.
    for (scale, rtol) in [(1.0f32, 0.0), (rng.uniform(10.0, 60.0), 1e-7)] {
        d_x.fill_bytes(0xff).unwrap();
        let secs = timed(&gpu, || {
            gpu.embed_gather(d_x.ptr(), d_emb.ptr(), d_tok.ptr(), t, hidden, scale)
        });
        let want: Vec<f64> = tokens
            .iter()
            .flat_map(|&tk| from_bf16(&emb[tk as usize * hidden..(tk as usize + 1) * hidden]))
            .map(|v| v as f64 * scale as f64)
            .collect();
        c.close(
            &format!("embed_gather scale={scale}"),
            &d_x.download(&gpu, 0, t * hidden).unwrap(),
            &want,
            0.0,
            rtol,
            secs,
        );
    }

    // RMSNorm with the residual add, odd hidden sizes.
    // 12,288: more than eight values a thread at the widest block (the loop after the
    // registers).
    for (rows, hidden) in [(1, 4096), (7, 1000), (33, 8192), (3, 72), (2, 12_288)] {
        let x = rng.vec(rows * hidden, 2.0);
        let delta = rng.vec(rows * hidden, 2.0);
        let w = round_bf16(&rng.vec(hidden, 1.5));
        let (dx, dd, dw, dout) = (
            gpu.alloc::<f32>(x.len()).unwrap(),
            gpu.alloc::<f32>(x.len()).unwrap(),
            gpu.alloc::<u16>(hidden).unwrap(),
            gpu.alloc::<u16>(x.len()).unwrap(),
        );
        dx.upload(0, &x).unwrap();
        dd.upload(0, &delta).unwrap();
        dw.upload(0, &to_bf16(&w)).unwrap();
        dout.fill_bytes(0xff).unwrap();
        let eps = 1e-5;
        let secs = timed(&gpu, || {
            gpu.rmsnorm_residual(dx.ptr(), dd.ptr(), dw.ptr(), dout.ptr(), rows, hidden, eps)
        });
        let sum: Vec<f64> = x
            .iter()
            .zip(&delta)
            .map(|(a, b)| (*a + *b) as f64)
            .collect();
        c.close(
            &format!("rmsnorm_residual x rows={rows} hidden={hidden}"),
            &dx.download(&gpu, 0, x.len()).unwrap(),
            &sum,
            1e-6,
            1e-6,
            secs,
        );
        let want: Vec<f64> = sum
            .chunks(hidden)
            .flat_map(|r| rmsnorm_ref(r, &w, eps))
            .collect();
        let got = from_bf16(&dout.download(&gpu, 0, x.len()).unwrap());
        c.close(
            &format!("rmsnorm_residual out rows={rows} hidden={hidden}"),
            &got,
            &want,
            1e-6,
            BF16_RTOL,
            secs,
        );

        // Final norm of selected rows (x + delta not written back), and of x alone when no
        // block output is pending (delta 0).
        let sel: Vec<i32> = (0..rows).rev().step_by(2).map(|r| r as i32).collect();
        let (dsel, dfo) = (
            gpu.alloc::<i32>(sel.len()).unwrap(),
            gpu.alloc::<u16>(sel.len() * hidden).unwrap(),
        );
        dsel.upload(0, &sel).unwrap();
        dx.upload(0, &x).unwrap();
        let plain: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for (delta, input) in [(dd.ptr(), &sum), (0, &plain)] {
            dfo.fill_bytes(0xff).unwrap();
            let secs = timed(&gpu, || {
                gpu.final_norm_rows(
                    dx.ptr(),
                    delta,
                    dsel.ptr(),
                    dw.ptr(),
                    dfo.ptr(),
                    sel.len(),
                    hidden,
                    eps,
                )
            });
            let want: Vec<f64> = sel
                .iter()
                .flat_map(|&r| {
                    rmsnorm_ref(
                        &input[r as usize * hidden..(r as usize + 1) * hidden],
                        &w,
                        eps,
                    )
                })
                .collect();
            let got = from_bf16(&dfo.download(&gpu, 0, sel.len() * hidden).unwrap());
            c.close(
                &format!(
                    "final_norm_rows {} of {rows} rows hidden={hidden} delta={}",
                    sel.len(),
                    delta != 0
                ),
                &got,
                &want,
                1e-6,
                BF16_RTOL,
                secs,
            );
        }
    }

    // SwiGLU: a width that is a multiple of 4 (four values a thread) and one that is not (one),
    // and more rows than the grid's first dimension needs.
    for (rows, inter) in [(19, 1336), (7, 1338)] {
        let gu = rng.vec(rows * 2 * inter, 6.0);
        let (dgu, dact) = (
            gpu.alloc::<f32>(gu.len()).unwrap(),
            gpu.alloc::<u16>(rows * inter).unwrap(),
        );
        dgu.upload(0, &gu).unwrap();
        dact.fill_bytes(0xff).unwrap();
        let secs = timed(&gpu, || gpu.swiglu(dgu.ptr(), dact.ptr(), inter, rows));
        let want: Vec<f64> = (0..rows * inter)
            .map(|i| {
                let (r, j) = (i / inter, i % inter);
                let g = gu[r * 2 * inter + j] as f64;
                g / (1.0 + (-g).exp()) * gu[r * 2 * inter + inter + j] as f64
            })
            .collect();
        c.close(
            &format!("swiglu rows={rows} inter={inter}"),
            &from_bf16(&dact.download(&gpu, 0, rows * inter).unwrap()),
            &want,
            1e-6,
            BF16_RTOL,
            secs,
        );
    }

    argmax_cases(&gpu, &mut rng, &mut c);

    // Dummy weights generated on the device equal the host's function after bf16 rounding.
    let n = 1_000_003;
    let seed =
        kiln_model::dummy::dummy_seed(kiln_model::TensorId::layer(3, kiln_model::Role::Down));
    let d = gpu.alloc::<u16>(n).unwrap();
    d.fill_bytes(0xff).unwrap();
    let secs = timed(&gpu, || gpu.dummy_fill(d.ptr(), n, seed));
    let got = d.download(&gpu, 0, n).unwrap();
    let want: Vec<u16> = (0..n as u64)
        .map(|i| bf16_bits(kiln_model::dummy::dummy_value(seed, i)))
        .collect();
    c.identical(
        &format!("dummy_fill n={n} ({:.3}ms)", secs * 1e3),
        &got,
        &want,
    );
    c.finish();
}

/// Heads of one token's row of the QKV projection for `kind` (Q, then the K and V it has).
fn row_heads(kind: QkvKind, n_q: usize, n_kv: usize) -> usize {
    match kind {
        QkvKind::Full => n_q + 2 * n_kv,
        QkvKind::VFromK => n_q + n_kv,
        QkvKind::QOnly => n_q,
    }
}

/// Host reference of qkv_prepare for one token: q [n_q*hd], then (unless Q only) k and v
/// [n_kv*hd each]; V from K reads K's row before its norm and RoPE.
#[allow(clippy::too_many_arguments)]
fn qkv_ref(
    row: &[f32],
    bias: Option<&[f32]>,
    qn: Option<&[f32]>,
    kn: Option<&[f32]>,
    inv_freq: &[f32],
    pos: usize,
    n_q: usize,
    n_kv: usize,
    hd: usize,
    neox: bool,
    eps: f32,
    af: f32,
    kind: QkvKind,
    v_norm: bool,
) -> Vec<f64> {
    let heads = match kind {
        QkvKind::QOnly => n_q,
        QkvKind::Full | QkvKind::VFromK => n_q + 2 * n_kv,
    };
    let mut out = Vec::with_capacity(heads * hd);
    for h in 0..heads {
        let src = match kind {
            QkvKind::VFromK if h >= n_q + n_kv => h - n_kv,
            _ => h,
        };
        let mut v: Vec<f64> = (0..hd)
            .map(|i| row[src * hd + i] as f64 + bias.map_or(0.0, |b| b[src * hd + i] as f64))
            .collect();
        let norm = if h < n_q {
            qn
        } else if h < n_q + n_kv {
            kn
        } else {
            None
        };
        if let Some(w) = norm {
            v = rmsnorm_ref(&v, w, eps);
        } else if h >= n_q + n_kv && v_norm {
            v = rmsnorm_ref(&v, &vec![1.0; hd], eps);
        }
        if h < n_q + n_kv {
            let mut r = v.clone();
            for (i, &f) in inv_freq.iter().enumerate() {
                let (i1, i2) = if neox {
                    (i, i + hd / 2)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let a = pos as f64 * f as f64;
                let (cs, sn) = (a.cos() * af as f64, a.sin() * af as f64);
                r[i1] = v[i1] * cs - v[i2] * sn;
                r[i2] = v[i2] * cs + v[i1] * sn;
            }
            v = r;
        }
        out.extend(v);
    }
    out
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn qkv_prepare_contract() {
    crate::common::run_contract("qkv_prepare_contract", "qkv_prepare", qkv_cases);
}

/// Every argmax_rows case on `gpu`'s kernels.
fn argmax_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    // Argmax: ties go to the smallest index, NaN never wins; a vocabulary that is a multiple
    // of 4 takes the four-a-load path, an odd one the one-a-load path.
    for vocab in [128_256, 32_003] {
        let mut logits = rng.vec(4 * vocab, 10.0);
        logits[vocab + 500] = 50.0;
        logits[vocab + 9000] = 50.0;
        logits[2 * vocab + 7] = f32::NAN;
        logits[2 * vocab + 30_001] = 99.0;
        logits[3 * vocab + vocab - 1] = 1e30;
        let (dl, di) = (
            gpu.alloc::<f32>(logits.len()).unwrap(),
            gpu.alloc::<i32>(4).unwrap(),
        );
        dl.upload(0, &logits).unwrap();
        di.fill_bytes(0xff).unwrap();
        let secs = timed(gpu, || gpu.argmax_rows(dl.ptr(), di.ptr(), 4, vocab));
        let want: Vec<i32> = (0..4)
            .map(|r| {
                let row = &logits[r * vocab..(r + 1) * vocab];
                let mut best = (f32::NEG_INFINITY, 0usize);
                for (i, &v) in row.iter().enumerate() {
                    if v > best.0 {
                        best = (v, i);
                    }
                }
                best.1 as i32
            })
            .collect();
        let got = di.download(gpu, 0, 4).unwrap();
        c.check(
            got == want,
            format!(
                "argmax_rows 4 x {vocab}: got {got:?}, want {want:?} ({:.3}ms)",
                secs * 1e3
            ),
        );
    }
}

/// elementwise.cu's four-a-load argmax with the last of the four given its neighbour's index.
const PLANTED_ARGMAX: &[(&str, &str)] = &[("visit(v[u].w, i + 3);", "visit(v[u].w, i + 2);")];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn argmax_planted_bug_fails() {
    planted_bugs_fail(
        "argmax_planted_bug_fails",
        "elementwise",
        PLANTED_ARGMAX,
        argmax_cases,
    );
}

/// The planted argmax bug's text is in its module once and changes its machine code (where
/// NVRTC is present), so that `argmax_planted_bug_fails` tests what it says.
#[test]
fn argmax_planted_bug_compiles() {
    common::planted::each_planted_compiles(
        PLANTED_ARGMAX.iter().map(|&(f, t)| ("elementwise", f, t)),
    );
}

/// rope_kv.cu with one planted bug each in what Gemma 4 added: (text, replacement).
const PLANTED_QKV: &[(&str, &str)] = &[
    // V taken from K reads V's place in the row instead of K's.
    (
        "(!is_q && !is_k && kv_mode == 1) ? head - n_kv : head",
        "head",
    ),
    // The V norm is skipped.
    ("(!is_q && !is_k && v_norm)", "false"),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn qkv_planted_bugs_fail() {
    planted_bugs_fail("qkv_planted_bugs_fail", "rope_kv", PLANTED_QKV, qkv_cases);
}

/// Every qkv_prepare case on `gpu`'s kernels (and the RoPE table it reads).
fn qkv_cases(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    let (full, v_from_k, q_only) = (QkvKind::Full, QkvKind::VFromK, QkvKind::QOnly);
    // (n_q, n_kv, hd, neox, bias, qk_norm, attention factor, kind, V norm); the last five are
    // Gemma 4's: V from K, a layer writing no KV, the V norm, head dim 512.
    for (n_q, n_kv, hd, neox, with_bias, qk_norm, af, kind, v_norm) in [
        (8, 8, 64, true, false, false, 1.0f32, full, false),
        (32, 8, 128, true, true, false, 1.0, full, false),
        (16, 2, 128, false, false, true, 1.0, full, false),
        (8, 1, 256, true, true, true, 1.2, full, false),
        (4, 2, 32, false, false, false, 1.0, full, false),
        (8, 2, 256, true, false, true, 1.0, full, true),
        (8, 4, 512, true, false, true, 1.0, v_from_k, true),
        (4, 2, 16, true, true, true, 1.0, v_from_k, true),
        (8, 4, 512, true, false, true, 1.0, q_only, true),
        (4, 2, 32, false, true, true, 1.0, q_only, false),
    ] {
        let (t, block_size, num_blocks, max_pos) = (23usize, 16usize, 64usize, 40_000usize);
        let heads = row_heads(kind, n_q, n_kv);
        let qkv = rng.vec(t * heads * hd, 3.0);
        let bias = with_bias.then(|| round_bf16(&rng.vec(heads * hd, 1.0)));
        let qn = qk_norm.then(|| round_bf16(&rng.vec(hd, 1.5)));
        let kn = qk_norm.then(|| round_bf16(&rng.vec(hd, 1.5)));
        let theta = 10_000f64 + rng.uniform(0.0, 490_000.0) as f64;
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / hd as f64)) as f32)
            .collect();
        let positions: Vec<i32> = (0..t).map(|_| rng.below(max_pos) as i32).collect();
        let mut slots: Vec<i32> = (0..(num_blocks * block_size) as i32).collect();
        rng.shuffle(&mut slots);
        slots.truncate(t);

        let up_bf16 = |v: &Option<Vec<f32>>| {
            v.as_ref().map(|v| {
                let d = gpu.alloc::<u16>(v.len()).unwrap();
                d.upload(0, &to_bf16(v)).unwrap();
                d
            })
        };
        let (d_bias, d_qn, d_kn) = (up_bf16(&bias), up_bf16(&qn), up_bf16(&kn));
        let p = |d: &Option<kiln_cuda::device::DevBuf<u16>>| d.as_ref().map_or(0, |d| d.ptr());
        let d_qkv = gpu.alloc::<f32>(qkv.len()).unwrap();
        d_qkv.upload(0, &qkv).unwrap();
        let d_freq = gpu.alloc::<f32>(hd / 2).unwrap();
        d_freq.upload(0, &inv_freq).unwrap();
        let d_rope = gpu.alloc::<f32>(max_pos * hd).unwrap();
        let secs_table = timed(gpu, || {
            gpu.rope_table_build(d_rope.ptr(), d_freq.ptr(), max_pos, hd / 2, af)
        });
        // The table itself, at a few positions.
        let table = d_rope.download(gpu, 0, max_pos * hd).unwrap();
        let probe = [0usize, 1, 4097, max_pos - 1];
        let got: Vec<f32> = probe
            .iter()
            .flat_map(|&pp| table[pp * hd..(pp + 1) * hd].iter().copied())
            .collect();
        let mut want = Vec::new();
        for &pp in &probe {
            for &f in &inv_freq {
                let a = pp as f64 * f as f64;
                want.extend([a.cos() * af as f64, a.sin() * af as f64]);
            }
        }
        c.close(
            &format!("rope_table_build hd={hd} max_pos={max_pos}"),
            &got,
            &want,
            2e-6,
            0.0,
            secs_table,
        );

        let (d_pos, d_slot) = (gpu.alloc::<i32>(t).unwrap(), gpu.alloc::<i32>(t).unwrap());
        d_pos.upload(0, &positions).unwrap();
        d_slot.upload(0, &slots).unwrap();
        let d_q = gpu.alloc::<u16>(t * n_q * hd).unwrap();
        let cache_len = num_blocks * n_kv * block_size * hd;
        let (d_k, d_v) = (
            gpu.alloc::<u16>(cache_len).unwrap(),
            gpu.alloc::<u16>(cache_len).unwrap(),
        );
        for d in [&d_q, &d_k, &d_v] {
            d.fill_bytes(0xff).unwrap();
        }
        let kv = KvView {
            k: d_k.ptr(),
            v: d_v.ptr(),
            n_kv,
            block_size,
        };
        let eps = 1e-6;
        let secs = timed(gpu, || {
            gpu.qkv_prepare(
                d_qkv.ptr(),
                p(&d_bias),
                p(&d_qn),
                p(&d_kn),
                d_rope.ptr(),
                d_pos.ptr(),
                d_slot.ptr(),
                d_q.ptr(),
                kv,
                t,
                n_q,
                hd,
                neox,
                eps,
                kind,
                v_norm,
            )
        });
        let q = from_bf16(&d_q.download(gpu, 0, t * n_q * hd).unwrap());
        let kc = from_bf16(&d_k.download(gpu, 0, cache_len).unwrap());
        let vc = from_bf16(&d_v.download(gpu, 0, cache_len).unwrap());
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for tok in 0..t {
            let r = qkv_ref(
                &qkv[tok * heads * hd..(tok + 1) * heads * hd],
                bias.as_deref(),
                qn.as_deref(),
                kn.as_deref(),
                &inv_freq,
                positions[tok] as usize,
                n_q,
                n_kv,
                hd,
                neox,
                eps,
                af,
                kind,
                v_norm,
            );
            want.extend_from_slice(&r);
            got.extend_from_slice(&q[tok * n_q * hd..(tok + 1) * n_q * hd]);
            if kind == q_only {
                continue;
            }
            let slot = slots[tok] as usize;
            for cache in [&kc, &vc] {
                for h in 0..n_kv {
                    let at = ((slot / block_size * n_kv + h) * block_size + slot % block_size) * hd;
                    got.extend_from_slice(&cache[at..at + hd]);
                }
            }
        }
        // `want` is per token [q heads, k heads, v heads] in the same order as `got`.
        c.close(&format!("qkv_prepare t={t} n_q={n_q} n_kv={n_kv} hd={hd} neox={neox} bias={with_bias} qk_norm={qk_norm} af={af} {kind:?} v_norm={v_norm}"), &got, &want, 1e-3, BF16_RTOL, secs);
        // Slots no token wrote stay poisoned (every slot, for a layer that writes no KV).
        let written: std::collections::HashSet<usize> = match kind {
            QkvKind::QOnly => Default::default(),
            _ => slots.iter().map(|&s| s as usize / block_size).collect(),
        };
        let untouched = (0..num_blocks).filter(|b| !written.contains(b)).all(|b| {
            kc[b * n_kv * block_size * hd].is_nan() && vc[b * n_kv * block_size * hd].is_nan()
        });
        c.check(
            untouched,
            format!("qkv_prepare hd={hd} {kind:?}: blocks without a written slot left poisoned"),
        );
    }
}
