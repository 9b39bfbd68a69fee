//! Kernel contract for device sampling (kernels/sample.cu): on fresh random rows of many shapes
//! (peaked, flat, coarse with many ties at the cuts, NaN and infinities) and random parameters
//! (temperature, top-k, top-p, min-p, draws, log-probabilities), every row's token must equal
//! the host sampler's (`sampler::sample_row`) exactly, its log-probabilities within f32
//! rounding. A row sampled alone must give the same words as inside a batch.

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, timed, Checks, Rng};
use kiln_cuda::device::Gpu;
use std::sync::Arc;

use kiln_cuda::sampling::{pack_params, unpack, SamplingBuffers, OUT_WORDS, PARAM_WORDS};
use kiln_step::sampling::{sample_row, SampleError, Sampled};
use kiln_step::{Penalty, RowAdjust, RowSampling, StepAdjust, StepOutput, TokenSet, Want};

/// Log-probabilities: the device's f64 log-sum-exp sums in another order than the host's.
const LOGPROB_ATOL: f64 = 2e-5;

fn row_of(rng: &mut Rng, vocab: usize, shape: usize) -> Vec<f32> {
    let mut row: Vec<f32> = match shape {
        // Spread logits, as a trained model gives.
        0 => (0..vocab).map(|_| rng.uniform(-1.0, 1.0) * 8.0).collect(),
        // One dominant token.
        1 => {
            let mut r: Vec<f32> = (0..vocab).map(|_| rng.uniform(-2.0, 2.0)).collect();
            r[rng.below(vocab)] = 25.0;
            r
        }
        // Every logit equal: the cuts fall inside one huge tie.
        2 => vec![1.5; vocab],
        // Coarse values: ties at every cut.
        3 => (0..vocab)
            .map(|_| (rng.uniform(-4.0, 4.0) * 2.0).round() / 2.0)
            .collect(),
        // Nearly flat, as a random-weight model gives.
        _ => (0..vocab).map(|_| rng.uniform(-0.05, 0.05)).collect(),
    };
    // Sprinkle NaN and -inf now and then.
    if rng.below(4) == 0 {
        for _ in 0..1 + vocab / 50 {
            let i = rng.below(vocab);
            row[i] = if rng.below(2) == 0 {
                f32::NAN
            } else {
                f32::NEG_INFINITY
            };
        }
    }
    row
}

fn params_of(rng: &mut Rng, vocab: usize) -> RowSampling {
    let pick = |rng: &mut Rng, v: &[f32]| v[rng.below(v.len())];
    let top_k = [0, 1, 3, 50, vocab.saturating_sub(1), vocab + 5][rng.below(6)];
    RowSampling {
        temperature: pick(rng, &[0.0, 0.01, 0.5, 0.8, 1.0, 2.0, 100.0]),
        top_k,
        top_p: pick(rng, &[1.0, 1.0, 0.95, 0.5, 1e-4]),
        min_p: pick(rng, &[0.0, 0.0, 0.05, 0.9]),
        uniform: (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64,
        logprobs: [None, None, Some(0), Some(1), Some(5), Some(20)][rng.below(6)],
    }
}

/// Runs the kernel over `rows` (each of `vocab` logits); the raw result words.
fn run(gpu: &Gpu, logits: &[f32], rows: &[RowSampling], vocab: usize) -> (Vec<i32>, f64) {
    let n = rows.len();
    let (dl, dp, dout) = (
        gpu.alloc::<f32>(logits.len()).unwrap(),
        gpu.alloc::<i32>(n * PARAM_WORDS).unwrap(),
        gpu.alloc::<i32>(n * OUT_WORDS).unwrap(),
    );
    let mut params = vec![0i32; n * PARAM_WORDS];
    pack_params(rows, vocab, &mut params);
    dl.upload(0, logits).unwrap();
    dp.upload(0, &params).unwrap();
    dout.fill_bytes(0xa5).unwrap();
    let secs = timed(gpu, || {
        gpu.sample_rows(dl.ptr(), dl.ptr(), dp.ptr(), dout.ptr(), n, vocab)
    });
    (dout.download(gpu, 0, n * OUT_WORDS).unwrap(), secs)
}

/// Compares one row's device result with the host's; a line describing the first mismatch.
fn mismatch(
    got: &Result<Sampled, SampleError>,
    want: &Result<Sampled, SampleError>,
) -> Option<String> {
    let (g, w) = match (got, want) {
        (Err(a), Err(b)) if a == b => return None,
        (Ok(g), Ok(w)) => (g, w),
        _ => return Some(format!("got {got:?}, want {want:?}")),
    };
    if g.id != w.id {
        return Some(format!("token {} vs {}", g.id, w.id));
    }
    let close =
        |a: f32, b: f32| a.to_bits() == b.to_bits() || (a as f64 - b as f64).abs() <= LOGPROB_ATOL;
    match (g.logprob, w.logprob) {
        (Some(a), Some(b)) if !close(a, b) => return Some(format!("logprob {a} vs {b}")),
        (a, b) if a.is_some() != b.is_some() => return Some(format!("logprob {a:?} vs {b:?}")),
        _ => {}
    }
    let ids = |s: &Sampled| s.top_logprobs.iter().map(|t| t.0).collect::<Vec<_>>();
    if ids(g) != ids(w) {
        return Some(format!("top ids {:?} vs {:?}", ids(g), ids(w)));
    }
    let lps = g.top_logprobs.iter().zip(&w.top_logprobs);
    if let Some((a, b)) = lps.clone().find(|(a, b)| !close(a.1, b.1)) {
        return Some(format!("top logprob {a:?} vs {b:?}"));
    }
    None
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn device_sampling_equals_the_host_sampler() {
    let Some(gpu) = gpu_or_skip("device_sampling_equals_the_host_sampler") else {
        return;
    };
    let mut rng = Rng::new("device_sampling_equals_the_host_sampler");
    let mut c = Checks::new("sampling");
    // Row counts above the SM count make CTAs loop over rows.
    for (vocab, n) in [
        (1, 8),
        (2, 16),
        (31, 64),
        (1000, 200),
        (4099, 150),
        (32000, 160),
        (128_256, 140),
        (151_936, 40),
    ] {
        let mut logits = Vec::with_capacity(n * vocab);
        let mut rows = Vec::with_capacity(n);
        for i in 0..n {
            logits.extend(row_of(&mut rng, vocab, i % 5));
            rows.push(params_of(&mut rng, vocab));
        }
        // Rows that have no finite logit, or an infinite one.
        if vocab > 2 {
            logits[..vocab].fill(f32::NEG_INFINITY);
            logits[vocab..2 * vocab].fill(f32::NAN);
            logits[2 * vocab + vocab / 2] = f32::INFINITY;
        }
        let (words, secs) = run(&gpu, &logits, &rows, vocab);
        let got = unpack(&words, &rows);
        let mut bad = Vec::new();
        for (i, (g, r)) in got.iter().zip(&rows).enumerate() {
            let want = sample_row(&logits[i * vocab..(i + 1) * vocab], r);
            if let Some(m) = mismatch(g, &want) {
                bad.push(format!("row {i} ({r:?}): {m}"));
            }
        }
        c.check(
            bad.is_empty(),
            format!(
                "vocab {vocab}: {n} rows equal the host sampler ({:.3} ms){}",
                secs * 1e3,
                bad.first()
                    .map_or(String::new(), |b| format!("; first of {}: {b}", bad.len()))
            ),
        );
        // Alone equals batched, word for word.
        for i in [0, n / 2, n - 1] {
            let (alone, _) = run(
                &gpu,
                &logits[i * vocab..(i + 1) * vocab],
                &rows[i..=i],
                vocab,
            );
            c.identical(
                &format!("vocab {vocab} row {i} alone vs in {n} rows"),
                &alone,
                &words[i * OUT_WORDS..(i + 1) * OUT_WORDS],
            );
        }
    }
    c.finish();
}

/// A row's random adjustment: none, a bias alone, a mask alone (sparse as a grammar's inside a
/// string, or a handful of tokens), or both, with bias on masked and on unmasked tokens.
fn adjust_of(rng: &mut Rng, vocab: usize) -> Option<RowAdjust> {
    let kind = rng.below(5);
    if kind == 0 {
        return None;
    }
    let mut bias = Vec::new();
    if kind != 2 {
        let mut ids: Vec<u32> = (0..1 + rng.below(40))
            .map(|_| rng.below(vocab) as u32)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        bias = ids
            .into_iter()
            .map(|id| (id, [-100.0, -3.5, 0.25, 5.0, 100.0][rng.below(5)]))
            .collect();
    }
    let allowed = (kind >= 2).then(|| {
        let mut set = TokenSet::empty(vocab);
        let dense = rng.below(2) == 0;
        for id in 0..vocab as u32 {
            if (dense && rng.below(3) != 0) || rng.below(vocab.max(8) / 4) == 0 {
                set.insert(id);
            }
        }
        // Sometimes a single allowed token (a grammar's forced step).
        if set.is_empty() || rng.below(6) == 0 {
            set = TokenSet::empty(vocab);
            set.insert(rng.below(vocab) as u32);
        }
        Arc::new(set)
    });
    // Penalties on about half the rows: some of the tokens, seen in the prompt only (0) or
    // generated up to three times, with and without each kind of penalty.
    let penalty = (rng.below(2) == 0).then(|| {
        let mut ids: Vec<u32> = (0..1 + rng.below(60))
            .map(|_| rng.below(vocab) as u32)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Arc::new(Penalty {
            repetition: [1.0, 1.3, 0.7][rng.below(3)],
            presence: [0.0, 0.5, -1.5][rng.below(3)],
            frequency: [0.0, 0.25, 2.0][rng.below(3)],
            tokens: ids
                .into_iter()
                .map(|id| (id, rng.below(4) as u32))
                .collect(),
        })
    });
    Some(RowAdjust {
        bias: bias.into(),
        allowed,
        penalty,
    })
}

/// Adjusted rows (penalties, logit bias, grammar masks) on the device give the host's `adjust_row` then
/// `choose` picks exactly, with the raw rows' log-probabilities; unadjusted rows in the same
/// batch are untouched by their neighbours' adjustments.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn device_adjusted_sampling_equals_the_host() {
    let Some(gpu) = gpu_or_skip("device_adjusted_sampling_equals_the_host") else {
        return;
    };
    let mut rng = Rng::new("device_adjusted_sampling_equals_the_host");
    let mut c = Checks::new("adjusted_sampling");
    for (vocab, n) in [(31, 40), (1000, 150), (32000, 96), (151_936, 40)] {
        let mut logits = Vec::with_capacity(n * vocab);
        let (mut rows, mut adjust) = (Vec::new(), Vec::new());
        for i in 0..n {
            logits.extend(row_of(&mut rng, vocab, i % 5));
            rows.push(params_of(&mut rng, vocab));
            adjust.push(adjust_of(&mut rng, vocab));
        }
        let dl = gpu.alloc::<f32>(logits.len()).unwrap();
        dl.upload(0, &logits).unwrap();
        let mut bufs = SamplingBuffers::new(&gpu, n).unwrap();
        let secs = timed(&gpu, || {
            bufs.queue_adjusted(&gpu, dl.ptr(), &rows, Some(&adjust), vocab, 1)
        });
        let got = bufs.results(1, &rows);
        let step = StepAdjust::ready(adjust.clone());
        let want = match Want::SampleAdjusted(&rows, &step).from_logits(logits.clone(), vocab) {
            Ok(StepOutput::Tokens(t)) => t,
            other => panic!("host reference: {other:?}"),
        };
        let mut bad = Vec::new();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if let Some(m) = mismatch(g, w) {
                bad.push(format!(
                    "row {i} ({:?}, adjusted {}): {m}",
                    rows[i],
                    adjust[i].is_some()
                ));
            }
        }
        // Unadjusted rows equal the plain sampler's picks.
        for (i, a) in adjust.iter().enumerate() {
            if a.is_none() {
                let plain = sample_row(&logits[i * vocab..(i + 1) * vocab], &rows[i]);
                if let Some(m) = mismatch(&got[i], &plain) {
                    bad.push(format!("unadjusted row {i}: {m}"));
                }
            }
        }
        c.check(
            bad.is_empty(),
            format!(
                "vocab {vocab}: {n} rows ({} adjusted) equal the host ({:.3} ms){}",
                adjust.iter().filter(|a| a.is_some()).count(),
                secs * 1e3,
                bad.first()
                    .map_or(String::new(), |b| format!("; first of {}: {b}", bad.len()))
            ),
        );
    }
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn device_sampling_speed() {
    let Some(gpu) = gpu_or_skip("device_sampling_speed") else {
        return;
    };
    let mut rng = Rng::new("device_sampling_speed");
    let vocab = 128_256;
    let chat = RowSampling {
        temperature: 0.8,
        top_k: 0,
        top_p: 0.95,
        min_p: 0.0,
        uniform: 0.5,
        logprobs: None,
    };
    let cases = [
        ("T=0.8 top_p=0.95", chat),
        (
            "T=1",
            RowSampling {
                top_p: 1.0,
                temperature: 1.0,
                ..chat
            },
        ),
        (
            "T=0.8 top_k=40 top_p=0.95 logprobs=5",
            RowSampling {
                top_k: 40,
                logprobs: Some(5),
                ..chat
            },
        ),
    ];
    for n in [1, 32, 128] {
        let logits: Vec<f32> = (0..n).flat_map(|_| row_of(&mut rng, vocab, 0)).collect();
        for (name, p) in cases {
            let rows = vec![p; n];
            run(&gpu, &logits, &rows, vocab);
            let mut times: Vec<f64> = (0..5).map(|_| run(&gpu, &logits, &rows, vocab).1).collect();
            times.sort_by(f64::total_cmp);
            let t = std::time::Instant::now();
            for i in 0..n {
                let _ = sample_row(&logits[i * vocab..(i + 1) * vocab], &p);
            }
            let host = t.elapsed().as_secs_f64();
            eprintln!(
                "[sampling speed] {n} rows x {vocab}, {name}: device {:.3} ms (median of 5, with launch), host reference {:.3} ms on one core",
                times[2] * 1e3,
                host * 1e3
            );
        }
    }
}

/// On every fixture model, through the whole backend (prefill, then decode steps that replay
/// CUDA graphs): `forward_sampled` picks, step after step, what the host sampler picks from
/// `forward`'s logits of the same step.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn backend_samples_fixture_models_like_the_host() {
    use models::{cuda_backend, fixture_sources, Blocks, Seq};
    if gpu_or_skip("backend_samples_fixture_models_like_the_host").is_none() {
        return;
    }
    let mut c = Checks::new("backend_sampling");
    let params = |step: u64, i: usize| {
        let u = kiln_step::sampling::uniform(11 + i as u64, step);
        let base = RowSampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            uniform: u,
            logprobs: Some(3),
        };
        match i {
            0 => base,
            1 => RowSampling {
                temperature: 0.8,
                top_p: 0.9,
                logprobs: Some(5),
                ..base
            },
            _ => RowSampling {
                temperature: 1.2,
                top_k: 20,
                min_p: 0.05,
                logprobs: None,
                ..base
            },
        }
    };
    for (name, src) in fixture_sources() {
        let mut backend = cuda_backend(src.as_ref(), 512);
        let bs = kiln_step::Backend::kv_geometry(&backend).block_size;
        let mut blocks = Blocks::new(&backend);
        let mut seqs: Vec<Seq> = (0..3)
            .map(|i| {
                let prompt = (0..5 + 7 * i as u32).map(|t| (t * 13 + 1) % 97).collect();
                Seq::new(prompt, &mut blocks, 64, bs)
            })
            .collect();
        let vocab = src.config().vocab_size;
        let mut bad = Vec::new();
        for step in 0..12u64 {
            let rows: Vec<RowSampling> = (0..3).map(|i| params(step, i)).collect();
            let chunks: Vec<_> = seqs.iter().map(|s| s.chunk(0)).collect();
            let logits = kiln_step::Backend::forward(&mut backend, &chunks).expect("forward");
            let got = backend
                .forward_sampled(&chunks, &rows)
                .expect("forward_sampled");
            for (i, r) in rows.iter().enumerate() {
                let want = sample_row(&logits[i * vocab..(i + 1) * vocab], r);
                if let Some(m) = mismatch(&got[i], &want) {
                    bad.push(format!("step {step} seq {i}: {m}"));
                }
            }
            drop(chunks);
            for (s, g) in seqs.iter_mut().zip(&got) {
                s.done = s.tokens.len();
                s.tokens.push(g.as_ref().map_or(0, |x| x.id));
            }
        }
        c.check(
            bad.is_empty(),
            format!(
                "{name}: 12 steps x 3 sequences sampled on the device equal the host{}",
                bad.first().map_or(String::new(), |b| format!("; {b}"))
            ),
        );
    }
    c.finish();
}
