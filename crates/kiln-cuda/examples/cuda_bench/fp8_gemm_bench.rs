//! `cuda_bench PRESET fp8-gemm`: an fp8 projection's decode GEMM alone on Llama-3-8B's weights
//! (QKV, o, gate/up, down) at 1-256 rows: cuBLASLt's fp8 GEMM (`lt`), the fp8 skinny kernels
//! (launches of at most 64 rows), the wide fp8 kernels in the launcher's entry (`wide[...]`),
//! and the fp8 wgmma kernels in the launcher's entry (`wg[...]`, split where it would split)
//! and in every entry, whole and split (`*_whole`, `*_split`; sm_90). Each launch reads one of
//! several copies of its weight, together well past the L2. Microseconds a launch (median of 5
//! rounds of 20) and the weight's bytes over that time: BENCH lines on stderr, one JSON object
//! on stdout.

use anyhow::Result;
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::fp8_rows::{Fp8Matrix, Fp8Rows};
use kiln_cuda::fp8_skinny::wide_entry;
use kiln_cuda::gemm_lt::LtGemm;
use kiln_cuda::store::{StoreBuf, StoreType};
use kiln_cuda::wg_rows::{splittable, wg_entries, wg_launch, SPLIT_MAX_ROWS};

use crate::gemm_bench::{time, MAX_ROWS, SHAPES};

/// The projections of gemm_bench's shapes (the LM head stays bf16 with fp8 projections).
pub(crate) const PROJECTIONS: &[(&str, usize, usize)] = SHAPES.split_at(4).0;
const ROWS: [usize; 8] = [1, 8, 16, 32, 64, 128, 192, 256];

/// `rows x cols` fp8 rows quantised from dummy bf16 values of seed `seed`.
pub(crate) fn fp8_rows(gpu: &Gpu, rows: usize, cols: usize, seed: u64) -> Result<Fp8Matrix> {
    let stored = StoreBuf::new(gpu, StoreType::Bf16, rows * cols)?;
    gpu.dummy_fill(stored.ptr(), rows * cols, seed)?;
    Fp8Matrix::from_store(gpu, &stored, rows, cols)
}

pub fn run() -> Result<()> {
    let gpu = Gpu::new(0)?;
    let sms = gpu.sm_count as usize;
    let mut json = Vec::new();
    let wg = gpu.has_wg_rows();
    if wg {
        gpu.reserve_wg_rows(true, SPLIT_MAX_ROWS)?;
    }
    let mut lt = LtGemm::new(&gpu, 2048)?;
    let shapes: Vec<(usize, usize)> = PROJECTIONS.iter().map(|&(_, n, k)| (n, k)).collect();
    lt.enable_fp8_for(&gpu, &shapes)?;
    for &(name, n, k) in PROJECTIONS {
        let x = fp8_rows(&gpu, MAX_ROWS, k, 7)?;
        let xr = Fp8Rows {
            q: x.q.ptr(),
            scale: x.scale.ptr(),
        };
        let copies: Vec<Fp8Matrix> = (0..(800usize << 20).div_ceil(n * k).max(2))
            .map(|i| fp8_rows(&gpu, n, k, 100 + i as u64))
            .collect::<Result<_>>()?;
        let y: DevBuf<f32> = gpu.alloc(MAX_ROWS * n)?;
        let bytes = (n * k) as f64;
        let mut turn = 0usize;
        let mut next_w = || {
            turn += 1;
            &copies[turn % copies.len()]
        };
        for m in ROWS {
            let mut line = format!("BENCH fp8-gemm {name} {n}x{k} rows {m}:");
            let mut report = |label: &str, secs: f64, line: &mut String| {
                *line += &format!(
                    " {label} {:.1} us ({:.2} TB/s);",
                    secs * 1e6,
                    bytes / secs / 1e12
                );
                json.push(format!("\"{name}_m{m}_{label}_us\":{:.2}", secs * 1e6));
            };
            let s = time(&gpu, || {
                lt.fp8()?.matmul(&gpu, y.ptr(), xr.q, xr.scale, next_w(), m)
            })?;
            report("lt", s, &mut line);
            let s = time(&gpu, || gpu.fp8_skinny(y.ptr(), xr, next_w(), m))?;
            report("skinny", s, &mut line);
            if m >= 16 && kiln_cuda::fp8_skinny::wide_matches_skinny(gpu.arch) {
                let e = wide_entry(n, m, sms);
                let s = time(&gpu, || gpu.fp8_wide_in(e, y.ptr(), xr, next_w(), m))?;
                report(
                    &format!("wide[{}]", &e.name["skinny_fp8_wide_".len()..]),
                    s,
                    &mut line,
                );
            }
            if wg {
                let l = wg_launch(n, k, m, sms);
                let (e, split) = (l.entry, l.split);
                let s = time(&gpu, || gpu.fp8_wg(y.ptr(), xr, next_w(), m))?;
                let how = if split { "split" } else { "whole" };
                let label = format!("wg[{}_{how}]", &e.name["fp8_wg_".len()..]);
                report(&label, s, &mut line);
                for e in wg_entries() {
                    for split in [false, true] {
                        if split && !splittable(n, m) {
                            continue;
                        }
                        let s = time(&gpu, || gpu.fp8_wg_in(e, split, y.ptr(), xr, next_w(), m))?;
                        let how = if split { "split" } else { "whole" };
                        report(&format!("{}_{how}", e.name), s, &mut line);
                    }
                }
            }
            eprintln!("{}", line.trim_end_matches(';'));
        }
    }
    println!("{{{}}}", json.join(","));
    Ok(())
}
