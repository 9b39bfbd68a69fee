//! The engine loop, on its own thread: take new requests, then step (schedule, launch,
//! collect, sample, hand tokens out) until there is nothing left to run. With a pipelined
//! backend the next step is planned and launched while the device runs the one before
//! (step_run.rs), so that the device does not wait for the host between steps.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use kiln_step::Backend;
use kiln_tokenizer::Tokenizer;

use crate::active::Active;
use crate::draft::{DraftConfig, Drafter};
use crate::output_stage::{Output, OutputStage};
use crate::sampler;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::sequence::{SeqId, Sequence};
use crate::shared::{Command, EngineConfig, EngineStats, Shared, Submission};
use crate::step_run::InFlight;
use crate::step_timing::{self, Phase, StepTimingSnapshot};

/// Set `KILN_DEVICE_ARGMAX=0` to always fetch logits, even for all-greedy steps. (Backends
/// that sample on the device have their own switch, e.g. KILN_DEVICE_SAMPLING for CUDA.)
fn device_argmax_enabled() -> bool {
    std::env::var("KILN_DEVICE_ARGMAX").map_or(true, |v| v != "0")
}

/// Set `KILN_DEVICE_PENALTIES=0` to sample penalised rows on the host from their logits (with
/// every other row of their steps), as before penalties went to the backend with the row.
fn device_penalties_enabled() -> bool {
    std::env::var("KILN_DEVICE_PENALTIES").map_or(true, |v| v != "0")
}

/// Set `KILN_PREFIX_CACHE=0` to turn the prefix cache off whatever the configuration says.
fn prefix_cache_enabled() -> bool {
    std::env::var("KILN_PREFIX_CACHE").map_or(true, |v| v != "0")
}

/// Set `KILN_OVERLAP=0` to finish every step before the next is planned, whatever the
/// configuration says.
fn overlap_enabled() -> bool {
    std::env::var("KILN_OVERLAP").map_or(true, |v| v != "0")
}

/// Set `KILN_OUTPUT_THREAD=0` to detokenise and send events on the engine thread.
fn output_thread_enabled() -> bool {
    std::env::var("KILN_OUTPUT_THREAD").map_or(true, |v| v != "0")
}

pub(crate) struct Engine {
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) scheduler: Scheduler,
    pub(crate) active: HashMap<SeqId, Active>,
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(crate) shared: Arc<Shared>,
    max_context: usize,
    /// Seeds for requests that bring none.
    seed_source: u64,
    stopping: bool,
    /// Consecutive steps that ran nothing although requests were waiting.
    pub(crate) idle_steps: u32,
    pub(crate) device_argmax: bool,
    pub(crate) device_penalties: bool,
    /// Speculative decoding: who drafts and how far (None: plain decoding).
    pub(crate) drafting: Option<(Box<dyn Drafter>, DraftConfig)>,
    /// Per sequence, the logits row of the step last finished that chose its last token: a
    /// draft model in the backend starts from that row's hidden state.
    pub(crate) chosen_rows: HashMap<SeqId, usize>,
    /// The next step is planned and launched while the device runs the one before.
    pub(crate) overlap: bool,
    /// The step launched and not yet finished.
    pub(crate) in_flight: Option<InFlight>,
    /// Where tokens become text and events.
    pub(crate) output: Output,
    /// The engine waited for requests with nothing to run since the last step: the device's
    /// idle time before the next step is no gap between steps.
    pub(crate) was_idle: bool,
    /// The step timings when the last summary line was logged, and when.
    last_summary: (StepTimingSnapshot, Instant),
    summary_every: Option<std::time::Duration>,
}

impl Engine {
    pub(crate) fn new(
        backend: Box<dyn Backend>,
        tokenizer: Tokenizer,
        cfg: EngineConfig,
        max_context: usize,
        commands: mpsc::Receiver<Command>,
        shared: Arc<Shared>,
        drafting: Option<(Box<dyn Drafter>, DraftConfig)>,
    ) -> Engine {
        let sched_cfg = SchedulerConfig {
            max_num_seqs: cfg.max_num_seqs,
            max_batched_tokens: cfg.max_batched_tokens,
            prefill_chunk: cfg.prefill_chunk,
            prefill_alone: cfg.prefill_alone,
            prefix_cache: cfg.prefix_cache && prefix_cache_enabled(),
            host_blocks: backend.host_blocks(),
            max_inputs: backend.step_capacity().map_or(0, |c| c.max_seqs),
        };
        let mut scheduler = Scheduler::new(sched_cfg, backend.kv_geometry());
        if let Some(ring) = backend.kv_ring() {
            scheduler.use_kv_ring(ring);
            tracing::info!(
                blocks = ring.blocks,
                window = ring.window,
                "sliding-window layers keep a ring of KV blocks per sequence; prefix cache off"
            );
        }
        let seed_source = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(Instant::now())
        };
        let overlap = cfg.overlap && overlap_enabled() && backend.pipelined();
        let last_summary = (shared.timings.snapshot(overlap), Instant::now());
        let engine = Engine {
            backend,
            tokenizer,
            scheduler,
            active: HashMap::new(),
            commands,
            shared,
            max_context,
            seed_source,
            stopping: false,
            idle_steps: 0,
            device_argmax: device_argmax_enabled(),
            device_penalties: device_penalties_enabled(),
            drafting: drafting.filter(|_| crate::draft::enabled_by_env()),
            chosen_rows: HashMap::new(),
            overlap,
            in_flight: None,
            output: if cfg.output_thread && output_thread_enabled() {
                Output::threaded()
            } else {
                Output::Inline(OutputStage::default())
            },
            was_idle: true,
            last_summary,
            summary_every: step_timing::log_interval(),
        };
        engine.shared.overlap.store(overlap, Ordering::Relaxed);
        engine.publish_stats();
        engine
    }

    pub(crate) fn run(mut self) {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| self.serve()));
        if outcome.is_err() {
            // A bug, not bad input: every client still gets an answer, then the engine closes.
            self.shared.shutting_down.store(true, Ordering::SeqCst);
            let ids: Vec<SeqId> = self.active.keys().copied().collect();
            for id in ids {
                self.fail(
                    id,
                    "internal engine error; the engine has stopped".to_string(),
                );
            }
        }
        // Every event handed to the output stage reaches its client before the engine ends.
        self.output.close();
        self.publish_stats();
    }

    fn serve(&mut self) {
        while self.wait_for_work() {
            // A step whose picks the next one cannot take where they lie is finished first.
            if self.in_flight.as_ref().is_some_and(|f| !f.ahead) {
                self.finish_in_flight();
            }
            let next = self.launch_next();
            self.finish_in_flight();
            self.in_flight = next;
            if !self.overlap {
                self.finish_in_flight();
            }
            self.output.flush();
            self.log_summary();
        }
        self.finish_in_flight();
        self.cancel_all();
    }

    /// Publishes stats, takes new requests and drops cancelled ones; blocks while there is
    /// nothing to run and nothing in flight. False: time to stop.
    fn wait_for_work(&mut self) -> bool {
        let mut started = Instant::now();
        loop {
            self.publish_stats();
            let command = if self.scheduler.is_idle() && self.in_flight.is_none() {
                match self.commands.recv() {
                    Ok(c) => {
                        // Time spent idle is no step's.
                        started = Instant::now();
                        self.was_idle = true;
                        Some(c)
                    }
                    Err(_) => return false,
                }
            } else {
                self.commands.try_recv().ok()
            };
            let drained = command.is_none();
            match command {
                Some(Command::Submit(s)) => self.admit(*s),
                Some(Command::Shutdown) => self.stopping = true,
                None => {}
            }
            if self.stopping {
                return false;
            }
            for id in self.output.stopped() {
                self.stopped_by_text(id);
            }
            self.drop_cancelled();
            if drained && (!self.scheduler.is_idle() || self.in_flight.is_some()) {
                self.shared.timings.observe_since(Phase::Admit, started);
                return true;
            }
        }
    }

    /// Logs where the steps' time went since the last such line, every few seconds.
    fn log_summary(&mut self) {
        let Some(every) = self.summary_every else {
            return;
        };
        let (earlier, at) = &self.last_summary;
        if at.elapsed() < every {
            return;
        }
        let now = self.shared.timings.snapshot(self.overlap);
        if let Some(line) = now.summary_since(earlier, at.elapsed().as_secs_f64()) {
            tracing::info!("{line}");
        }
        self.last_summary = (now, Instant::now());
    }

    pub(crate) fn admit(&mut self, mut s: Submission) {
        let seed = s.req.sampling.seed.unwrap_or_else(|| {
            self.seed_source = self.seed_source.wrapping_add(1);
            sampler::splitmix64(self.seed_source)
        });
        let max_len = match s.req.max_tokens {
            0 => self.max_context,
            n => (s.req.prompt.len() + n).min(self.max_context),
        };
        let prompt = std::mem::take(&mut s.req.prompt);
        let prompt_tokens = prompt.len();
        let mut seq = Sequence::new(s.id, prompt);
        seq.max_len = max_len;
        self.scheduler.add(seq);
        self.open_output(s.id, s.events.clone(), &s.req.stop);
        let active = Active {
            prompt_tokens,
            seed,
            max_len,
            events: s.events,
            submitted: s.submitted,
            time_to_first_token: None,
            draft_len: 0,
            draft_pause: 0,
            draft_misses: 0,
            draft: Default::default(),
            bias: s.req.sampling.logit_bias.clone().into(),
            penalty: s.req.sampling.has_penalties().then(|| {
                let history = sampler::History {
                    prompt: self.scheduler.get(s.id).map_or(&[][..], |q| q.prompt()),
                    generated: &[],
                };
                sampler::penalty_of(&s.req.sampling, history)
            }),
            req: s.req,
        };
        self.active.insert(s.id, active);
    }

    /// Requests whose stream was dropped leave now, freeing their blocks.
    fn drop_cancelled(&mut self) {
        let gone: Vec<SeqId> = self
            .active
            .iter()
            .filter(|(_, a)| a.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.retire(id);
            self.bump(|s| s.requests_cancelled += 1);
        }
    }

    /// An empty plan with requests waiting happens for one step after a sequence preempts
    /// itself. Submission checks make a lasting one impossible; if it happens anyway, the
    /// request at the head of the queue fails rather than the loop spinning.
    pub(crate) fn unstick(&mut self) {
        self.idle_steps += 1;
        if self.idle_steps > 2 {
            self.idle_steps = 0;
            if let Some(id) = self.scheduler.first_waiting() {
                self.fail(id, "the request does not fit in the KV cache".to_string());
            }
        }
    }

    pub(crate) fn bump(&self, f: impl FnOnce(&mut EngineStats)) {
        if let Ok(mut s) = self.shared.stats.lock() {
            f(&mut s);
        }
    }

    pub(crate) fn publish_stats(&self) {
        let blocks = self.scheduler.blocks();
        let (running, waiting) = (self.scheduler.num_running(), self.scheduler.num_waiting());
        let preemptions = self.scheduler.preemptions();
        let prefix = blocks.prefix_stats();
        self.bump(|s| {
            s.running = running;
            s.waiting = waiting;
            s.kv_block_size = blocks.block_size();
            s.kv_blocks_total = blocks.num_blocks();
            s.kv_blocks_used = blocks.num_used();
            s.kv_blocks_free = blocks.num_free();
            s.kv_blocks_cached = blocks.num_cached();
            s.prefix_cache_on = blocks.prefix_cache_on();
            s.prefix_queried_tokens = prefix.queried_tokens;
            s.prefix_hit_tokens = prefix.hit_tokens;
            s.prefix_evictions = prefix.evictions;
            s.host_blocks_cached = blocks.num_host_cached();
            s.prefix_host_saves = prefix.host_saves;
            s.prefix_host_hit_tokens = prefix.host_hit_tokens;
            s.preemptions = preemptions;
        });
    }
}
