//! Prefill rows of block-quantised matrices: each matrix expanded to bf16, then cuBLASLt.
//!
//! Expanded into one scratch just before its GEMM (`KILN_QUANT_AHEAD=off`), a matrix costs
//! every prefill step the expansion's memory traffic in series with the GEMMs (at 2k tokens a
//! chunk, 6-7 ms of the Q8_0 8B step's 57 on the H200). By default a step expands the next
//! layer's matrices on the side stream while this layer's launches run, into the other of two
//! layer-sized buffers: the expansion is memory-bound and the GEMMs compute-bound, so part of
//! it hides (Q8_0 8B prefill 2k +2.0-2.7%). The expanded values are the same, so are the
//! results.

use anyhow::{bail, Context, Result};
use cudarc::driver::CudaEvent;
use kiln_model::LayerWeight;

use crate::device::{DevBuf, DevPtr, Gpu, Lane};
use crate::gemm_lt::{GemmOut, LtGemm};
use crate::quant_weights::QuantMatrix;
use crate::switches::KernelChoice;
use crate::weights::LayerWeights;

/// Where the prefill rows of a quantised GEMM find W in bf16.
#[derive(Debug, Clone, Copy)]
pub enum Bf16Of {
    /// Expand W into this scratch (room for W) first.
    Scratch(u64),
    /// Expanded here already (the layer-ahead buffers).
    Expanded(u64),
}

/// Rows d..t of y = x . W^T, W quantised (rows 0..d, the decode rows, are the skinny
/// kernels'): W's bf16 expansion times x through cuBLASLt.
#[allow(clippy::too_many_arguments)]
pub fn prefill_rows(
    gpu: &Gpu,
    lt: &mut LtGemm,
    bf16: Bf16Of,
    w: &QuantMatrix,
    out: GemmOut,
    y: DevPtr<f32>,
    x: DevPtr<u16>,
    t: usize,
    d: usize,
) -> Result<()> {
    if t <= d {
        return Ok(());
    }
    let (n, k) = (w.rows, w.cols);
    let at = match bf16 {
        Bf16Of::Scratch(0) => bail!("no prefill scratch for a quantised {n}x{k} weight"),
        Bf16Of::Scratch(at) => {
            expand(gpu, w, at, Lane::Main)?;
            at
        }
        Bf16Of::Expanded(at) => at,
    };
    let (y, x) = (y.row(d, n).addr(), x.row(d, k).addr());
    lt.matmul_to(gpu, out, y, x, at, t - d, n, k)
}

/// W's bf16 rows at `out`, in the weight's order, on `lane`'s stream.
fn expand(gpu: &Gpu, w: &QuantMatrix, out: u64, lane: Lane) -> Result<()> {
    let (out, k) = (DevPtr::<u16>::new(out), w.cols);
    let words = KernelChoice::from_env().quant_expand_words;
    for s in &w.segments {
        let at = out.row(s.row0, k).addr();
        let (f, data) = (s.format, s.data.ptr());
        gpu.quant_to_bf16_kernel(words, lane, f, at, k, data, s.rows, k, s.order)?;
    }
    Ok(())
}

/// Values (bf16) a layer's quantised matrices take expanded, one after another in
/// `quantised()` order ([`AheadBuffers::matrix`] finds each one's place).
fn layer_len(lw: &LayerWeights) -> usize {
    lw.quantised().map(|(_, q)| padded(q)).sum()
}

/// The room of a matrix of `values` in a layer buffer, rounded up to 128 values (256 bytes,
/// as cuBLASLt likes its operands aligned).
pub fn room(values: usize) -> usize {
    values.next_multiple_of(128)
}

fn padded(q: &QuantMatrix) -> usize {
    room(q.rows * q.cols)
}

/// The two layer buffers and the events that order them between the streams.
pub struct AheadBuffers {
    bufs: [DevBuf<u16>; 2],
    /// Recorded on the main stream when a layer's first GEMM is about to be queued: every
    /// launch of the layers before it is behind it.
    mark: CudaEvent,
    /// Recorded on the side stream when layer L's expansion (into `bufs[L % 2]`) is queued.
    ready: [CudaEvent; 2],
}

/// One step's progress through the layers.
#[derive(Debug, Default, Clone, Copy)]
pub struct AheadStep {
    /// The step is being captured into a graph: it keeps to the main stream.
    pub capturing: bool,
    /// The last layer whose expansion the side stream has queued.
    queued: Option<usize>,
    /// The last layer the main stream waited for.
    entered: Option<usize>,
}

impl AheadStep {
    /// A step about to be queued; `capturing`: into a graph (asked once a step).
    pub fn new(capturing: bool) -> AheadStep {
        AheadStep {
            capturing,
            ..AheadStep::default()
        }
    }
}

impl AheadBuffers {
    /// Two buffers for the widest layer; None when no layer has a quantised matrix.
    pub fn new(gpu: &Gpu, layers: &[LayerWeights]) -> Result<Option<AheadBuffers>> {
        let len = layers.iter().map(layer_len).max().unwrap_or(0);
        if len == 0 {
            return Ok(None);
        }
        gpu.side_stream()?;
        let event = || {
            gpu.ctx
                .new_event(None)
                .context("creating an event of the layer-ahead expansion")
        };
        Ok(Some(AheadBuffers {
            bufs: [gpu.alloc(len)?, gpu.alloc(len)?],
            mark: event()?,
            ready: [event()?, event()?],
        }))
    }

    pub fn bytes(&self) -> usize {
        self.bufs.iter().map(|b| b.bytes()).sum()
    }

    /// The expansion of layer `layer`'s `weight`, valid once [`AheadBuffers::enter`] ran for
    /// the layer in this step.
    pub fn matrix(
        &self,
        layers: &[LayerWeights],
        layer: usize,
        weight: LayerWeight,
    ) -> Result<u64> {
        let mut at = 0;
        for (w, q) in layers[layer].quantised() {
            if w == weight {
                return Ok(self.bufs[layer % 2].at(at));
            }
            at += padded(q);
        }
        bail!("layer {layer} has no quantised {weight:?}")
    }

    /// After a step's launches, whether they all went or one failed: the main stream waits for
    /// any expansion queued for a layer it never entered, so no later step's writes to that
    /// buffer (a graph's, on the main stream) can race the side stream's.
    pub fn finish(&self, gpu: &Gpu, step: &AheadStep) -> Result<()> {
        match step.queued {
            Some(l) if step.entered != Some(l) => Ok(gpu.stream.wait(&self.ready[l % 2])?),
            _ => Ok(()),
        }
    }

    /// Before layer `layer`'s first quantised GEMM of a step with prefill rows: queues the
    /// next layer's expansion on the side stream (once this layer's buffer-mate, the layer
    /// before, has no GEMM left to queue) and makes the main stream wait for this layer's.
    pub fn enter(
        &self,
        gpu: &Gpu,
        layers: &[LayerWeights],
        layer: usize,
        step: &mut AheadStep,
    ) -> Result<()> {
        if step.entered == Some(layer) {
            return Ok(());
        }
        let side = gpu.side_stream()?;
        let mut queue = Vec::with_capacity(2);
        if step.queued != Some(layer) {
            queue.push(layer);
        }
        if layer + 1 < layers.len() {
            queue.push(layer + 1);
        }
        if !queue.is_empty() {
            // The side stream writes a buffer only after every GEMM that read it.
            self.mark.record(&gpu.stream)?;
            side.wait(&self.mark)?;
        }
        for l in queue {
            for (w, q) in layers[l].quantised() {
                expand(gpu, q, self.matrix(layers, l, w)?, Lane::Side)?;
            }
            self.ready[l % 2].record(side)?;
            step.queued = Some(l);
        }
        gpu.stream.wait(&self.ready[layer % 2])?;
        step.entered = Some(layer);
        Ok(())
    }
}
