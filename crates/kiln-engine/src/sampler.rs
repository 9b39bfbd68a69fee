//! Picks the next token from one row of logits: the penalties, which read the sequence's
//! history, then the row sampler every backend shares (`kiln_step::sampling`: temperature,
//! top-k, top-p, min-p and a random draw that depends only on the request's seed and the
//! token's index, so a seed alone fixes the tokens whatever else runs in the batch and across
//! preemption).

use kiln_step::sampling::{choose, RowSampling};
pub use kiln_step::sampling::{sample_row, splitmix64, uniform, SampleError, Sampled};
use kiln_step::{adjust_row, Penalty, RowAdjust};

use crate::request::SamplingParams;

/// The tokens the penalties look at.
#[derive(Debug, Clone, Copy)]
pub struct History<'a> {
    pub prompt: &'a [u32],
    pub generated: &'a [u32],
}

/// Chooses the token that follows `history` given its `logits`.
///
/// `draw_index` is the index of the token being generated (0 for the first): together with
/// `seed` it fixes the random draw. `logprobs`: `Some(n)` fills `logprob` and the top `n`.
pub fn sample(
    logits: &[f32],
    params: &SamplingParams,
    history: History<'_>,
    seed: u64,
    draw_index: u64,
    logprobs: Option<usize>,
) -> Result<Sampled, SampleError> {
    sample_adjusted(logits, params, history, seed, draw_index, logprobs, None)
}

/// [`sample`] with `adjust` (a logit bias and a grammar's allowed set) applied after the
/// penalties. An `adjust` that carries the penalties ([`RowAdjust::penalty`], from
/// [`penalty_of`]) applies them itself.
pub fn sample_adjusted(
    logits: &[f32],
    params: &SamplingParams,
    history: History<'_>,
    seed: u64,
    draw_index: u64,
    logprobs: Option<usize>,
    adjust: Option<&RowAdjust>,
) -> Result<Sampled, SampleError> {
    let carried = adjust.is_some_and(|a| a.penalty.is_some());
    let penalised;
    let mut adjusted: &[f32] = if params.has_penalties() && !carried {
        penalised = apply_penalties(logits, params, history)?;
        &penalised
    } else {
        logits
    };
    let mut biased = Vec::new();
    if let Some(adj) = adjust.filter(|a| !a.is_identity()) {
        adjust_row(adjusted, adj, &mut biased);
        adjusted = &biased;
    }
    let row = RowSampling {
        temperature: params.temperature,
        top_k: params.top_k,
        top_p: params.top_p,
        min_p: params.min_p,
        uniform: uniform(seed, draw_index),
        logprobs,
    };
    choose(logits, adjusted, &row)
}

/// The penalties of `p` over `history`: repetition over prompt and generated tokens (as
/// Hugging Face and vLLM do), presence and frequency over generated tokens only (as OpenAI
/// defines them).
pub fn penalty_of(p: &SamplingParams, history: History<'_>) -> Penalty {
    Penalty::of_history(
        p.repetition_penalty,
        p.presence_penalty,
        p.frequency_penalty,
        history.prompt,
        history.generated,
    )
}

fn apply_penalties(
    logits: &[f32],
    p: &SamplingParams,
    history: History<'_>,
) -> Result<Vec<f32>, SampleError> {
    let vocab = logits.len();
    let all = history.prompt.iter().chain(history.generated);
    if let Some(&id) = all.clone().find(|&&t| t as usize >= vocab) {
        return Err(SampleError::TokenOutOfRange { id, vocab });
    }
    let mut out = logits.to_vec();
    let penalty = penalty_of(p, history);
    for &(id, generated) in &penalty.tokens {
        let l = &mut out[id as usize];
        *l = penalty.apply(*l, generated);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
