//! The fused decode epilogues through the wgmma row order's bf16 kernels (bf16_wg.cu,
//! KILN_BF16_WG; sm_90): their own plain GEMM is the reference, as the skinny kernel is the
//! other paths'.

use crate::common::poisoned;
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::skinny_fused::Epilogue;
use kiln_cuda::wg_rows::{bf16_wg_entries, SPLIT_MAX_ROWS};

/// Entry `name` (split along the chains or not) through `epi`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    gpu: &Gpu,
    name: &str,
    split: bool,
    epi: &Epilogue,
    x: u64,
    w: u64,
    m: usize,
    n: usize,
    k: usize,
) -> anyhow::Result<()> {
    gpu.reserve_wg_rows(true, SPLIT_MAX_ROWS)?;
    let e = bf16_wg_entries()
        .iter()
        .find(|e| e.name == name)
        .expect("a bf16_wg entry");
    gpu.bf16_wg_in(e, split, epi, x, w, m, n, k)?;
    gpu.synchronize()
}

/// y = x . w^T for m rows in the row order, stored, as the launcher chooses.
pub(super) fn plain(gpu: &Gpu, x: u64, w: u64, m: usize, n: usize, k: usize) -> DevBuf<f32> {
    gpu.reserve_wg_rows(true, SPLIT_MAX_ROWS).unwrap();
    let y = poisoned::<f32>(gpu, m * n);
    gpu.bf16_wg(y.ptr(), x, w, m, n, k).unwrap();
    y
}
