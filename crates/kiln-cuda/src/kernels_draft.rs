//! Typed launchers for kernels/draft.cu: the input rows of a draft model's pre-projection and
//! its ordered LM head (Gemma 4's assistant). Pointers are device addresses; argument lists
//! match the .cu signatures.

use anyhow::{ensure, Result};

use crate::device::{i32_of, Arg, Gpu};

/// Centroids one `keep_best_centroids` block flags, one byte each, in shared memory under the
/// 48 KB a launch gets without asking.
pub const MAX_CENTROIDS: usize = 32 * 1024;

impl Gpu {
    /// out[r] = [store(e[r]), h[rows[r]]] for `n` rows: `e` f32 `[n, b]`, `h` in the storage
    /// type, `rows` i32 row indices into it.
    pub fn draft_concat(
        &self,
        out: u64,
        e: u64,
        h: u64,
        rows: u64,
        n: usize,
        b: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(out),
            Arg::Ptr(e),
            Arg::Ptr(h),
            Arg::Ptr(rows),
            Arg::I32(i32_of(b, "draft width")?),
        ];
        self.launch("draft_concat", (n as u32, 1, 1), 256, 0, &args)
    }

    /// Masks `rows` logits rows `[rows, vocab]` in place to the tokens of each row's `top_k`
    /// best centroids (scores `[rows, centroids]`, `owner[t]` the centroid of token t); every
    /// other token gets the lowest kept logit minus one.
    #[allow(clippy::too_many_arguments)]
    pub fn keep_best_centroids(
        &self,
        logits: u64,
        scores: u64,
        owner: u64,
        rows: usize,
        vocab: usize,
        centroids: usize,
        top_k: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        ensure!(
            (1..=MAX_CENTROIDS).contains(&centroids) && (1..=centroids).contains(&top_k),
            "an ordered LM head of {centroids} centroids keeping {top_k}"
        );
        let args = [
            Arg::Ptr(logits),
            Arg::Ptr(scores),
            Arg::Ptr(owner),
            Arg::I32(i32_of(vocab, "vocab")?),
            Arg::I32(i32_of(centroids, "centroids")?),
            Arg::I32(i32_of(top_k, "top_k")?),
        ];
        let smem = centroids as u32;
        self.launch(
            "keep_best_centroids",
            (rows as u32, 1, 1),
            1024,
            smem,
            &args,
        )
    }
}
