//! Short steps' fp8 algorithms (a child module of gemm_fp8.rs), as gemm_short.rs chooses them for
//! bf16: an fp8 shape's pinned algorithm is chosen at the prefill chunk's m, and at one decode
//! row its large tiles put a weight's columns on a few multiprocessors. So steps of at most a
//! tier's rows (gemm_short.rs's TIERS) may take another algorithm: the fastest at the tier's m of
//! the split-K-free candidates offered at any tier's m whose rows are, on the device, bit for bit
//! the pinned algorithm's. Where none is faster or none agrees, the pinned one serves. The choice
//! never changes a bit. KILN_GEMM_SHORT=0: the pinned algorithm for every m.

use anyhow::Result;
use cudarc::cublaslt::sys as lt;

use super::Fp8Gemm;
use crate::device::Gpu;
use crate::fp8_rows::Fp8Matrix;
use crate::gemm_lt::algo_config;
use crate::gemm_lt::short::{tier_candidates, tier_choice, timed_tiers, TIERS};
use crate::gemm_lt::tune::mean_of_runs;
use crate::lt_calls;

/// Bytes of weight copies a timing cycles through, so that no run finds its weight in the L2.
const TIMING_BYTES: usize = 256 << 20;

type Algo = lt::cublasLtMatmulAlgo_t;

impl Fp8Gemm {
    /// The algorithm for an m-row product of shape (n, k): the first tier's that holds m and
    /// has one, else the pinned one.
    pub(super) fn algo_for(&self, n: usize, k: usize, m: usize) -> Option<Algo> {
        tier_choice(&self.short, n, k, m).or_else(|| self.pinned.get(&(n, k)).map(|p| p.algo))
    }

    /// Chooses shape (n, k)'s tier algorithms once its pinned one is known (at start-up, never
    /// while a graph is captured).
    pub(super) fn pin_short(&mut self, gpu: &Gpu, n: usize, k: usize) -> Result<()> {
        let Some(main) = self
            .pinned
            .get(&(n, k))
            .filter(|p| p.one_pass)
            .map(|p| p.algo)
        else {
            return Ok(());
        };
        if !self.short_on {
            return Ok(());
        }
        let mut offered = Vec::with_capacity(TIERS.len());
        for &(_, m) in &timed_tiers() {
            offered.push(self.one_pass_offered(n, k, m, &main)?);
        }
        let (x, w) = self.timing_rows(gpu, n, k)?;
        for (tier, &(most, m)) in timed_tiers().iter().enumerate() {
            // The pinned algorithm first: it is timed beside the candidates and wins ties.
            let mut cands: Vec<Algo> = vec![main];
            cands.extend(tier_candidates(tier, &offered, |a| a));
            let y = gpu.alloc::<f32>(m * n)?;
            let mut timed = Vec::with_capacity(cands.len());
            for (c, a) in cands.iter().enumerate() {
                let run = mean_of_runs(gpu, w.len(), |i| {
                    self.run(
                        gpu,
                        Some(a),
                        y.ptr(),
                        x.q.ptr(),
                        x.scale.ptr(),
                        &w[i % w.len()],
                        m,
                    )
                });
                // The pinned algorithm must run; a candidate that does not is left out.
                timed.push(match run {
                    Ok(secs) => secs,
                    Err(e) if c == 0 => return Err(e),
                    Err(_) => f64::INFINITY,
                });
            }
            let main_secs = timed[0];
            let mut order: Vec<usize> =
                (1..cands.len()).filter(|&i| timed[i] < main_secs).collect();
            order.sort_by(|&a, &b| timed[a].total_cmp(&timed[b]));
            let mut chosen = None;
            for i in order {
                if self.same_bits(gpu, &cands[i], &main, &x, &w[0], m)? {
                    chosen = Some(i);
                    break;
                }
            }
            use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
            self.choices.push(match chosen {
                Some(i) => format!(
                    "gemm fp8 n={n} k={k}: up to m={most} tile {} stages {}, {:.1} us at m={m} against the pinned one's {:.1}, bit-identical to it",
                    algo_config(&cands[i], C::CUBLASLT_ALGO_CONFIG_TILE_ID),
                    algo_config(&cands[i], C::CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    timed[i] * 1e6,
                    main_secs * 1e6
                ),
                None => format!(
                    "gemm fp8 n={n} k={k}: up to m={most} the pinned algorithm ({:.1} us at m={m}; none faster and bit-identical)",
                    main_secs * 1e6
                ),
            });
            self.short.insert((n, k, tier), chosen.map(|i| cands[i]));
        }
        Ok(())
    }

    /// The heuristic's candidates at m that sum each element in one pass, work for every m and
    /// are not `main`, in its order.
    fn one_pass_offered(&self, n: usize, k: usize, m: usize, main: &Algo) -> Result<Vec<Algo>> {
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        let mut out = Vec::new();
        for r in self.heuristic(n, k, m)? {
            if r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && algo_config(&r.algo, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1
                && r.algo.data != main.data
                && self.works_for_small_m(&r.algo, n, k)?
            {
                out.push(r.algo);
            }
        }
        Ok(out)
    }

    /// Input rows for the largest tier and weight copies past the L2, generated and quantised.
    fn timing_rows(&self, gpu: &Gpu, n: usize, k: usize) -> Result<(Fp8Matrix, Vec<Fp8Matrix>)> {
        let m = timed_tiers()
            .iter()
            .map(|&(_, m)| m)
            .max()
            .unwrap_or(1)
            .max(42);
        let xs = gpu.alloc_store(m * k)?;
        gpu.dummy_fill(xs.ptr(), m * k, 0x7e57)?;
        let ws = gpu.alloc_store(n * k)?;
        gpu.dummy_fill(ws.ptr(), n * k, 0xbeef)?;
        let copies = TIMING_BYTES.div_ceil(n * k).clamp(1, 16);
        let w = (0..copies)
            .map(|_| Fp8Matrix::from_store(gpu, &ws, n, k))
            .collect::<Result<Vec<_>>>()?;
        Ok((Fp8Matrix::from_store(gpu, &xs, m, k)?, w))
    }

    /// Whether algorithms `a` and `b` give the same bits: all rows of an m-row product, and 37
    /// rows at an offset of 4 (scales 16-byte aligned).
    fn same_bits(
        &self,
        gpu: &Gpu,
        a: &Algo,
        b: &Algo,
        x: &Fp8Matrix,
        w: &Fp8Matrix,
        m: usize,
    ) -> Result<bool> {
        let (n, k) = (w.rows, w.cols);
        let m = m.max(42);
        let (ya, yb) = (gpu.alloc::<f32>(m * n)?, gpu.alloc::<f32>(m * n)?);
        for (off, rows) in [(0, m), (4, 37)] {
            let (xq, xs) = (x.q.at(off * k), x.scale.at(off));
            // A candidate that fails to run here is one that fails the check; so is one whose
            // pinned algorithm does not run at this offset (an alignment it asks for): the
            // tier then keeps the pinned one.
            if self.run(gpu, Some(a), ya.ptr(), xq, xs, w, rows).is_err()
                || self.run(gpu, Some(b), yb.ptr(), xq, xs, w, rows).is_err()
            {
                return Ok(false);
            }
            if !lt_calls::same_bits(gpu, (&ya, 0), (&yb, 0), rows * n)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
