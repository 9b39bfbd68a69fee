//! A draft model on the device beside the target (Gemma 4's assistant, a child module of
//! backend.rs): loaded in the backend's storage type, it keeps no KV cache of its own and reads
//! the target's, below each row's position, and starts from the final-normed rows of the step
//! last finished (`Activations::logit_in`). A draft call uploads its rows once; each of its `k`
//! steps runs the model program's layer loop with the ops of every step
//! (`kiln_model::program::run_draft_step`), its picks staying on the device as the next step's
//! tokens; the picks of every step come back in one copy.

use anyhow::{bail, ensure, Context, Result};
use kiln_model::{ModelSpec, WeightSource};
use kiln_step::{ChunkInput, DraftRow};

use super::CudaBackend;
use crate::device::DevBuf;
use crate::forward::{Activations, DraftIo, StepContext};
use crate::step_plan::{pack_step, StepLayout, StepPlan};
use crate::store::StoreBuf;
use crate::weights::{load_weights, ModelWeights};

/// Most rows one draft pass runs: a call with more runs them in groups (each row's drafts
/// depend on its own inputs only), so the draft's logits buffer stays small.
const DRAFT_ROWS: usize = 64;

/// A draft call's answer with the logits behind it (for parity tests).
pub struct Drafted {
    /// Per row, its `k` draft tokens.
    pub tokens: Vec<Vec<u32>>,
    /// `[k][rows * vocab]`: each draft step's logits rows (empty unless asked for).
    pub logits: Vec<Vec<f32>>,
}

pub(super) struct DraftModel {
    spec: ModelSpec,
    weights: ModelWeights,
    act: Activations,
    /// The draft pass's step buffer layout: `DRAFT_ROWS` rows at most.
    layout: StepLayout,
    bufs: DraftBufs,
    step_host: Vec<i32>,
}

/// The draft pass's own buffers beside its activations ([`DraftIo`] says what each holds).
struct DraftBufs {
    /// i32 `[3][rows]`: each row's RoPE position, its hidden row in the target's step, and its
    /// own index (the rows of the hidden state the draft steps hand on).
    meta: DevBuf<i32>,
    embedded: DevBuf<f32>,
    input: StoreBuf,
    post: DevBuf<f32>,
    next_hidden: StoreBuf,
    scores: DevBuf<f32>,
    /// i32 `[k][rows]`: each draft step's picks (grown to the longest draft asked for).
    picks: DevBuf<i32>,
}

impl DraftBufs {
    fn new(gpu: &crate::device::Gpu, spec: &ModelSpec, rows: usize) -> Result<DraftBufs> {
        let d = spec.draft.context("the model is not a draft model")?;
        let b = d.backbone_hidden;
        let centroids = d.ordered.map_or(0, |o| o.centroids);
        Ok(DraftBufs {
            meta: gpu.alloc(3 * rows)?,
            embedded: gpu.alloc(rows * b)?,
            input: gpu.alloc_store(rows * 2 * b)?,
            post: gpu.alloc(rows * b)?,
            next_hidden: gpu.alloc_store(rows * b)?,
            scores: gpu.alloc(rows * centroids.max(1))?,
            picks: gpu.alloc(rows)?,
        })
    }
}

impl CudaBackend {
    /// Loads a draft model that reads this backend's KV cache and hidden states (Gemma 4's
    /// assistant) onto the device, in the backend's storage type; an error says why it does
    /// not fit this model.
    pub fn attach_draft_model(
        &mut self,
        weights: &dyn WeightSource,
        progress: Option<&dyn Fn(usize, usize)>,
    ) -> Result<()> {
        self.gpu.bind()?;
        let config = weights.config().clone();
        config.validate("draft model config")?;
        let spec = config
            .draft_spec(&self.config)
            .context("the draft model does not fit the model")?;
        if let Some(why) = crate::model_support::refusal(&spec, config.arch) {
            bail!(why);
        }
        let l = self.layout;
        let w = load_weights(&self.gpu, weights, &spec, l.max_context, progress)?;
        ensure!(w.draft.is_some(), "the draft model has no projections");
        let rows = l.max_seqs.min(DRAFT_ROWS);
        let layout = StepLayout::new(
            rows,
            rows,
            l.max_context,
            l.block_size,
            l.num_blocks,
            l.vocab_size,
        );
        let act = Activations::new(&self.gpu, &spec, &layout)?;
        let bufs = DraftBufs::new(&self.gpu, &spec, rows)?;
        self.draft = Some(DraftModel {
            spec,
            weights: w,
            act,
            step_host: vec![0; layout.len],
            layout,
            bufs,
        });
        Ok(())
    }

    /// [`kiln_step::Backend::draft`], with each draft step's logits when `keep_logits`.
    pub fn draft_with_logits(
        &mut self,
        rows: &[DraftRow<'_>],
        k: usize,
        keep_logits: bool,
    ) -> Result<Drafted> {
        self.gpu.bind()?;
        ensure!(
            self.pipe.is_empty(),
            "drafts read the hidden states of the step last finished: collect every step first"
        );
        self.layout.limits().check_draft(rows, self.hidden_rows)?;
        let d = self.draft.as_mut().context("no draft model is attached")?;
        let group = d.layout.max_seqs;
        if d.bufs.picks.len() < k * group {
            d.bufs.picks = self.gpu.alloc(k * group)?;
        }
        d.layout.num_blocks = self.layout.num_blocks;
        let mut out = Drafted {
            tokens: Vec::with_capacity(rows.len()),
            logits: vec![Vec::new(); if keep_logits { k } else { 0 }],
        };
        for part in rows.chunks(group) {
            let plan = d.upload(part)?;
            let vocab = d.spec.vocab_size;
            for step in 0..k {
                let ctx = StepContext {
                    gpu: &self.gpu,
                    spec: &d.spec,
                    w: &d.weights,
                    kv: &self.kv,
                    a: &d.act,
                    layout: &d.layout,
                    sw: self.switches,
                    draft: Some(d.io(&self.weights, self.act.logit_in.ptr(), step)),
                };
                ctx.run(&mut self.lt, &plan)?;
                if keep_logits {
                    let logits = d.act.logits.download(&self.gpu, 0, part.len() * vocab)?;
                    out.logits[step].extend(logits);
                }
            }
            let picks = match k {
                0 => Vec::new(),
                _ => d.bufs.picks.download(&self.gpu, 0, k * group)?,
            };
            for r in 0..part.len() {
                out.tokens
                    .push((0..k).map(|s| picks[s * group + r] as u32).collect());
            }
        }
        Ok(out)
    }

    pub(super) fn has_draft(&self) -> bool {
        self.draft.is_some()
    }
}

impl DraftModel {
    /// Packs and uploads a group's rows: each as a decode row at the position before its own
    /// (attention reads the target's keys up to there), and the group's RoPE positions and
    /// hidden rows.
    fn upload(&mut self, rows: &[DraftRow<'_>]) -> Result<StepPlan> {
        let tokens: Vec<[u32; 1]> = rows.iter().map(|r| [r.token]).collect();
        let chunks: Vec<ChunkInput<'_>> = rows
            .iter()
            .zip(&tokens)
            .map(|(r, t)| ChunkInput {
                tokens: t,
                start_pos: r.pos - 1,
                block_table: r.block_table,
                want_logits: true,
            })
            .collect();
        let plan = pack_step(&chunks, &self.layout, &mut self.step_host)?;
        self.act
            .step
            .upload(0, &self.step_host[..plan.upload_len])?;
        let group = self.layout.max_seqs;
        let mut meta = vec![0i32; 3 * group];
        for (i, r) in rows.iter().enumerate() {
            meta[i] = r.pos as i32;
            meta[group + i] = r.hidden_row as i32;
            meta[2 * group + i] = i as i32;
        }
        self.bufs.meta.upload(0, &meta)?;
        Ok(plan)
    }

    /// Where draft step `step` reads and writes: the first starts from the call's tokens and
    /// the target's rows (`target_hidden`), each later one from the step before.
    fn io<'a>(&'a self, target: &'a ModelWeights, target_hidden: u64, step: usize) -> DraftIo<'a> {
        let (b, group) = (&self.bufs, self.layout.max_seqs);
        let first = step == 0;
        DraftIo {
            target,
            tokens: match first {
                true => self.act.step.at(self.layout.tokens),
                false => b.picks.at((step - 1) * group),
            },
            rope_positions: b.meta.at(0),
            hidden: if first {
                target_hidden
            } else {
                b.next_hidden.ptr()
            },
            hidden_rows: b.meta.at(if first { group } else { 2 * group }),
            embedded: b.embedded.ptr(),
            input: b.input.ptr(),
            post: b.post.ptr(),
            next_hidden: b.next_hidden.ptr(),
            scores: b.scores.ptr(),
            picks: b.picks.at(step * group),
        }
    }
}
