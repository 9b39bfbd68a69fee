//! Prefill and decode speed of the CPU backend on generated weights, one sequence.
//!
//! `cargo run --release -p kiln-cpu --example cpu_speed -- [PRESET] [PROMPT] [GENERATED] [THREADS]`
//! (defaults: tiny 128 64, one thread per core). Decoding is greedy over the logits.

#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::time::Instant;

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_model::{DummySource, WeightSource};
use kiln_step::{Backend, ChunkInput};

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let preset = args.first().map_or("tiny", String::as_str);
    let number = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse()
                .map_err(|_| anyhow::anyhow!("'{s}' is not a number"))
        })
    };
    let (prompt_len, generated) = (number(1, 128)?, number(2, 64)?);
    let threads = args.get(3).map(|s| s.parse()).transpose()?;

    let src = DummySource::preset(preset)?;
    let vocab = src.config().vocab_size;
    let block_size = 16;
    let blocks = (prompt_len + generated).div_ceil(block_size);
    let opts = CpuOptions {
        kv_blocks: blocks,
        block_size,
        threads,
        host_blocks: 0,
        fp8: false,
    };
    let t0 = Instant::now();
    let mut backend = CpuBackend::new(&src, opts, None)?;
    let load_s = t0.elapsed().as_secs_f64();

    let table: Vec<u32> = (0..blocks as u32).collect();
    let prompt: Vec<u32> = (0..prompt_len).map(|i| (i * 7919 % vocab) as u32).collect();
    let (t1, c1) = (Instant::now(), cpu_time::cpu_seconds());
    let logits = backend.forward(&[ChunkInput {
        tokens: &prompt,
        start_pos: 0,
        block_table: &table,
        want_logits: true,
    }])?;
    let (prefill_s, prefill_cpu) = (t1.elapsed().as_secs_f64(), cpu_time::cpu_seconds() - c1);

    let mut token = argmax(&logits);
    let (t2, c2) = (Instant::now(), cpu_time::cpu_seconds());
    for pos in prompt_len..prompt_len + generated {
        let step = [token];
        let logits = backend.forward(&[ChunkInput {
            tokens: &step,
            start_pos: pos,
            block_table: &table,
            want_logits: true,
        }])?;
        token = argmax(&logits);
    }
    let (decode_s, decode_cpu) = (t2.elapsed().as_secs_f64(), cpu_time::cpu_seconds() - c2);
    println!(
        "{preset} ({:?}, {} threads): load {load_s:.2} s, prefill {prompt_len} tokens {:.1} tok/s, \
         decode {generated} tokens {:.2} tok/s; CPU-seconds: prefill {prefill_cpu:.2}, decode {decode_cpu:.2}",
        kiln_cpu::kernels::isa(),
        threads.unwrap_or_else(rayon::current_num_threads),
        prompt_len as f64 / prefill_s,
        generated as f64 / decode_s,
    );
    Ok(())
}
