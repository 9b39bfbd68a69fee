//! Short steps' algorithms (a child module of gemm_lt.rs). A shape's pinned algorithm is chosen
//! for the prefill chunk's m; at a few hundred rows its large tiles leave multiprocessors idle
//! (Llama-3-8B's o and down at 473 rows, a serving step of decode and prompt rows: 64 CTAs on
//! 132). So steps of at most a tier's rows may take another algorithm: the fastest at the
//! tier's m of the split-K-free candidates offered for any tier's m whose rows are, on the
//! device, bit for bit the pinned algorithm's (every row of a product at that m, and rows at an
//! offset of a 37-row one). Where none is faster, or none agrees, the next tier's (or the
//! pinned one) serves. The choice never changes a bit, so it is timed at each start and not
//! kept. KILN_GEMM_SHORT=0: the pinned algorithm for every m.

use anyhow::Result;
use cudarc::cublaslt::sys as lt;

use std::collections::HashMap;

use super::{algo_config, GemmOut, LtGemm, Pinned};
use crate::device::Gpu;
use crate::lt_calls;

/// The tiers: the most rows a step may have to take the tier's algorithm, and the m it is timed
/// at (decode steps of one and of a few sequences in the prefill's order, where the pinned GEMM
/// and the chain kernel are timed against each other; decode steps of many; serving steps of
/// decode and prompt rows).
pub const TIERS: [(usize, usize); 5] = [(4, 1), (16, 8), (64, 32), (256, 128), (1024, 512)];

/// TIERS with the widest tier timed where KILN_GEMM_TIER_M says (the rows each tier holds stay).
pub(crate) fn timed_tiers() -> [(usize, usize); 5] {
    let mut tiers = TIERS;
    if let Some(m) = crate::switches::Switches::from_env().gemm_tier_m {
        tiers[TIERS.len() - 1].1 = m;
    }
    tiers
}

/// Each (n, k, tier)'s choice: Some(algorithm) where one faster than the pinned one gives its
/// bits, None where the pinned one serves.
pub(crate) type TierChoices<T> = HashMap<(usize, usize, usize), Option<T>>;

/// The choice of the first tier that holds m and has one (None: the pinned algorithm serves).
pub(crate) fn tier_choice<T: Copy>(
    short: &TierChoices<T>,
    n: usize,
    k: usize,
    m: usize,
) -> Option<T> {
    TIERS
        .iter()
        .enumerate()
        .filter(|(_, &(most, _))| m <= most)
        .find_map(|(tier, _)| short.get(&(n, k, tier)).copied().flatten())
}

/// The candidates tier `tier` times, from those `offered` at each tier's m (in TIERS' order):
/// the heuristic's first ones at the tier's m, then those it offers at the other tiers' m,
/// CANDIDATES new ones from each. One it ranks for many rows can be the fastest at few
/// (Llama-3-8B's o on the H200, 2026-12-04 18:20Z: 13.8 us at 64 rows with the 32-row tier's
/// algorithm, 28 at one row with the best of those offered for one).
pub(crate) fn tier_candidates<T: Copy>(
    tier: usize,
    offered: &[Vec<T>],
    algo: impl Fn(&T) -> &lt::cublasLtMatmulAlgo_t,
) -> Vec<T> {
    let mut cands: Vec<T> = Vec::new();
    let order = std::iter::once(tier).chain((0..TIERS.len()).filter(|&t| t != tier));
    for t in order {
        let mut taken = 0;
        for r in &offered[t] {
            if taken == super::tune::CANDIDATES {
                break;
            }
            if !cands.iter().any(|c| algo(c).data == algo(r).data) {
                cands.push(*r);
                taken += 1;
            }
        }
    }
    cands
}

impl LtGemm {
    /// The algorithm for an m-row product of shape (n, k): the first tier's that holds m and
    /// has one, else the pinned one (None when nothing is pinned).
    pub(super) fn algo_for(&self, n: usize, k: usize, m: usize) -> Option<Pinned> {
        tier_choice(&self.short, n, k, m).or_else(|| self.pinned.get(&(n, k)).copied())
    }

    /// Chooses shape (n, k)'s tier algorithms once its pinned one is known (pin_shape calls it,
    /// so that nothing is chosen, and allocated, while a graph is being captured).
    pub(super) fn pin_short(&mut self, gpu: &Gpu, n: usize, k: usize) -> Result<()> {
        let todo: Vec<usize> = (0..TIERS.len())
            .filter(|&tier| !self.short.contains_key(&(n, k, tier)))
            .collect();
        if !self.short_on || todo.is_empty() {
            return Ok(());
        }
        let Some(main) = self.pinned.get(&(n, k)).copied().filter(|p| p.split_k == 1) else {
            for tier in todo {
                self.short.insert((n, k, tier), None);
            }
            return Ok(());
        };
        // What the heuristic offers at each tier's m, read once for every tier (each read and
        // each candidate's small-m check is a call into cuBLASLt).
        let mut offered = Vec::with_capacity(TIERS.len());
        for &(_, m) in &timed_tiers() {
            offered.push(self.one_pass_offered(n, k, m, &main)?);
        }
        for tier in todo {
            self.pin_tier(gpu, n, k, tier, &main, &offered)?;
        }
        Ok(())
    }

    /// The heuristic's candidates at m that sum each element in one pass, work for every m and
    /// are not `main`, in its order.
    fn one_pass_offered(
        &self,
        n: usize,
        k: usize,
        m: usize,
        main: &Pinned,
    ) -> Result<Vec<lt::cublasLtMatmulHeuristicResult_t>> {
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        let mut out = Vec::new();
        for r in self.heuristic(n, k, m)? {
            let one_pass = algo_config(&r.algo, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1;
            if r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && one_pass
                && r.algo.data != main.algo.data
                && self.works_for_small_m(&r.algo, n, k)?
            {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Tier `tier`'s choice among the candidates `offered` at each tier's m (in TIERS' order).
    fn pin_tier(
        &mut self,
        gpu: &Gpu,
        n: usize,
        k: usize,
        tier: usize,
        main: &Pinned,
        offered: &[Vec<lt::cublasLtMatmulHeuristicResult_t>],
    ) -> Result<()> {
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        let (most, m) = timed_tiers()[tier];
        let mut cands = tier_candidates(tier, offered, |r| &r.algo);
        let Some(&first) = cands.first() else {
            self.short.insert((n, k, tier), None);
            return Ok(());
        };
        // The pinned algorithm is timed beside them and wins ties (it stays first).
        let mut pinned = first;
        pinned.algo = main.algo;
        cands.insert(0, pinned);
        self.fastest_first(gpu, &mut cands, m, n, k)?;
        let mut chosen = None;
        for c in &cands {
            if c.algo.data == main.algo.data {
                break;
            }
            if self.same_bits(gpu, &c.algo, &main.algo, m, n, k)? {
                chosen = Some(c.algo);
                break;
            }
        }
        let line = match &chosen {
            Some(a) => format!(
                "gemm {} n={n} k={k}: up to m={most} algo {} tile {} stages {}, faster at m={m} than the pinned one and bit-identical to it",
                self.store,
                algo_config(a, C::CUBLASLT_ALGO_CONFIG_ID),
                algo_config(a, C::CUBLASLT_ALGO_CONFIG_TILE_ID),
                algo_config(a, C::CUBLASLT_ALGO_CONFIG_STAGES_ID),
            ),
            None => format!(
                "gemm {} n={n} k={k}: up to m={most} the pinned algorithm (none faster at m={m} and bit-identical)",
                self.store
            ),
        };
        self.choices.push(line);
        let short = chosen.map(|algo| Pinned {
            algo,
            split_k: 1,
            invariant: true,
        });
        self.short.insert((n, k, tier), short);
        Ok(())
    }

    /// Whether algorithms `a` and `b` give the same bits on generated data: all rows of an
    /// m-row product, and 37 rows at an offset of 5.
    fn same_bits(
        &self,
        gpu: &Gpu,
        a: &lt::cublasLtMatmulAlgo_t,
        b: &lt::cublasLtMatmulAlgo_t,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<bool> {
        let m = m.max(42);
        let x = gpu.alloc_store(m * k)?;
        let w = gpu.alloc_store(n * k)?;
        gpu.dummy_fill(x.ptr(), m * k, 0x5407)?;
        gpu.dummy_fill(w.ptr(), n * k, 0xc4a1)?;
        let (ya, yb) = (gpu.alloc::<f32>(m * n)?, gpu.alloc::<f32>(m * n)?);
        for (off, rows) in [(0, m), (5, 37)] {
            let xr = x.at(off * k);
            self.run(
                gpu,
                Some(a),
                GemmOut::Store,
                ya.ptr(),
                xr,
                w.ptr(),
                rows,
                n,
                k,
            )?;
            self.run(
                gpu,
                Some(b),
                GemmOut::Store,
                yb.ptr(),
                xr,
                w.ptr(),
                rows,
                n,
                k,
            )?;
            if !lt_calls::same_bits(gpu, (&ya, 0), (&yb, 0), rows * n)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::TIERS;

    /// `algo_for` takes the first tier that holds m: the tiers must widen in order, each timed at
    /// an m it holds.
    #[test]
    fn tiers_widen_and_each_is_timed_inside_itself() {
        for w in TIERS.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].1 < w[1].1, "{TIERS:?}");
        }
        for (most, at) in TIERS {
            assert!(at <= most, "{TIERS:?}");
        }
    }
}
