//! Kernel contract for the tensor-core decode GEMM (skinny_tc.cu) and the fused decode launches
//! (skinny_gemm.cu's `skinny_fused*`, skinny_epilogue.cu), on fresh random inputs with odd sizes
//! and poisoned outputs:
//!
//! - every tensor-core entry gives the 16-warp skinny kernel's bits at every row count (so the
//!   row count may choose the kernel), agrees with a float64 reference, and writes nothing past
//!   its rows; `KILN_SKINNY_TC=auto`'s routes (skinny_tc::MEASURED) on the Llama-3-8B weights
//!   give those bits on both sides of every boundary of the table;
//! - each epilogue (residual add, SwiGLU, RoPE and the KV write) and the norm prologue give the
//!   bits of the unfused launches they replace (skinny GEMM, then rmsnorm_residual, swiglu or
//!   qkv_prepare; rmsnorm_residual, then the GEMM), through the skinny kernel and the
//!   tensor-core kernel;
//! - the wgmma kernel (skinny_wg.cu, sm_90 GPUs) likewise, every entry and row count (wgmma.rs);
//! - the epilogues through the wgmma row order's bf16 kernels (bf16_wg.cu, KILN_BF16_WG; sm_90)
//!   against that order's plain GEMM, then the unfused kernels (rows_order.rs);
//! - `planted_bugs_fail`: kernels with a bug planted in their text fail these checks.

use crate::common;

use common::rope_case::RopeCase;
use common::{all, f32_bits, gpu_or_skip, poisoned, timed, to_bf16, up, Checks, Rng};
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::skinny::SkinnyKind;
use kiln_cuda::skinny_fused::{Epilogue, NormPrologue};
use kiln_cuda::skinny_tc::{find_tc_entry, measured_entry, tc_entries, MEASURED};
use kiln_cuda::skinny_tc_split::{split_part_floats, tc_split_entries};
use kiln_cuda::switches::{KernelChoice, SkinnyTc};

mod planted;
mod rows_order;
mod wgmma;

/// x [m, k] and w [n, k] in bf16, on the host and the device.
struct Gemm {
    n: usize,
    k: usize,
    x: Vec<u16>,
    w: Vec<u16>,
    dx: DevBuf<u16>,
    dw: DevBuf<u16>,
}

impl Gemm {
    fn new(gpu: &Gpu, rng: &mut Rng, m: usize, n: usize, k: usize) -> Gemm {
        let x = to_bf16(&rng.vec(m * k, 1.0));
        let w = to_bf16(&rng.vec(n * k, 1.0));
        let (dx, dw) = (up(gpu, &x), up(gpu, &w));
        Gemm { n, k, x, w, dx, dw }
    }

    /// Rows `rows` of x . w^T in float64.
    fn reference(&self, rows: &[usize]) -> Vec<f64> {
        let f = |b: u16| half::bf16::from_bits(b).to_f64();
        let mut out = Vec::with_capacity(rows.len() * self.n);
        for &r in rows {
            let xr = &self.x[r * self.k..(r + 1) * self.k];
            for j in 0..self.n {
                let wr = &self.w[j * self.k..(j + 1) * self.k];
                out.push(xr.iter().zip(wr).map(|(&a, &b)| f(a) * f(b)).sum());
            }
        }
        out
    }

    /// y = x . w^T for m rows in `p`'s order, stored: the bits its epilogues must agree with.
    fn plain(&self, gpu: &Gpu, p: Path, x: u64, m: usize) -> DevBuf<f32> {
        match p {
            Path::Rows(..) => rows_order::plain(gpu, x, self.dw.ptr(), m, self.n, self.k),
            _ => self.skinny(gpu, x, m),
        }
    }

    /// What `make` builds from the plain GEMM in `p`'s order, made once an order: `wants` holds
    /// the skinny kernel's order's, then the wgmma row order's.
    fn want_for<'w, T>(
        &self,
        gpu: &Gpu,
        p: Path,
        m: usize,
        wants: &'w mut [Option<T>; 2],
        make: impl FnOnce(&DevBuf<f32>) -> T,
    ) -> &'w T {
        wants[matches!(p, Path::Rows(..)) as usize]
            .get_or_insert_with(|| make(&self.plain(gpu, p, self.dx.ptr(), m)))
    }

    /// The 16-warp skinny kernel's y = x . w^T for m rows: the bits every path must give.
    fn skinny(&self, gpu: &Gpu, x: u64, m: usize) -> DevBuf<f32> {
        let y = poisoned::<f32>(gpu, m * self.n);
        gpu.skinny_gemm_launch(
            SkinnyKind::Wide,
            true,
            y.ptr(),
            x,
            self.dw.ptr(),
            m,
            self.n,
            self.k,
        )
        .unwrap();
        y
    }
}

/// Where a fused launch runs: the skinny kernel's fused entries, one tensor-core entry, or one
/// entry split along the chains (then joined); or, in the wgmma row order, one bf16_wg entry,
/// whole or split.
#[derive(Debug, Clone, Copy)]
enum Path {
    Skinny,
    Tc(&'static str),
    Split(&'static str),
    Wg(&'static str),
    Rows(&'static str, bool),
}

impl Path {
    /// Whether this GPU has the path's kernel (the wgmma ones need sm_90).
    fn available(self, gpu: &Gpu) -> bool {
        match self {
            Path::Wg(_) => gpu.has_wgmma(),
            Path::Rows(..) => gpu.has_wg_rows(),
            _ => true,
        }
    }

    fn run(
        self,
        gpu: &Gpu,
        epi: &Epilogue,
        norm: Option<NormPrologue>,
        x: u64,
        g: &Gemm,
        m: usize,
    ) {
        let w = g.dw.ptr();
        match self {
            Path::Skinny => gpu.skinny_fused(epi, norm, true, x, w, m, g.n, g.k),
            Path::Tc(name) => {
                assert!(
                    norm.is_none(),
                    "the tensor-core kernel has no norm prologue"
                );
                let e = find_tc_entry(name).expect("a tensor-core entry");
                gpu.skinny_tc_entry(e, epi, true, x, w, m, g.n, g.k)
            }
            Path::Split(name) => {
                assert!(norm.is_none(), "the split kernel has no norm prologue");
                split_launch(gpu, name, epi, x, w, m, g.n, g.k)
            }
            Path::Wg(name) => {
                assert!(norm.is_none(), "the wgmma kernel has no norm prologue");
                wgmma::launch(gpu, name, epi, x, w, m, g.n, g.k)
            }
            Path::Rows(name, split) => {
                assert!(norm.is_none(), "the wgmma row order has no norm prologue");
                rows_order::launch(gpu, name, split, epi, x, w, m, g.n, g.k)
            }
        }
        .unwrap_or_else(|e| panic!("{self:?}: {e:#}"));
    }
}

/// The skinny kernel, the tilings `KILN_SKINNY_TC=auto` takes (4x1, 2x2), the two-chain 2x4,
/// the one-chain 128 x 128 CTAs (64 x 32 warp tiles, and 16 warps of 32 x 32), the split
/// entries and five wgmma entries (on sm_90 GPUs), two of them split and two in clusters; three
/// entries of the wgmma row order (sm_90), one of them split.
const PATHS: [Path; 16] = [
    Path::Skinny,
    Path::Tc("skinny_tc_4x1"),
    Path::Tc("skinny_tc_2x2"),
    Path::Tc("skinny_tc_2x4"),
    Path::Tc("skinny_tc_t2x4"),
    Path::Tc("skinny_tc_w4x4"),
    Path::Split("skinny_tcs_t2x4"),
    Path::Split("skinny_tcs_2x2"),
    Path::Wg("skinny_wg_1x64"),
    Path::Wg("skinny_wg_2x128"),
    Path::Wg("skinny_wgs_1x64"),
    Path::Wg("skinny_wg_2x64_c4"),
    Path::Wg("skinny_wgs_1x64_c2"),
    Path::Rows("bf16_wg_1x1_n8", false),
    Path::Rows("bf16_wg_1x1_n64", true),
    Path::Rows("bf16_wg_2x2_n64", false),
];

/// Split entry `name` through `epi`, its chain partials in a buffer of their own (poisoned, so
/// a partial never written shows).
#[allow(clippy::too_many_arguments)]
fn split_launch(
    gpu: &Gpu,
    name: &str,
    epi: &Epilogue,
    x: u64,
    w: u64,
    m: usize,
    n: usize,
    k: usize,
) -> anyhow::Result<()> {
    let e = tc_split_entries()
        .iter()
        .find(|e| e.name == name)
        .expect("a split entry");
    let part = poisoned::<f32>(gpu, split_part_floats(m, epi.tiles(n)?));
    gpu.skinny_tc_split(e, epi, true, x, w, part.ptr(), m, n, k)?;
    gpu.synchronize()
}

/// Each of `paths` against the skinny kernel (bits), float64 and its row bounds, on odd shapes
/// up to 256 rows and k = 14336 (`quick`: two of them); `also` adds checks of its own per case.
fn paths_match_skinny(
    gpu: &Gpu,
    rng: &mut Rng,
    c: &mut Checks,
    quick: bool,
    paths: &[Path],
    also: impl Fn(&Gemm, &[u32], usize, &mut Checks),
) {
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
        let want = f32_bits(&all(gpu, &g.skinny(gpu, g.dx.ptr(), m)));
        let rows: Vec<usize> = if m * n * k <= 1 << 27 {
            (0..m).collect()
        } else {
            vec![0, m / 2, m - 1]
        };
        let reference = g.reference(&rows);
        for &p in paths {
            let v = format!("{p:?} m={m} n={n} k={k}");
            let y = poisoned::<f32>(gpu, (m + 1) * n);
            let epi = Epilogue::Store { y: y.ptr() };
            let secs = timed(gpu, || {
                p.run(gpu, &epi, None, g.dx.ptr(), &g, m);
                Ok(())
            });
            let got = all(gpu, &y);
            c.identical(
                &format!("{v}: == skinny_wide"),
                &f32_bits(&got[..m * n]),
                &want,
            );
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
        also(&g, &want, m, c);
    }
}

/// Every tensor-core entry, whole and split along the chains, against the skinny kernel; and
/// three rows alone, at an offset, through the shape chosen for them.
fn tc_matches_skinny(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, quick: bool) {
    let paths: Vec<Path> = tc_entries()
        .iter()
        .map(|e| Path::Tc(e.name.as_str()))
        .chain(
            tc_split_entries()
                .iter()
                .map(|e| Path::Split(e.name.as_str())),
        )
        .collect();
    paths_match_skinny(gpu, rng, c, quick, &paths, |g, want, m, c| {
        let (n, k) = (g.n, g.k);
        if m >= 3 {
            let r0 = m / 2 - 1;
            let y = poisoned::<f32>(gpu, 3 * n);
            let epi = Epilogue::Store { y: y.ptr() };
            gpu.skinny_tc(&epi, true, g.dx.at(r0 * k), g.dw.ptr(), 3, n, k)
                .unwrap();
            let got = f32_bits(&all(gpu, &y));
            c.identical(
                &format!("m={m} n={n} k={k}: rows {r0}.. alone"),
                &got,
                &want[r0 * n..(r0 + 3) * n],
            );
        }
    });
}

/// `KILN_SKINNY_TC=auto` through `skinny_gemm_with` on each weight of its table, at the row
/// counts on both sides of every boundary and past the last measured (256): the 16-warp skinny
/// kernel's bits whichever kernel and tiling the table picks, nothing written past the rows.
fn auto_matches_skinny(gpu: &Gpu, c: &mut Checks) {
    let auto = KernelChoice {
        skinny_tc: SkinnyTc::Measured,
        ..KernelChoice::ALL_FAST
    };
    let max_rows = 300;
    let k_max = MEASURED.iter().map(|s| s.k).max().unwrap();
    let x = gpu.alloc::<u16>(max_rows * k_max).unwrap();
    gpu.dummy_fill(x.ptr(), max_rows * k_max, 7).unwrap();
    for s in &MEASURED {
        let (n, k) = (s.n, s.k);
        let w = gpu.alloc::<u16>(n * k).unwrap();
        gpu.dummy_fill(w.ptr(), n * k, 11).unwrap();
        let mut rows: Vec<usize> = s.from.iter().flat_map(|&(r, _)| [r - 1, r]).collect();
        rows.extend([256, max_rows]);
        rows.retain(|&r| r > 0);
        for m in rows {
            let want = poisoned::<f32>(gpu, m * n);
            gpu.skinny_gemm_launch(
                SkinnyKind::Wide,
                true,
                want.ptr(),
                x.ptr(),
                w.ptr(),
                m,
                n,
                k,
            )
            .unwrap();
            let got = poisoned::<f32>(gpu, (m + 1) * n);
            gpu.skinny_gemm_with(&auto, got.ptr(), x.ptr(), w.ptr(), m, n, k)
                .unwrap();
            let route = measured_entry(n, k, m).map_or("skinny", |e| e.name.as_str());
            let v = format!("auto {} {n}x{k} m={m} ({route})", s.what);
            let got = all(gpu, &got);
            c.identical(
                &format!("{v}: == skinny_wide"),
                &f32_bits(&got[..m * n]),
                &f32_bits(&all(gpu, &want)),
            );
            let untouched = got[m * n..].iter().all(|v| v.to_bits() == u32::MAX);
            c.check(
                untouched,
                format!("{v}: the row past the end left poisoned"),
            );
        }
    }
}

/// The residual add: x + GEMM, as rmsnorm_residual adds a pending block output.
fn add_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, paths: &[Path], row_counts: &[usize]) {
    let (n, k) = (1000, 520);
    for &m in row_counts {
        let g = Gemm::new(gpu, rng, m, n, k);
        let x0 = rng.vec(m * n, 4.0);
        let mut wants = [None, None];
        for &p in paths {
            let want = g.want_for(gpu, p, m, &mut wants, |delta| {
                let xr = up(gpu, &x0);
                let (nw, normed) = (
                    up(gpu, &to_bf16(&vec![1.0; n])),
                    gpu.alloc::<u16>(m * n).unwrap(),
                );
                gpu.rmsnorm_residual(xr.ptr(), delta.ptr(), nw.ptr(), normed.ptr(), m, n, 1e-5)
                    .unwrap();
                f32_bits(&all(gpu, &xr))
            });
            let xf = up(gpu, &x0);
            p.run(gpu, &Epilogue::Add { y: xf.ptr() }, None, g.dx.ptr(), &g, m);
            c.identical(&format!("add {p:?} m={m}"), &f32_bits(&all(gpu, &xf)), want);
        }
    }
}

/// SwiGLU: silu(gate) * up of the GEMM, as swiglu computes it (with the norm prologue too).
fn glu_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, paths: &[Path], row_counts: &[usize]) {
    let (inter, k) = (300, 264);
    for &m in row_counts {
        let g = Gemm::new(gpu, rng, m, 2 * inter, k);
        let mut wants = [None, None];
        for &p in paths {
            let want = g.want_for(gpu, p, m, &mut wants, |gu| {
                let act = poisoned::<u16>(gpu, m * inter);
                gpu.swiglu(gu.ptr(), act.ptr(), inter, m).unwrap();
                all(gpu, &act)
            });
            let out = poisoned::<u16>(gpu, m * inter);
            p.run(
                gpu,
                &Epilogue::Glu {
                    act: out.ptr(),
                    inter,
                },
                None,
                g.dx.ptr(),
                &g,
                m,
            );
            c.identical(&format!("glu {p:?} m={m}"), &all(gpu, &out), want);
        }
    }
}

/// Bias, RoPE and the KV write as qkv_prepare does them, for GQA heads of 64 and 128, both
/// pairings, with and without a bias.
fn rope_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, paths: &[Path], row_counts: &[usize]) {
    let (n_q, n_kv, k) = (8, 2, 256);
    for &m in row_counts {
        for (hd, neox, bias) in [(64, true, false), (128, false, true), (128, true, true)] {
            let g = Gemm::new(gpu, rng, m, (n_q + 2 * n_kv) * hd, k);
            let case = RopeCase::new(gpu, rng, m, (n_q, n_kv, hd), neox, bias);
            let mut wants = [None, None];
            for &p in paths {
                let want = g.want_for(gpu, p, m, &mut wants, |qkv| case.reference(gpu, qkv.ptr()));
                let got = case.outputs(gpu);
                p.run(gpu, &case.epilogue(&got), None, g.dx.ptr(), &g, m);
                let v = format!("rope {p:?} m={m} hd={hd} neox={neox} bias={bias}");
                case.compare(gpu, c, &v, &got, want);
            }
        }
    }
}

/// The norm prologue: the GEMM of rmsnorm(x) * w built in the GEMM, against rmsnorm_residual
/// then the GEMM, for norm blocks of 512, 256 and 128 threads, storing or with SwiGLU.
fn norm_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, row_counts: &[usize]) {
    for &kh in &[4096, 2048, 1000] {
        for &m in row_counts.iter().filter(|&&m| m <= 8) {
            let x = rng.vec(m * kh, 3.0);
            let nw: Vec<f32> = (0..kh).map(|_| rng.uniform(0.5, 1.5)).collect();
            let nw = up(gpu, &to_bf16(&nw));
            let normed = poisoned::<u16>(gpu, m * kh);
            let xr = up(gpu, &x);
            gpu.rmsnorm_residual(xr.ptr(), 0, nw.ptr(), normed.ptr(), m, kh, 1e-5)
                .unwrap();
            let pro = Some(NormPrologue {
                x: xr.ptr(),
                w: nw.ptr(),
                eps: 1e-5,
            });
            for glu in [false, true] {
                let n = if glu { 2 * 104 } else { 200 };
                let g = Gemm::new(gpu, rng, m, n, kh);
                let y = g.skinny(gpu, normed.ptr(), m);
                let v = format!("norm k={kh} m={m} glu={glu}");
                if glu {
                    let want = poisoned::<u16>(gpu, m * 104);
                    gpu.swiglu(y.ptr(), want.ptr(), 104, m).unwrap();
                    let got = poisoned::<u16>(gpu, m * 104);
                    Path::Skinny.run(
                        gpu,
                        &Epilogue::Glu {
                            act: got.ptr(),
                            inter: 104,
                        },
                        pro,
                        g.dx.ptr(),
                        &g,
                        m,
                    );
                    c.identical(&v, &all(gpu, &got), &all(gpu, &want));
                } else {
                    let got = poisoned::<f32>(gpu, m * n);
                    // x is never read: the GEMM builds its input from the residual stream.
                    Path::Skinny.run(
                        gpu,
                        &Epilogue::Store { y: got.ptr() },
                        pro,
                        g.dx.ptr(),
                        &g,
                        m,
                    );
                    c.identical(&v, &f32_bits(&all(gpu, &got)), &f32_bits(&all(gpu, &y)));
                }
            }
        }
    }
}

fn fused_matches(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, quick: bool) {
    let rows: &[usize] = if quick {
        &[3, 13]
    } else {
        &[1, 3, 8, 13, 64, 100]
    };
    let paths: Vec<Path> = PATHS.into_iter().filter(|p| p.available(gpu)).collect();
    add_matches(gpu, rng, c, &paths, rows);
    glu_matches(gpu, rng, c, &paths, rows);
    rope_matches(gpu, rng, c, &paths, rows);
    norm_matches(gpu, rng, c, rows);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn tc_gemm_contract() {
    let Some(gpu) = gpu_or_skip("tc_gemm_contract") else {
        return;
    };
    let mut rng = Rng::new("tc_gemm_contract");
    let mut c = Checks::new("tc_gemm");
    tc_matches_skinny(&gpu, &mut rng, &mut c, false);
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn tc_auto_contract() {
    let Some(gpu) = gpu_or_skip("tc_auto_contract") else {
        return;
    };
    let mut c = Checks::new("tc_auto");
    auto_matches_skinny(&gpu, &mut c);
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn fused_decode_contract() {
    let Some(gpu) = gpu_or_skip("fused_decode_contract") else {
        return;
    };
    let mut rng = Rng::new("fused_decode_contract");
    let mut c = Checks::new("fused_decode");
    fused_matches(&gpu, &mut rng, &mut c, false);
    c.finish();
}
