//! The CUDA backend's steps queued without waiting (kiln_step's launch and collect; the staging
//! slots, events and feeds are pipeline.rs's): a step is packed into a free slot, uploaded, its
//! feeds copied, its forward pass and what it asks for queued; collecting it waits for its end
//! event and reads its answer from its slot.

use anyhow::Result;
use kiln_step::{ChunkInput, Feed, OwnedWant, Sampled, StepOutput, Want};

use super::CudaBackend;
use crate::graphs_pad::pad_step;
use crate::pipeline::{PickSource, Picks};
use crate::step_plan::pack_step;

impl CudaBackend {
    /// Queues one step on the device into the next staging slot without waiting for it: the
    /// input upload, the feeds, the forward pass and what `out` asks for (`on_host`: the logits
    /// come back and the host picks as `out` says). [`Pipeline::wait_oldest`] finishes it.
    pub(super) fn queue_step(
        &mut self,
        chunks: &[ChunkInput<'_>],
        out: &Want<'_>,
        feeds: &[Feed],
        on_host: bool,
    ) -> Result<()> {
        let logits = on_host || matches!(out, Want::Logits);
        let slot = self.pipe.next_slot(logits)?;
        self.gpu.bind()?;
        let scratch = self.scratch_slot()?;
        let step_host = &mut self.step_host[slot];
        let plan = pack_step(chunks, &self.layout, step_host.as_mut_slice())?;
        let shape = self.graphs.shape_for(&plan);
        let run = match shape {
            Some(s) => pad_step(
                step_host.as_mut_slice(),
                &self.layout,
                &plan,
                &self.graphs.buckets,
                s,
                scratch,
            )?,
            None => plan.clone(),
        };
        let events = self.pipe.begin(&self.gpu)?;
        if plan.n_tokens > 0 {
            step_host.copy_to_device(&self.gpu, self.act.step.ptr(), run.upload_len)?;
            let tokens = self.act.step.at(self.layout.tokens);
            self.pipe
                .queue_feeds(&self.gpu, chunks, feeds, tokens, slot)?;
            self.launch_step(shape, &run)?;
        }
        let vocab = self.config.vocab_size;
        let picks = match out {
            _ if logits => {
                self.logits_host.copy_from_device(
                    &self.gpu,
                    self.act.logits.ptr(),
                    plan.n_logits * vocab,
                )?;
                // Waits for a grammar's masks, which were computed while the forward pass ran.
                Picks::Logits(OwnedWant::of(out))
            }
            Want::Argmax => {
                self.ids_host[slot].copy_from_device(
                    &self.gpu,
                    self.act.ids.ptr(),
                    plan.n_logits,
                )?;
                Picks::Argmax
            }
            Want::Sample(rows) => {
                let rows = *rows;
                self.sampling
                    .queue(&self.gpu, self.act.logits.ptr(), rows, vocab, slot)?;
                Picks::Sampled(rows.to_vec())
            }
            // The adjustments (grammar masks) were being computed while the step ran; waiting
            // here leaves the device busy with the forward pass meanwhile.
            Want::SampleAdjusted(rows, adjust) => {
                let rows = *rows;
                self.sampling.queue_adjusted(
                    &self.gpu,
                    self.act.logits.ptr(),
                    rows,
                    Some(adjust.wait()),
                    vocab,
                    slot,
                )?;
                Picks::Sampled(rows.to_vec())
            }
            Want::Logits => unreachable!("logits are handled above"),
        };
        self.pipe.last_picks = match picks {
            Picks::Logits(_) => None,
            Picks::Argmax => Some(PickSource {
                ptr: self.act.ids.ptr(),
                stride: 1,
                rows: plan.n_logits,
            }),
            Picks::Sampled(_) => Some(PickSource {
                ptr: self.sampling.picks(),
                stride: crate::sampling::OUT_WORDS,
                rows: plan.n_logits,
            }),
        };
        self.pipe.end(&self.gpu, plan, slot, picks, events)
    }

    /// Waits for the oldest launched step and reads its answer.
    pub(super) fn finish_oldest(&mut self) -> Result<StepOutput> {
        let p = self.pipe.wait_oldest()?;
        let n = p.plan.n_logits;
        self.hidden_rows = n;
        Ok(match p.picks {
            Picks::Argmax => StepOutput::Tokens(
                self.ids_host[p.slot].as_slice()[..n]
                    .iter()
                    .map(|&i| Ok(Sampled::id_only(i as u32)))
                    .collect(),
            ),
            Picks::Sampled(rows) => StepOutput::Tokens(self.sampling.results(p.slot, &rows)),
            Picks::Logits(want) => {
                let vocab = self.config.vocab_size;
                let logits = self.logits_host.as_slice()[..n * vocab].to_vec();
                want.from_logits(logits, vocab)?
            }
        })
    }

    /// A whole step: queued, then waited for. Only when no launched step waits.
    pub(super) fn run_whole(
        &mut self,
        chunks: &[ChunkInput<'_>],
        out: Want<'_>,
        on_host: bool,
    ) -> Result<StepOutput> {
        anyhow::ensure!(
            self.pipe.is_empty(),
            "a whole step was asked for while launched steps wait to be collected"
        );
        self.queue_step(chunks, &out, &[], on_host)?;
        self.finish_oldest()
    }

    /// Whether `want` is sampled on the host from the logits rather than on the device.
    pub(super) fn picks_on_host(&self, want: &Want<'_>) -> bool {
        match want {
            Want::Sample(rows) | Want::SampleAdjusted(rows, _) => {
                !(self.switches.device_sampling
                    && crate::sampling::supports(rows, self.config.vocab_size))
            }
            Want::Logits | Want::Argmax => false,
        }
    }
}
