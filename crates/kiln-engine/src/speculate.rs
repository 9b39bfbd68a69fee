//! Speculative decoding inside the engine loop: after each step, drafts for the sequences that
//! decode; in the next step each draft runs as decode rows after its sequence's last token, and
//! the rows are judged here. Row j holds the target's own choice at that position (greedy, or the
//! seeded draw for that draw index), so the kept tokens are exactly plain decoding's: the draft
//! only decides how many of them one step yields.

use crate::engine::Engine;
use crate::sampler::Sampled;
use crate::scheduler::ScheduledChunk;
use crate::sequence::SeqId;

impl Engine {
    /// Judges a verify chunk's rows: keeps the target's tokens up to and including the first
    /// whose draft differs, rolls the rest back, and hands the kept ones to the request.
    pub(crate) fn settle_verify(
        &mut self,
        chunk: &ScheduledChunk,
        rows: Vec<(SeqId, Result<Sampled, String>)>,
    ) {
        let id = chunk.seq;
        let draft: Vec<u32> = match self.scheduler.get(id) {
            Some(seq) => seq.draft()[..chunk.draft].to_vec(),
            None => return,
        };
        let mut kept = Vec::with_capacity(rows.len());
        for (j, (_, result)) in rows.into_iter().enumerate() {
            let s = match result {
                Ok(s) => s,
                Err(e) => {
                    self.fail(id, format!("sampling failed: {e}"));
                    return;
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
            let mut draft = if k == 0 {
                Vec::new()
            } else {
                drafter.propose(id, &seq.tokens, k)
            };
            // Under a grammar, a draft is cut where the grammar would refuse it: the rows
            // after could never be kept.
            if let Some(c) = a.req.constraint.as_mut() {
                let valid = c.valid_prefix(&draft);
                draft.truncate(valid);
            }
            self.scheduler.set_draft(id, draft);
        }
    }
}
