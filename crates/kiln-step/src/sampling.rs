//! The reference row sampler: temperature, top-k, top-p, min-p and a random draw that depends
//! only on a sequence's seed and the token's index, in arithmetic a GPU kernel can reproduce bit
//! for bit ([`crate::sampling_weights`]). A backend that samples on its device must pick what
//! [`sample_row`] picks from the same logits; a backend that does not calls [`sample_rows`].
//! Penalties, which need a sequence's history, stay with the engine's sampler, which calls
//! [`choose`] on the penalised logits.

use crate::sampling_weights as weights;

/// Most `top_logprobs` a backend is asked to compute on the device (the API's limit).
pub const MAX_DEVICE_TOP_LOGPROBS: usize = 20;

/// How one logits row is sampled: the host sampler's parameters without the penalties (which
/// need the sequence's history), and the row's random draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSampling {
    /// 0: greedy.
    pub temperature: f32,
    /// 0: no top-k cut.
    pub top_k: usize,
    /// 1.0: no nucleus cut.
    pub top_p: f32,
    /// 0.0: no min-p cut.
    pub min_p: f32,
    /// The row's uniform draw in [0, 1), [`uniform`]`(seed, index)`.
    pub uniform: f64,
    /// `Some(n)`: the chosen token's log-probability and the `n` most likely tokens'
    /// (`n <= MAX_DEVICE_TOP_LOGPROBS` when a device samples).
    pub logprobs: Option<usize>,
}

/// The token the sampler chose, with the log-probabilities a client asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub id: u32,
    /// Log-softmax of the raw logits at `id` (before penalties and temperature), when asked.
    pub logprob: Option<f32>,
    /// The `n` most likely tokens of the raw distribution, most likely first.
    pub top_logprobs: Vec<(u32, f32)>,
}

impl Sampled {
    /// A token chosen without log-probabilities (a device argmax).
    pub fn id_only(id: u32) -> Sampled {
        Sampled {
            id,
            logprob: None,
            top_logprobs: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    #[error("the model returned no finite logit (NaN or infinite values everywhere)")]
    NoFiniteLogits,
    #[error("token {id} is outside the logits row of {vocab} entries")]
    TokenOutOfRange { id: u32, vocab: usize },
}

/// Smallest candidate list tried before growing it, when top-p needs the most likely tokens in
/// order: most distributions reach top-p within a few dozen tokens, so a full sort is rare.
const FIRST_PREFIX: usize = 64;

/// Samples one row of raw logits with `row`: the reference a device sampler is tested against.
pub fn sample_row(logits: &[f32], row: &RowSampling) -> Result<Sampled, SampleError> {
    choose(logits, logits, row)
}

/// Samples each `vocab`-wide row of `logits` with its entry of `rows`, spread over threads when
/// the rows are many; results in row order, each depending only on its own row.
pub fn sample_rows(
    logits: &[f32],
    vocab: usize,
    rows: &[RowSampling],
) -> Vec<Result<Sampled, SampleError>> {
    let jobs: Vec<(&[f32], &RowSampling)> = logits.chunks_exact(vocab.max(1)).zip(rows).collect();
    crate::par::map_rows(&jobs, logits.len(), |(l, r)| sample_row(l, r))
}

/// Picks from `adjusted` (the logits after any penalties) with the row's draw;
/// log-probabilities come from the raw `logits`.
pub fn choose(logits: &[f32], adjusted: &[f32], row: &RowSampling) -> Result<Sampled, SampleError> {
    let id = if row.temperature <= 0.0 {
        argmax(adjusted).ok_or(SampleError::NoFiniteLogits)?
    } else {
        draw(adjusted, row)?
    };
    let (logprob, top_logprobs) = match row.logprobs {
        Some(n) => {
            let lse = log_sum_exp(logits).ok_or(SampleError::NoFiniteLogits)?;
            let chosen = (logits[id as usize] as f64 - lse) as f32;
            let top = top_n(logits, n)
                .into_iter()
                .map(|t| (t, (logits[t as usize] as f64 - lse) as f32))
                .collect();
            (Some(chosen), top)
        }
        None => (None, Vec::new()),
    };
    Ok(Sampled {
        id,
        logprob,
        top_logprobs,
    })
}

/// Largest finite logit; the lowest id wins a tie.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(u32, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || l == f32::NEG_INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i as u32, l));
        }
    }
    best.map(|(i, _)| i)
}

/// Temperature, then top-k, top-p and min-p, then a draw at `u`, in the fixed-point arithmetic
/// of [`crate::sampling_weights`] (which the GPU sampler reproduces bit for bit).
///
/// Candidates are ordered most likely first ([`order_key`], lower id first among equals); top-k
/// and top-p keep a prefix of that order (top-p: the shortest whose weight reaches
/// `ceil(top_p * total)`), min-p drops weights below `ceil(min_p * WEIGHT_ONE)`. The draw
/// then walks the kept tokens in id order and takes the first whose running weight exceeds
/// `draw_target(p.uniform, kept)`.
fn draw(logits: &[f32], p: &RowSampling) -> Result<u32, SampleError> {
    let max = logits
        .iter()
        .copied()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY || logits.contains(&f32::INFINITY) {
        // Nothing finite, or an infinite logit: the argmax is the only sensible choice.
        return argmax(logits).ok_or(SampleError::NoFiniteLogits);
    }
    let inv_t = 1.0 / p.temperature as f64;
    let weights: Vec<u64> = logits
        .iter()
        .map(|&l| weights::token_weight(l, max, inv_t))
        .collect();
    let vocab = logits.len();
    let top_k = if p.top_k == 0 || p.top_k >= vocab {
        vocab
    } else {
        p.top_k
    };
    let mut kept: Vec<u32> = if top_k < vocab || p.top_p < 1.0 {
        let total = weights.iter().sum();
        let need = (p.top_p < 1.0).then(|| weights::top_p_need(p.top_p, total));
        let mut ids = ordered_prefix(logits, &weights, top_k, need);
        ids.sort_unstable();
        ids
    } else {
        (0..vocab as u32).collect()
    };
    let floor = weights::min_p_floor(p.min_p);
    kept.retain(|&t| weights[t as usize] >= floor.max(1));
    let mass: u64 = kept.iter().map(|&t| weights[t as usize]).sum();
    let target = weights::draw_target(p.uniform, mass);
    let mut acc = 0u64;
    for &t in &kept {
        acc += weights[t as usize];
        if acc > target {
            return Ok(t);
        }
    }
    Err(SampleError::NoFiniteLogits)
}

/// Orders token ids most likely first, lower id first among equal logits.
fn by_key_desc(logits: &[f32]) -> impl Fn(&u32, &u32) -> std::cmp::Ordering + '_ {
    move |&a, &b| {
        let key = |t: u32| weights::order_key(logits[t as usize]);
        key(b).cmp(&key(a)).then(a.cmp(&b))
    }
}

/// The first `top_k` tokens of the order, cut to the shortest prefix whose weight reaches
/// `need` when there is one. Sorts only as long a prefix as the cut needs.
fn ordered_prefix(logits: &[f32], weights: &[u64], top_k: usize, need: Option<u64>) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let order = by_key_desc(logits);
    let mut len = if need.is_some() {
        FIRST_PREFIX.min(top_k)
    } else {
        top_k
    };
    loop {
        if len < ids.len() {
            ids.select_nth_unstable_by(len, &order);
        }
        ids[..len].sort_unstable_by(&order);
        if let Some(need) = need {
            let mut acc = 0u64;
            for (i, &t) in ids[..len].iter().enumerate() {
                acc += weights[t as usize];
                if acc >= need {
                    ids.truncate(i + 1);
                    return ids;
                }
            }
        }
        if len >= top_k {
            ids.truncate(top_k);
            return ids;
        }
        len = (len * 4).min(top_k);
    }
}

/// log(sum(exp(logits))) over the finite logits, in f64.
fn log_sum_exp(logits: &[f32]) -> Option<f64> {
    let max = logits
        .iter()
        .copied()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return None;
    }
    let sum: f64 = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| (l as f64 - max as f64).exp())
        .sum();
    Some(max as f64 + sum.ln())
}

/// The `n` largest raw logits' ids in the sampler's order (NaN ranks with -inf).
fn top_n(logits: &[f32], n: usize) -> Vec<u32> {
    let n = n.min(logits.len());
    if n == 0 {
        return Vec::new();
    }
    let order = by_key_desc(logits);
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    if n < ids.len() {
        ids.select_nth_unstable_by(n, &order);
    }
    ids.truncate(n);
    ids.sort_unstable_by(&order);
    ids
}

/// SplitMix64's finaliser: a bijective, well-mixed hash of a 64-bit counter.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform draw in [0, 1) for token `index` of a sequence seeded with `seed`. Counter-based:
/// no state, so it is the same in any batch and after a preemption recomputes the sequence.
pub fn uniform(seed: u64, index: u64) -> f64 {
    let bits = splitmix64(splitmix64(seed) ^ splitmix64(index.wrapping_add(0x5851_F42D_4C95_7F2D)));
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_p_on_a_flat_row_grows_past_the_first_prefix() {
        let row = vec![0.0f32; 1000];
        let w = vec![weights::WEIGHT_ONE; 1000];
        let need = weights::top_p_need(0.9, 1000 * w[0]);
        let ids = ordered_prefix(&row, &w, 1000, Some(need));
        assert_eq!(ids.len(), 900);
        assert_eq!(ids, (0..900).collect::<Vec<u32>>());
    }
}
