//! Causal attention over the paged KV cache, with GQA and an optional sliding window.
//!
//! Each (token, head) pair visits its keys in increasing absolute position and reduces them
//! in that order, reading them through the sequence's block table; the query heads that share
//! a KV head run together so that each key and value is read once. Whether the keys were
//! written in this step or earlier ones, alone or beside other sequences, the arithmetic is
//! the same, so chunked prefill equals whole prefill equals decode, bit for bit.

use rayon::prelude::*;

use super::reduce::{dot_with, Fused, MulAdd, Separate};
use super::simd::{isa, Isa};

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

    /// The slots of positions `first..=last`, in position order, as one range per block.
    #[inline]
    pub fn slot_runs<'t>(
        &self,
        block_table: &'t [u32],
        first: usize,
        last: usize,
    ) -> impl Iterator<Item = std::ops::Range<usize>> + 't {
        let bs = self.block_size;
        (first / bs..=last / bs).map(move |b| {
            let start = if b == first / bs { first % bs } else { 0 };
            let end = if b == last / bs { last % bs + 1 } else { bs };
            let base = block_table[b] as usize * bs;
            base + start..base + end
        })
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

/// Attention for every query token, with the process's instruction set.
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
    let queries = Queries {
        data: q,
        stride: q_stride,
        rows,
    };
    paged_attention_with(isa(), shape, scale, queries, cache, out)
}

/// Probabilities of some rows rounded as the P V product reads them, their sum left unrounded:
/// the tensor-core attention of a narrower-storage backend, emulated (`rows[t]`: round row t).
#[derive(Clone, Copy)]
pub struct RoundProbs<'a> {
    pub round: fn(f32) -> f32,
    pub rows: &'a [bool],
}

/// [`paged_attention`] with the probabilities of some rows rounded ([`RoundProbs`]).
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_rounding(
    shape: &AttentionShape,
    scale: f32,
    q: &[f32],
    q_stride: usize,
    rows: &[QueryRow<'_>],
    cache: KvView<'_>,
    out: &mut [f32],
    probs: RoundProbs<'_>,
) {
    assert_eq!(probs.rows.len(), rows.len(), "one rounding flag per row");
    let queries = Queries {
        data: q,
        stride: q_stride,
        rows,
    };
    attention_impl(isa(), shape, scale, queries, cache, out, Some(probs))
}

/// The query side of an attention call (see [`paged_attention`]).
#[derive(Debug, Clone, Copy)]
pub struct Queries<'a> {
    pub data: &'a [f32],
    pub stride: usize,
    pub rows: &'a [QueryRow<'a>],
}

/// [`paged_attention`] with an explicit instruction set (tests compare them).
pub fn paged_attention_with(
    isa: Isa,
    shape: &AttentionShape,
    scale: f32,
    queries: Queries<'_>,
    cache: KvView<'_>,
    out: &mut [f32],
) {
    attention_impl(isa, shape, scale, queries, cache, out, None)
}

fn attention_impl(
    isa: Isa,
    shape: &AttentionShape,
    scale: f32,
    queries: Queries<'_>,
    cache: KvView<'_>,
    out: &mut [f32],
    probs: Option<RoundProbs<'_>>,
) {
    let (hd, heads) = (shape.head_dim, shape.num_heads);
    let Queries {
        data: q,
        stride,
        rows,
    } = queries;
    assert!(
        heads.is_multiple_of(shape.num_kv_heads),
        "query heads are not a multiple of KV heads"
    );
    assert!(
        stride >= heads * hd,
        "query row stride is shorter than the heads"
    );
    assert!(
        rows.is_empty() || q.len() >= (rows.len() - 1) * stride + heads * hd,
        "query rows are short"
    );
    assert_eq!(
        out.len(),
        rows.len() * heads * hd,
        "attention output has the wrong length"
    );
    assert!(isa.is_supported(), "{isa:?} is not supported by this CPU");
    let task = Task {
        shape,
        scale,
        queries,
        cache,
        group: heads / shape.num_kv_heads,
        probs,
    };
    // One task per (token, KV head): its query heads share every key and value read.
    out.par_chunks_mut(task.group * hd)
        .enumerate()
        .for_each_init(Scratch::default, |s, (i, o)| match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            Isa::Avx2Fma => unsafe { attend_fma(&task, s, i, o) },
            _ => attend::<Separate>(&task, s, i, o),
        });
}

struct Task<'a> {
    shape: &'a AttentionShape,
    scale: f32,
    queries: Queries<'a>,
    cache: KvView<'a>,
    group: usize,
    probs: Option<RoundProbs<'a>>,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_fma(task: &Task<'_>, s: &mut Scratch, i: usize, o: &mut [f32]) {
    attend::<Fused>(task, s, i, o)
}

/// Task `i`: token `i / num_kv_heads`, KV head `i % num_kv_heads`, writing its query heads'
/// outputs to `o`.
#[inline(always)]
fn attend<M: MulAdd>(task: &Task<'_>, s: &mut Scratch, i: usize, o: &mut [f32]) {
    let Task {
        shape,
        scale,
        queries,
        cache,
        group,
        probs,
    } = *task;
    let (hd, kv_dim) = (shape.head_dim, shape.kv_dim());
    let (t, kvh) = (i / shape.num_kv_heads, i % shape.num_kv_heads);
    let row = queries.rows[t];
    let qs = &queries.data[t * queries.stride + kvh * group * hd..][..group * hd];
    let kv_off = kvh * hd;
    let first = shape.first_key(row.pos);
    let len = row.pos + 1 - first;
    s.reset(group, len);

    let slots = shape.slot_runs(row.block_table, first, row.pos).flatten();
    for (j, slot) in slots.enumerate() {
        let k = &cache.k[slot * kv_dim + kv_off..][..hd];
        for (g, max) in s.max.iter_mut().enumerate() {
            let score = dot_with::<M>(&qs[g * hd..][..hd], k) * scale;
            if score > *max {
                *max = score;
            }
            s.scores[g * len + j] = score;
        }
    }
    for (g, (sum, max)) in s.sum.iter_mut().zip(&s.max).enumerate() {
        for e in &mut s.scores[g * len..][..len] {
            *e = (*e - max).exp();
            *sum += *e;
        }
    }
    if let Some(p) = probs.filter(|p| p.rows[t]) {
        s.scores.iter_mut().for_each(|e| *e = (p.round)(*e));
    }

    o.fill(0.0);
    let slots = shape.slot_runs(row.block_table, first, row.pos).flatten();
    for (j, slot) in slots.enumerate() {
        let v = &cache.v[slot * kv_dim + kv_off..][..hd];
        for (g, out_g) in o.chunks_exact_mut(hd).enumerate() {
            let weight = s.scores[g * len + j];
            for (acc, &x) in out_g.iter_mut().zip(v) {
                *acc = M::mul_add(weight, x, *acc);
            }
        }
    }
    for (out_g, sum) in o.chunks_exact_mut(hd).zip(&s.sum) {
        let inv = 1.0 / sum;
        for acc in out_g.iter_mut() {
            *acc *= inv;
        }
    }
}

/// Per-task buffers: `scores[g * len + j]` is query head g against the j-th visible key.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
}

impl Scratch {
    fn reset(&mut self, group: usize, len: usize) {
        self.scores.clear();
        self.scores.resize(group * len, 0.0);
        self.max.clear();
        self.max.resize(group, f32::NEG_INFINITY);
        self.sum.clear();
        self.sum.resize(group, 0.0);
    }
}
