//! The engine loop, on its own thread: take new requests, then step (schedule, forward,
//! sample, postprocess) until there is nothing left to run.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use kiln_step::{Backend, RowSampling, StepOutput, Want};
use kiln_tokenizer::{StreamDecoder, Tokenizer};

use crate::active::Active;
use crate::batch_sampler::{self, SampleJob};
use crate::draft::{DraftConfig, Drafter};
use crate::sampler::{self, History, Sampled};
use crate::scheduler::{ScheduledChunk, Scheduler, SchedulerConfig};
use crate::sequence::{SeqId, Sequence};
use crate::shared::{Command, EngineConfig, EngineStats, Shared, Submission};
use crate::step_adjust::{self, StepAdjustments};
use crate::stop::StopMatcher;

/// What a step gave back, with the adjustments its rows were sampled under.
struct Stepped {
    output: StepOutput,
    adjustments: Option<StepAdjustments>,
}

/// Set `KILN_DEVICE_ARGMAX=0` to always fetch logits, even for all-greedy steps. (Backends
/// that sample on the device have their own switch, e.g. KILN_DEVICE_SAMPLING for CUDA.)
fn device_argmax_enabled() -> bool {
    std::env::var("KILN_DEVICE_ARGMAX").map_or(true, |v| v != "0")
}

/// Set `KILN_PREFIX_CACHE=0` to turn the prefix cache off whatever the configuration says.
fn prefix_cache_enabled() -> bool {
    std::env::var("KILN_PREFIX_CACHE").map_or(true, |v| v != "0")
}

pub(crate) struct Engine {
    backend: Box<dyn Backend>,
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
    idle_steps: u32,
    device_argmax: bool,
    /// Speculative decoding: who drafts and how far (None: plain decoding).
    pub(crate) drafting: Option<(Box<dyn Drafter>, DraftConfig)>,
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
            prefix_cache: cfg.prefix_cache && prefix_cache_enabled(),
            host_blocks: backend.host_blocks(),
            max_inputs: backend.step_capacity().map_or(0, |c| c.max_seqs),
        };
        let scheduler = Scheduler::new(sched_cfg, backend.kv_geometry());
        let seed_source = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(Instant::now())
        };
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
            drafting: drafting.filter(|_| crate::draft::enabled_by_env()),
        };
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
        self.publish_stats();
    }

    fn serve(&mut self) {
        while self.wait_for_work() {
            let started = Instant::now();
            let plan = self.scheduler.schedule();
            if !self.copy_blocks(&plan) {
                continue;
            }
            // Gauges as of this step, before any of its tokens reach a client: a reader who has
            // a token never sees the sequence still waiting or its blocks not yet taken.
            self.publish_stats();
            let forward_started = Instant::now();
            let Some(stepped) = self.forward(&plan) else {
                continue;
            };
            let forward_s = forward_started.elapsed().as_secs_f64();
            let sampled = self.sample(&plan, stepped);
            self.postprocess(&plan, sampled);
            let step_s = started.elapsed().as_secs_f64();
            self.bump(|s| {
                s.forward_seconds += forward_s;
                s.step_seconds += step_s;
            });
            self.publish_stats();
        }
        self.cancel_all();
    }

    /// Publishes stats, takes new requests and drops cancelled ones; blocks while idle.
    /// False: time to stop.
    fn wait_for_work(&mut self) -> bool {
        loop {
            self.publish_stats();
            let command = if self.scheduler.is_idle() {
                match self.commands.recv() {
                    Ok(c) => Some(c),
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
            self.drop_cancelled();
            if drained && !self.scheduler.is_idle() {
                return true;
            }
        }
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
        self.scheduler.add(Sequence::new(s.id, prompt));
        let active = Active {
            prompt_tokens,
            seed,
            max_len,
            events: s.events,
            decoder: StreamDecoder::new(&self.tokenizer),
            stop: StopMatcher::new(&s.req.stop),
            submitted: s.submitted,
            time_to_first_token: None,
            draft_len: 0,
            draft_pause: 0,
            draft_misses: 0,
            draft: Default::default(),
            bias: s.req.sampling.logit_bias.clone().into(),
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

    /// Runs the plan through the backend. None when nothing ran (its requests have been told
    /// why, if it failed).
    fn forward(&mut self, plan: &[ScheduledChunk]) -> Option<Stepped> {
        if plan.is_empty() {
            self.unstick();
            return None;
        }
        self.idle_steps = 0;
        let rows: usize = plan.iter().map(ScheduledChunk::rows).sum();
        let all_greedy = self.device_argmax
            && plan
                .iter()
                .filter(|c| c.want_logits)
                .all(|c| self.active.get(&c.seq).is_some_and(Active::plain_greedy));
        let device_rows = if all_greedy {
            None
        } else {
            self.device_rows(plan)
        };
        let adjusting = step_adjust::plan_adjusts(plan, &self.active);
        let inputs = self.scheduler.inputs(plan);
        let backend = &mut self.backend;
        let mut run = |want: Want<'_>| {
            std::panic::catch_unwind(AssertUnwindSafe(|| backend.step(&inputs, want)))
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the backend panicked")))
        };
        let (result, adjustments) = if adjusting {
            let (r, a) =
                step_adjust::run_adjusted(plan, &mut self.active, &self.scheduler, |adj| {
                    run(match &device_rows {
                        Some(rows) => Want::SampleAdjusted(rows, adj),
                        None => Want::Logits,
                    })
                });
            (r, Some(a))
        } else {
            let want = match (all_greedy, &device_rows) {
                (true, _) => Want::Argmax,
                (false, Some(rows)) => Want::Sample(rows),
                (false, None) => Want::Logits,
            };
            (run(want), None)
        };
        if let Some(a) = &adjustments {
            self.bump(|s| {
                s.grammar_masks += a.masks as u64;
                s.grammar_mask_seconds += a.mask_seconds;
            });
        }
        let checked = result.and_then(|output| match &output {
            StepOutput::Tokens(t) if t.len() != rows => Err(anyhow::anyhow!(
                "the backend returned {} tokens for {rows} rows",
                t.len()
            )),
            StepOutput::Logits(l) if rows > 0 && (l.is_empty() || l.len() % rows != 0) => Err(
                anyhow::anyhow!("the backend returned {} logits for {rows} rows", l.len()),
            ),
            _ => Ok(output),
        });
        match checked {
            Ok(output) => Some(Stepped {
                output,
                adjustments,
            }),
            Err(e) => {
                tracing::error!("forward pass failed: {e:#}");
                for c in plan {
                    self.fail(c.seq, format!("forward pass failed: {e:#}"));
                }
                None
            }
        }
    }

    /// Makes the copies between the KV pool and the host tier that scheduling asked for; they
    /// must land before the step reads or overwrites those blocks. False: they failed, and the
    /// plan's requests were told (their KV could not be trusted).
    fn copy_blocks(&mut self, plan: &[ScheduledChunk]) -> bool {
        let copies = self.scheduler.take_copies();
        if copies.is_empty() {
            return true;
        }
        let backend = &mut self.backend;
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| backend.copy_blocks(&copies)))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the backend panicked")));
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("KV block copies failed: {e:#}");
                for c in plan {
                    self.fail(c.seq, format!("KV block copies failed: {e:#}"));
                }
                false
            }
        }
    }

    /// Every logits row's device sampling, in plan order; None if a row needs the host.
    fn device_rows(&self, plan: &[ScheduledChunk]) -> Option<Vec<RowSampling>> {
        let mut out = Vec::new();
        for c in plan {
            let generated = self.scheduler.get(c.seq)?.generated().len();
            let a = self.active.get(&c.seq)?;
            // Row j of a verify chunk draws the token j places after the next one.
            for j in 0..c.rows() {
                out.push(a.device_row(generated + j)?);
            }
        }
        Some(out)
    }

    /// An empty plan with requests waiting happens for one step after a sequence preempts
    /// itself. Submission checks make a lasting one impossible; if it happens anyway, the
    /// request at the head of the queue fails rather than the loop spinning.
    fn unstick(&mut self) {
        self.idle_steps += 1;
        if self.idle_steps > 2 {
            self.idle_steps = 0;
            if let Some(id) = self.scheduler.first_waiting() {
                self.fail(id, "the request does not fit in the KV cache".to_string());
            }
        }
    }

    /// Picks the next token for every chunk that produced logits. A row whose grammar failed
    /// gets the grammar's reason.
    fn sample(
        &self,
        plan: &[ScheduledChunk],
        stepped: Stepped,
    ) -> Vec<(SeqId, Result<Sampled, String>)> {
        let Stepped {
            output,
            adjustments,
        } = stepped;
        let mut sampled = self.sample_rows(plan, output, adjustments.as_ref());
        for (row, why) in adjustments.map(|a| a.errors).unwrap_or_default() {
            if let Some(entry) = sampled.get_mut(row) {
                entry.1 = Err(why);
            }
        }
        sampled
    }

    fn sample_rows(
        &self,
        plan: &[ScheduledChunk],
        output: StepOutput,
        adjustments: Option<&StepAdjustments>,
    ) -> Vec<(SeqId, Result<Sampled, String>)> {
        // One entry per logits row: the sequence and the row's offset in its chunk.
        let wanting: Vec<(SeqId, usize)> = plan
            .iter()
            .flat_map(|c| (0..c.rows()).map(move |j| (c.seq, j)))
            .collect();
        let logits = match output {
            StepOutput::Tokens(rows) => {
                let rows = rows.into_iter().map(|r| r.map_err(|e| e.to_string()));
                return wanting.iter().map(|w| w.0).zip(rows).collect();
            }
            StepOutput::Logits(logits) => logits,
        };
        let adjust = adjustments.map(|a| a.adjust.wait());
        let rows = wanting.len();
        if rows == 0 {
            return Vec::new();
        }
        let vocab = logits.len() / rows;
        let mut ids = Vec::with_capacity(rows);
        let mut jobs = Vec::with_capacity(rows);
        for (r, (&(id, j), row)) in wanting.iter().zip(logits.chunks_exact(vocab)).enumerate() {
            let (Some(seq), Some(a)) = (self.scheduler.get(id), self.active.get(&id)) else {
                continue;
            };
            ids.push(id);
            jobs.push(SampleJob {
                row,
                params: &a.req.sampling,
                // Verify rows carry no penalties (drafting skips such requests), so the
                // history past the last token does not matter to them.
                history: History {
                    prompt: seq.prompt(),
                    generated: seq.generated(),
                },
                seed: a.seed,
                index: (seq.generated().len() + j) as u64,
                logprobs: a.req.logprobs,
                adjust: adjust.and_then(|rows| rows.get(r)?.as_ref()),
            });
        }
        let results = batch_sampler::sample_all(&jobs);
        ids.into_iter()
            .zip(results.into_iter().map(|r| r.map_err(|e| e.to_string())))
            .collect()
    }

    /// Records the step and hands each new token to its request: text, stop checks, events. A
    /// verify chunk's rows are judged first: its tokens are the target's choices up to the first
    /// draft that differs from them.
    fn postprocess(
        &mut self,
        plan: &[ScheduledChunk],
        sampled: Vec<(SeqId, Result<Sampled, String>)>,
    ) {
        self.scheduler.complete(plan);
        let processed: usize = plan.iter().map(|c| c.len).sum();
        self.bump(|s| {
            s.steps += 1;
            s.tokens_processed += processed as u64;
        });
        let mut rows = sampled.into_iter();
        for c in plan {
            let chunk_rows: Vec<_> = rows.by_ref().take(c.rows()).collect();
            if c.draft > 0 {
                self.settle_verify(c, chunk_rows);
                continue;
            }
            for (id, result) in chunk_rows {
                match result {
                    Ok(s) => self.accept(id, s),
                    Err(e) => self.fail(id, format!("sampling failed: {e}")),
                }
            }
        }
        self.propose_drafts();
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
