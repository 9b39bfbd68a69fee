//! The text half of a request's output, off the engine thread: each request's detokeniser and
//! stop strings, and the events its client reads. The engine decides everything that depends on
//! token ids alone (end of turn, grammar, length) and sends the stage one message per token or
//! end, in order; the stage turns them into text and events. A stop string is the one end only
//! the text shows: the stage ends the request there (the client gets exactly what the engine
//! thread would have sent) and tells the engine, which stops scheduling it; rows it computed
//! meanwhile are dropped. On its own thread by default (`KILN_OUTPUT_THREAD=0` or
//! `EngineConfig::output_thread` false: inline on the engine thread, as before).

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;

use kiln_tokenizer::StreamDecoder;
use tokio::sync::mpsc::UnboundedSender;

use crate::request::{DraftCounts, Finish, FinishReason, GenEvent, TokenEvent};
use crate::sampler::Sampled;
use crate::sequence::SeqId;
use crate::stop::{StopCheck, StopMatcher};

/// What a request's `Done` reports besides its reason and trailing text, as of the message.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FinishInfo {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    /// Generated tokens so far, the message's own included.
    pub completion_tokens: usize,
    pub time_to_first_token: Option<f64>,
    pub draft: DraftCounts,
}

pub(crate) enum OutMsg {
    /// A new request: where its events go, how its text is made.
    Open {
        id: SeqId,
        events: UnboundedSender<GenEvent>,
        decoder: Box<StreamDecoder>,
        stop: StopMatcher,
    },
    /// A generated token. `ends_turn`: an end-of-turn token, which has no text.
    Token {
        id: SeqId,
        token: Sampled,
        ends_turn: bool,
        info: FinishInfo,
    },
    /// The request ends; `flush`: release the text still held back first.
    End {
        id: SeqId,
        reason: FinishReason,
        flush: bool,
        info: FinishInfo,
    },
    Error {
        id: SeqId,
        message: String,
    },
    /// The request is gone without a word (its client went away).
    Close {
        id: SeqId,
    },
}

struct Request {
    events: UnboundedSender<GenEvent>,
    decoder: Box<StreamDecoder>,
    stop: StopMatcher,
}

/// Every open request's text state.
#[derive(Default)]
pub(crate) struct OutputStage {
    requests: HashMap<SeqId, Request>,
}

impl OutputStage {
    /// Carries out one message. Returns the id of a request a stop string has just ended.
    pub fn handle(&mut self, msg: OutMsg) -> Option<SeqId> {
        match msg {
            OutMsg::Open {
                id,
                events,
                decoder,
                stop,
            } => {
                self.requests.insert(
                    id,
                    Request {
                        events,
                        decoder,
                        stop,
                    },
                );
                None
            }
            OutMsg::Token {
                id,
                token,
                ends_turn,
                info,
            } => {
                // Ended by a stop string already: what the engine computed since is dropped.
                let r = self.requests.get_mut(&id)?;
                let (text, stopped) = if ends_turn {
                    (String::new(), false)
                } else {
                    match r.stop.push(&r.decoder.push(token.id)) {
                        StopCheck::Emit(text) => (text, false),
                        StopCheck::Stopped(text) => (text, true),
                    }
                };
                let _ = r.events.send(GenEvent::Token(TokenEvent {
                    id: token.id,
                    text,
                    logprob: token.logprob,
                    top_logprobs: token.top_logprobs,
                }));
                if !stopped {
                    return None;
                }
                self.done(id, FinishReason::Stop, false, info);
                Some(id)
            }
            OutMsg::End {
                id,
                reason,
                flush,
                info,
            } => {
                self.done(id, reason, flush, info);
                None
            }
            OutMsg::Error { id, message } => {
                if let Some(r) = self.requests.remove(&id) {
                    let _ = r.events.send(GenEvent::Error(message));
                }
                None
            }
            OutMsg::Close { id } => {
                self.requests.remove(&id);
                None
            }
        }
    }

    /// Sends `Done` and forgets the request. `flush`: the text held back goes out first (it may
    /// yet complete a stop string); false after a stop string matched, when the rest is cut.
    fn done(&mut self, id: SeqId, mut reason: FinishReason, flush: bool, info: FinishInfo) {
        let Some(mut r) = self.requests.remove(&id) else {
            return;
        };
        let mut trailing = String::new();
        if flush {
            match r.stop.push(&r.decoder.finish()) {
                StopCheck::Emit(text) => trailing = text + &r.stop.finish(),
                StopCheck::Stopped(text) => {
                    trailing = text;
                    reason = FinishReason::Stop;
                }
            }
        }
        let _ = r.events.send(GenEvent::Done(Finish {
            reason,
            prompt_tokens: info.prompt_tokens,
            cached_tokens: info.cached_tokens,
            completion_tokens: info.completion_tokens,
            trailing_text: trailing,
            time_to_first_token: info.time_to_first_token,
            draft: info.draft,
        }));
    }
}

/// Where the engine's output messages go: handled at once on the engine thread, or batched to
/// the output thread.
pub(crate) enum Output {
    Inline(OutputStage),
    Thread {
        /// Messages not yet sent, in order.
        outbox: Vec<OutMsg>,
        tx: Option<mpsc::Sender<Vec<OutMsg>>>,
        /// Requests a stop string ended.
        stopped: mpsc::Receiver<SeqId>,
        thread: Option<JoinHandle<()>>,
    },
}

impl Output {
    /// On its own thread (inline when the thread cannot be started).
    pub fn threaded() -> Output {
        let (tx, rx) = mpsc::channel::<Vec<OutMsg>>();
        let (stopped_tx, stopped) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("kiln-output".into())
            .spawn(move || {
                let mut stage = OutputStage::default();
                while let Ok(batch) = rx.recv() {
                    for msg in batch {
                        if let Some(id) = stage.handle(msg) {
                            let _ = stopped_tx.send(id);
                        }
                    }
                }
            });
        match spawned {
            Ok(thread) => Output::Thread {
                outbox: Vec::new(),
                tx: Some(tx),
                stopped,
                thread: Some(thread),
            },
            Err(e) => {
                tracing::warn!("no output thread ({e}); detokenising on the engine thread");
                Output::Inline(OutputStage::default())
            }
        }
    }

    /// Handles `msg` now (inline; returns a request a stop string ended) or queues it.
    pub fn send(&mut self, msg: OutMsg) -> Option<SeqId> {
        match self {
            Output::Inline(stage) => stage.handle(msg),
            Output::Thread { outbox, .. } => {
                outbox.push(msg);
                None
            }
        }
    }

    /// Sends what is queued to the output thread, in one batch.
    pub fn flush(&mut self) {
        if let Output::Thread { outbox, tx, .. } = self {
            if outbox.is_empty() {
                return;
            }
            let batch = std::mem::take(outbox);
            if let Some(tx) = tx {
                let _ = tx.send(batch);
            }
        }
    }

    /// Requests a stop string ended on the output thread since the last call.
    pub fn stopped(&mut self) -> Vec<SeqId> {
        match self {
            Output::Inline(_) => Vec::new(),
            Output::Thread { stopped, .. } => stopped.try_iter().collect(),
        }
    }

    /// Sends what is queued and waits until the output thread has handled it all.
    pub fn close(&mut self) {
        self.flush();
        if let Output::Thread { tx, thread, .. } = self {
            drop(tx.take());
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}
