//! The wgmma decode GEMM (skinny_wg.cu, sm_90 GPUs): every entry, whole or split along the
//! chains, gives the 16-warp skinny kernel's bits at every row count, agrees with float64 and
//! writes nothing past its rows.

use super::{all, bits, poisoned, Gemm};
use crate::common::{gpu_or_skip, timed, Checks, Rng};
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

/// Every wgmma entry against the skinny kernel (bits), float64 and its row bounds.
pub(super) fn wg_matches_skinny(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, quick: bool) {
    let cases: &[(usize, usize, usize)] = if quick {
        &[(77, 300, 4104), (130, 250, 8200)]
    } else {
        &[
            (1, 201, 136),
            (5, 96, 8),
            (31, 130, 264),
            (64, 512, 1024),
            (77, 300, 4104),
            (128, 4096, 4096),
            (130, 250, 8200),
            (256, 1000, 264),
            (200, 130, 14336),
        ]
    };
    for &(m, n, k) in cases {
        let g = Gemm::new(gpu, rng, m, n, k);
        let want = bits(&all(gpu, &g.skinny(gpu, g.dx.ptr(), m)));
        let rows: Vec<usize> = if m * n * k <= 1 << 27 {
            (0..m).collect()
        } else {
            vec![0, m / 2, m - 1]
        };
        let reference = g.reference(&rows);
        for e in all_wg_entries() {
            let v = format!("{} m={m} n={n} k={k}", e.name);
            let y = poisoned::<f32>(gpu, (m + 1) * n);
            let epi = Epilogue::Store { y: y.ptr() };
            let secs = timed(gpu, || {
                launch(gpu, &e.name, &epi, g.dx.ptr(), g.dw.ptr(), m, n, k)
            });
            let got = all(gpu, &y);
            c.identical(&format!("{v}: == skinny_wide"), &bits(&got[..m * n]), &want);
            let sel: Vec<f32> = rows
                .iter()
                .flat_map(|&r| got[r * n..(r + 1) * n].to_vec())
                .collect();
            c.close(&v, &sel, &reference, 1e-4 * (k as f64).sqrt(), 1e-5, secs);
            let untouched = got[m * n..].iter().all(|v| v.to_bits() == u32::MAX);
            c.check(
                untouched,
                format!("{v}: the row past the end left poisoned"),
            );
        }
    }
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
