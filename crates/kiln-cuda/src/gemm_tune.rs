//! KILN_GEMM_TUNE (a child module of gemm_lt.rs): a shape's split-K-free candidates timed at the
//! reference m, fastest first, and the choice kept on disk beside the compiled kernels (`gemm/`
//! in the kernel cache), so that later processes on the same GPU and cuBLASLt pin the same
//! algorithm, and give the same bits run after run, without timing again. A shape's file is
//! written once: a process that timed a shape while another wrote it takes the file's choice.
//! With the kernel cache off (KILN_KERNEL_CACHE=off) nothing is timed: the heuristic's first.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use cudarc::cublaslt::sys as lt;

use super::{GemmOut, LtGemm};
use crate::device::Gpu;
use crate::store::StoreBuf;

/// Split-K-free candidates timed per shape (the heuristic offers up to 16).
pub(crate) const CANDIDATES: usize = 8;

/// Bytes of weight copies a timing cycles through: past the L2 (50 MB on the H200), so that each
/// launch reads its weight from memory, as a step reads each layer's own. Timed on one copy, a
/// weight of up to 50 MB stays in the L2 and the few-row algorithms chosen on it were slower
/// from memory (Llama-3-8B's o at 8 rows, H200 2026-12-04 18:15Z: 25.5 us, against 19.7 for
/// the one timed at 128).
const TIMING_BYTES: usize = 160 << 20;

/// Generated copies of an n x k weight for timing (see [`TIMING_BYTES`]).
pub(super) struct TimingWeights {
    buf: StoreBuf,
    pub copies: usize,
    bytes: usize,
}

impl TimingWeights {
    pub(super) fn new(gpu: &Gpu, n: usize, k: usize, seed: u64) -> Result<TimingWeights> {
        let bytes = n * k * gpu.store.bytes();
        let copies = TIMING_BYTES.div_ceil(bytes).clamp(1, 64);
        let buf = gpu.alloc_store(copies * n * k)?;
        gpu.dummy_fill(buf.ptr(), copies * n * k, seed)?;
        Ok(TimingWeights { buf, copies, bytes })
    }

    /// Copy i (modulo the count).
    pub(super) fn at(&self, i: usize) -> u64 {
        self.buf.ptr() + ((i % self.copies) * self.bytes) as u64
    }
}

/// Seconds a launch: one warm-up, then one launch a copy (at least three), the mean.
pub(crate) fn mean_of_runs(
    gpu: &Gpu,
    copies: usize,
    mut run: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    run(copies - 1)?;
    gpu.synchronize()?;
    let runs = copies.max(3);
    let t = Instant::now();
    for i in 0..runs {
        run(i)?;
    }
    gpu.synchronize()?;
    Ok(t.elapsed().as_secs_f64() / runs as f64)
}

impl LtGemm {
    /// Where shape (n, k)'s tuned choice is kept; None without a kernel cache.
    pub(super) fn tune_file(&self, gpu: &Gpu, n: usize, k: usize) -> Option<(PathBuf, String)> {
        let dir = crate::nvrtc_build::cache_dir()?;
        // SAFETY: takes nothing, returns a number.
        let version = unsafe { lt::cublasLtGetVersion() };
        let key = format!(
            "{} {} SMs, cuBLASLt {version}, {} n={n} k={k} m={} on {} SMs",
            gpu.name, gpu.sm_count, self.store, self.reference_m, self.sm_target
        );
        let h = crate::nvrtc_build::fnv1a(&[key.as_bytes()]);
        Some((dir.join("gemm").join(format!("{h:016x}.algo")), key))
    }

    /// Puts the candidates in the order they are checked: the choice kept at `path` first when
    /// there is one, else the first `one_pass` (those without split-K) fastest first. Says which.
    pub(super) fn tuned_order(
        &self,
        gpu: &Gpu,
        path: &Path,
        usable: &mut Vec<lt::cublasLtMatmulHeuristicResult_t>,
        one_pass: usize,
        n: usize,
        k: usize,
    ) -> Result<String> {
        match load(path) {
            // A choice kept by an earlier run: tried first, checked as any candidate.
            Some(kept) if !usable.is_empty() && self.works_for_small_m(&kept, n, k)? => {
                let mut first = usable[0];
                first.algo = kept;
                usable.insert(0, first);
                Ok(", kept from an earlier run's timing".into())
            }
            _ => {
                let cands = &mut usable[..one_pass.min(CANDIDATES)];
                self.fastest_first(gpu, cands, self.reference_m, n, k)
            }
        }
    }

    /// Sorts `cands` by their time at m rows on generated data, fastest first; says what the
    /// first gained over the first given. Each candidate's time is the better of two
    /// rounds (the mean of a run a weight copy, at least three, after a warm-up run), the
    /// rounds taken in turn, so that a GPU still raising its clocks does not count against the
    /// first candidates timed.
    pub(super) fn fastest_first(
        &self,
        gpu: &Gpu,
        cands: &mut [lt::cublasLtMatmulHeuristicResult_t],
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<String> {
        if cands.len() < 2 {
            return Ok(String::new());
        }
        let x = gpu.alloc_store(m * k)?;
        gpu.dummy_fill(x.ptr(), m * k, 0x7e57)?;
        let w = TimingWeights::new(gpu, n, k, 0xbeef)?;
        let y = gpu.alloc::<f32>(m * n)?;
        let mut times = vec![f64::INFINITY; cands.len()];
        for _round in 0..2 {
            for (c, best) in cands.iter().zip(times.iter_mut()) {
                let (y, x) = (y.ptr(), x.ptr());
                let secs = mean_of_runs(gpu, w.copies, |i| {
                    self.run(gpu, Some(&c.algo), GemmOut::Store, y, x, w.at(i), m, n, k)
                })?;
                *best = best.min(secs);
            }
        }
        let mut order: Vec<usize> = (0..cands.len()).collect();
        order.sort_by(|&a, &b| times[a].total_cmp(&times[b]));
        let sorted: Vec<_> = order.iter().map(|&i| cands[i]).collect();
        cands.copy_from_slice(&sorted);
        Ok(format!(
            ", the fastest of {} timed: {:.0} us against the heuristic's first {:.0} us",
            times.len(),
            times[order[0]] * 1e6,
            times[0] * 1e6
        ))
    }

    /// Keeps `ours` as shape (n, k)'s choice unless one is kept already; Some(that one) when
    /// it differs and passes the checks (another run timed the shape first).
    pub(super) fn settle(
        &self,
        gpu: &Gpu,
        path: &Path,
        key: &str,
        ours: &lt::cublasLtMatmulAlgo_t,
        n: usize,
        k: usize,
    ) -> Result<Option<lt::cublasLtMatmulAlgo_t>> {
        if let Err(e) = save(path, key, ours) {
            // Not kept: this run's choice stands (the next run times again).
            tracing::warn!("could not keep the GEMM choice in {}: {e}", path.display());
            return Ok(None);
        }
        Ok(match load(path) {
            Some(kept)
                if kept.data != ours.data
                    && self.works_for_small_m(&kept, n, k)?
                    && self.invariant_on_device(gpu, &kept, n, k)? =>
            {
                Some(kept)
            }
            _ => None,
        })
    }
}

/// The algorithm kept at `path`, if the file holds one.
pub(super) fn load(path: &Path) -> Option<lt::cublasLtMatmulAlgo_t> {
    let text = std::fs::read_to_string(path).ok()?;
    let words = text.lines().last()?.split_whitespace();
    let words: Vec<u64> = words
        .map(|w| u64::from_str_radix(w, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    Some(lt::cublasLtMatmulAlgo_t {
        data: words.try_into().ok()?,
    })
}

/// Keeps `algo` at `path` (its key on the first line, for whoever reads the folder) unless a
/// file is there: written to a temporary name and linked into place, so no reader sees half a
/// file and the first writer wins.
pub(super) fn save(path: &Path, key: &str, algo: &lt::cublasLtMatmulAlgo_t) -> Result<()> {
    let dir = path.parent().expect("a file in the cache folder");
    std::fs::create_dir_all(dir)?;
    let words: Vec<String> = algo.data.iter().map(|w| format!("{w:016x}")).collect();
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{key}\n{}\n", words.join(" ")))?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_choice_reads_back_and_the_first_writer_wins() {
        let dir = std::env::temp_dir().join(format!("kiln-gemm-tune-{}", std::process::id()));
        let path = dir.join("gemm").join("shape.algo");
        let a = lt::cublasLtMatmulAlgo_t {
            data: [1, 2, 3, u64::MAX, 5, 6, 7, 8],
        };
        save(&path, "the key", &a).unwrap();
        assert_eq!(load(&path).unwrap().data, a.data);
        let b = lt::cublasLtMatmulAlgo_t { data: [9; 8] };
        save(&path, "the key", &b).unwrap();
        assert_eq!(load(&path).unwrap().data, a.data);
        std::fs::write(&path, "the key\n1 2 3\n").unwrap();
        assert!(load(&path).is_none(), "three words, not eight");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
