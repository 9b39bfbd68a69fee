//! Kernel contract for `adjust_rows` (kernels/sample.cu): on fresh random rows (spread, flat,
//! coarse, with NaN and infinities) and random adjustments (penalties over a history, logit
//! biases, grammar masks, each alone and together), every adjusted copy equals the host's
//! `kiln_step::adjust_row` bit for bit; the same contract with bugs planted in the kernel's
//! text must fail.

use crate::common;

use std::sync::Arc;

use common::{gpu_or_skip, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::sampling::AdjustPack;
use kiln_step::{adjust_row, Penalty, RowAdjust, TokenSet};

fn row_of(rng: &mut Rng, vocab: usize) -> Vec<f32> {
    let mut row: Vec<f32> = match rng.below(3) {
        0 => (0..vocab).map(|_| rng.uniform(-8.0, 8.0)).collect(),
        1 => vec![1.5; vocab],
        _ => (0..vocab)
            .map(|_| (rng.uniform(-4.0, 4.0) * 2.0).round() / 2.0)
            .collect(),
    };
    for _ in 0..rng.below(4) {
        let i = rng.below(vocab);
        row[i] = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, 0.0][rng.below(4)];
    }
    row
}

fn ids(rng: &mut Rng, vocab: usize, most: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..1 + rng.below(most))
        .map(|_| rng.below(vocab) as u32)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// None, or any mix of a penalty, a bias and a mask (each present half the time).
fn adjust_of(rng: &mut Rng, vocab: usize) -> Option<RowAdjust> {
    if rng.below(6) == 0 {
        return None;
    }
    let penalty = (rng.below(2) == 0).then(|| {
        Arc::new(Penalty {
            repetition: [1.0, 1.3, 0.7, 2.0][rng.below(4)],
            presence: [0.0, 0.5, -1.5][rng.below(3)],
            frequency: [0.0, 0.25, 2.0][rng.below(3)],
            tokens: ids(rng, vocab, 80)
                .into_iter()
                .map(|id| (id, rng.below(4) as u32))
                .collect(),
        })
    });
    let bias: Vec<(u32, f32)> = if rng.below(2) == 0 {
        ids(rng, vocab, 40)
            .into_iter()
            .map(|id| (id, [-100.0, -3.5, 0.25, 5.0, 100.0][rng.below(5)]))
            .collect()
    } else {
        Vec::new()
    };
    let allowed = (rng.below(2) == 0).then(|| {
        let mut set = TokenSet::empty(vocab);
        for id in 0..vocab as u32 {
            if rng.below(3) != 0 {
                set.insert(id);
            }
        }
        Arc::new(set)
    });
    Some(RowAdjust {
        bias: bias.into(),
        allowed,
        penalty,
    })
}

/// Runs adjust_rows on `gpu` over random rows of each vocabulary and checks every copy.
fn contract(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, shapes: &[(usize, usize)]) {
    for &(vocab, n) in shapes {
        let mut logits = Vec::with_capacity(n * vocab);
        let mut adjust = Vec::new();
        for _ in 0..n {
            logits.extend(row_of(rng, vocab));
            adjust.push(adjust_of(rng, vocab));
        }
        let pack = AdjustPack::new(&adjust, vocab);
        let rows = pack.rows();
        let upload_i32 = |v: &[i32]| {
            let d = gpu.alloc::<i32>(v.len().max(1)).unwrap();
            d.upload(0, v).unwrap();
            d
        };
        let dl = gpu.alloc::<f32>(logits.len()).unwrap();
        dl.upload(0, &logits).unwrap();
        let out = gpu.alloc::<f32>((rows * vocab).max(1)).unwrap();
        out.fill_bytes(0xAB).unwrap();
        let plan = upload_i32(&pack.plan);
        let masks = gpu.alloc::<u32>(pack.masks.len().max(1)).unwrap();
        masks.upload(0, &pack.masks).unwrap();
        let bias_ids = upload_i32(&pack.bias_ids);
        let bias_vals = gpu.alloc::<f32>(pack.bias_vals.len().max(1)).unwrap();
        bias_vals.upload(0, &pack.bias_vals).unwrap();
        let pens = upload_i32(&pack.penalties);
        gpu.adjust_rows(
            dl.ptr(),
            out.ptr(),
            plan.ptr(),
            masks.ptr(),
            bias_ids.ptr(),
            bias_vals.ptr(),
            pens.ptr(),
            rows,
            vocab,
        )
        .unwrap();
        let got = out.download(gpu, 0, rows * vocab).unwrap();
        let mut bad = Vec::new();
        let mut want = Vec::new();
        for (r, a) in adjust.iter().enumerate() {
            let copy = pack.copy_of_row[r];
            let Some(a) = a.as_ref().filter(|a| !a.is_identity()) else {
                if copy >= 0 {
                    bad.push(format!("row {r}: an identity adjustment got a copy"));
                }
                continue;
            };
            adjust_row(&logits[r * vocab..(r + 1) * vocab], a, &mut want);
            let g = &got[copy as usize * vocab..(copy as usize + 1) * vocab];
            let same = |x: f32, y: f32| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
            if let Some(i) = (0..vocab).find(|&i| !same(g[i], want[i])) {
                bad.push(format!(
                    "row {r} token {i}: {} vs host {} (raw {}, penalised {}, biased {}, masked {})",
                    g[i],
                    want[i],
                    logits[r * vocab + i],
                    a.penalty.is_some(),
                    !a.bias.is_empty(),
                    a.allowed.is_some()
                ));
            }
        }
        c.check(
            bad.is_empty(),
            format!(
                "vocab {vocab}: {rows} of {n} rows adjusted, every copy equal to the host's{}",
                bad.first()
                    .map_or(String::new(), |b| format!("; first of {}: {b}", bad.len()))
            ),
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn adjust_rows_equals_adjust_row() {
    let Some(gpu) = gpu_or_skip("adjust_rows_equals_adjust_row") else {
        return;
    };
    let mut rng = Rng::new("adjust_rows_equals_adjust_row");
    let mut c = Checks::new("adjust_rows");
    let shapes = [(31, 40), (1000, 150), (32000, 96), (151_936, 24)];
    contract(&gpu, &mut rng, &mut c, &shapes);
    c.finish();
}

/// sample.cu's adjust_rows with one planted bug each: (text, replacement).
const PLANTED: &[(&str, &str)] = &[
    // Positive logits multiplied by the repetition penalty too.
    (
        "l = l > 0.f ? __fdiv_rn(l, rep) : __fmul_rn(l, rep);",
        "l = __fmul_rn(l, rep);",
    ),
    // The presence penalty left out.
    (
        "l = __fsub_rn(l, __fadd_rn(pres, __fmul_rn(freq, __int2float_rn(times))));",
        "l = __fsub_rn(l, __fmul_rn(freq, __int2float_rn(times)));",
    ),
    // The bias added to the raw logit, dropping the penalty.
    (
        "if (ok) dst[id] = __fadd_rn(dst[id], bias_vals[p[2] + e]);",
        "if (ok) dst[id] = __fadd_rn(src[id], bias_vals[p[2] + e]);",
    ),
    // Penalties on tokens the mask leaves out.
    (
        "const bool ok = id >= 0 && id < vocab && (m == nullptr || ((m[id >> 5] >> (id & 31)) & 1u));\n            if (!ok) continue;",
        "const bool ok = id >= 0 && id < vocab;\n            if (!ok) continue;",
    ),
];

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_adjust_bugs_fail() {
    common::planted::planted_bugs_fail(
        "adjust_rows planted bugs",
        "sample",
        PLANTED,
        |bad, rng, c| contract(bad, rng, c, &[(1000, 150), (32000, 48)]),
    );
}
