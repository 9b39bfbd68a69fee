//! A draft model on the device beside the target (Gemma 4's assistant, a child module of
//! backend.rs): loaded in the backend's storage type, it keeps no KV cache of its own and reads
//! the target's, below each row's position, and starts from the final-normed rows of the step
//! last finished (`Activations::logit_in`). A draft call uploads its rows once; each of its `k`
//! steps runs the model program's layer loop with the ops of every step
//! (`kiln_model::program::run_draft_step`), its picks staying on the device as the next step's
//! tokens; the picks of every step come back in one copy. All k steps replay as one CUDA graph
//! per batch size where one holds the rows (draft_graphs.rs), else they run launch by launch.

use anyhow::{bail, ensure, Context, Result};
use kiln_model::{ModelSpec, WeightSource};
use kiln_step::{ChunkInput, DraftRow};

use super::CudaBackend;
use crate::device::{DevBuf, Gpu, PinnedBuf};
use crate::draft_graphs::{DraftGraphCounters, DraftGraphKey, DraftGraphs};
use crate::forward::{Activations, DraftIo, StepContext};
use crate::gemm_lt::LtGemm;
use crate::graphs_pad::pad_step;
use crate::kv_cache::KvCache;
use crate::step_plan::{pack_step, StepLayout, StepPlan};
use crate::store::StoreBuf;
use crate::switches::Switches;
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
    /// Before the buffers its executables read.
    graphs: DraftGraphs,
    spec: ModelSpec,
    weights: ModelWeights,
    act: Activations,
    /// The draft pass's step buffer layout: `DRAFT_ROWS` rows at most.
    layout: StepLayout,
    bufs: DraftBufs,
    /// Host staging of a group's step buffer and row inputs, and of its picks.
    step_host: PinnedBuf<i32>,
    meta_host: PinnedBuf<i32>,
    picks_host: PinnedBuf<i32>,
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
    /// f32 `[k][rows][vocab]`: each step's logits, when a call keeps them (parity tests).
    kept_logits: Option<DevBuf<f32>>,
}

impl DraftBufs {
    fn new(gpu: &Gpu, spec: &ModelSpec, rows: usize) -> Result<DraftBufs> {
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
            kept_logits: None,
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
        ensure!(
            self.layout.ring.is_none(),
            "a draft model reads the KV cache whole, and this backend keeps a ring \
             (KILN_KV_RING=0 or CudaOptions::kv_ring = Some(false))"
        );
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
        // A draft step's rows are all one-token decode rows (`upload`), which the skinny
        // kernels take unless KILN_SKINNY_GEMM=0: no room for expansions otherwise.
        let prefill_rows = !Switches::from_env().skinny_gemm;
        let w = load_weights(
            &self.gpu,
            weights,
            &spec,
            l.max_context,
            prefill_rows,
            // A draft model keeps its own format: fp8 is the target's.
            false,
            progress,
        )?;
        ensure!(w.draft.is_some(), "the draft model has no projections");
        // Algorithms chosen now, as the target's are: never while a graph is recorded.
        let d = spec.draft.context("the model is not a draft model")?;
        let (h, b) = (spec.hidden_size, d.backbone_hidden);
        // A draft model keeps its own format (no fp8 projections).
        let mut shapes =
            super::open::gemm_shapes(&spec, self.gpu.store, self.switches.chain_gemm, false);
        shapes.extend([(h, 2 * b), (b, h)]);
        shapes.extend(d.ordered.map(|o| (o.centroids, h)));
        let chain = self.switches.chain_order(self.gpu.store);
        for (n, k) in shapes {
            self.lt.pin_shape(&self.gpu, n, k)?;
            if chain {
                self.lt.pin_chain(&self.gpu, n, k)?;
            }
        }
        let rows = l.max_seqs.min(DRAFT_ROWS);
        let layout = StepLayout::new(
            rows,
            rows,
            l.max_context,
            l.block_size,
            l.num_blocks,
            l.vocab_size,
        );
        self.draft = Some(DraftModel {
            graphs: DraftGraphs::new(&layout, self.switches.draft_graphs),
            act: Activations::new(&self.gpu, &spec, &layout, false)?,
            bufs: DraftBufs::new(&self.gpu, &spec, rows)?,
            step_host: PinnedBuf::new(&self.gpu, layout.len)?,
            meta_host: PinnedBuf::new(&self.gpu, 3 * rows)?,
            picks_host: PinnedBuf::new(&self.gpu, rows)?,
            spec,
            weights: w,
            layout,
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
        let scratch = self.scratch_slot()?;
        let d = self.draft.as_mut().context("no draft model is attached")?;
        d.layout.num_blocks = self.layout.num_blocks;
        d.reserve(&self.gpu, k, keep_logits)?;
        let vocab = d.spec.vocab_size;
        let mut out = Drafted {
            tokens: Vec::with_capacity(rows.len()),
            logits: vec![Vec::new(); if keep_logits { k } else { 0 }],
        };
        let target = Target {
            gpu: &self.gpu,
            weights: &self.weights,
            kv: &self.kv,
            hidden: self.act.logit_in.ptr(),
            sw: self.switches,
        };
        for part in rows.chunks(d.layout.max_seqs) {
            d.run_group(&target, &mut self.lt, part, k, keep_logits, scratch)?;
            let group = d.layout.max_seqs;
            for r in 0..part.len() {
                let picks = d.picks_host.as_slice();
                out.tokens
                    .push((0..k).map(|s| picks[s * group + r] as u32).collect());
            }
            if let Some(kept) = d.bufs.kept_logits.as_ref().filter(|_| keep_logits) {
                for (s, logits) in out.logits.iter_mut().enumerate() {
                    let at = s * group * vocab;
                    logits.extend(kept.download(&self.gpu, at, part.len() * vocab)?);
                }
            }
        }
        Ok(out)
    }

    pub(super) fn has_draft(&self) -> bool {
        self.draft.is_some()
    }

    /// Turns the draft's CUDA graphs on or off (KILN_DRAFT_GRAPHS=0 starts with them off).
    pub fn set_draft_graphs(&mut self, on: bool) {
        if let Some(d) = self.draft.as_mut() {
            d.graphs.set_enabled(on);
        }
    }

    /// How the draft's calls ran so far (None: no draft model).
    pub fn draft_graph_counters(&self) -> Option<DraftGraphCounters> {
        self.draft.as_ref().map(|d| d.graphs.counters)
    }

    /// The draft's graphs read the old pool's addresses: they are recorded again when next used.
    pub(super) fn forget_draft_graphs(&mut self) {
        if let Some(d) = self.draft.as_mut() {
            d.graphs.forget();
        }
    }
}

/// What a draft pass reads of the target's backend.
struct Target<'a> {
    gpu: &'a Gpu,
    weights: &'a ModelWeights,
    kv: &'a KvCache,
    /// The target's final-normed rows of the step last finished (`logit_in`).
    hidden: u64,
    sw: Switches,
}

impl DraftModel {
    /// Room for `k` steps' picks (and logits when kept); growing a buffer moves it, so the
    /// graphs that read it are recorded again.
    fn reserve(&mut self, gpu: &Gpu, k: usize, keep_logits: bool) -> Result<()> {
        let group = self.layout.max_seqs;
        if self.bufs.picks.len() < k * group {
            self.bufs.picks = gpu.alloc(k * group)?;
            self.picks_host = PinnedBuf::new(gpu, k * group)?;
            self.graphs.forget();
        }
        let logits = k * group * self.spec.vocab_size;
        let held = self.bufs.kept_logits.as_ref().map_or(0, |b| b.len());
        if keep_logits && held < logits {
            self.bufs.kept_logits = Some(gpu.alloc(logits)?);
            self.graphs.forget();
        }
        Ok(())
    }

    /// Drafts `k` steps for one group of rows and leaves their picks in `picks_host`: the
    /// rows' inputs uploaded once, then every step as one graph replay, or launch by launch.
    fn run_group(
        &mut self,
        t: &Target<'_>,
        lt: &mut LtGemm,
        rows: &[DraftRow<'_>],
        k: usize,
        keep_logits: bool,
        scratch: i32,
    ) -> Result<()> {
        let shape = self.graphs.shape_for(rows.len());
        let plan = self.upload(t.gpu, rows, shape, scratch)?;
        let mut graphs = std::mem::replace(&mut self.graphs, DraftGraphs::new(&self.layout, false));
        let this = &*self;
        let queue = |lt: &mut LtGemm| -> Result<()> {
            for step in 0..k {
                let ctx = StepContext {
                    gpu: t.gpu,
                    spec: &this.spec,
                    w: &this.weights,
                    kv: t.kv,
                    a: &this.act,
                    layout: &this.layout,
                    sw: t.sw,
                    draft: Some(this.io(t.weights, t.hidden, step, keep_logits)),
                };
                ctx.run(lt, &plan)?;
            }
            Ok(())
        };
        let replayed = shape.is_some_and(|s| {
            let key = DraftGraphKey {
                rows: s.decode_rows,
                steps: k,
                logits: keep_logits,
            };
            let run = graphs.run(t.gpu, key, || queue(lt));
            if let Err(e) = &run {
                tracing::warn!("draft CUDA graph {key:?} failed, drafting eagerly from now: {e:#}");
                graphs.set_enabled(false);
            }
            run.is_ok()
        });
        let eager = match replayed {
            true => Ok(()),
            false => {
                graphs.counters.eager_groups += 1;
                queue(lt)
            }
        };
        self.graphs = graphs;
        eager?;
        let group = self.layout.max_seqs;
        self.picks_host
            .copy_from_device(t.gpu, self.bufs.picks.ptr(), k * group)?;
        t.gpu.synchronize()
    }

    /// Packs and uploads a group's rows (padded to `shape` for a graph): each as a decode row
    /// at the position before its own (attention reads the target's keys up to there), and the
    /// group's RoPE positions and hidden rows.
    fn upload(
        &mut self,
        gpu: &Gpu,
        rows: &[DraftRow<'_>],
        shape: Option<crate::graphs_pad::GraphShape>,
        scratch: i32,
    ) -> Result<StepPlan> {
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
        let buf = self.step_host.as_mut_slice();
        let mut plan = pack_step(&chunks, &self.layout, buf)?;
        if let Some(s) = shape {
            let b = &self.graphs.buckets;
            plan = pad_step(buf, &self.layout, &plan, b, s, scratch)?;
        }
        self.step_host
            .copy_to_device(gpu, self.act.step.ptr(), plan.upload_len)?;
        // Padding rows start from hidden row 0 at position 0: inert, never read back.
        let group = self.layout.max_seqs;
        let meta = self.meta_host.as_mut_slice();
        meta.fill(0);
        for (i, r) in rows.iter().enumerate() {
            meta[i] = r.pos as i32;
            meta[group + i] = r.hidden_row as i32;
        }
        for (i, m) in meta[2 * group..].iter_mut().enumerate() {
            *m = i as i32;
        }
        self.meta_host
            .copy_to_device(gpu, self.bufs.meta.ptr(), 3 * group)?;
        Ok(plan)
    }

    /// Where draft step `step` reads and writes: the first starts from the call's tokens and
    /// the target's rows (`target_hidden`), each later one from the step before.
    fn io<'a>(
        &'a self,
        target: &'a ModelWeights,
        target_hidden: u64,
        step: usize,
        keep_logits: bool,
    ) -> DraftIo<'a> {
        let (b, group) = (&self.bufs, self.layout.max_seqs);
        let first = step == 0;
        let logits = match (&b.kept_logits, keep_logits) {
            (Some(kept), true) => kept.at(step * group * self.spec.vocab_size),
            _ => self.act.logits.ptr(),
        };
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
            logits,
            picks: b.picks.at(step * group),
        }
    }
}
