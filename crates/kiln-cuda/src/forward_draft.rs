//! A draft model's step on the device (Gemma 4's assistant; a child module of forward.rs): the
//! pre-projection of `[the target's scaled embedding, the hidden state]`, and after the layers
//! and the LM head (its ordered head masked to the best centroids' tokens) the post-projection
//! that the next draft step starts from. The layers are the model program's, with the ops every
//! step uses; their attention reads the target's KV cache (`AttnSpec::kv_from`).

use anyhow::{bail, Context, Result};

use super::{CudaOps, StepContext};
use crate::device::DevPtr;
use crate::kernels::KvView;
use crate::store::{StorePtr, StoreType};
use crate::weights::{MatrixRef, ModelWeights};

/// What one draft step reads beside its step buffer and where it writes: device addresses,
/// fixed for a draft call (and for a captured graph).
#[derive(Clone, Copy)]
pub struct DraftIo<'a> {
    /// The target's weights, for the embedding of each row's token.
    pub target: &'a ModelWeights,
    /// i32 `[rows]`: each row's token (the call's at the first step, then the picks before).
    pub tokens: u64,
    /// i32 `[rows]`: each row's own position, which RoPE turns it by; the step buffer holds the
    /// position of the target's row it attends as (one before).
    pub rope_positions: u64,
    /// The hidden state each row starts from, in the storage type, `[_, backbone]`: row
    /// `hidden_rows[r]` for row r (i32 indices).
    pub hidden: u64,
    pub hidden_rows: u64,
    /// f32 `[rows, backbone]`: the scaled embedding rows; in the storage type
    /// `[rows, 2 * backbone]`: the pre-projection's input.
    pub embedded: u64,
    pub input: u64,
    /// f32 `[rows, backbone]`: the post-projection's output; in the storage type, the hidden
    /// state the next step starts from (its `hidden`, rows in order).
    pub post: u64,
    pub next_hidden: u64,
    /// f32 `[rows, centroids]`: the ordered LM head's centroid scores.
    pub scores: u64,
    /// f32 `[rows, vocab]`: where the step's logits go.
    pub logits: u64,
    /// i32 `[rows]`: each row's argmax pick.
    pub picks: u64,
}

impl StepContext<'_> {
    /// Each row's RoPE position: the step's positions, or a draft row's own (its step's
    /// positions are those of the target's row it attends as).
    pub(super) fn rope_positions(&self) -> u64 {
        match self.draft {
            Some(d) => d.rope_positions,
            None => self.step_ptr(self.layout.positions),
        }
    }

    /// The KV cache layer `layer` reads: its own, or the one its `kv_from` names (a draft
    /// model's layers name its target's).
    pub(super) fn kv_view(&self, layer: usize) -> KvView {
        self.kv.view(self.spec.layers[layer].attn.kv_layer(layer))
    }
}

impl CudaOps<'_, '_> {
    /// `x = pre([target_embedding(token) * input_embed_scale, hidden])`.
    pub(super) fn draft_in(&mut self) -> Result<()> {
        let c = self.ctx;
        let io = c.draft.context("a draft step without its target")?;
        let d = c.spec.draft.context("the model is not a draft model")?;
        let w = c.w.draft.as_ref().context("no draft projections")?;
        let (g, n, b, h) = (
            c.gpu,
            self.plan.n_tokens,
            d.backbone_hidden,
            c.spec.hidden_size,
        );
        let scale = d.input_embed_scale;
        match io.target.embedding()? {
            MatrixRef::Plain(e) => g.embed_gather(io.embedded, e, io.tokens, n, b, scale)?,
            MatrixRef::Quant(q) => match q.segments.as_slice() {
                [s] => g.quant_embed(
                    s.format,
                    io.embedded,
                    s.data.ptr(),
                    io.tokens,
                    n,
                    q.cols,
                    scale,
                )?,
                _ => bail!("a quantised embedding in more than one format"),
            },
            MatrixRef::Fp8(_) => bail!("an fp8 embedding (only layer projections are fp8)"),
        }
        g.draft_concat(io.input, io.embedded, io.hidden, io.hidden_rows, n, b)?;
        let input = StorePtr::new(io.input, g.store);
        self.gemm(
            c.a.x.dev_ptr(),
            input,
            MatrixRef::Plain(w.pre.ptr()),
            h,
            2 * b,
        )
    }

    /// `hidden = post(normed)`: the final-normed rows the LM head read, projected back to the
    /// target's width and stored for the next step.
    pub(super) fn draft_out(&mut self) -> Result<()> {
        let c = self.ctx;
        let io = c.draft.context("a draft step without its target")?;
        let d = c.spec.draft.context("the model is not a draft model")?;
        let w = c.w.draft.as_ref().context("no draft projections")?;
        let (n, b, h) = (self.plan.n_logits, d.backbone_hidden, c.spec.hidden_size);
        let post = DevPtr::<f32>::new(io.post);
        self.gemm(
            post,
            c.a.logit_in.dev_ptr(),
            MatrixRef::Plain(w.post.ptr()),
            b,
            h,
        )?;
        c.gpu.f32_to_store(io.next_hidden, io.post, n * b)
    }

    /// An ordered LM head keeps each row's best centroids' tokens (after the logits GEMM).
    pub(super) fn keep_best_centroids(&mut self) -> Result<()> {
        let c = self.ctx;
        let (Some(o), Some(io)) = (c.spec.draft.and_then(|d| d.ordered), c.draft) else {
            return Ok(());
        };
        let (centroids, owner) =
            c.w.draft
                .as_ref()
                .and_then(|w| w.ordered.as_ref())
                .context("the ordered LM head's centroids are not loaded")?;
        let (g, r, h, vocab) = (
            c.gpu,
            self.plan.n_logits,
            c.spec.hidden_size,
            c.spec.vocab_size,
        );
        let x = c.a.logit_in.ptr();
        match g.store {
            StoreType::Bf16 => g.skinny_gemm(io.scores, x, centroids.ptr(), r, o.centroids, h)?,
            _ => self
                .lt
                .matmul(g, io.scores, x, centroids.ptr(), r, o.centroids, h)?,
        }
        g.keep_best_centroids(
            io.logits,
            io.scores,
            owner.ptr(),
            r,
            vocab,
            o.centroids,
            o.top_k,
        )
    }
}
