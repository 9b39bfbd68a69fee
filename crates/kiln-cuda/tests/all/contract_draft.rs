//! Kernel contract for kernels/draft.cu (Gemma 4's assistant): `draft_concat` builds the
//! pre-projection's input rows `[store(e[r]), h[rows[r]]]` bit for bit; `keep_best_centroids`
//! masks each logits row as the CPU's ordered LM head does (kiln_cpu's draft_head.rs: the
//! tokens of the `top_k` best centroids keep their logits, highest score first and equal scores
//! to the lower index in f32's total order, NaN scores included; every other token gets the
//! lowest kept logit minus one), bit for bit, on fresh random inputs with ties, negative and
//! NaN scores, NaN logits and poisoned outputs; the same contract with bugs planted in the
//! kernels' text must fail.

use crate::common;

use common::{bf16_bits, f32_bits, timed, to_bf16, Checks, Rng};
use kiln_cuda::device::Gpu;

/// The host's ordered LM head on one row (draft_head.rs's arithmetic).
fn keep_best_ref(row: &mut [f32], scores: &[f32], ordering: &[u32], top_k: usize) {
    let c = scores.len();
    let per = row.len() / c;
    let mut order: Vec<usize> = (0..c).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut keep = vec![false; row.len()];
    let mut lowest = f32::INFINITY;
    for &ci in &order[..top_k] {
        for &t in &ordering[ci * per..(ci + 1) * per] {
            keep[t as usize] = true;
            lowest = lowest.min(row[t as usize]);
        }
    }
    for (x, k) in row.iter_mut().zip(keep) {
        if !k {
            *x = lowest - 1.0;
        }
    }
}

fn concat_case(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, n: usize, b: usize) {
    let held = n + 3;
    let e = rng.vec(n * b, 30.0);
    let h = to_bf16(&rng.vec(held * b, 4.0));
    let rows: Vec<i32> = (0..n).map(|_| rng.below(held) as i32).collect();
    let (de, dh, dr, dout) = (
        gpu.alloc::<f32>(e.len()).unwrap(),
        gpu.alloc::<u16>(h.len()).unwrap(),
        gpu.alloc::<i32>(n).unwrap(),
        gpu.alloc::<u16>(n * 2 * b).unwrap(),
    );
    de.upload(0, &e).unwrap();
    dh.upload(0, &h).unwrap();
    dr.upload(0, &rows).unwrap();
    dout.fill_bytes(0xff).unwrap();
    let secs = timed(gpu, || {
        gpu.draft_concat(dout.ptr(), de.ptr(), dh.ptr(), dr.ptr(), n, b)
    });
    let mut want = Vec::with_capacity(n * 2 * b);
    for (r, &src) in rows.iter().enumerate() {
        want.extend(e[r * b..(r + 1) * b].iter().map(|&v| bf16_bits(v)));
        want.extend_from_slice(&h[src as usize * b..(src as usize + 1) * b]);
    }
    let got = dout.download(gpu, 0, n * 2 * b).unwrap();
    c.identical(
        &format!("draft_concat n={n} b={b} ({:.3}ms)", secs * 1e3),
        &got,
        &want,
    );
}

/// Scores with equal values, negative ones and (sometimes) NaN of either sign.
fn scores_of(rng: &mut Rng, c: usize) -> Vec<f32> {
    let mut s: Vec<f32> = (0..c)
        .map(|_| (rng.uniform(-4.0, 4.0) * 2.0).round() / 2.0)
        .collect();
    if rng.below(2) == 0 {
        s[rng.below(c)] = f32::NAN;
        s[rng.below(c)] = -f32::NAN;
    }
    s
}

/// `shift` moves every score (NaN stays NaN): below zero, the best centroids are ranked among
/// negative scores, whose raw bits order backwards.
fn mask_case(
    gpu: &Gpu,
    rng: &mut Rng,
    c: &mut Checks,
    rows: usize,
    shape: (usize, usize, usize),
    shift: f32,
) {
    let (vocab, centroids, top_k) = shape;
    let mut ordering: Vec<u32> = (0..vocab as u32).collect();
    rng.shuffle(&mut ordering);
    let per = vocab / centroids;
    let mut owner = vec![0i32; vocab];
    for (i, &t) in ordering.iter().enumerate() {
        owner[t as usize] = (i / per) as i32;
    }
    let mut logits = rng.vec(rows * vocab, 12.0);
    logits[rng.below(rows * vocab)] = f32::NAN;
    let scores: Vec<f32> = (0..rows)
        .flat_map(|_| scores_of(rng, centroids))
        .map(|x| x + shift)
        .collect();
    let (dl, ds, dw) = (
        gpu.alloc::<f32>(logits.len()).unwrap(),
        gpu.alloc::<f32>(scores.len()).unwrap(),
        gpu.alloc::<i32>(vocab).unwrap(),
    );
    dl.upload(0, &logits).unwrap();
    ds.upload(0, &scores).unwrap();
    dw.upload(0, &owner).unwrap();
    let secs = timed(gpu, || {
        gpu.keep_best_centroids(dl.ptr(), ds.ptr(), dw.ptr(), rows, vocab, centroids, top_k)
    });
    let mut want = logits.clone();
    for (row, s) in want
        .chunks_exact_mut(vocab)
        .zip(scores.chunks_exact(centroids))
    {
        keep_best_ref(row, s, &ordering, top_k);
    }
    let got = dl.download(gpu, 0, logits.len()).unwrap();
    c.identical(
        &format!(
            "keep_best_centroids rows={rows} vocab={vocab} centroids={centroids} top_k={top_k} shift={shift} ({:.3}ms)",
            secs * 1e3
        ),
        &f32_bits(&got),
        &f32_bits(&want),
    );
}

fn contract(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    for (n, b) in [(1, 64), (5, 2560), (64, 8), (3, 1000)] {
        concat_case(gpu, rng, c, n, b);
    }
    for (rows, shape, shift) in [
        (1, (512, 16, 4), 0.0),
        (4, (512, 16, 16), 0.0),
        (7, (262_144, 2048, 32), 0.0),
        (3, (4096, 4096, 1), 0.0),
        (2, (1000, 5, 3), 0.0),
        (3, (512, 16, 4), -8.0),
        (2, (262_144, 2048, 32), -8.0),
    ] {
        mask_case(gpu, rng, c, rows, shape, shift);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn draft_kernels_contract() {
    crate::common::run_contract("draft_kernels_contract", "draft", contract);
}

/// draft.cu with one planted bug each: (text, replacement).
const PLANTED: &[(&str, &str)] = &[
    // The hidden state of the row's own index, not the one it names.
    (
        "const store_t* hr = h + (u64)rows[r] * b;",
        "const store_t* hr = h + (u64)r * b;",
    ),
    // Scores ordered by their raw bits: negative scores rank backwards.
    ("return k ^ ((k >> 31) & 0x7fffffff);", "return k;"),
    // One centroid fewer than top_k.
    (
        "for (int round = 0; round < top_k; ++round)",
        "for (int round = 1; round < top_k; ++round)",
    ),
    // The masked tokens tie with the lowest kept one.
    ("lowest = __fsub_rn(lo, 1.f);", "lowest = lo;"),
    // The kept tokens masked instead of the others.
    (
        "if (!kept[owner[t]]) row[t] = masked;",
        "if (kept[owner[t]]) row[t] = masked;",
    ),
];

/// Without a GPU: each planted text occurs once, and with NVRTC each planted module compiles
/// into other machine code than the module's.
#[test]
fn planted_draft_modules_compile() {
    common::planted::each_planted_compiles(PLANTED.iter().map(|&(f, t)| ("draft", f, t)));
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_draft_bugs_fail() {
    common::planted::planted_bugs_fail("draft planted bugs", "draft", PLANTED, contract);
}
