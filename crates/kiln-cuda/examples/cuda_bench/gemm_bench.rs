//! `cuda_bench PRESET gemm`: the decode GEMM alone on Llama-3-8B's weights (QKV, o, gate/up,
//! down, LM head) at 1-256 rows: the 16-warp skinny kernel (launches of at most 64 rows, as
//! decode runs it today), the tensor-core kernel with the shape the L2 rule picks and with
//! each shape, each chain-split entry (`tcs_*`, partials then the join; QKV, o and down), each
//! wgmma entry (`wg_*`, sm_90: x rewritten, then the GEMM), the
//! kernel and shape `KILN_SKINNY_TC=auto` picks (`auto[...]`), the wgmma row order's bf16
//! entries (`rows[...]` as its launcher chooses, then each `bf16_wg_*` whole and split;
//! wg_rows.rs, sm_90), and the fused
//! gate/up launch (SwiGLU in the epilogue) against the GEMM and swiglu, the prefill-order
//! kernel (`chain`, and each `chain_gemm_*` entry up to 32 rows) and the pinned cuBLASLt GEMM
//! (`lt`) whose bits it gives. Each launch reads one of several copies of its weight, together well past the L2, as
//! a decode step reads every layer's own weights. Microseconds per launch (median of 5 rounds
//! of 20 launches) and the weight's bytes over that time; human lines on stderr (`BENCH ...`),
//! one JSON object on stdout.

use std::time::Instant;

use anyhow::Result;
use kiln_cuda::chain_gemm;
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::gemm_lt::LtGemm;
use kiln_cuda::skinny::SkinnyKind;
use kiln_cuda::skinny_fused::Epilogue;
use kiln_cuda::skinny_tc::{choose_tc_entry, measured_entry, tc_entries};
use kiln_cuda::skinny_tc_split::{split_part_floats, tc_split_entries, SPLIT_MAX_ROWS};
use kiln_cuda::skinny_wg::{all_wg_entries, wg_x_elems};
use kiln_cuda::wg_rows::{
    bf16_wg_entries, bf16_wg_launch, splittable, SPLIT_MAX_ROWS as ROWS_SPLIT_MAX,
};

/// Llama-3-8B's decode weights (name, rows, columns): the four projections, then the LM head.
pub(crate) const SHAPES: [(&str, usize, usize); 5] = [
    ("qkv", 6144, 4096),
    ("o", 4096, 4096),
    ("gate_up", 28672, 4096),
    ("down", 4096, 14336),
    ("lm_head", 128256, 4096),
];
const ROWS: [usize; 7] = [1, 8, 32, 64, 128, 192, 256];
pub(crate) const MAX_ROWS: usize = 256;

/// Median seconds per call of `f` over 5 rounds of 20 calls (after one untimed call).
pub(crate) fn time(gpu: &Gpu, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    gpu.synchronize()?;
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..20 {
            f()?;
        }
        gpu.synchronize()?;
        rounds.push(t.elapsed().as_secs_f64() / 20.0);
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[2])
}

pub fn run() -> Result<()> {
    let gpu = Gpu::new(0)?;
    let mut json = Vec::new();
    let k_max = SHAPES.iter().map(|s| s.2).max().unwrap_or(0);
    let x = gpu.alloc::<u16>(MAX_ROWS * k_max)?;
    gpu.dummy_fill(x.ptr(), MAX_ROWS * k_max, 7)?;
    let mut lt = LtGemm::new(&gpu, 2048)?;
    let rows_order = gpu.has_wg_rows();
    if rows_order {
        gpu.reserve_wg_rows(true, ROWS_SPLIT_MAX)?;
    }
    let xw = match gpu.has_wgmma() {
        true => Some(gpu.alloc::<u16>(wg_x_elems(MAX_ROWS, k_max))?),
        false => None,
    };
    for (name, n, k) in SHAPES {
        let copies: Vec<DevBuf<u16>> = (0..(800usize << 20).div_ceil(n * k * 2).max(2))
            .map(|i| {
                let w = gpu.alloc::<u16>(n * k)?;
                gpu.dummy_fill(w.ptr(), n * k, 100 + i as u64)?;
                Ok(w)
            })
            .collect::<Result<_>>()?;
        let y = gpu.alloc::<f32>(MAX_ROWS * n)?;
        // The chain partials, for the weights decode may split (QKV, o and down; the LM head's
        // would take 2 GB at 256 rows).
        let part = match n <= SPLIT_MAX_ROWS {
            true => Some(gpu.alloc::<f32>(split_part_floats(MAX_ROWS, n.div_ceil(16)))?),
            false => None,
        };
        let bytes = (n * k * 2) as f64;
        let mut turn = 0usize;
        let mut next_w = || {
            turn += 1;
            copies[turn % copies.len()].ptr()
        };
        for m in ROWS {
            let mut line = format!("BENCH gemm {name} {n}x{k} rows {m}:");
            let mut report = |label: &str, secs: f64, line: &mut String| {
                *line += &format!(
                    " {label} {:.1} us ({:.2} TB/s);",
                    secs * 1e6,
                    bytes / secs / 1e12
                );
                json.push(format!("\"{name}_m{m}_{label}_us\":{:.2}", secs * 1e6));
            };
            let skinny = time(&gpu, || {
                gpu.skinny_gemm_launch(SkinnyKind::Wide, true, y.ptr(), x.ptr(), next_w(), m, n, k)
            })?;
            report("skinny", skinny, &mut line);
            let epi = Epilogue::Store { y: y.ptr() };
            let chosen = choose_tc_entry(n.div_ceil(16), m, gpu.sm_count as usize);
            let tc = time(&gpu, || {
                gpu.skinny_tc(&epi, true, x.ptr(), next_w(), m, n, k)
            })?;
            report(
                &format!("tc[{}]", &chosen.name["skinny_tc_".len()..]),
                tc,
                &mut line,
            );
            // KILN_SKINNY_TC=auto's pick (skinny_tc::MEASURED), timed again on its own.
            let auto = measured_entry(n, k, m);
            let secs = time(&gpu, || match auto {
                Some(e) => gpu.skinny_tc_entry(e, &epi, true, x.ptr(), next_w(), m, n, k),
                None => gpu.skinny_gemm_launch(
                    SkinnyKind::Wide,
                    true,
                    y.ptr(),
                    x.ptr(),
                    next_w(),
                    m,
                    n,
                    k,
                ),
            })?;
            let pick = auto.map_or("skinny", |e| &e.name["skinny_tc_".len()..]);
            report(&format!("auto[{pick}]"), secs, &mut line);
            // The prefill's order: the chain kernel for few rows, the pinned GEMM itself.
            if m <= 32 {
                let s = time(&gpu, || {
                    gpu.chain_gemm(true, y.ptr(), x.ptr(), next_w(), m, n, k)
                })?;
                report("chain", s, &mut line);
                for e in chain_gemm::entries().iter().filter(|e| m <= e.max_rows()) {
                    let s = time(&gpu, || {
                        gpu.chain_entry_launch(e, true, y.ptr(), x.ptr(), next_w(), m, n, k)
                    })?;
                    report(&e.name, s, &mut line);
                }
            }
            let s = time(&gpu, || {
                lt.matmul(&gpu, y.ptr(), x.ptr(), next_w(), m, n, k)
            })?;
            report("lt", s, &mut line);
            if rows_order {
                let store = Epilogue::Store { y: y.ptr() };
                let sms = gpu.sm_count as usize;
                let l = bf16_wg_launch(n, 2 * k, m, sms);
                let (e, split) = (l.entry, l.split);
                let s = time(&gpu, || {
                    gpu.bf16_wg_in(e, split, &store, x.ptr(), next_w(), m, n, k)
                })?;
                let how = if split { "split" } else { "whole" };
                report(
                    &format!("rows[{}_{how}]", &e.name["bf16_wg_".len()..]),
                    s,
                    &mut line,
                );
                for e in bf16_wg_entries() {
                    for split in [false, true] {
                        if split && !splittable(n, m) {
                            continue;
                        }
                        let s = time(&gpu, || {
                            gpu.bf16_wg_in(e, split, &store, x.ptr(), next_w(), m, n, k)
                        })?;
                        let how = if split { "split" } else { "whole" };
                        report(&format!("{}_{how}", e.name), s, &mut line);
                    }
                }
            }
            if m >= 32 {
                for e in tc_entries() {
                    let s = time(&gpu, || {
                        gpu.skinny_tc_entry(e, &epi, true, x.ptr(), next_w(), m, n, k)
                    })?;
                    report(&e.name["skinny_".len()..], s, &mut line);
                }
                // The wgmma entries (sm_90), x rewritten into the workspace first.
                if let Some(xw) = &xw {
                    for e in all_wg_entries() {
                        let part = match (e.split, &part) {
                            (false, _) => None,
                            (true, Some(p)) => Some(p.ptr()),
                            (true, None) => continue,
                        };
                        let s = time(&gpu, || {
                            let w = next_w();
                            gpu.skinny_wg_entry(e, &epi, true, x.ptr(), w, xw.ptr(), part, m, n, k)
                        })?;
                        report(&e.name["skinny_".len()..], s, &mut line);
                    }
                }
                // Split along the chains (then joined), for the weights with few tiles.
                if let Some(part) = &part {
                    for e in tc_split_entries() {
                        let s = time(&gpu, || {
                            let w = next_w();
                            gpu.skinny_tc_split(e, &epi, true, x.ptr(), w, part.ptr(), m, n, k)
                        })?;
                        report(&e.name["skinny_".len()..], s, &mut line);
                    }
                }
            }
            if name == "gate_up" {
                // SwiGLU fused into the launch against the GEMM and the swiglu kernel.
                let inter = n / 2;
                let act = gpu.alloc::<u16>(MAX_ROWS * inter)?;
                let glu = Epilogue::Glu {
                    act: act.ptr(),
                    inter,
                };
                let c = kiln_cuda::kernels::KernelChoice::from_env();
                let fused = time(&gpu, || {
                    let w = next_w();
                    if let Some(e) = gpu.tc_for(&c, SkinnyKind::Wide, &glu, m, n, k)? {
                        gpu.skinny_tc_entry(e, &glu, true, x.ptr(), w, m, n, k)
                    } else {
                        gpu.skinny_fused(&glu, None, true, x.ptr(), w, m, n, k)
                    }
                })?;
                let apart = time(&gpu, || {
                    gpu.skinny_gemm(y.ptr(), x.ptr(), next_w(), m, n, k)?;
                    gpu.swiglu(y.ptr(), act.ptr(), inter, m)
                })?;
                report("glu_fused", fused, &mut line);
                report("gemm_then_swiglu", apart, &mut line);
            }
            eprintln!("{}", line.trim_end_matches(';'));
        }
    }
    println!("{{{}}}", json.join(","));
    Ok(())
}
