//! Sampling on the device (kernels/sample.cu): each logits row's parameters packed into a few
//! words, one CTA per row, and only the chosen ids and log-probabilities copied back.

use anyhow::Result;
use kiln_step::{Penalty, RowAdjust, RowSampling, MAX_DEVICE_TOP_LOGPROBS};
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

/// Packs each row's parameters as sample.cu reads them (no adjusted rows).
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
        w[7] = -1;
    }
}

/// Words of one adjusted row's plan (SMP_ADJ_WORDS in sample.cu).
pub const ADJ_WORDS: usize = 9;

/// Where each adjusted row's inputs lie, as adjust_rows reads them: the rows that change
/// (identity adjustments are skipped), their masks' words, their penalty and bias entries,
/// packed.
#[derive(Debug, Default, PartialEq)]
pub struct AdjustPack {
    /// ADJ_WORDS per adjusted row: logits row, mask index (-1: none), first bias, bias count,
    /// first penalty entry, penalty entries, and the repetition, presence and frequency
    /// penalties (f32 bits).
    pub plan: Vec<i32>,
    pub masks: Vec<u32>,
    pub bias_ids: Vec<i32>,
    pub bias_vals: Vec<f32>,
    /// Two words per penalty entry: the token, how often it was generated.
    pub penalties: Vec<i32>,
    /// For each logits row, its adjusted copy's index (-1: sampled from the raw row).
    pub copy_of_row: Vec<i32>,
}

impl AdjustPack {
    pub fn new(adjust: &[Option<RowAdjust>], vocab: usize) -> AdjustPack {
        let words = vocab.div_ceil(32);
        let mut p = AdjustPack::default();
        let mut masks = 0;
        for (row, a) in adjust.iter().enumerate() {
            let Some(a) = a.as_ref().filter(|a| !a.is_identity()) else {
                p.copy_of_row.push(-1);
                continue;
            };
            p.copy_of_row.push((p.plan.len() / ADJ_WORDS) as i32);
            let mask = match &a.allowed {
                Some(set) => {
                    let start = p.masks.len();
                    p.masks.extend_from_slice(set.words());
                    // A set made for another width: the ids past it are left out.
                    p.masks.resize(start + words, 0);
                    masks += 1;
                    masks - 1
                }
                None => -1,
            };
            let none = Penalty {
                repetition: 1.0,
                ..Penalty::default()
            };
            let pen = a.penalty.as_deref().unwrap_or(&none);
            p.plan.extend([
                row as i32,
                mask,
                p.bias_ids.len() as i32,
                a.bias.len() as i32,
                (p.penalties.len() / 2) as i32,
                pen.tokens.len() as i32,
                pen.repetition.to_bits() as i32,
                pen.presence.to_bits() as i32,
                pen.frequency.to_bits() as i32,
            ]);
            p.bias_ids.extend(a.bias.iter().map(|b| b.0 as i32));
            p.bias_vals.extend(a.bias.iter().map(|b| b.1));
            p.penalties
                .extend(pen.tokens.iter().flat_map(|&(t, n)| [t as i32, n as i32]));
        }
        p
    }

    pub fn rows(&self) -> usize {
        self.plan.len() / ADJ_WORDS
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
    /// `adjusted`: the rows' adjusted copies, which parameter word 7 indexes (any pointer when
    /// no row has one).
    #[allow(clippy::too_many_arguments)]
    pub fn sample_rows(
        &self,
        logits: u64,
        adjusted: u64,
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
                Arg::Ptr(adjusted),
                Arg::Ptr(params),
                Arg::Ptr(out),
                Arg::I32(rows as i32),
                Arg::I32(vocab as i32),
            ],
        )
    }

    /// Writes into `tokens` (a step's token ids on the device) the picks of the step before,
    /// before the forward pass reads them: `pairs` holds n (flat token index, row) pairs, and
    /// row r's pick is `picks[r * stride]`.
    pub fn feed_tokens(
        &self,
        tokens: u64,
        picks: u64,
        stride: usize,
        pairs: u64,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        // Plain order: the forward pass's kernels (dependent launches) wait for this one.
        self.launch_with(
            "feed_tokens",
            (n.div_ceil(256) as u32, 1, 1),
            256,
            0,
            &[
                Arg::Ptr(tokens),
                Arg::Ptr(picks),
                Arg::I32(crate::device::i32_of(stride, "stride")?),
                Arg::Ptr(pairs),
                Arg::I32(crate::device::i32_of(n, "feeds")?),
            ],
            false,
        )
    }

    /// Writes the adjusted copy of each row `plan` names into `adjusted` (vocab floats each).
    #[allow(clippy::too_many_arguments)]
    pub fn adjust_rows(
        &self,
        logits: u64,
        adjusted: u64,
        plan: u64,
        masks: u64,
        bias_ids: u64,
        bias_vals: u64,
        penalties: u64,
        n: usize,
        vocab: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let grid = n.min(self.sm_count as usize) as u32;
        self.launch(
            "adjust_rows",
            (grid, 1, 1),
            1024,
            0,
            &[
                Arg::Ptr(logits),
                Arg::Ptr(adjusted),
                Arg::Ptr(plan),
                Arg::Ptr(masks),
                Arg::Ptr(bias_ids),
                Arg::Ptr(bias_vals),
                Arg::Ptr(penalties),
                Arg::I32(n as i32),
                Arg::I32(vocab as i32),
            ],
        )
    }
}

/// A device buffer and its pinned staging twin that grow to the largest use seen: adjusted
/// rows are rare, so their room is taken only when asked for.
struct Staged<T> {
    dev: Option<DevBuf<T>>,
    host: Option<PinnedBuf<T>>,
}

impl<T: Copy + Default> Staged<T> {
    fn new() -> Staged<T> {
        Staged {
            dev: None,
            host: None,
        }
    }

    /// Copies `data` to the device (queued on the step stream); the device pointer.
    fn upload(&mut self, gpu: &Gpu, data: &[T]) -> Result<u64> {
        let n = data.len().max(1);
        if self.dev.as_ref().is_none_or(|d| d.len() < n) {
            let cap = n.next_power_of_two();
            self.dev = Some(gpu.alloc(cap)?);
            self.host = Some(PinnedBuf::new(gpu, cap)?);
        }
        let (dev, host) = (self.dev.as_ref().unwrap(), self.host.as_mut().unwrap());
        host.as_mut_slice()[..data.len()].copy_from_slice(data);
        host.copy_to_device(gpu, dev.ptr(), data.len())?;
        Ok(dev.ptr())
    }

    fn bytes(&self) -> usize {
        self.dev.as_ref().map_or(0, |d| d.bytes())
    }
}

/// Room for the adjusted copies and their inputs, grown on first use.
struct AdjustBuffers {
    rows: Option<DevBuf<f32>>,
    plan: Staged<i32>,
    masks: Staged<u32>,
    bias_ids: Staged<i32>,
    bias_vals: Staged<f32>,
    penalties: Staged<i32>,
}

impl AdjustBuffers {
    /// Queues the copies of `pack`'s rows; the device pointer of the first.
    fn queue(&mut self, gpu: &Gpu, logits: u64, pack: &AdjustPack, vocab: usize) -> Result<u64> {
        let need = pack.rows() * vocab;
        if self.rows.as_ref().is_none_or(|r| r.len() < need) {
            self.rows = Some(gpu.alloc(need.next_power_of_two())?);
        }
        let rows = self.rows.as_ref().unwrap().ptr();
        let plan = self.plan.upload(gpu, &pack.plan)?;
        let masks = self.masks.upload(gpu, &pack.masks)?;
        let ids = self.bias_ids.upload(gpu, &pack.bias_ids)?;
        let vals = self.bias_vals.upload(gpu, &pack.bias_vals)?;
        let pens = self.penalties.upload(gpu, &pack.penalties)?;
        gpu.adjust_rows(
            logits,
            rows,
            plan,
            masks,
            ids,
            vals,
            pens,
            pack.rows(),
            vocab,
        )?;
        Ok(rows)
    }

    fn bytes(&self) -> usize {
        self.rows.as_ref().map_or(0, |r| r.bytes())
            + self.plan.bytes()
            + self.masks.bytes()
            + self.bias_ids.bytes()
            + self.bias_vals.bytes()
            + self.penalties.bytes()
    }
}

/// The buffers of device sampling, sized once for the largest step. The host sides come in
/// two slots, so that a step can be queued while the one before still reads its parameters or
/// writes its results.
pub struct SamplingBuffers {
    params: DevBuf<i32>,
    out: DevBuf<i32>,
    params_host: [PinnedBuf<i32>; 2],
    out_host: [PinnedBuf<i32>; 2],
    adjust: AdjustBuffers,
}

impl SamplingBuffers {
    pub fn new(gpu: &Gpu, max_rows: usize) -> Result<SamplingBuffers> {
        Ok(SamplingBuffers {
            params: gpu.alloc(max_rows * PARAM_WORDS)?,
            out: gpu.alloc(max_rows * OUT_WORDS)?,
            params_host: [
                PinnedBuf::new(gpu, max_rows * PARAM_WORDS)?,
                PinnedBuf::new(gpu, max_rows * PARAM_WORDS)?,
            ],
            out_host: [
                PinnedBuf::new(gpu, max_rows * OUT_WORDS)?,
                PinnedBuf::new(gpu, max_rows * OUT_WORDS)?,
            ],
            adjust: AdjustBuffers {
                rows: None,
                plan: Staged::new(),
                masks: Staged::new(),
                bias_ids: Staged::new(),
                bias_vals: Staged::new(),
                penalties: Staged::new(),
            },
        })
    }

    /// Queues the parameter upload, the kernel over `logits` and the result download into
    /// host slot `slot` (0 or 1); the caller synchronises, then reads
    /// [`SamplingBuffers::results`] of that slot.
    pub fn queue(
        &mut self,
        gpu: &Gpu,
        logits: u64,
        rows: &[RowSampling],
        vocab: usize,
        slot: usize,
    ) -> Result<()> {
        self.queue_adjusted(gpu, logits, rows, None, vocab, slot)
    }

    /// Like [`SamplingBuffers::queue`], each row first adjusted by its entry of `adjust`
    /// (one per row) when there are any.
    pub fn queue_adjusted(
        &mut self,
        gpu: &Gpu,
        logits: u64,
        rows: &[RowSampling],
        adjust: Option<&[Option<RowAdjust>]>,
        vocab: usize,
        slot: usize,
    ) -> Result<()> {
        let n = rows.len();
        let (params_host, out_host) = (&mut self.params_host[slot], &mut self.out_host[slot]);
        pack_params(rows, vocab, params_host.as_mut_slice());
        let mut adjusted = logits;
        if let Some(adjust) = adjust {
            anyhow::ensure!(
                adjust.len() == n,
                "{} adjustments for {n} sampled rows",
                adjust.len()
            );
            let pack = AdjustPack::new(adjust, vocab);
            if pack.rows() > 0 {
                adjusted = self.adjust.queue(gpu, logits, &pack, vocab)?;
                let params = params_host.as_mut_slice();
                for (w, &copy) in params.chunks_exact_mut(PARAM_WORDS).zip(&pack.copy_of_row) {
                    w[7] = copy;
                }
            }
        }
        params_host.copy_to_device(gpu, self.params.ptr(), n * PARAM_WORDS)?;
        gpu.sample_rows(
            logits,
            adjusted,
            self.params.ptr(),
            self.out.ptr(),
            n,
            vocab,
        )?;
        out_host.copy_from_device(gpu, self.out.ptr(), n * OUT_WORDS)
    }

    /// The rows sampled into `slot` by the last [`SamplingBuffers::queue`] there, once the
    /// stream has passed it.
    pub fn results(&self, slot: usize, rows: &[RowSampling]) -> Vec<Result<Sampled, SampleError>> {
        unpack(
            &self.out_host[slot].as_slice()[..rows.len() * OUT_WORDS],
            rows,
        )
    }

    /// Where the last queued kernel leaves each row's pick on the device: the first word of
    /// each row's OUT_WORDS.
    pub fn picks(&self) -> u64 {
        self.out.ptr()
    }

    pub fn bytes(&self) -> usize {
        self.params.bytes() + self.out.bytes() + self.adjust.bytes()
    }
}
