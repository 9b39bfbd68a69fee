//! Causal attention over the paged KV cache, with GQA and an optional sliding window.
//!
//! Each (token, head) pair visits its keys in increasing absolute position and reduces them
//! in that order, reading them through the sequence's block table. Whether the keys were
//! written in this step or earlier ones, alone or beside other sequences, the arithmetic is
//! the same, so chunked prefill equals whole prefill equals decode, bit for bit.

use rayon::prelude::*;

use super::reduce::dot;

/// Head layout of the attention and of the KV cache it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Each token attends to at most this many tokens, itself included.
    pub window: Option<usize>,
}

impl AttentionShape {
    /// Elements of one token's keys (or values) in the cache.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// The cache slot that holds position `pos` of a sequence with this block table.
    #[inline]
    pub fn slot(&self, block_table: &[u32], pos: usize) -> usize {
        block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// The first position a query at `pos` attends to.
    #[inline]
    pub fn first_key(&self, pos: usize) -> usize {
        match self.window {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        }
    }
}

/// One query token: its absolute position and its sequence's block table. Its keys (and its
/// own) must already be in the cache.
#[derive(Debug, Clone, Copy)]
pub struct QueryRow<'a> {
    pub pos: usize,
    pub block_table: &'a [u32],
}

/// One layer's KV pool, `[slots, kv_dim]` each.
#[derive(Debug, Clone, Copy)]
pub struct KvView<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// Attention for every query token.
///
/// `q` holds one row per token with row stride `q_stride`, the heads in its first
/// `num_heads * head_dim` elements. `out` gets `[tokens, num_heads * head_dim]`. Scores are
/// scaled by `scale`.
pub fn paged_attention(
    shape: &AttentionShape,
    scale: f32,
    q: &[f32],
    q_stride: usize,
    rows: &[QueryRow<'_>],
    cache: KvView<'_>,
    out: &mut [f32],
) {
    let (k_cache, v_cache) = (cache.k, cache.v);
    let (hd, heads) = (shape.head_dim, shape.num_heads);
    assert!(
        heads.is_multiple_of(shape.num_kv_heads),
        "query heads are not a multiple of KV heads"
    );
    assert!(
        q_stride >= heads * hd,
        "query row stride is shorter than the heads"
    );
    assert!(
        rows.is_empty() || q.len() >= (rows.len() - 1) * q_stride + heads * hd,
        "query rows are short"
    );
    assert_eq!(
        out.len(),
        rows.len() * heads * hd,
        "attention output has the wrong length"
    );
    let group = heads / shape.num_kv_heads;
    let kv_dim = shape.kv_dim();
    out.par_chunks_mut(hd)
        .enumerate()
        .for_each_init(Vec::new, |scores: &mut Vec<f32>, (i, o)| {
            let (t, h) = (i / heads, i % heads);
            let row = rows[t];
            let qh = &q[t * q_stride + h * hd..][..hd];
            let kv_off = (h / group) * hd;
            let first = shape.first_key(row.pos);

            scores.clear();
            let mut max = f32::NEG_INFINITY;
            for p in first..=row.pos {
                let slot = shape.slot(row.block_table, p);
                let s = dot(qh, &k_cache[slot * kv_dim + kv_off..][..hd]) * scale;
                if s > max {
                    max = s;
                }
                scores.push(s);
            }
            let mut sum = 0.0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }

            o.fill(0.0);
            for (p, &weight) in (first..=row.pos).zip(scores.iter()) {
                let slot = shape.slot(row.block_table, p);
                let v = &v_cache[slot * kv_dim + kv_off..][..hd];
                for (acc, &x) in o.iter_mut().zip(v) {
                    *acc += weight * x;
                }
            }
            let inv = 1.0 / sum;
            for acc in o.iter_mut() {
                *acc *= inv;
            }
        });
}
