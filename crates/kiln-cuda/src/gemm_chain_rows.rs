//! Which decode-only steps take the chain kernel in the prefill's order (a child module of
//! gemm_lt.rs). The chain kernel (chain_gemm.rs) and the pinned GEMM give a row the same bits,
//! so the choice is one of speed: for each shape, the most rows up to which the chain kernel beat
//! the pinned GEMM (with the short algorithm it takes at that m) at every count of
//! [`CHAIN_TIMED_ROWS`], timed once at start-up on generated weights read from memory, as a
//! decode step reads them. On the H200 (2026-12-04 18:26Z), with the short tiers timed at 1 to 32
//! rows, the pinned GEMM won at one row on every Llama-3-8B weight; with the tiers of before,
//! the chain kernel won at one to 16 rows on all but down. KILN_CHAIN_ROWS=N: N for every shape
//! instead.

use anyhow::Result;

use super::tune::{mean_of_runs, TimingWeights};
use super::{GemmOut, LtGemm};
use crate::chain_gemm::CHAIN_MAX_ROWS;
use crate::device::Gpu;

/// The row counts timed: a count between two of them takes the chain kernel only if it won at
/// the larger.
pub const CHAIN_TIMED_ROWS: [usize; 4] = [1, 8, 16, CHAIN_MAX_ROWS];

impl LtGemm {
    /// Whether an m-row decode-only step of shape (n, k) takes the chain kernel: m at most the
    /// shape's limit (0 for a shape not chosen: the pinned GEMM, the same bits).
    pub fn chain_takes(&self, n: usize, k: usize, m: usize) -> bool {
        m <= self.chain_rows.get(&(n, k)).copied().unwrap_or(0)
    }

    /// Chooses shape (n, k)'s limit, pinning its algorithms first. The backend calls it at
    /// start-up in the prefill's order, so that nothing is timed while a graph is captured.
    pub fn pin_chain(&mut self, gpu: &Gpu, n: usize, k: usize) -> Result<()> {
        if self.chain_rows.contains_key(&(n, k)) {
            return Ok(());
        }
        self.pin_shape(gpu, n, k)?;
        let (limit, how) = match self.chain_fixed {
            Some(rows) => (rows, "KILN_CHAIN_ROWS".to_string()),
            None => self.time_chain(gpu, n, k)?,
        };
        self.choices.push(format!(
            "chain n={n} k={k}: decode-only steps of up to {limit} rows take the chain kernel ({how})"
        ));
        self.chain_rows.insert((n, k), limit);
        Ok(())
    }

    /// The limit for shape (n, k), and the times it was chosen by (microseconds, chain kernel
    /// against the pinned GEMM, at each count timed until the pinned GEMM won).
    fn time_chain(&self, gpu: &Gpu, n: usize, k: usize) -> Result<(usize, String)> {
        let rows = CHAIN_MAX_ROWS;
        let x = gpu.alloc_store(rows * k)?;
        gpu.dummy_fill(x.ptr(), rows * k, 0x3c1a)?;
        let w = TimingWeights::new(gpu, n, k, 0x91d7)?;
        let y = gpu.alloc::<f32>(rows * n)?;
        let (y, x, copies) = (y.ptr(), x.ptr(), w.copies);
        let mut limit = 0;
        let mut seen = Vec::new();
        for m in CHAIN_TIMED_ROWS {
            let algo = self.algo_for(n, k, m);
            let algo = algo.as_ref().map(|p| &p.algo);
            // The better of two rounds each, taken in turn (as gemm_tune.rs times candidates).
            let (mut chain, mut pinned) = (f64::INFINITY, f64::INFINITY);
            for _round in 0..2 {
                chain = chain.min(mean_of_runs(gpu, copies, |i| {
                    gpu.chain_gemm(false, y, x, w.at(i), m, n, k)
                })?);
                pinned = pinned.min(mean_of_runs(gpu, copies, |i| {
                    self.run(gpu, algo, GemmOut::Store, y, x, w.at(i), m, n, k)
                })?);
            }
            seen.push(format!("{m}: {:.1} / {:.1} us", chain * 1e6, pinned * 1e6));
            if chain >= pinned {
                break;
            }
            limit = m;
        }
        Ok((limit, format!("chain / pinned at {}", seen.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts rise and the last is the most one launch takes, so that a limit never asks
    /// more of the chain kernel than its widest entry holds.
    #[test]
    fn timed_counts_rise_to_the_widest_launch() {
        assert!(CHAIN_TIMED_ROWS.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(CHAIN_TIMED_ROWS.last(), Some(&CHAIN_MAX_ROWS));
    }
}
