//! `cuda_bench PRESET mixed-gemm`: what a step of prompt and decode rows pays for an fp8
//! projection on Llama-3-8B's weights when its decode rows take the wgmma row order (the
//! default on sm_90) and its prompt rows cuBLASLt's fp8 GEMM: P prompt rows and D decode rows
//! through cuBLASLt together (`lt_all`, the step with KILN_FP8_WG=0), the prompt rows alone
//! (`lt_prompt`), the decode rows alone (`wg_decode`), and both in the step's way on one copy of
//! the weight: cuBLASLt then wgmma (`lt_wg`, as forward_gemm.rs runs them) and wgmma first
//! (`wg_lt`). Each launch pair reads one of several copies of its weight, together well past
//! the L2. Microseconds a pair (median of 5 rounds of 20): BENCH lines on stderr, one JSON
//! object on stdout (sm_90 only).

use anyhow::{ensure, Result};
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::fp8_rows::{Fp8Matrix, Fp8Rows};
use kiln_cuda::gemm_lt::LtGemm;
use kiln_cuda::wg_rows::SPLIT_MAX_ROWS;

use crate::fp8_gemm_bench::{fp8_rows, PROJECTIONS};
use crate::gemm_bench::time;

/// Decode rows (32 and 128 streams) and prompt rows (a short, a 400-word and a long prompt's
/// share of a step).
const DECODE: [usize; 2] = [32, 128];
const PROMPT: [usize; 3] = [128, 384, 1024];

pub fn run() -> Result<()> {
    let gpu = Gpu::new(0)?;
    ensure!(
        gpu.has_wg_rows(),
        "mixed-gemm: the wgmma row order is sm_90 only"
    );
    gpu.reserve_wg_rows(true, SPLIT_MAX_ROWS)?;
    let max_rows = PROMPT[PROMPT.len() - 1] + DECODE[DECODE.len() - 1];
    let mut lt = LtGemm::new(&gpu, 2048)?;
    let shapes: Vec<(usize, usize)> = PROJECTIONS.iter().map(|&(_, n, k)| (n, k)).collect();
    lt.enable_fp8_for(&gpu, &shapes)?;
    let mut json = Vec::new();
    for &(name, n, k) in PROJECTIONS {
        let x = fp8_rows(&gpu, max_rows, k, 7)?;
        let copies: Vec<Fp8Matrix> = (0..(800usize << 20).div_ceil(n * k).max(2))
            .map(|i| fp8_rows(&gpu, n, k, 100 + i as u64))
            .collect::<Result<_>>()?;
        let y: DevBuf<f32> = gpu.alloc(max_rows * n)?;
        // Decode rows first, as a step lays them out; the prompt rows after them.
        let dec = Fp8Rows {
            q: x.q.ptr(),
            scale: x.scale.ptr(),
        };
        let mut turn = 0usize;
        for d in DECODE {
            for p in PROMPT {
                let (pq, ps, yp) = (x.q.at(d * k), x.scale.at(d), y.at(d * n));
                let mut line = format!("BENCH mixed-gemm {name} {n}x{k} decode {d} prompt {p}:");
                let mut cases: Vec<(&str, f64)> = Vec::new();
                let mut next = || {
                    turn += 1;
                    turn % copies.len()
                };
                let s = time(&gpu, || {
                    lt.fp8()?
                        .matmul(&gpu, y.ptr(), dec.q, dec.scale, &copies[next()], d + p)
                })?;
                cases.push(("lt_all", s));
                let s = time(&gpu, || {
                    lt.fp8()?.matmul(&gpu, yp, pq, ps, &copies[next()], p)
                })?;
                cases.push(("lt_prompt", s));
                let s = time(&gpu, || gpu.fp8_wg(y.ptr(), dec, &copies[next()], d))?;
                cases.push(("wg_decode", s));
                let s = time(&gpu, || {
                    let w = &copies[next()];
                    lt.fp8()?.matmul(&gpu, yp, pq, ps, w, p)?;
                    gpu.fp8_wg(y.ptr(), dec, w, d)
                })?;
                cases.push(("lt_wg", s));
                let s = time(&gpu, || {
                    let w = &copies[next()];
                    gpu.fp8_wg(y.ptr(), dec, w, d)?;
                    lt.fp8()?.matmul(&gpu, yp, pq, ps, w, p)
                })?;
                cases.push(("wg_lt", s));
                for (label, s) in cases {
                    line += &format!(" {label} {:.1} us;", s * 1e6);
                    json.push(format!("\"{name}_d{d}_p{p}_{label}_us\":{:.2}", s * 1e6));
                }
                eprintln!("{}", line.trim_end_matches(';'));
            }
        }
    }
    println!("{{{}}}", json.join(","));
    Ok(())
}
