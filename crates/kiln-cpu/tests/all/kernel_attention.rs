//! Paged attention against a float64 reference: GQA ratios 1/4/8, block sizes that do and do
//! not divide the sequence, windows shorter and longer than it, shuffled block tables.

use crate::support;

use kiln_cpu::kernels::{paged_attention_with, AttentionShape, Isa, KvView, Queries, QueryRow};
use support::{shuffled_blocks, Rng};

/// Reference for one (query, head): softmax over positions `lo..=pos` of the sequence.
fn reference(
    shape: &AttentionShape,
    q: &[f32],
    keys: &[Vec<f32>],
    values: &[Vec<f32>],
    pos: usize,
    head: usize,
) -> Vec<f64> {
    let hd = shape.head_dim;
    let kvh = head / (shape.num_heads / shape.num_kv_heads);
    let lo = shape.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    let scale = 1.0 / (hd as f64).sqrt();
    let scores: Vec<f64> = (lo..=pos)
        .map(|p| {
            (0..hd)
                .map(|d| q[d] as f64 * keys[p][kvh * hd + d] as f64)
                .sum::<f64>()
                * scale
        })
        .collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    (0..hd)
        .map(|d| {
            (lo..=pos)
                .zip(&exps)
                .map(|(p, e)| e / sum * values[p][kvh * hd + d] as f64)
                .sum()
        })
        .collect()
}

struct Case {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    window: Option<usize>,
}

/// Several sequences share one pool; each asks attention for a few of its positions. With
/// `fence`, every slot a query may not read (other sequences, future positions, positions
/// outside the window) holds NaN, so reading one shows.
fn check(case: &Case, seed: u64, fence: bool) {
    let shape = AttentionShape {
        num_heads: case.heads,
        num_kv_heads: case.kv_heads,
        head_dim: case.head_dim,
        block_size: case.block_size,
        window: case.window,
    };
    let (kv_dim, qd) = (shape.kv_dim(), case.heads * case.head_dim);
    let mut rng = Rng::new(seed);
    let lens = [1usize, 9, 70, 33];
    let pool = lens
        .iter()
        .map(|l| l.div_ceil(case.block_size))
        .sum::<usize>()
        + 3;
    let mut blocks = shuffled_blocks(pool, seed).into_iter();
    let mut k_cache = vec![f32::NAN; pool * case.block_size * kv_dim];
    let mut v_cache = k_cache.clone();

    let mut seqs = Vec::new();
    for &len in &lens {
        let table: Vec<u32> = blocks
            .by_ref()
            .take(len.div_ceil(case.block_size))
            .collect();
        let keys: Vec<Vec<f32>> = (0..len).map(|_| rng.vec(kv_dim, 2.0)).collect();
        let values: Vec<Vec<f32>> = (0..len).map(|_| rng.vec(kv_dim, 1.0)).collect();
        // With a fence, one query per sequence at its last position, and only its window written.
        let queries: Vec<usize> = if fence {
            vec![len - 1]
        } else {
            vec![0, len / 2, len - 1]
        };
        let lo = if fence { shape.first_key(len - 1) } else { 0 };
        for p in lo..len {
            let slot = shape.slot(&table, p);
            k_cache[slot * kv_dim..][..kv_dim].copy_from_slice(&keys[p]);
            v_cache[slot * kv_dim..][..kv_dim].copy_from_slice(&values[p]);
        }
        seqs.push((table, keys, values, queries));
    }

    let q_stride = qd + 5;
    let mut rows = Vec::new();
    let mut expected = Vec::new();
    let mut q = Vec::new();
    for (table, keys, values, queries) in &seqs {
        for &pos in queries {
            let qrow = rng.vec(q_stride, 1.5);
            for h in 0..case.heads {
                expected.push(reference(
                    &shape,
                    &qrow[h * case.head_dim..][..case.head_dim],
                    keys,
                    values,
                    pos,
                    h,
                ));
            }
            q.extend_from_slice(&qrow);
            rows.push(QueryRow {
                pos,
                block_table: table,
            });
        }
    }
    let scale = (1.0 / (case.head_dim as f64).sqrt()) as f32;
    for isa in Isa::available() {
        let mut out = vec![f32::NAN; rows.len() * qd];
        let queries = Queries {
            data: &q,
            stride: q_stride,
            rows: &rows,
        };
        let cache = KvView {
            k: &k_cache,
            v: &v_cache,
        };
        paged_attention_with(isa, &shape, scale, queries, cache, &mut out);
        for (i, (got, want)) in out.chunks_exact(case.head_dim).zip(&expected).enumerate() {
            for (d, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (*g as f64 - w).abs() <= 1e-5,
                    "{isa:?} heads {}/{} hd {} bs {} window {:?} fence {fence}: row {} head {} [{d}]: {g} vs {w}",
                    case.heads, case.kv_heads, case.head_dim, case.block_size, case.window, i / case.heads, i % case.heads
                );
            }
        }
    }
}

#[test]
fn attention_matches_f64_reference() {
    let cases = [
        Case {
            heads: 4,
            kv_heads: 4,
            head_dim: 8,
            block_size: 16,
            window: None,
        },
        Case {
            heads: 8,
            kv_heads: 2,
            head_dim: 12,
            block_size: 5,
            window: None,
        },
        Case {
            heads: 8,
            kv_heads: 1,
            head_dim: 64,
            block_size: 1,
            window: None,
        },
        Case {
            heads: 16,
            kv_heads: 2,
            head_dim: 20,
            block_size: 16,
            window: Some(3),
        },
        Case {
            heads: 4,
            kv_heads: 1,
            head_dim: 32,
            block_size: 7,
            window: Some(30),
        },
        Case {
            heads: 2,
            kv_heads: 2,
            head_dim: 16,
            block_size: 4,
            window: Some(500),
        },
        Case {
            heads: 6,
            kv_heads: 6,
            head_dim: 6,
            block_size: 3,
            window: Some(1),
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        check(case, i as u64, false);
        check(case, 100 + i as u64, true);
    }
}
