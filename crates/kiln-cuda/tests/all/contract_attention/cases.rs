//! The attention contract's cases: head counts, head dims and windows, each over chunks of
//! prefill rows, decode rows and verify steps at positions from 0 to 128k.

use crate::common::attn::{own, Case, Chunk};

/// Verify-step rows: k + 1 decode rows of one sequence at consecutive positions.
pub(super) fn verify(start: usize, rows: usize, table: usize) -> Vec<Chunk> {
    (0..rows)
        .map(|j| Chunk {
            start: start + j,
            rows: 1,
            table,
        })
        .collect()
}

pub(super) fn cases() -> Vec<Case> {
    let common = own(&[
        (0, 150),
        (1000, 77),
        (5, 2),
        (4999, 1),
        (0, 1),
        (700, 1),
        (63, 129),
    ]);
    let mut v: Vec<Case> = [
        (8, 8, 64, 0),
        (16, 4, 128, 0),
        (16, 2, 128, 100),
        (8, 2, 256, 0),
        (8, 8, 32, 100_000),
        (12, 3, 64, 37),
        (32, 2, 64, 0),
        (4, 2, 64, 200),
        (4, 4, 16, 0),
        (8, 4, 512, 0),
        (8, 2, 512, 37),
        (3, 1, 512, 512),
    ]
    .into_iter()
    .map(|(n_q, n_kv, hd, window)| Case {
        n_q,
        n_kv,
        hd,
        window,
        chunks: common.clone(),
    })
    .collect();
    // Verify steps beside other rows: 5 rows at 3000 (GQA 4), 3 rows crossing the split-span
    // change at 4096 keys, and a prefill chunk of the same sequence's neighbour.
    let mut chunks = own(&[(2999, 1), (100, 300)]);
    chunks.extend(verify(3000, 5, 2));
    chunks.extend(verify(4094, 3, 3));
    chunks.extend(verify(17, 2, 4));
    for (n_q, n_kv, hd, window) in [
        (32, 8, 128, 0),
        (16, 2, 64, 1000),
        (8, 8, 128, 0),
        (32, 2, 256, 0),
        (8, 4, 512, 512),
    ] {
        v.push(Case {
            n_q,
            n_kv,
            hd,
            window,
            chunks: chunks.clone(),
        });
    }
    // A batch of 128 decode rows: decode_mma gives each head group a few CTAs (5 on an H200),
    // each serving every fifth split slot, up to 13 splits a CTA for the rows near 8k (the
    // CUDA-core decode and the wide decode of 512-wide heads likewise); alone == in the batch
    // and float64 must still hold, with and without a window.
    let many: Vec<(usize, usize)> = (0..128)
        .map(|i| {
            (
                if i % 32 == 7 {
                    8000 + i
                } else {
                    (i * 389) % 1500
                },
                1,
            )
        })
        .collect();
    for (n_q, n_kv, hd, window) in [(32, 8, 128, 0), (16, 8, 64, 1000), (8, 2, 512, 0)] {
        v.push(Case {
            n_q,
            n_kv,
            hd,
            window,
            chunks: own(&many),
        });
    }
    // Long KV: decode rows at 32k and 128k, short prefill chunks on top of long caches.
    v.push(Case {
        n_q: 32,
        n_kv: 8,
        hd: 128,
        window: 0,
        chunks: own(&[(31_999, 1), (30_000, 8), (16_383, 1)]),
    });
    v.push(Case {
        n_q: 32,
        n_kv: 8,
        hd: 128,
        window: 4096,
        chunks: own(&[(31_999, 1), (30_000, 8)]),
    });
    // Wide heads deep in the cache, with and without Gemma's 512-token window.
    for window in [0, 512] {
        v.push(Case {
            n_q: 8,
            n_kv: 4,
            hd: 512,
            window,
            chunks: own(&[(16_383, 1), (10_000, 70), (9_000, 1)]),
        });
    }
    let mut long = own(&[(131_071, 1), (120_000, 5), (65_536, 1)]);
    long.extend(verify(100_000, 4, 3));
    v.push(Case {
        n_q: 8,
        n_kv: 2,
        hd: 128,
        window: 0,
        chunks: long,
    });
    v
}
