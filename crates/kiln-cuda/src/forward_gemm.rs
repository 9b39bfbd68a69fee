//! A step's GEMMs: decode rows through the skinny kernels, prefill rows through cuBLASLt; of a
//! block-quantised matrix, through its bf16 expansion (quant_prefill.rs), made just before the
//! GEMM or, by default, by the side stream while the layer before ran (KILN_QUANT_AHEAD). With
//! KILN_CHAIN_GEMM every row of a bf16 weight takes the prefill's order (chain_or_lt). Every row
//! of an fp8 projection takes the fp8 GEMM, its input rows quantised first (fp8_gemm), but its
//! decode rows, which on sm_90 GPUs take the fp8 wgmma kernels (wg_rows.rs; KILN_FP8_WG=0 to
//! leave them) and with KILN_FP8_SKINNY elsewhere the fp8 skinny kernels (fp8_skinny.rs). With
//! KILN_BF16_WG (sm_90) a bf16 weight's decode rows take the wgmma row order's bf16 kernels
//! instead of the skinny ones.

use anyhow::{ensure, Result};
use kiln_model::LayerWeight;

use super::CudaOps;
use crate::device::DevPtr;
use crate::fp8_rows::{Fp8Matrix, Fp8Rows};
use crate::gemm_lt::GemmOut;
use crate::quant_gemm::quant_skinny_all;
use crate::quant_prefill::{prefill_rows, Bf16Of};
use crate::store::{StorePtr, StoreType};
use crate::weights::MatrixRef;

impl CudaOps<'_, '_> {
    /// y = x . w^T for `plan.n_tokens` rows: decode rows through the skinny kernel, prefill rows
    /// through cuBLASLt (or every row through cuBLASLt with KILN_SKINNY_GEMM=0, and always when
    /// the storage type is not bf16: the skinny kernel is bf16-only). Block-quantised weights
    /// (bf16 storage only) take their expansion (quant_prefill.rs) just before the GEMM;
    /// [`CudaOps::quant_ahead`] takes them first when they were expanded a layer ahead.
    pub(super) fn gemm(
        &mut self,
        y: DevPtr<f32>,
        x: StorePtr,
        w: MatrixRef,
        n: usize,
        k: usize,
    ) -> Result<()> {
        self.gemm_to(GemmOut::Store, y, x, w, n, k)
    }

    /// As [`CudaOps::gemm`], the rows written over y or, with [`GemmOut::Add`], added to it in
    /// cuBLASLt's epilogue: only in steps whose every row goes through cuBLASLt (the skinny
    /// kernels write their rows).
    pub(super) fn gemm_to(
        &mut self,
        out: GemmOut,
        y: DevPtr<f32>,
        x: StorePtr,
        w: MatrixRef,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let (g, t, d) = (self.ctx.gpu, self.plan.n_tokens, self.skinny_rows_of(&w));
        ensure!(out == GemmOut::Store || d == 0, "an add into skinny rows");
        let w = match w {
            MatrixRef::Plain(w) if self.chain_order() => {
                return self.chain_or_lt(out, y.addr(), x.addr(), w, t, n, k);
            }
            MatrixRef::Plain(w) => w,
            MatrixRef::Quant(q) => {
                let x = DevPtr::<u16>::new(x.addr());
                quant_skinny_all(g, q, y.addr(), x.addr(), d)?;
                let scratch = Bf16Of::Scratch(self.ctx.w.scratch_ptr());
                return prefill_rows(g, self.lt, scratch, q, out, y, x, t, d);
            }
            MatrixRef::Fp8(m) => return self.fp8_gemm(out, y, x, m, n, k),
        };
        if self.ctx.sw.bf16_wg {
            g.bf16_wg(y.addr(), x.addr(), w, d, n, k)?;
        } else {
            g.skinny_gemm(y.addr(), x.addr(), w, d, n, k)?;
        }
        let (y, x) = (y.row(d, n).addr(), x.row(d, k).addr());
        self.lt.matmul_to(g, out, y, x, w, t - d, n, k)
    }

    /// Whether `weight`'s GEMM adds its rows to the residual stream (KILN_GEMM_ADD) instead of
    /// leaving them in `delta` for the next kernel to add: o and down of a layer whose block
    /// output is added as it is (no post-norm between), in a step with no decode rows, whose
    /// rows all go through cuBLASLt with an algorithm that sums each element in one pass.
    pub(super) fn adds_in_gemm(
        &mut self,
        layer: usize,
        weight: LayerWeight,
        n: usize,
        k: usize,
    ) -> Result<bool> {
        let c = self.ctx;
        let w = c.w.layers[layer].matrix(weight);
        // The fp8 GEMM stores its rows (its shapes have no bf16 algorithm pinned to add with).
        let candidate = c.sw.gemm_add
            && !matches!(w, MatrixRef::Fp8(_))
            && matches!(weight, LayerWeight::O | LayerWeight::Down)
            && !c.spec.layers[layer].post_norms
            && self.plan.n_decode == 0
            && self.skinny_rows_of(&w) == 0;
        Ok(candidate && self.lt.adds_exactly(c.gpu, n, k)?)
    }

    /// Rows 0..d of the step that take the skinny kernels for `w`: [`CudaOps::skinny_rows`],
    /// or every row of a quantised weight with KILN_QUANT_PREFILL=skinny, or none of a bf16
    /// weight in the prefill's order; of an fp8 one, its decode rows with KILN_FP8_SKINNY or
    /// KILN_FP8_WG.
    fn skinny_rows_of(&self, w: &MatrixRef) -> usize {
        match w {
            MatrixRef::Quant(_) if self.ctx.sw.quant_prefill_skinny => self.plan.n_tokens,
            MatrixRef::Plain(_) if self.chain_order() => 0,
            MatrixRef::Fp8(_)
                if (self.ctx.sw.fp8_skinny || self.ctx.sw.fp8_wg) && !self.chain_order() =>
            {
                self.plan.n_decode
            }
            MatrixRef::Fp8(_) => 0,
            _ => self.skinny_rows(),
        }
    }

    /// y = x . w^T for every row of the step through the fp8 GEMM: the rows of x quantised
    /// to fp8 rows (kiln_formats::fp8) into the step's fp8 buffer, then multiplied with w's.
    fn fp8_gemm(
        &mut self,
        out: GemmOut,
        y: DevPtr<f32>,
        x: StorePtr,
        w: &Fp8Matrix,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let (g, a, t) = (self.ctx.gpu, self.ctx.a, self.plan.n_tokens);
        g.fp8_quantize_rows(x.addr(), a.fp8_x.ptr(), a.fp8_scale.ptr(), t, k, k)?;
        self.fp8_matmul(out, y, w, n, k)
    }

    /// y = x . w^T for every row of the step from x's rows as the step's fp8 buffer holds them.
    pub(super) fn fp8_matmul(
        &mut self,
        out: GemmOut,
        y: DevPtr<f32>,
        w: &Fp8Matrix,
        n: usize,
        k: usize,
    ) -> Result<()> {
        ensure!(out == GemmOut::Store, "an add in an fp8 GEMM's epilogue");
        ensure!(
            (w.rows, w.cols) == (n, k),
            "an fp8 matrix of {}x{} for a {n}x{k} product",
            w.rows,
            w.cols
        );
        let (g, a, t) = (self.ctx.gpu, self.ctx.a, self.plan.n_tokens);
        let x = Fp8Rows {
            q: a.fp8_x.ptr(),
            scale: a.fp8_scale.ptr(),
        };
        let d = self.skinny_rows_of(&MatrixRef::Fp8(w));
        if t > d {
            // The fp8 GEMM from a row whose scale starts 16-byte aligned (a multiple of 4, as
            // the pinning checks ran it): the decode rows it also computes are written over by
            // the skinny kernel next, in the same queue.
            let d4 = d - d % 4;
            let (y, xq, xs) = (
                y.row(d4, n),
                x.q + (d4 * k) as u64,
                x.scale + (d4 * 4) as u64,
            );
            self.lt.fp8()?.matmul(g, y.addr(), xq, xs, w, t - d4)?;
        }
        // KILN_FP8_WG, which backend_open.rs leaves on only where the GPU builds the kernels.
        if self.ctx.sw.fp8_wg {
            return g.fp8_wg(y.addr(), x, w, d);
        }
        match self.ctx.sw.fp8_wide_from {
            Some(from) if d >= from => g.fp8_wide(y.addr(), x, w, d),
            _ => g.fp8_skinny(y.addr(), x, w, d),
        }
    }

    /// Whether this step's bf16 weights give every row the prefill GEMM's order
    /// ([`crate::switches::Switches::chain_order`]).
    pub(super) fn chain_order(&self) -> bool {
        self.ctx.sw.chain_order(self.ctx.gpu.store)
    }

    /// y = x . w^T in the prefill's order for all `t` rows of the step: a decode-only step of
    /// few enough rows for the shape (gemm_chain_rows.rs) through the chain kernel, any other
    /// through the pinned cuBLASLt GEMM (decode and prompt rows in one pass), the same bits for
    /// a row either way.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn chain_or_lt(
        &mut self,
        out: GemmOut,
        y: u64,
        x: u64,
        w: u64,
        t: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let g = self.ctx.gpu;
        if self.plan.n_decode == t && out == GemmOut::Store && self.lt.chain_takes(n, k, t) {
            return g.chain_gemm(self.ctx.sw.kernels.pdl, y, x, w, t, n, k);
        }
        self.lt.matmul_to(g, out, y, x, w, t, n, k)
    }

    /// Rows 0..d of the step that take the skinny kernels: its decode rows, unless
    /// KILN_SKINNY_GEMM=0 or the storage type is not bf16 (the skinny kernels are bf16-only).
    fn skinny_rows(&self) -> usize {
        if self.ctx.sw.skinny_gemm && self.ctx.gpu.store == StoreType::Bf16 {
            self.plan.n_decode
        } else {
            0
        }
    }

    /// y = x . W^T for layer `layer`'s `weight` when it is quantised, the step has prefill rows
    /// and the expansion runs ahead; Ok(false): nothing launched, the plain path's to do.
    pub(super) fn quant_ahead(
        &mut self,
        layer: usize,
        weight: LayerWeight,
        out: GemmOut,
        y: u64,
        x: u64,
    ) -> Result<bool> {
        let c = self.ctx;
        let (Some(ahead), MatrixRef::Quant(q)) = (&c.w.ahead, c.w.layers[layer].matrix(weight))
        else {
            return Ok(false);
        };
        // As `gemm` splits the rows (no buffers are made for KILN_QUANT_PREFILL=skinny).
        let (t, d) = (self.plan.n_tokens, self.skinny_rows());
        if t <= d {
            return Ok(false);
        }
        let bf16 = ahead.matrix(&c.w.layers, layer, weight)?;
        // The decode rows read the quantised blocks: queued before any wait for the expansion.
        quant_skinny_all(c.gpu, q, y, x, d)?;
        // A graph's steps (prefill chunks of a few tokens) keep to the main stream: the matrix
        // is expanded into its place in the layer buffer just before its GEMM.
        let at = if self.ahead.capturing {
            Bf16Of::Scratch(bf16)
        } else {
            ahead.enter(c.gpu, &c.w.layers, layer, &mut self.ahead)?;
            Bf16Of::Expanded(bf16)
        };
        let (y, x) = (DevPtr::<f32>::new(y), DevPtr::<u16>::new(x));
        prefill_rows(c.gpu, self.lt, at, q, out, y, x, t, d)?;
        Ok(true)
    }
}
