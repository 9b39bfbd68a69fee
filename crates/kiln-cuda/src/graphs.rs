//! CUDA graphs of whole steps, one executable per step shape (graphs_pad.rs). A step's launches
//! are recorded by stream capture; a shape seen again replays its executable after the step's
//! inputs are copied into the persistent buffers. Recording a shape that already holds an
//! executable (the KV pool moved, say) updates it in place with cuGraphExecUpdate instead of
//! instantiating a new one. KILN_CUDA_GRAPHS=0 runs every step eagerly.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use cudarc::driver::{result as drv, sys};

use crate::device::Gpu;
use crate::graphs_pad::{GraphBuckets, GraphShape};
use crate::switches::Switches;

/// How often each graph operation happened since the backend started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphCounters {
    /// Steps recorded by stream capture.
    pub captures: u64,
    /// Executables instantiated from a recording.
    pub instantiations: u64,
    /// Held executables given a new recording's parameters in place.
    pub updates: u64,
    /// Steps run by launching an executable.
    pub replays: u64,
    /// Steps run launch by launch (no graph for their shape, or graphs off).
    pub eager_steps: u64,
}

/// Whether KILN_CUDA_GRAPHS leaves graphs on (anything but 0/off/false).
pub fn graphs_enabled_by_env() -> bool {
    Switches::from_env().cuda_graphs
}

/// Largest prefill bucket: KILN_CUDA_GRAPH_PREFILL (0: no prefill graphs), else the default.
pub fn prefill_max_from_env() -> usize {
    Switches::from_env()
        .graph_prefill_max
        .unwrap_or(crate::graphs_pad::DEFAULT_PREFILL_MAX)
}

/// An instantiated graph, destroyed when dropped (before the context: the backend's field
/// order).
pub(crate) struct Exec(sys::CUgraphExec);

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: instantiated by GraphCache::capture and destroyed once.
        let _ = unsafe { drv::graph::exec_destroy(self.0) };
    }
}

/// A recorded (not instantiated) graph, destroyed when dropped.
struct Recording(sys::CUgraph);

impl Drop for Recording {
    fn drop(&mut self) {
        // SAFETY: created by stream capture and destroyed once.
        let _ = unsafe { drv::graph::destroy(self.0) };
    }
}

pub struct GraphCache {
    pub buckets: GraphBuckets,
    enabled: bool,
    execs: HashMap<GraphShape, Exec>,
    counters: GraphCounters,
    /// Wall time of the last start-up (or re-) capture of every held shape.
    capture_ms: f64,
    /// Why graphs were turned off after a failed capture, if they were.
    failure: Option<String>,
}

// SAFETY: the executables are used only through &mut self, from one thread at a time.
unsafe impl Send for GraphCache {}

impl GraphCache {
    pub fn new(buckets: GraphBuckets, enabled: bool) -> GraphCache {
        GraphCache {
            buckets,
            enabled,
            execs: HashMap::new(),
            counters: GraphCounters::default(),
            capture_ms: 0.0,
            failure: None,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Turns graphs on or off; after a failed capture they stay off.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on && self.failure.is_none();
    }

    pub fn counters(&self) -> GraphCounters {
        self.counters
    }

    pub fn count_eager(&mut self) {
        self.counters.eager_steps += 1;
    }

    /// The shape a step pads up to, when graphs are on and one fits.
    pub fn shape_for(&self, plan: &crate::step_plan::StepPlan) -> Option<GraphShape> {
        if self.enabled {
            self.buckets.shape_for(plan)
        } else {
            None
        }
    }

    pub fn holds(&self, s: GraphShape) -> bool {
        self.execs.contains_key(&s)
    }

    /// Shapes that hold an executable, in order.
    pub fn held_shapes(&self) -> Vec<GraphShape> {
        let mut v: Vec<GraphShape> = self.execs.keys().copied().collect();
        v.sort();
        v
    }

    /// Records the launches `queue` makes on the stream as shape `s`'s graph: updates the held
    /// executable in place when the launches differ only in parameters, else instantiates one.
    pub fn capture(
        &mut self,
        gpu: &Gpu,
        s: GraphShape,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let rec = record(gpu, queue)?;
        self.counters.captures += 1;
        if let Some(exec) = self.execs.get(&s) {
            if try_update(exec, &rec) {
                self.counters.updates += 1;
                return Ok(());
            }
            // Another launch sequence: the held executable cannot take it.
            self.execs.remove(&s);
        }
        let exec = instantiate(gpu, &rec).map_err(|e| anyhow!("the graph of {s:?}: {e:#}"))?;
        self.counters.instantiations += 1;
        self.execs.insert(s, exec);
        Ok(())
    }

    /// Captures every shape in `shapes` with `queue(shape)`; records the time taken.
    pub fn capture_all(
        &mut self,
        gpu: &Gpu,
        shapes: &[GraphShape],
        mut queue: impl FnMut(GraphShape) -> Result<()>,
    ) -> Result<()> {
        let t = Instant::now();
        for &s in shapes {
            self.capture(gpu, s, || queue(s))?;
        }
        gpu.synchronize()?;
        self.capture_ms = t.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// Launches shape `s`'s executable on the stream.
    pub fn replay(&mut self, gpu: &Gpu, s: GraphShape) -> Result<()> {
        let exec = self
            .execs
            .get(&s)
            .ok_or_else(|| anyhow!("no graph held for {s:?}"))?;
        exec.launch(gpu)
            .map_err(|e| anyhow!("the graph of {s:?}: {e:#}"))?;
        self.counters.replays += 1;
        Ok(())
    }

    /// Turns graphs off for good after a failed capture (held graphs may read stale
    /// buffers then), keeping the reason for describe().
    pub fn fail(&mut self, why: String) {
        self.enabled = false;
        self.execs.clear();
        self.failure = Some(why);
    }

    /// One line for logs and describe().
    pub fn describe(&self) -> String {
        let c = self.counters;
        let state = match (&self.failure, self.enabled) {
            (Some(why), _) => format!("off after a failed capture ({why})"),
            (None, true) => "on".to_string(),
            (None, false) => "off".to_string(),
        };
        format!(
            "cuda graphs: {state}; decode buckets {:?}, prefill buckets {:?}; {} held, last captured in {:.1} ms; \
             captures {}, instantiations {}, updates {}, replays {}, eager steps {}",
            self.buckets.decode,
            self.buckets.prefill,
            self.execs.len(),
            self.capture_ms,
            c.captures,
            c.instantiations,
            c.updates,
            c.replays,
            c.eager_steps
        )
    }
}

impl Exec {
    /// Launches the executable on the stream.
    pub(crate) fn launch(&self, gpu: &Gpu) -> Result<()> {
        // SAFETY: valid executable and stream.
        unsafe { drv::graph::launch(self.0, gpu.stream.cu_stream()) }
            .map_err(|e| anyhow!("launching: {e:?}"))
    }
}

/// Instantiates a recording and moves the executable to the device now rather than on its
/// first replay.
fn instantiate(gpu: &Gpu, rec: &Recording) -> Result<Exec> {
    // SAFETY: a complete recording from stream capture.
    let exec = unsafe { drv::graph::instantiate(rec.0, sys::CUgraphInstantiate_flags(0)) }
        .map_err(|e| anyhow!("instantiating: {e:?}"))?;
    let exec = Exec(exec);
    // SAFETY: valid executable and stream.
    unsafe { drv::graph::upload(exec.0, gpu.stream.cu_stream()) }
        .map_err(|e| anyhow!("uploading: {e:?}"))?;
    Ok(exec)
}

/// Records the launches `queue` makes on the stream and instantiates them.
pub(crate) fn capture_exec(gpu: &Gpu, queue: impl FnOnce() -> Result<()>) -> Result<Exec> {
    instantiate(gpu, &record(gpu, queue)?)
}

/// Runs `queue` under stream capture and returns the recording. The capture always ends, so
/// a failed launch leaves the stream usable.
fn record(gpu: &Gpu, queue: impl FnOnce() -> Result<()>) -> Result<Recording> {
    let stream = gpu.stream.cu_stream();
    // SAFETY: our own stream; the mode keeps other threads' work out of the capture.
    unsafe {
        drv::stream::begin_capture(
            stream,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    }
    .map_err(|e| anyhow!("starting a stream capture: {e:?}"))?;
    let queued = queue();
    // SAFETY: ends the capture begun above.
    let ended = unsafe { drv::stream::end_capture(stream) };
    let rec = match &ended {
        Ok(g) if !g.is_null() => Some(Recording(*g)),
        _ => None,
    };
    queued?;
    match (rec, ended) {
        (Some(r), _) => Ok(r),
        (None, Err(e)) => bail!("ending the stream capture: {e:?}"),
        (None, Ok(_)) => bail!("the stream capture recorded nothing"),
    }
}

/// Gives `exec` the parameters of `rec` when both launch the same kernels in the same order.
fn try_update(exec: &Exec, rec: &Recording) -> bool {
    // SAFETY: plain C struct, filled by the driver.
    let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    // SAFETY: valid executable and recording.
    let st = unsafe { sys::cuGraphExecUpdate_v2(exec.0, rec.0, &mut info) };
    st == sys::CUresult::CUDA_SUCCESS
        && info.result == sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS
}
