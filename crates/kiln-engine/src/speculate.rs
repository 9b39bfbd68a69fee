//! Speculative decoding inside the engine loop: after each step, drafts for the sequences that
//! decode; in the next step each draft runs as decode rows after its sequence's last token, and
//! the rows are judged here. Row j holds the target's own choice at that position (greedy, or the
//! seeded draw for that draw index), so the kept tokens are exactly plain decoding's: the draft
//! only decides how many of them one step yields.

use std::panic::AssertUnwindSafe;

use kiln_step::DraftRow;

use crate::engine::Engine;
use crate::sampler::Sampled;
use crate::scheduler::ScheduledChunk;
use crate::sequence::SeqId;

impl Engine {
    /// Judges a verify chunk's rows: keeps the target's tokens up to and including the first
    /// whose draft differs, rolls the rest back, and hands the kept ones to the request.
    /// Returns how many drafts were kept (the row after them chose the last token), None when
    /// the request failed.
    pub(crate) fn settle_verify(
        &mut self,
        chunk: &ScheduledChunk,
        rows: Vec<(SeqId, Result<Sampled, String>)>,
    ) -> Option<usize> {
        let id = chunk.seq;
        let draft: Vec<u32> = match self.scheduler.get(id) {
            Some(seq) => seq.draft()[..chunk.draft].to_vec(),
            None => return None,
        };
        let mut kept = Vec::with_capacity(rows.len());
        for (j, (_, result)) in rows.into_iter().enumerate() {
            let s = match result {
                Ok(s) => s,
                Err(e) => {
                    self.fail(id, format!("sampling failed: {e}"));
                    return None;
                }
            };
            let matches = draft.get(j) == Some(&s.id);
            kept.push(s);
            if !matches {
                break;
            }
        }
        let accepted = kept.len() - 1;
        self.scheduler.settle_draft(chunk, accepted);
        if let Some(a) = self.active.get_mut(&id) {
            a.draft.proposed += chunk.draft as u64;
            a.draft.accepted += accepted as u64;
            a.draft.target_passes += 1;
            // Deeper after a full hit, back to what held after a miss (capped where used).
            a.draft_len = if accepted == chunk.draft {
                (chunk.draft + 1).max(a.draft_len)
            } else {
                accepted + 1
            };
            if accepted == 0 {
                a.draft_misses = (a.draft_misses + 1).min(6);
                a.draft_pause = 1 << (a.draft_misses - 1);
            } else {
                a.draft_misses = 0;
            }
        }
        self.bump(|s| {
            s.draft_proposed += chunk.draft as u64;
            s.draft_accepted += accepted as u64;
            s.draft_verify_rows += (chunk.draft + 1) as u64;
            s.draft_verify_steps += 1;
        });
        for s in kept {
            // A stop (EOS, stop string, length) ends the request; the tokens after it go.
            if !self.active.contains_key(&id) {
                break;
            }
            self.scheduler.push_token(id, s.id);
            self.accept(id, s);
        }
        Some(accepted)
    }

    /// Asks the drafter for each decoding sequence's next draft, unless too many decode at
    /// once for drafting to pay.
    pub(crate) fn propose_drafts(&mut self) {
        let Some((drafter, cfg)) = self.drafting.as_mut() else {
            return;
        };
        let decoding: Vec<SeqId> = self.scheduler.decoding().map(|s| s.id).collect();
        if decoding.len() > cfg.max_batch {
            return;
        }
        let in_backend = drafter.in_backend();
        let mut wanted: Vec<(SeqId, usize)> = Vec::new();
        let mut proposed: Vec<(SeqId, Vec<u32>)> = Vec::new();
        for id in decoding {
            let Some(a) = self.active.get_mut(&id) else {
                continue;
            };
            if !a.may_draft() {
                continue;
            }
            if a.draft_pause > 0 {
                a.draft_pause -= 1;
                self.scheduler.set_draft(id, Vec::new());
                continue;
            }
            let cap = if a.req.sampling.temperature > 0.0 {
                cfg.max_tokens.div_ceil(2)
            } else {
                cfg.max_tokens
            };
            let room = a.max_len.saturating_sub(1);
            let Some(seq) = self.scheduler.get(id) else {
                continue;
            };
            if a.draft_len == 0 {
                a.draft_len = cap;
            }
            // Never past the request's length: the last token is pending, drafts follow it.
            let k = a
                .draft_len
                .clamp(1, cap)
                .min(room.saturating_sub(seq.tokens.len()));
            if in_backend {
                wanted.push((id, k));
                continue;
            }
            let draft = if k == 0 {
                Vec::new()
            } else {
                drafter.propose(id, &seq.tokens, k)
            };
            proposed.push((id, draft));
        }
        for (id, draft) in proposed {
            self.set_checked_draft(id, draft);
        }
        if in_backend {
            self.backend_drafts(&wanted);
        }
    }

    /// Sets `id`'s draft, cut where its grammar would refuse it (the rows after could never
    /// be kept).
    fn set_checked_draft(&mut self, id: SeqId, mut draft: Vec<u32>) {
        if let Some(c) = self
            .active
            .get_mut(&id)
            .and_then(|a| a.req.constraint.as_mut())
        {
            let valid = c.valid_prefix(&draft);
            draft.truncate(valid);
        }
        self.scheduler.set_draft(id, draft);
    }

    /// Drafts from the backend's own draft model, every sequence of `wanted` (with its draft
    /// length) at once; a sequence whose last token no row of the step last finished chose
    /// (it was not in that step) drafts nothing this time.
    fn backend_drafts(&mut self, wanted: &[(SeqId, usize)]) {
        let mut ids = Vec::new();
        for &(id, k) in wanted {
            self.scheduler.set_draft(id, Vec::new());
            let hidden_row = self.chosen_rows.get(&id).copied();
            if let (Some(row), true) = (hidden_row, k > 0 && self.scheduler.get(id).is_some()) {
                ids.push((id, k, row));
            }
        }
        if ids.is_empty() {
            return;
        }
        let k_max = ids.iter().map(|&(_, k, _)| k).max().unwrap_or(0);
        let rows: Vec<DraftRow<'_>> = ids
            .iter()
            .filter_map(|&(id, _, hidden_row)| {
                let seq = self.scheduler.get(id)?;
                Some(DraftRow {
                    token: *seq.tokens.last()?,
                    pos: seq.tokens.len() - 1,
                    block_table: self.scheduler.blocks().table(id),
                    hidden_row,
                })
            })
            .collect();
        let backend = &mut self.backend;
        let drafted = std::panic::catch_unwind(AssertUnwindSafe(|| backend.draft(&rows, k_max)))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the backend panicked")));
        drop(rows);
        match drafted {
            Ok(drafts) if drafts.len() == ids.len() => {
                for ((id, k, _), mut draft) in ids.into_iter().zip(drafts) {
                    draft.truncate(k);
                    self.set_checked_draft(id, draft);
                }
            }
            Ok(drafts) => tracing::warn!(
                "the draft model gave {} drafts for {} sequences; no drafts this step",
                drafts.len(),
                ids.len()
            ),
            // Plain decoding goes on: a draft only ever saves passes.
            Err(e) => tracing::warn!("the draft model failed, no drafts this step: {e:#}"),
        }
    }
}
