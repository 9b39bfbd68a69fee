//! What the engine keeps for a request besides its tokens, and how its next token may be
//! chosen by the backend.

use std::sync::Arc;
use std::time::Instant;

use kiln_step::{Penalty, RowAdjust, RowSampling, MAX_DEVICE_TOP_LOGPROBS};
use tokio::sync::mpsc::UnboundedSender;

use crate::request::{DraftCounts, GenEvent, GenerateRequest};
use crate::sampler;

/// What the engine keeps for a request besides its tokens.
pub(crate) struct Active {
    /// The request without its prompt (which the scheduler's sequence holds).
    pub req: GenerateRequest,
    pub prompt_tokens: usize,
    pub seed: u64,
    /// Length (prompt + generated) at which generation ends with `Length`.
    pub max_len: usize,
    /// The request's events (the output stage sends them; this copy tells when the client has
    /// gone).
    pub events: UnboundedSender<GenEvent>,
    pub submitted: Instant,
    pub time_to_first_token: Option<f64>,
    /// Tokens to draft next (adapts to how many were accepted); 0: not drafted for yet.
    pub draft_len: usize,
    /// Steps to decode plainly before drafting again: a draft nothing of which was kept costs a
    /// wider step for nothing, so misses back off (1, 2, 4, ... steps).
    pub draft_pause: usize,
    pub draft_misses: u32,
    pub draft: DraftCounts,
    /// The request's logit bias, shared by every row that samples for it.
    pub bias: Arc<[(u32, f32)]>,
    /// Its penalties over the tokens so far (None: it has none), kept up to date token by token
    /// so that a step hands them to the backend without reading the whole history.
    pub penalty: Option<Penalty>,
}

impl Active {
    /// Whether a drafter may serve this request: its tokens then come from verify rows, which
    /// must not need the host's view of the history (penalties).
    pub fn may_draft(&self) -> bool {
        !self.req.no_draft && !self.req.sampling.has_penalties()
    }

    /// Argmax of the raw logits is all this request needs.
    pub fn plain_greedy(&self) -> bool {
        let p = &self.req.sampling;
        p.temperature <= 0.0 && !p.has_penalties() && self.req.logprobs.is_none() && !self.adjusts()
    }

    /// Whether its logits are changed before sampling (penalties, a logit bias, a grammar).
    pub fn adjusts(&self) -> bool {
        !self.bias.is_empty() || self.req.constraint.is_some() || self.penalty.is_some()
    }

    /// The row adjustment known before any grammar mask: the penalties and the bias.
    pub fn fixed_adjust(&self) -> Option<RowAdjust> {
        (!self.bias.is_empty() || self.penalty.is_some()).then(|| RowAdjust {
            bias: self.bias.clone(),
            allowed: None,
            penalty: self.penalty.clone().map(Arc::new),
        })
    }

    /// How the backend may sample this request's next token (its penalties go with the row's
    /// adjustment), unless it needs the host: more log-probabilities than a device computes.
    /// `index`: the draw index of the token (how many the request has generated before it).
    pub fn device_row(&self, index: usize) -> Option<RowSampling> {
        let p = &self.req.sampling;
        let top = self.req.logprobs.unwrap_or(0);
        if top > MAX_DEVICE_TOP_LOGPROBS {
            return None;
        }
        Some(RowSampling {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            uniform: sampler::uniform(self.seed, index as u64),
            logprobs: self.req.logprobs,
        })
    }
}
