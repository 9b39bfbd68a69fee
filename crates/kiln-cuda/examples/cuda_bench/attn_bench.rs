//! `cuda_bench PRESET attn [prefill|decode]`: the attention kernels alone, on a KV cache of
//! dummy values in blocks of 16 (read through reversed block tables), 32 query heads over 8 KV
//! heads.
//!
//! - Prefill: causal attention of a 2k, 8k and 32k prompt in 2048-row chunks (as the engine
//!   runs them) at head dims 64, 128, 256 and 512, for each kernel family: TFLOP/s (4 * hd * heads
//!   per key a row sees) and the milliseconds of 32 such layers. KILN_BENCH_ATTN_CHUNK=N takes
//!   chunks of N rows instead (32768: each prompt in one launch, the shape torch SDPA is timed
//!   on by scripts/bench/sdpa_bench.py).
//! - Decode: one step of `batch` sequences at depth 8k-128k (each its own blocks), both decode
//!   families at head dim 128: microseconds per layer and KV bytes read per second; and a
//!   speculative verify step (5 rows of one sequence at 8k) against a 1-row step.
//! - Profile: one launch of each prefill family at head dim 128 on the last 2048-row chunk of
//!   an 8k prompt, nothing else, for a profiler (`ncu -k regex:flash`).
//!
//! Human lines on stderr (`BENCH ...`), one JSON object on stdout.

use std::time::Instant;

use anyhow::{Context, Result};
use kiln_cuda::attn_launch::{
    flash_sm90_kv_group, DecodeKernel, FlashKernel, FLASH_SM90_HEAD_DIMS,
};
use kiln_cuda::attn_wide::WIDE_HEAD_DIMS;
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::kernels::{decode_part_splits, AttnCall, AttnInputs, FlashTiles, KvView, Partials};
use kiln_cuda::step_plan::{pack_step, StepLayout};
use kiln_cuda::switches::{DecodeFold, Switches};
use kiln_step::ChunkInput;

const N_Q: usize = 32;
const N_KV: usize = 8;
const BS: usize = 16;
/// decode_mma folding a row's splits itself and through the combine (the combine and the step's
/// form the environment chooses: KILN_COMBINE_COLS, KILN_DECODE_TRANSPOSE, KILN_DECODE_DEEP).
fn mma_kinds() -> [DecodeKernel; 2] {
    let sw = Switches::from_env();
    [DecodeFold::Always, DecodeFold::Never].map(|fold| DecodeKernel::Mma {
        fold,
        early: true,
        ahead: false,
        cols: sw.combine_cols,
        tr: sw.decode_transpose,
        deep: sw.decode_deep,
    })
}
const LAYERS: f64 = 32.0;
const CHUNK: usize = 2048;
/// KV tokens the decode cache holds (4 KB each at head dim 128: 16 GB).
const DECODE_TOKENS: usize = 4 << 20;

/// One packed step uploaded to the device.
struct Step {
    layout: StepLayout,
    buf: DevBuf<i32>,
    n_tiles: usize,
    /// Keys the prefill chunks span (the plan's prefill_keys).
    keys: usize,
    n_decode: usize,
}

impl Step {
    /// `chunks`: (table, start, rows) each.
    fn new(
        gpu: &Gpu,
        chunks: &[(&[u32], usize, usize)],
        blocks: usize,
        max_ctx: usize,
    ) -> Result<Step> {
        let tokens: Vec<Vec<u32>> = chunks.iter().map(|c| vec![1u32; c.2]).collect();
        let inputs: Vec<ChunkInput<'_>> = chunks
            .iter()
            .zip(&tokens)
            .map(|(c, t)| ChunkInput {
                tokens: t,
                start_pos: c.1,
                block_table: c.0,
                want_logits: false,
            })
            .collect();
        let max_tokens = tokens.iter().map(Vec::len).sum::<usize>().max(1);
        let layout = StepLayout::new(max_tokens, chunks.len(), max_ctx, BS, blocks, 2);
        let mut packed = vec![0i32; layout.len];
        let plan = pack_step(&inputs, &layout, &mut packed)?;
        let buf = gpu.alloc::<i32>(layout.len)?;
        buf.upload(0, &packed)?;
        Ok(Step {
            layout,
            buf,
            n_tiles: plan.n_tiles,
            keys: plan.prefill_keys,
            n_decode: plan.n_decode,
        })
    }

    fn inputs(&self) -> AttnInputs {
        AttnInputs {
            positions: self.buf.at(self.layout.positions),
            token_seq: self.buf.at(self.layout.token_seq),
            bt_start: self.buf.at(self.layout.bt_start),
            block_tables: self.buf.at(self.layout.block_tables),
            old_keys_ready: true,
        }
    }
}

/// Seconds per call of `f`, over `reps` calls after one warm-up.
fn time(gpu: &Gpu, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    gpu.synchronize()?;
    let t = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    gpu.synchronize()?;
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// A prefill family as the bench runs it: `l2`, the sm90 grid in the order of
/// flash_sm90_kv_group for each step's keys (the default), else in one group.
#[derive(Clone, Copy)]
struct Variant {
    kind: FlashKernel,
    l2: bool,
}

impl Variant {
    fn name(self) -> &'static str {
        match (self.kind, self.l2) {
            (FlashKernel::Sm80 { pairs: true }, _) => "sm80",
            (FlashKernel::Sm80 { pairs: false }, _) => "sm80_single",
            (FlashKernel::Sm90 { overlap: false, .. }, _) => "sm90_plain",
            (
                FlashKernel::Sm90 {
                    pingpong: false, ..
                },
                true,
            ) => "sm90_overlap",
            (
                FlashKernel::Sm90 {
                    pingpong: false, ..
                },
                false,
            ) => "sm90_overlap_onegroup",
            (FlashKernel::Sm90 { pingpong: true, .. }, _) => "sm90_pingpong",
        }
    }
}

/// A prefill layer's buffers at head dim `hd`: K/V caches of `blocks` blocks of dummy values,
/// Q and the output of one chunk of `rows` rows.
struct Prefill {
    k: DevBuf<u16>,
    v: DevBuf<u16>,
    q: DevBuf<u16>,
    out: DevBuf<u16>,
    hd: usize,
}

impl Prefill {
    fn new(gpu: &Gpu, hd: usize, blocks: usize, rows: usize) -> Result<Prefill> {
        let cache_len = blocks * N_KV * BS * hd;
        let (k, v) = (gpu.alloc::<u16>(cache_len)?, gpu.alloc::<u16>(cache_len)?);
        gpu.dummy_fill(k.ptr(), cache_len, 11)?;
        gpu.dummy_fill(v.ptr(), cache_len, 12)?;
        let q = gpu.alloc::<u16>(rows * N_Q * hd)?;
        gpu.dummy_fill(q.ptr(), rows * N_Q * hd, 13)?;
        let out = gpu.alloc::<u16>(rows * N_Q * hd)?;
        Ok(Prefill { k, v, q, out, hd })
    }

    /// The prefill families that run at this head dim: sm80, then sm90 plain, overlapped and
    /// taking turns where the device has them, and overlapped in one group (the order
    /// before KILN_FLASH_L2).
    fn kinds(&self, gpu: &Gpu) -> Vec<Variant> {
        let sm90 = |overlap, pingpong, l2| Variant {
            kind: FlashKernel::Sm90 {
                overlap,
                pingpong,
                kv_group: 0,
            },
            l2,
        };
        let mut kinds = vec![Variant {
            kind: FlashKernel::Sm80 { pairs: true },
            l2: false,
        }];
        let hd = self.hd;
        let sm90_here = gpu.has_func(&format!("flash_sm90_hd{hd}"));
        if WIDE_HEAD_DIMS.contains(&hd) && sm90_here {
            // One wgmma kernel at 512-wide heads (flash_sm90_wide.cu): no overlapped forms.
            kinds.push(sm90(false, false, true));
        } else if FLASH_SM90_HEAD_DIMS.contains(&hd) && sm90_here {
            kinds.extend([
                sm90(false, false, true),
                sm90(true, false, true),
                sm90(true, true, true),
                sm90(true, false, false),
            ]);
        }
        kinds
    }

    /// One launch of `v` over the tiles of `st`.
    fn launch(&self, gpu: &Gpu, v: Variant, st: &Step) -> Result<()> {
        let kind = match v.kind {
            FlashKernel::Sm90 {
                overlap, pingpong, ..
            } if v.l2 => FlashKernel::Sm90 {
                overlap,
                pingpong,
                kv_group: flash_sm90_kv_group(N_KV, self.hd, st.keys, gpu.l2_bytes),
            },
            k => k,
        };
        let kv = KvView {
            k: self.k.ptr(),
            v: self.v.ptr(),
            n_kv: N_KV,
            block_size: BS,
        };
        let inp = st.inputs();
        let call = AttnCall {
            q: self.q.ptr(),
            kv,
            inp: &inp,
            out: self.out.ptr(),
            n_q: N_Q,
            hd: self.hd,
            window: 0,
            scale: 1.0 / (self.hd as f32).sqrt(),
        };
        let tiles = FlashTiles {
            ptr: st.buf.at(st.layout.tiles),
            n: st.n_tiles,
        };
        gpu.flash_attn_kernel(kind, call, tiles)
    }
}

/// One launch of each prefill family at head dim 128, rows 6144..8191 of an 8k prompt.
fn profile(gpu: &Gpu) -> Result<()> {
    let (len, blocks) = (8192, 8192 / BS);
    let table: Vec<u32> = (0..blocks as u32).rev().collect();
    let p = Prefill::new(gpu, 128, blocks, CHUNK)?;
    let st = Step::new(gpu, &[(&table, len - CHUNK, CHUNK)], blocks, len)?;
    for kind in p.kinds(gpu) {
        p.launch(gpu, kind, &st)?;
        gpu.synchronize()?;
        eprintln!(
            "profiled flash {} hd 128, rows 6144..8191 of 8192",
            kind.name()
        );
    }
    Ok(())
}

/// Rows a prefill chunk of the kernel figures: KILN_BENCH_ATTN_CHUNK, else the engine's 2048.
fn prefill_chunk() -> usize {
    std::env::var("KILN_BENCH_ATTN_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0 && n % BS == 0)
        .unwrap_or(CHUNK)
}

fn prefill(gpu: &Gpu, json: &mut Vec<String>) -> Result<()> {
    let max_len = 32_768;
    let chunk = prefill_chunk();
    let blocks = max_len / BS;
    let table: Vec<u32> = (0..blocks as u32).rev().collect();
    for hd in [64usize, 128, 256, 512] {
        let p = Prefill::new(gpu, hd, blocks, chunk)?;
        let kinds = p.kinds(gpu);
        for len in [2048usize, 8192, 32_768] {
            let steps: Vec<(Step, f64)> = (0..len)
                .step_by(chunk)
                .map(|s| {
                    let rows = chunk.min(len - s);
                    // A row at position p sees p + 1 keys: QK^T and PV are 2 * hd flops each.
                    let keys: f64 = (s..s + rows).map(|p| (p + 1) as f64).sum();
                    Ok((
                        Step::new(gpu, &[(&table, s, rows)], blocks, max_len)?,
                        4.0 * (hd * N_Q) as f64 * keys,
                    ))
                })
                .collect::<Result<_>>()?;
            for &kind in &kinds {
                let (mut secs, mut flops) = (0.0, 0.0);
                for (st, f) in &steps {
                    secs += time(gpu, 5, || p.launch(gpu, kind, st))?;
                    flops += f;
                }
                let name = kind.name();
                let tflops = flops / secs / 1e12;
                eprintln!(
                    "BENCH flash {name} hd {hd} causal {len}: {tflops:.1} TFLOP/s, {:.1} ms for 32 layers",
                    secs * LAYERS * 1e3
                );
                json.push(format!("\"flash_{name}_hd{hd}_{len}_tflops\":{tflops:.1}"));
            }
        }
    }
    Ok(())
}

fn decode_name(k: DecodeKernel) -> &'static str {
    match k {
        DecodeKernel::Simt => "simt",
        DecodeKernel::Mma {
            fold: DecodeFold::Always,
            ..
        } => "mma_fold",
        DecodeKernel::Mma {
            fold: DecodeFold::Never,
            ..
        } => "mma_combine",
        DecodeKernel::Mma {
            fold: DecodeFold::Auto,
            ..
        } => "mma",
    }
}

fn decode(gpu: &Gpu, kinds: &[DecodeKernel], json: &mut Vec<String>) -> Result<()> {
    let hd = 128;
    let blocks = DECODE_TOKENS / BS + 256;
    let cache_len = blocks * N_KV * BS * hd;
    let (k, v) = (gpu.alloc::<u16>(cache_len)?, gpu.alloc::<u16>(cache_len)?);
    gpu.dummy_fill(k.ptr(), cache_len, 11)?;
    gpu.dummy_fill(v.ptr(), cache_len, 12)?;
    let kv = KvView {
        k: k.ptr(),
        v: v.ptr(),
        n_kv: N_KV,
        block_size: BS,
    };
    let max_rows = 128;
    let q = gpu.alloc::<u16>(max_rows * N_Q * hd)?;
    gpu.dummy_fill(q.ptr(), max_rows * N_Q * hd, 13)?;
    let out = gpu.alloc::<u16>(max_rows * N_Q * hd)?;
    let po = gpu.alloc::<f32>(max_rows * N_Q * decode_part_splits() * hd)?;
    let pm = gpu.alloc::<f32>(max_rows * N_Q * decode_part_splits() * 2)?;
    let part = Partials {
        o: po.ptr(),
        ml: pm.ptr(),
    };
    let run = |kind: DecodeKernel, st: &Step, reps: usize| -> Result<f64> {
        let inp = st.inputs();
        let call = AttnCall {
            q: q.ptr(),
            kv,
            inp: &inp,
            out: out.ptr(),
            n_q: N_Q,
            hd,
            window: 0,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        time(gpu, reps, || {
            gpu.decode_attn_with(kind, call, part, st.n_decode)
        })
    };
    for depth in [512usize, 8192, 32_768, 131_072] {
        for batch in [1usize, 8, 32, 128] {
            if batch * (depth + 1) > DECODE_TOKENS {
                continue;
            }
            // Each sequence its own blocks, in reverse order.
            let per = (depth + 1).div_ceil(BS);
            let tables: Vec<Vec<u32>> = (0..batch)
                .map(|b| (b * per..(b + 1) * per).rev().map(|x| x as u32).collect())
                .collect();
            let chunks: Vec<(&[u32], usize, usize)> =
                tables.iter().map(|t| (&t[..], depth, 1)).collect();
            let st = Step::new(gpu, &chunks, blocks, depth + 1)?;
            let bytes = (batch * (depth + 1) * N_KV * hd * 2 * 2) as f64;
            for &kind in kinds {
                let secs = run(kind, &st, 20)?;
                let name = decode_name(kind);
                eprintln!(
                    "BENCH decode_attn {name} batch {batch} depth {depth}: {:.1} us, KV read at {:.2} TB/s",
                    secs * 1e6,
                    bytes / secs / 1e12
                );
                json.push(format!(
                    "\"decode_{name}_b{batch}_d{depth}_tbs\":{:.3}",
                    bytes / secs / 1e12
                ));
            }
        }
    }
    // A verify step: 5 rows of one sequence at consecutive positions from 8k, against 1 row.
    let table: Vec<u32> = (0..(8192 + 8usize).div_ceil(BS) as u32).rev().collect();
    let one = Step::new(gpu, &[(&table, 8192, 1)], blocks, 8200)?;
    let rows: Vec<(&[u32], usize, usize)> = (0..5).map(|j| (&table[..], 8192 + j, 1)).collect();
    let five = Step::new(gpu, &rows, blocks, 8200)?;
    for &kind in kinds {
        let (a, b) = (run(kind, &one, 50)?, run(kind, &five, 50)?);
        let name = decode_name(kind);
        eprintln!(
            "BENCH decode_attn {name} verify 5 rows depth 8192: {:.1} us, 1 row {:.1} us ({:.2}x)",
            b * 1e6,
            a * 1e6,
            b / a
        );
        json.push(format!(
            "\"decode_{name}_verify5_d8192_ratio\":{:.3}",
            b / a
        ));
    }
    Ok(())
}

/// `part`: "prefill" or "decode" for one half (each in a process of its own, so that a kernel
/// that faults costs only its half), "decode-mma" for decode_mma alone (an A/B of its
/// switches), "profile" for one launch of each prefill family, anything else for prefill and
/// decode.
pub fn run(part: Option<&str>) -> Result<()> {
    let gpu = Gpu::new(0).context("opening the GPU")?;
    eprintln!(
        "device: {} (sm_{}, {} SMs)",
        gpu.name, gpu.arch, gpu.sm_count
    );
    let mut json = Vec::new();
    if part == Some("profile") {
        return profile(&gpu);
    }
    if !matches!(part, Some("decode" | "decode-mma")) {
        prefill(&gpu, &mut json)?;
    }
    let mma = mma_kinds();
    if part == Some("decode-mma") {
        decode(&gpu, &mma, &mut json)?;
    } else if part != Some("prefill") {
        let all = [DecodeKernel::Simt, mma[0], mma[1]];
        decode(&gpu, &all, &mut json)?;
    }
    println!("{{{}}}", json.join(","));
    Ok(())
}
