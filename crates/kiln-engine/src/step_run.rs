//! One step through the backend: plan it, launch it, finish it (collect, sample on the host
//! where needed, hand the tokens out). With a pipelined backend the engine launches step N+1
//! before it finishes step N: N+1 is planned with a stand-in for each token N picks
//! ([`Scheduler::launched`]), the device takes those tokens from N's picks where they lie
//! (feeds), and N's tokens are handed out while N+1 runs. Every row still computes what it
//! would alone (batch invariance), so the tokens are the same; only a request that ends at N
//! may have a row in N+1, which is dropped.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use kiln_step::{Feed, RowSampling, StepOutput, Want};

use crate::active::Active;
use crate::batch_sampler::{self, SampleJob};
use crate::engine::Engine;
use crate::sampler::{History, Sampled};
use crate::scheduler::ScheduledChunk;
use crate::sequence::SeqId;
use crate::step_adjust::{self, StepAdjustments};
use crate::step_timing::Phase;

/// A step launched and not yet finished.
pub(crate) struct InFlight {
    plan: Vec<ScheduledChunk>,
    /// The logits row of each sequence that gets one plain token from the step, for the next
    /// step's feeds.
    rows: HashMap<SeqId, usize>,
    /// The answer, when the backend gave it at launch (a whole step).
    output: Option<anyhow::Result<StepOutput>>,
    adjustments: Option<StepAdjustments>,
    /// The next step may be planned and launched before this one is finished: its picks stay
    /// on the device and nothing the next step needs waits for them on the host.
    pub ahead: bool,
    /// Host seconds of the step so far (schedule and launch), and the backend's share.
    host_s: f64,
    backend_s: f64,
}

/// What the backend did with a step.
enum Started {
    /// Queued; its picks may feed the next launch.
    Queued { feeds_next: bool },
    /// Run to the end (a whole step).
    Done(StepOutput),
}

impl Engine {
    /// Plans the next step and launches it. None when nothing was launched (nothing to run,
    /// or it failed and its requests were told why).
    pub(crate) fn launch_next(&mut self) -> Option<InFlight> {
        let started = Instant::now();
        let plan = self.scheduler.schedule();
        if !self.copy_blocks(&plan) {
            return None;
        }
        // Gauges as of this step, before any of its tokens reach a client: a reader who has
        // a token never sees the sequence still waiting or its blocks not yet taken.
        self.publish_stats();
        if plan.is_empty() {
            if self.in_flight.is_none() {
                self.unstick();
            }
            return None;
        }
        self.idle_steps = 0;
        let all_greedy = self.device_argmax
            && plan
                .iter()
                .filter(|c| c.want_logits)
                .all(|c| self.active.get(&c.seq).is_some_and(Active::plain_greedy));
        let device_rows = if all_greedy {
            None
        } else {
            self.device_rows(&plan)
        };
        let adjusting = step_adjust::plan_adjusts(&plan, &self.active);
        let feeds = match self.feeds(&plan) {
            Ok(f) => f,
            Err(e) => {
                self.fail_plan(&plan, format!("planning the step failed: {e:#}"));
                return None;
            }
        };
        let inputs = self.scheduler.inputs(&plan);
        let schedule_s = started.elapsed().as_secs_f64();
        self.shared.timings.observe_since(Phase::Schedule, started);
        let launched_at = Instant::now();
        let pipelined = self.overlap;
        let backend = &mut self.backend;
        let mut run = |want: Want<'_>| {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                if pipelined {
                    let l = backend.launch(&inputs, want, &feeds)?;
                    Ok(Started::Queued {
                        feeds_next: l.feeds_next,
                    })
                } else {
                    backend.step(&inputs, want).map(Started::Done)
                }
            }))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the backend panicked")))
        };
        let (result, adjustments) = if adjusting {
            let (r, a) =
                step_adjust::run_adjusted(&plan, &mut self.active, &self.scheduler, |adj| {
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
        drop(inputs);
        let backend_s = launched_at.elapsed().as_secs_f64();
        // A whole step's call is split when it is finished, once the device's share is known.
        if pipelined {
            self.shared
                .timings
                .observe_since(Phase::Launch, launched_at);
        }
        if let Some(a) = &adjustments {
            self.bump(|s| {
                s.grammar_masks += a.masks as u64;
                s.grammar_mask_seconds += a.mask_seconds;
            });
        }
        let (output, feeds_next) = match result {
            Ok(Started::Queued { feeds_next }) => (None, feeds_next),
            Ok(Started::Done(out)) => (Some(Ok(out)), false),
            Err(e) => {
                tracing::error!("forward pass failed: {e:#}");
                self.fail_plan(&plan, format!("forward pass failed: {e:#}"));
                return None;
            }
        };
        self.scheduler.launched(&plan);
        let mut rows = HashMap::new();
        let mut row = 0;
        for c in &plan {
            if c.want_logits && c.draft == 0 {
                rows.insert(c.seq, row);
            }
            row += c.rows();
        }
        let tokens: usize = plan.iter().map(|c| c.len).sum();
        self.shared.timings.count_step(row, tokens);
        let ahead = feeds_next && adjustments.is_none() && self.drafting.is_none();
        Some(InFlight {
            plan,
            rows,
            output,
            adjustments,
            ahead,
            host_s: schedule_s + backend_s,
            backend_s,
        })
    }

    /// The inputs of `plan` whose token is still being picked by the step in flight, and the
    /// row of that step each takes it from.
    fn feeds(&self, plan: &[ScheduledChunk]) -> anyhow::Result<Vec<Feed>> {
        let mut feeds = Vec::new();
        let mut input = 0;
        for c in plan {
            let awaiting = self.scheduler.get(c.seq).is_some_and(|s| s.awaiting > 0);
            if awaiting {
                let row = self
                    .in_flight
                    .as_ref()
                    .and_then(|f| f.rows.get(&c.seq).copied());
                match row {
                    Some(row) if c.len == 1 && c.draft == 0 => feeds.push(Feed { input, row }),
                    _ => anyhow::bail!(
                        "sequence {} awaits a token that no step in flight picks",
                        c.seq
                    ),
                }
            }
            input += c.inputs();
        }
        Ok(feeds)
    }

    /// Finishes the step in flight, if any: its answer (waiting for the device), host sampling
    /// where needed, its tokens to their requests.
    pub(crate) fn finish_in_flight(&mut self) {
        let Some(f) = self.in_flight.take() else {
            return;
        };
        let waited = Instant::now();
        let collected = f.output.is_none();
        let output = match f.output {
            Some(out) => out,
            None => {
                let backend = &mut self.backend;
                std::panic::catch_unwind(AssertUnwindSafe(|| backend.collect()))
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the backend panicked")))
            }
        };
        let wait_s = waited.elapsed().as_secs_f64();
        if collected {
            self.shared.timings.observe_since(Phase::Wait, waited);
        }
        let after_idle = std::mem::take(&mut self.was_idle);
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.max(0.0));
        let device = self.backend.device_timing();
        if let Some(d) = device {
            self.shared
                .timings
                .observe(Phase::DeviceBusy, secs(d.busy_s));
            // After the engine waited for requests, the gap is that wait, not the host's cost.
            let idle = if after_idle { 0.0 } else { d.idle_before_s };
            self.shared.timings.observe(Phase::DeviceIdle, secs(idle));
        }
        if !collected {
            // A whole step: the host waited for the device's share of the call.
            let waited = device.map_or(0.0, |d| d.busy_s.min(f.backend_s));
            let t = &self.shared.timings;
            t.observe(Phase::Launch, secs(f.backend_s - waited));
            if device.is_some() {
                t.observe(Phase::Wait, secs(waited));
            }
        }
        let rows: usize = f.plan.iter().map(ScheduledChunk::rows).sum();
        let checked = output.and_then(|output| match &output {
            StepOutput::Tokens(t) if t.len() != rows => Err(anyhow::anyhow!(
                "the backend returned {} tokens for {rows} rows",
                t.len()
            )),
            StepOutput::Logits(l) if rows > 0 && (l.is_empty() || l.len() % rows != 0) => Err(
                anyhow::anyhow!("the backend returned {} logits for {rows} rows", l.len()),
            ),
            _ => Ok(output),
        });
        let output = match checked {
            Ok(o) => o,
            Err(e) => {
                tracing::error!("forward pass failed: {e:#}");
                self.fail_plan(&f.plan, format!("forward pass failed: {e:#}"));
                return;
            }
        };
        let sampling = Instant::now();
        let sampled = self.sample(&f.plan, output, f.adjustments);
        let sample_s = sampling.elapsed().as_secs_f64();
        self.shared.timings.observe_since(Phase::Sample, sampling);
        let handing = Instant::now();
        self.postprocess(&f.plan, sampled);
        let output_s = handing.elapsed().as_secs_f64();
        self.shared.timings.observe_since(Phase::Output, handing);
        self.bump(|s| {
            s.forward_seconds += f.backend_s + wait_s;
            s.step_seconds += f.host_s + wait_s + sample_s + output_s;
        });
        self.publish_stats();
        self.output.flush();
    }

    /// Every request of `plan` still running fails with `why`.
    fn fail_plan(&mut self, plan: &[ScheduledChunk], why: String) {
        for c in plan {
            if self.active.contains_key(&c.seq) {
                self.fail(c.seq, why.clone());
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
                self.fail_plan(plan, format!("KV block copies failed: {e:#}"));
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
            if a.penalty.is_some() && !self.device_penalties {
                return None;
            }
            // Row j of a verify chunk draws the token j places after the next one.
            for j in 0..c.rows() {
                out.push(a.device_row(generated + j)?);
            }
        }
        Some(out)
    }

    /// Picks the next token for every chunk that produced logits. A row whose grammar failed
    /// gets the grammar's reason.
    fn sample(
        &self,
        plan: &[ScheduledChunk],
        output: StepOutput,
        adjustments: Option<StepAdjustments>,
    ) -> Vec<(SeqId, Result<Sampled, String>)> {
        let mut sampled = self.sample_rows(plan, output, adjustments.as_ref());
        for (row, why) in adjustments.map(|a| a.errors).unwrap_or_default() {
            if let Some(entry) = sampled.get_mut(row) {
                entry.1 = Err(why);
            }
        }
        sampled
    }

    /// One entry per logits row, in plan order. Rows of requests that ended since the step
    /// was launched get an empty error (postprocess drops them).
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
        let mut out: Vec<(SeqId, Result<Sampled, String>)> = wanting
            .iter()
            .map(|&(id, _)| (id, Err(String::new())))
            .collect();
        let mut at = Vec::with_capacity(rows);
        let mut jobs = Vec::with_capacity(rows);
        for (r, (&(id, j), row)) in wanting.iter().zip(logits.chunks_exact(vocab)).enumerate() {
            let (Some(seq), Some(a)) = (self.scheduler.get(id), self.active.get(&id)) else {
                continue;
            };
            // The history as it stands before this row's token: stand-ins left out.
            let generated = seq.generated_known();
            at.push(r);
            jobs.push(SampleJob {
                row,
                params: &a.req.sampling,
                // Verify rows carry no penalties (drafting skips such requests), so the
                // history past the last token does not matter to them.
                history: History {
                    prompt: seq.prompt(),
                    generated,
                },
                seed: a.seed,
                index: (generated.len() + j) as u64,
                logprobs: a.req.logprobs,
                adjust: adjust.and_then(|rows| rows.get(r)?.as_ref()),
            });
        }
        let results = batch_sampler::sample_all(&jobs);
        for (r, result) in at.into_iter().zip(results) {
            out[r].1 = result.map_err(|e| e.to_string());
        }
        out
    }

    /// Records the step and hands each new token to its request: text, stop checks, events. A
    /// verify chunk's rows are judged first: its tokens are the target's choices up to the first
    /// draft that differs from them. Rows of requests that ended meanwhile are dropped.
    fn postprocess(
        &mut self,
        plan: &[ScheduledChunk],
        sampled: Vec<(SeqId, Result<Sampled, String>)>,
    ) {
        self.scheduler.register_computed(plan);
        let processed: usize = plan.iter().map(|c| c.len).sum();
        self.bump(|s| {
            s.steps += 1;
            s.tokens_processed += processed as u64;
        });
        let mut rows = sampled.into_iter();
        self.chosen_rows.clear();
        let mut first_row = 0;
        for c in plan {
            let chunk_rows: Vec<_> = rows.by_ref().take(c.rows()).collect();
            let at = first_row;
            first_row += c.rows();
            if !self.active.contains_key(&c.seq) {
                continue;
            }
            if c.draft > 0 {
                // The row after the kept drafts chose the last token.
                if let Some(accepted) = self.settle_verify(c, chunk_rows) {
                    self.chosen_rows.insert(c.seq, at + accepted);
                }
                continue;
            }
            if c.want_logits {
                self.chosen_rows.insert(c.seq, at);
            }
            for (id, result) in chunk_rows {
                match result {
                    Ok(s) => {
                        if self.scheduler.resolve(id, s.id) {
                            self.accept(id, s);
                        }
                    }
                    Err(e) => self.fail(id, format!("sampling failed: {e}")),
                }
            }
        }
        self.propose_drafts();
    }
}
