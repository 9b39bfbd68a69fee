//! The request-output half of the engine: what happens to a sampled token on its way to the
//! client (detokenising, stop strings, end of turn, length limit), and how a request ends
//! (finished, failed, cancelled).

use std::sync::atomic::Ordering;

use crate::engine::Engine;
use crate::request::{Finish, FinishReason, GenEvent, TokenEvent};
use crate::sampler::Sampled;
use crate::sequence::SeqId;
use crate::shared::Command;
use crate::stop::StopCheck;

impl Engine {
    pub(crate) fn accept(&mut self, id: SeqId, s: Sampled) {
        self.scheduler.push_token(id, s.id);
        self.bump(|st| st.generated_tokens += 1);
        let len = self.scheduler.get(id).map_or(0, |q| q.tokens.len());
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        if a.time_to_first_token.is_none() {
            a.time_to_first_token = Some(a.submitted.elapsed().as_secs_f64());
        }
        let ends_turn = (!a.req.ignore_eos && self.tokenizer.eos_ids().contains(&s.id))
            || a.req.stop_token_ids.contains(&s.id);
        // The grammar takes every token that is output; once complete, the request ends.
        let mut grammar_done = false;
        if let (Some(c), false) = (a.req.constraint.as_mut(), ends_turn) {
            if let Err(e) = c.commit(s.id) {
                self.fail(id, e);
                return;
            }
            grammar_done = c.is_finished();
        }
        let (text, stop_string) = if ends_turn {
            (String::new(), false)
        } else {
            match a.stop.push(&a.decoder.push(s.id)) {
                StopCheck::Emit(text) => (text, false),
                StopCheck::Stopped(text) => (text, true),
            }
        };
        let reason = if ends_turn || stop_string || grammar_done {
            Some(FinishReason::Stop)
        } else {
            (len >= a.max_len).then_some(FinishReason::Length)
        };
        let event = TokenEvent {
            id: s.id,
            text,
            logprob: s.logprob,
            top_logprobs: s.top_logprobs,
        };
        let sent = a.events.send(GenEvent::Token(event)).is_ok();
        if stop_string {
            self.finish(id, FinishReason::Stop, false);
        } else if let Some(reason) = reason {
            self.finish(id, reason, true);
        } else if !sent {
            self.retire(id);
            self.bump(|st| st.requests_cancelled += 1);
        }
    }

    /// Ends a request and sends `Done`. `flush`: release the text still held back (unless
    /// it completes a stop string); false after a stop string matched, when the rest is cut.
    pub(crate) fn finish(&mut self, id: SeqId, mut reason: FinishReason, flush: bool) {
        let Some(mut a) = self.active.remove(&id) else {
            return;
        };
        let mut trailing = String::new();
        if flush {
            // Text the decoder or the stop matcher still holds; it may yet complete a stop string.
            match a.stop.push(&a.decoder.finish()) {
                StopCheck::Emit(text) => trailing = text + &a.stop.finish(),
                StopCheck::Stopped(text) => {
                    trailing = text;
                    reason = FinishReason::Stop;
                }
            }
        }
        self.forget_draft(id);
        let seq = self.scheduler.remove(id);
        self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        let finish = Finish {
            reason,
            prompt_tokens: a.prompt_tokens,
            cached_tokens: seq.as_ref().map_or(0, |s| s.cached_tokens),
            completion_tokens: seq.map_or(0, |s| s.generated().len()),
            trailing_text: trailing,
            time_to_first_token: a.time_to_first_token,
            draft: a.draft,
        };
        let _ = a.events.send(GenEvent::Done(finish));
        match reason {
            FinishReason::Cancelled => self.bump(|s| s.requests_cancelled += 1),
            _ => self.bump(|s| s.requests_finished += 1),
        }
    }

    /// Ends a request with an error event.
    pub(crate) fn fail(&mut self, id: SeqId, message: String) {
        if let Some(a) = self.active.get(&id) {
            let _ = a.events.send(GenEvent::Error(message));
        }
        self.retire(id);
        self.bump(|s| s.requests_failed += 1);
    }

    /// Forgets a request and frees its blocks, sending nothing.
    pub(crate) fn retire(&mut self, id: SeqId) {
        self.forget_draft(id);
        self.scheduler.remove(id);
        if self.active.remove(&id).is_some() {
            self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The drafter lets go of a sequence that leaves (a draft model frees its cache blocks).
    fn forget_draft(&mut self, id: SeqId) {
        if let Some((drafter, _)) = self.drafting.as_mut() {
            drafter.forget(id);
        }
    }

    /// At shutdown: every request still in flight, and any still in the channel, is cancelled.
    pub(crate) fn cancel_all(&mut self) {
        while let Ok(command) = self.commands.try_recv() {
            if let Command::Submit(s) = command {
                self.admit(*s);
            }
        }
        let ids: Vec<SeqId> = self.active.keys().copied().collect();
        for id in ids {
            self.finish(id, FinishReason::Cancelled, true);
        }
    }
}
