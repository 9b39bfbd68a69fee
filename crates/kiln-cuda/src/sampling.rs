//! Sampling on the device (kernels/sample.cu): each logits row's parameters packed into a few
//! words, one CTA per row, and only the chosen ids and log-probabilities copied back.

use anyhow::Result;
use kiln_step::{RowSampling, MAX_DEVICE_TOP_LOGPROBS};
use kiln_step::{SampleError, Sampled};

use crate::device::{Arg, DevBuf, Gpu, PinnedBuf};

/// Words of one row's parameters (SMP_PARAM_WORDS in sample.cu).
pub const PARAM_WORDS: usize = 8;
/// Top log-probabilities one row returns at most (SMP_MAX_TOP).
pub const MAX_TOP: usize = 20;
/// Words of one row's result (SMP_OUT_WORDS).
pub const OUT_WORDS: usize = 4 + 2 * MAX_TOP;
const _: () = assert!(MAX_TOP == MAX_DEVICE_TOP_LOGPROBS);

/// Largest vocabulary whose fixed-point weights sum within a u64 (2^20 tokens of 2^44).
pub const MAX_VOCAB: usize = 1 << 20;

/// Whether the kernel can sample these rows exactly as the host would.
pub fn supports(rows: &[RowSampling], vocab: usize) -> bool {
    vocab <= MAX_VOCAB && rows.iter().all(|r| r.logprobs.is_none_or(|n| n <= MAX_TOP))
}

/// Packs each row's parameters as sample.cu reads them.
pub fn pack_params(rows: &[RowSampling], vocab: usize, out: &mut [i32]) {
    for (r, w) in rows.iter().zip(out.chunks_exact_mut(PARAM_WORDS)) {
        let top_k = if r.top_k >= vocab { 0 } else { r.top_k };
        let u = r.uniform.to_bits();
        w[0] = r.temperature.to_bits() as i32;
        w[1] = top_k as i32;
        w[2] = r.top_p.to_bits() as i32;
        w[3] = r.min_p.to_bits() as i32;
        w[4] = u as u32 as i32;
        w[5] = (u >> 32) as u32 as i32;
        w[6] = r.logprobs.map_or(-1, |n| n.min(MAX_TOP) as i32);
        w[7] = 0;
    }
}

/// Reads back what the kernel wrote for each row.
pub fn unpack(out: &[i32], rows: &[RowSampling]) -> Vec<Result<Sampled, SampleError>> {
    out.chunks_exact(OUT_WORDS)
        .zip(rows)
        .map(|(w, r)| {
            if w[1] != 0 {
                return Err(SampleError::NoFiniteLogits);
            }
            let f = |x: i32| f32::from_bits(x as u32);
            let n = w[3].max(0) as usize;
            let top_logprobs = (0..n)
                .map(|i| (w[4 + i] as u32, f(w[4 + MAX_TOP + i])))
                .collect();
            Ok(Sampled {
                id: w[0] as u32,
                logprob: r.logprobs.map(|_| f(w[2])),
                top_logprobs,
            })
        })
        .collect()
}

impl Gpu {
    /// Samples `rows` rows of `vocab` logits: `params` holds PARAM_WORDS words per row, `out`
    /// receives OUT_WORDS words per row. One CTA per row, at most one per SM at a time.
    pub fn sample_rows(
        &self,
        logits: u64,
        params: u64,
        out: u64,
        rows: usize,
        vocab: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            vocab <= MAX_VOCAB,
            "device sampling takes vocabularies up to {MAX_VOCAB}, got {vocab}"
        );
        let grid = rows.min(self.sm_count as usize) as u32;
        self.launch(
            "sample_rows",
            (grid, 1, 1),
            1024,
            0,
            &[
                Arg::Ptr(logits),
                Arg::Ptr(params),
                Arg::Ptr(out),
                Arg::I32(rows as i32),
                Arg::I32(vocab as i32),
            ],
        )
    }
}

/// The buffers of device sampling, sized once for the largest step.
pub struct SamplingBuffers {
    params: DevBuf<i32>,
    out: DevBuf<i32>,
    params_host: PinnedBuf<i32>,
    out_host: PinnedBuf<i32>,
}

impl SamplingBuffers {
    pub fn new(gpu: &Gpu, max_rows: usize) -> Result<SamplingBuffers> {
        Ok(SamplingBuffers {
            params: gpu.alloc(max_rows * PARAM_WORDS)?,
            out: gpu.alloc(max_rows * OUT_WORDS)?,
            params_host: PinnedBuf::new(gpu, max_rows * PARAM_WORDS)?,
            out_host: PinnedBuf::new(gpu, max_rows * OUT_WORDS)?,
        })
    }

    /// Queues the parameter upload, the kernel over `logits` and the result download; the
    /// caller synchronises, then reads [`SamplingBuffers::results`].
    pub fn queue(
        &mut self,
        gpu: &Gpu,
        logits: u64,
        rows: &[RowSampling],
        vocab: usize,
    ) -> Result<()> {
        let n = rows.len();
        pack_params(rows, vocab, self.params_host.as_mut_slice());
        self.params_host
            .copy_to_device(gpu, self.params.ptr(), n * PARAM_WORDS)?;
        gpu.sample_rows(logits, self.params.ptr(), self.out.ptr(), n, vocab)?;
        self.out_host
            .copy_from_device(gpu, self.out.ptr(), n * OUT_WORDS)
    }

    /// The rows sampled by the last [`SamplingBuffers::queue`], once the stream is synchronised.
    pub fn results(&self, rows: &[RowSampling]) -> Vec<Result<Sampled, SampleError>> {
        unpack(&self.out_host.as_slice()[..rows.len() * OUT_WORDS], rows)
    }

    pub fn bytes(&self) -> usize {
        self.params.bytes() + self.out.bytes()
    }
}
