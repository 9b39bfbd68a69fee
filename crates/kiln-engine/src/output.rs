//! The request-output half of the engine: what the engine decides about a sampled token on its
//! way to the client (end of turn, grammar, length limit), and how a request ends (finished,
//! failed, cancelled). The text (detokenising, stop strings) and the events are the output
//! stage's (output_stage.rs), which gets one message per token or end, in order.

use std::sync::atomic::Ordering;

use kiln_tokenizer::StreamDecoder;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::Engine;
use crate::output_stage::{FinishInfo, OutMsg};
use crate::request::{FinishReason, GenEvent};
use crate::sampler::Sampled;
use crate::sequence::SeqId;
use crate::shared::Command;
use crate::stop::StopMatcher;

impl Engine {
    /// A new request's text state goes to the output stage.
    pub(crate) fn open_output(
        &mut self,
        id: SeqId,
        events: UnboundedSender<GenEvent>,
        stop: &[String],
    ) {
        let decoder = Box::new(StreamDecoder::new(&self.tokenizer));
        let msg = OutMsg::Open {
            id,
            events,
            decoder,
            stop: StopMatcher::new(stop),
        };
        self.output.send(msg);
    }

    /// Hands `s`, already in the sequence's tokens, to its request.
    pub(crate) fn accept(&mut self, id: SeqId, s: Sampled) {
        self.bump(|st| st.generated_tokens += 1);
        let len = self.scheduler.get(id).map_or(0, |q| q.known_len());
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        if a.time_to_first_token.is_none() {
            a.time_to_first_token = Some(a.submitted.elapsed().as_secs_f64());
        }
        if let Some(p) = a.penalty.as_mut() {
            p.push_generated(s.id);
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
        let reason = if ends_turn || grammar_done {
            Some(FinishReason::Stop)
        } else {
            (len >= a.max_len).then_some(FinishReason::Length)
        };
        let info = self.finish_info(id);
        let msg = OutMsg::Token {
            id,
            token: s,
            ends_turn,
            info,
        };
        if self.output.send(msg).is_some() {
            // A stop string ended it (the stage sent `Done`).
            self.stopped_by_text(id);
        } else if let Some(reason) = reason {
            self.finish(id, reason, true);
        }
    }

    /// What `Done` reports about `id` as of now.
    fn finish_info(&self, id: SeqId) -> FinishInfo {
        let seq = self.scheduler.get(id);
        let a = self.active.get(&id);
        FinishInfo {
            prompt_tokens: a.map_or(0, |a| a.prompt_tokens),
            cached_tokens: seq.map_or(0, |s| s.cached_tokens),
            completion_tokens: seq.map_or(0, |s| s.generated_known().len()),
            time_to_first_token: a.and_then(|a| a.time_to_first_token),
            draft: a.map(|a| a.draft).unwrap_or_default(),
        }
    }

    /// Ends a request and has `Done` sent. `flush`: release the text still held back (unless
    /// it completes a stop string).
    pub(crate) fn finish(&mut self, id: SeqId, reason: FinishReason, flush: bool) {
        if !self.active.contains_key(&id) {
            return;
        }
        let info = self.finish_info(id);
        self.leave(id);
        self.output.send(OutMsg::End {
            id,
            reason,
            flush,
            info,
        });
        match reason {
            FinishReason::Cancelled => self.bump(|s| s.requests_cancelled += 1),
            _ => self.bump(|s| s.requests_finished += 1),
        }
    }

    /// A stop string ended `id` in the output stage, which has told its client: the engine lets
    /// it go (unless it ended another way meanwhile).
    pub(crate) fn stopped_by_text(&mut self, id: SeqId) {
        if self.active.contains_key(&id) {
            self.leave(id);
            self.bump(|s| s.requests_finished += 1);
        }
    }

    /// Ends a request with an error event.
    pub(crate) fn fail(&mut self, id: SeqId, message: String) {
        if self.active.contains_key(&id) {
            self.output.send(OutMsg::Error { id, message });
            self.leave(id);
        }
        self.bump(|s| s.requests_failed += 1);
    }

    /// Forgets a request and frees its blocks, sending nothing.
    pub(crate) fn retire(&mut self, id: SeqId) {
        if self.active.contains_key(&id) {
            self.output.send(OutMsg::Close { id });
            self.leave(id);
        } else {
            self.forget_draft(id);
            self.scheduler.remove(id);
        }
    }

    /// Takes a request out of the engine: its sequence, blocks and draft state.
    fn leave(&mut self, id: SeqId) {
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
