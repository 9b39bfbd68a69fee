//! The wgmma decode GEMM (skinny_wg.cu, sm_90 GPUs): every entry, whole or split along the
//! chains, gives the 16-warp skinny kernel's bits at every row count, agrees with float64 and
//! writes nothing past its rows.

use super::{paths_match_skinny, Path};
use crate::common::poisoned;
use crate::common::{gpu_or_skip, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::skinny_fused::Epilogue;
use kiln_cuda::skinny_tc_split::split_part_floats;
use kiln_cuda::skinny_wg::{all_wg_entries, find_wg_entry, wg_x_elems};

/// Entry `name` through `epi`, its rewritten x (and a split entry's chain partials) in poisoned
/// buffers of their own.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    gpu: &Gpu,
    name: &str,
    epi: &Epilogue,
    x: u64,
    w: u64,
    m: usize,
    n: usize,
    k: usize,
) -> anyhow::Result<()> {
    let e = find_wg_entry(name).expect("a wgmma entry");
    let xw = poisoned::<u16>(gpu, wg_x_elems(m, k));
    let part = poisoned::<f32>(gpu, split_part_floats(m, epi.tiles(n)?));
    let part = e.split.then(|| part.ptr());
    gpu.skinny_wg_entry(e, epi, true, x, w, xw.ptr(), part, m, n, k)?;
    gpu.synchronize()
}

/// Every wgmma entry, whole and split along the chains, against the skinny kernel (bits),
/// float64 and its row bounds.
pub(super) fn wg_matches_skinny(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, quick: bool) {
    let paths: Vec<Path> = all_wg_entries()
        .iter()
        .map(|e| Path::Wg(e.name.as_str()))
        .collect();
    paths_match_skinny(gpu, rng, c, quick, &paths, |_, _, _, _| {});
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn wg_gemm_contract() {
    let Some(gpu) = gpu_or_skip("wg_gemm_contract") else {
        return;
    };
    if !gpu.has_wgmma() {
        eprintln!("wg_gemm_contract: skipped (not an sm_90 GPU)");
        return;
    }
    let mut rng = Rng::new("wg_gemm_contract");
    let mut c = Checks::new("wg_gemm");
    wg_matches_skinny(&gpu, &mut rng, &mut c, false);
    c.finish();
}
