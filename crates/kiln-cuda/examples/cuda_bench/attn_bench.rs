//! `cuda_bench PRESET attn`: the attention kernels alone on Llama-3-8B head shapes (32 query
//! heads, 8 KV heads, head dim 128, blocks of 16), on a KV cache of dummy values. Flash
//! attention over every 2048-row chunk of a 2k, 8k and 32k prompt (both CTA variants), as
//! causal TFLOP/s and the milliseconds the 32 layers of such a prefill spend in it; split-KV
//! decode attention of one row at depth 0.5k, 8k and 32k, as KV bytes read per second.

use std::time::Instant;

use anyhow::{Context, Result};
use kiln_cuda::device::Gpu;
use kiln_cuda::kernels::{AttnInputs, KvView, DECODE_MAX_SPLITS};
use kiln_cuda::step_plan::{pack_step, StepLayout};
use kiln_step::ChunkInput;

const N_Q: usize = 32;
const N_KV: usize = 8;
const HD: usize = 128;
const BS: usize = 16;
const LAYERS: f64 = 32.0;
const CHUNK: usize = 2048;
const MAX_CTX: usize = 32_768;

/// One packed step (a single chunk) uploaded to the device.
struct Step {
    layout: StepLayout,
    buf: kiln_cuda::device::DevBuf<i32>,
    n_tiles: usize,
}

impl Step {
    fn new(gpu: &Gpu, table: &[u32], start: usize, rows: usize) -> Result<Step> {
        let layout = StepLayout::new(CHUNK, 1, MAX_CTX, BS, table.len(), 2);
        let tokens = vec![1u32; rows];
        let chunk = ChunkInput {
            tokens: &tokens,
            start_pos: start,
            block_table: table,
            want_logits: false,
        };
        let mut packed = vec![0i32; layout.len];
        let plan = pack_step(&[chunk], &layout, &mut packed)?;
        let buf = gpu.alloc::<i32>(layout.len)?;
        buf.upload(0, &packed)?;
        Ok(Step {
            layout,
            buf,
            n_tiles: plan.n_tiles,
        })
    }

    fn inputs(&self) -> AttnInputs {
        AttnInputs {
            positions: self.buf.at(self.layout.positions),
            token_seq: self.buf.at(self.layout.token_seq),
            bt_start: self.buf.at(self.layout.bt_start),
            block_tables: self.buf.at(self.layout.block_tables),
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

pub fn run() -> Result<()> {
    let gpu = Gpu::new(0).context("opening the GPU")?;
    let blocks = MAX_CTX / BS;
    let cache_len = blocks * N_KV * BS * HD;
    let (k, v) = (gpu.alloc::<u16>(cache_len)?, gpu.alloc::<u16>(cache_len)?);
    gpu.dummy_fill(k.ptr(), cache_len, 11)?;
    gpu.dummy_fill(v.ptr(), cache_len, 12)?;
    let kv = KvView {
        k: k.ptr(),
        v: v.ptr(),
        n_kv: N_KV,
        block_size: BS,
    };
    // Blocks in reverse order, so reads go through the table rather than straight down memory.
    let table: Vec<u32> = (0..blocks as u32).rev().collect();
    let q = gpu.alloc::<u16>(CHUNK * N_Q * HD)?;
    gpu.dummy_fill(q.ptr(), CHUNK * N_Q * HD, 13)?;
    let out = gpu.alloc::<u16>(CHUNK * N_Q * HD)?;
    let scale = 1.0 / (HD as f32).sqrt();
    let mut json = Vec::new();

    for len in [2048usize, 8192, 32_768] {
        let steps: Vec<(Step, f64)> = (0..len)
            .step_by(CHUNK)
            .map(|s| {
                let rows = CHUNK.min(len - s);
                // Row at position p sees p + 1 keys: QK^T and PV are 2 * HD flops each per key.
                let keys: f64 = (s..s + rows).map(|p| (p + 1) as f64).sum();
                Ok((
                    Step::new(&gpu, &table, s, rows)?,
                    4.0 * (HD * N_Q) as f64 * keys,
                ))
            })
            .collect::<Result<_>>()?;
        for pairs in [true, false] {
            let (mut secs, mut flops) = (0.0, 0.0);
            for (st, f) in &steps {
                let inp = st.inputs();
                let tiles = st.buf.at(st.layout.tiles);
                secs += time(&gpu, 5, || {
                    gpu.flash_attn_with(
                        pairs,
                        q.ptr(),
                        kv,
                        tiles,
                        st.n_tiles,
                        &inp,
                        out.ptr(),
                        N_Q,
                        HD,
                        0,
                        scale,
                    )
                })?;
                flops += f;
            }
            let variant = if pairs { "pairs" } else { "single" };
            eprintln!(
                "BENCH flash_attn {variant} prefill {len}: {:.1} TFLOP/s, {:.1} ms for 32 layers",
                flops / secs / 1e12,
                secs * LAYERS * 1e3
            );
            json.push(format!(
                "\"flash_{variant}_{len}_tflops\":{:.1}",
                flops / secs / 1e12
            ));
        }
    }

    let po = gpu.alloc::<f32>(N_Q * DECODE_MAX_SPLITS * HD)?;
    let pm = gpu.alloc::<f32>(N_Q * DECODE_MAX_SPLITS * 2)?;
    for depth in [512usize, 8192, 32_000] {
        let st = Step::new(&gpu, &table, depth, 1)?;
        let inp = st.inputs();
        let secs = time(&gpu, 20, || {
            gpu.decode_attn(
                q.ptr(),
                kv,
                &inp,
                po.ptr(),
                pm.ptr(),
                out.ptr(),
                1,
                N_Q,
                HD,
                0,
                scale,
            )
        })?;
        let bytes = ((depth + 1) * N_KV * HD * 2 * 2) as f64;
        eprintln!(
            "BENCH decode_attn depth {depth}: {:.1} us, KV read at {:.2} TB/s, {:.2} ms for 32 layers",
            secs * 1e6,
            bytes / secs / 1e12,
            secs * LAYERS * 1e3
        );
        json.push(format!("\"decode_attn_{depth}_us\":{:.2}", secs * 1e6));
    }
    println!("{{{}}}", json.join(","));
    Ok(())
}
