//! Steps queued ahead of their answers (kiln_step's `launch` and `collect`). Each launched step
//! has a slot of host staging (its inputs and results stay put while the next step is packed),
//! a pair of events that mark its start and end on the stream (the end is what `collect` waits
//! for; both time it), and leaves its picks where the next step's feeds copy them from on the
//! device. At most two steps wait to be collected: their slots alternate.

use std::collections::VecDeque;

use anyhow::{bail, ensure, Context, Result};
use cudarc::driver::{sys, CudaEvent};
use kiln_step::{ChunkInput, DeviceTiming, Feed, OwnedWant, RowSampling};

use crate::device::{DevBuf, Gpu, PinnedBuf};
use crate::step_plan::{is_decode, StepPlan};

/// How a launched step's tokens come back.
pub(crate) enum Picks {
    /// The logits rows, to the host; the host picks from them as the owned want says.
    Logits(OwnedWant),
    /// The device argmax, one id per row.
    Argmax,
    /// The device sampler's picks for these rows.
    Sampled(Vec<RowSampling>),
}

/// A launched step not yet collected.
pub(crate) struct Pending {
    pub plan: StepPlan,
    /// Its host staging slot (0 or 1).
    pub slot: usize,
    pub picks: Picks,
    events: usize,
}

/// Where the last launched step left its picks on the device: row r's at `ptr` + r * `stride`
/// i32 words.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PickSource {
    pub ptr: u64,
    pub stride: usize,
    pub rows: usize,
}

/// Steps launched and not collected, their events, and the feeds' staging.
pub(crate) struct Pipeline {
    pending: VecDeque<Pending>,
    launches: usize,
    /// Start and end events of the last three steps: two in flight, and the one finished
    /// before them, whose end times the device's idle gap before the next.
    events: Vec<(CudaEvent, CudaEvent)>,
    last_end: Option<usize>,
    /// The last launched step's picks on the device; None when they are made on the host.
    pub last_picks: Option<PickSource>,
    timing: Option<DeviceTiming>,
    feed_dev: DevBuf<i32>,
    feed_host: [PinnedBuf<i32>; 2],
}

impl Pipeline {
    pub fn new(gpu: &Gpu, max_seqs: usize) -> Result<Pipeline> {
        let event = || {
            gpu.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .context("creating a CUDA event")
        };
        let events = (0..3)
            .map(|_| Ok((event()?, event()?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Pipeline {
            pending: VecDeque::new(),
            launches: 0,
            events,
            last_end: None,
            last_picks: None,
            timing: None,
            feed_dev: gpu.alloc(2 * max_seqs.max(1))?,
            feed_host: [
                PinnedBuf::new(gpu, 2 * max_seqs.max(1))?,
                PinnedBuf::new(gpu, 2 * max_seqs.max(1))?,
            ],
        })
    }

    /// The staging slot the next launch packs into, after checking it may launch: fewer than
    /// two steps waiting, and no second one whose logits would share the host buffer.
    pub fn next_slot(&self, logits: bool) -> Result<usize> {
        ensure!(
            self.pending.len() < 2,
            "two launched steps wait to be collected; collect one first"
        );
        ensure!(
            !(logits && self.pending.iter().any(|p| matches!(p.picks, Picks::Logits(_)))),
            "a launched step's logits wait to be collected; collect it before launching another that returns logits"
        );
        Ok(self.launches % 2)
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Marks the start of the next step on the stream; its event index.
    pub fn begin(&mut self, gpu: &Gpu) -> Result<usize> {
        let i = self.launches % self.events.len();
        self.events[i]
            .0
            .record(&gpu.stream)
            .context("recording a step's start event")?;
        Ok(i)
    }

    /// Marks the end of a step begun with `events` and queues it for `collect`.
    pub fn end(
        &mut self,
        gpu: &Gpu,
        plan: StepPlan,
        slot: usize,
        picks: Picks,
        events: usize,
    ) -> Result<()> {
        self.events[events]
            .1
            .record(&gpu.stream)
            .context("recording a step's end event")?;
        self.launches += 1;
        self.pending.push_back(Pending {
            plan,
            slot,
            picks,
            events,
        });
        Ok(())
    }

    /// Waits for the oldest launched step to end on the device and times it.
    pub fn wait_oldest(&mut self) -> Result<Pending> {
        let Some(p) = self.pending.pop_front() else {
            bail!("collect with no step launched");
        };
        let (start, end) = &self.events[p.events];
        end.synchronize()
            .context("running the step on the GPU (an earlier kernel may have failed)")?;
        let busy = start.elapsed_ms(end).unwrap_or(0.0) as f64 * 1e-3;
        let idle = match self.last_end {
            Some(prev) => self.events[prev]
                .1
                .elapsed_ms(start)
                .map_or(0.0, |ms| ms.max(0.0) as f64 * 1e-3),
            None => 0.0,
        };
        self.timing = Some(DeviceTiming {
            busy_s: busy,
            idle_before_s: idle,
        });
        self.last_end = Some(p.events);
        Ok(p)
    }

    /// The timing of the step last collected, once.
    pub fn take_timing(&mut self) -> Option<DeviceTiming> {
        self.timing.take()
    }

    /// Queues the copy of the last launched step's picks into the token ids of the step being
    /// launched (`tokens`: its token section on the device), after checking the feeds.
    pub fn queue_feeds(
        &mut self,
        gpu: &Gpu,
        chunks: &[ChunkInput<'_>],
        feeds: &[Feed],
        tokens: u64,
        slot: usize,
    ) -> Result<()> {
        if feeds.is_empty() {
            return Ok(());
        }
        let Some(src) = self.last_picks else {
            bail!("feeds name a step whose picks were made on the host");
        };
        kiln_step::pipeline::check_feeds(chunks, feeds, src.rows)?;
        // Decode rows are packed first, in chunk order (step_plan.rs): an input's flat index
        // is the number of one-token inputs before it.
        let mut flat = Vec::with_capacity(chunks.len());
        let mut decode = 0;
        for c in chunks {
            flat.push(decode);
            decode += is_decode(c) as i32;
        }
        let host = self.feed_host[slot].as_mut_slice();
        for (i, f) in feeds.iter().enumerate() {
            host[2 * i] = flat[f.input];
            host[2 * i + 1] = f.row as i32;
        }
        self.feed_host[slot].copy_to_device(gpu, self.feed_dev.ptr(), 2 * feeds.len())?;
        gpu.feed_tokens(
            tokens,
            src.ptr,
            src.stride,
            self.feed_dev.ptr(),
            feeds.len(),
        )
    }

    pub fn bytes(&self) -> usize {
        self.feed_dev.bytes()
    }
}
