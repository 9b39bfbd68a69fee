//! Fingerprints of what a backend computes, for proving that a refactor changed no bit: for each
//! model, a fixed workload (a prompt prefilled in two chunks, greedy decode steps, a batched step
//! mixing a new prompt with a decode row) and, per case, the greedy tokens and an FNV-1a digest
//! of every logits row's f32 bits. On CUDA also the device argmax and device sampling paths.
//! Run it before and after a change and compare the lines (scripts/digests.sh).
//! Usage: logits_digest cpu|cuda MODEL... (a .gguf, a Hugging Face folder or dummy:PRESET;
//! `MODEL@LEN` sets the prompt length, default 40).

use anyhow::{bail, Context, Result};
use kiln_step::{Backend, ChunkInput, RowSampling};

const DECODE_STEPS: usize = 6;

fn fnv(bits: impl IntoIterator<Item = u32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bits {
        for byte in b.to_le_bytes() {
            h ^= byte as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

struct Run<'a> {
    b: &'a mut dyn Backend,
    vocab: usize,
    next_block: u32,
}

impl Run<'_> {
    fn table(&mut self, tokens: usize) -> Vec<u32> {
        let bs = self.b.kv_geometry().block_size;
        let n = tokens.div_ceil(bs) as u32;
        let t = (self.next_block..self.next_block + n).collect();
        self.next_block += n;
        t
    }

    fn prompt(&self, len: usize, salt: usize) -> Vec<u32> {
        (0..len)
            .map(|i| ((i * 7919 + salt * 104_729 + 1) % self.vocab) as u32)
            .collect()
    }
}

fn report(model: &str, device: &str, case: &str, tokens: &[u32], logits: &[f32]) {
    let finite = logits.iter().all(|v| v.is_finite());
    println!(
        "{model} {device} {case}: tokens {tokens:?} logits {} digest {:016x}{}",
        logits.len(),
        fnv(logits.iter().map(|v| v.to_bits())),
        if finite { "" } else { " NON-FINITE" }
    );
}

/// The workload every backend runs.
fn workload(model: &str, device: &str, run: &mut Run<'_>, len: usize) -> Result<()> {
    let a = run.prompt(len, 1);
    let table_a = run.table(len + DECODE_STEPS + 2);
    // Two chunks (pieces of at most 2048 tokens for long prompts), logits after each.
    let piece = len.div_ceil(2).min(2048);
    let mut logits = Vec::new();
    for start in (0..len).step_by(piece) {
        let end = (start + piece).min(len);
        logits.extend(run.b.forward(&[ChunkInput {
            tokens: &a[start..end],
            start_pos: start,
            block_table: &table_a,
            want_logits: true,
        }])?);
    }
    report(model, device, "prefill", &[], &logits);

    let mut last = argmax(&logits[logits.len() - run.vocab..]);
    let mut tokens = vec![last];
    let mut decode_logits = Vec::new();
    for step in 0..DECODE_STEPS {
        let row = run.b.forward(&[ChunkInput {
            tokens: &[last],
            start_pos: len + step,
            block_table: &table_a,
            want_logits: true,
        }])?;
        last = argmax(&row);
        tokens.push(last);
        decode_logits.extend(row);
    }
    report(model, device, "decode", &tokens, &decode_logits);

    // A new prompt and A's next decode row in one step.
    let pos = len + DECODE_STEPS;
    let b_prompt = run.prompt(24, 2);
    let table_b = run.table(24 + 4);
    let mixed = run.b.forward(&[
        ChunkInput {
            tokens: &b_prompt,
            start_pos: 0,
            block_table: &table_b,
            want_logits: true,
        },
        ChunkInput {
            tokens: &[last],
            start_pos: pos,
            block_table: &table_a,
            want_logits: true,
        },
    ])?;
    let picks: Vec<u32> = mixed.chunks_exact(run.vocab).map(argmax).collect();
    report(model, device, "mixed", &picks, &mixed);
    Ok(())
}

/// The device's own argmax and sampler on two decode rows.
fn device_paths(model: &str, b: &mut kiln_cuda::CudaBackend, vocab: usize) -> Result<()> {
    let mut run = Run {
        b,
        vocab,
        next_block: 0,
    };
    let p = run.prompt(20, 3);
    let (ta, tb) = (run.table(24), run.table(24));
    run.b.forward(&[
        ChunkInput {
            tokens: &p,
            start_pos: 0,
            block_table: &ta,
            want_logits: false,
        },
        ChunkInput {
            tokens: &p[..10],
            start_pos: 0,
            block_table: &tb,
            want_logits: false,
        },
    ])?;
    let rows = |pa: usize, pb: usize| {
        [
            ChunkInput {
                tokens: &p[5..6],
                start_pos: pa,
                block_table: &ta,
                want_logits: true,
            },
            ChunkInput {
                tokens: &p[6..7],
                start_pos: pb,
                block_table: &tb,
                want_logits: true,
            },
        ]
    };
    let ids = b.forward_greedy(&rows(20, 10))?;
    println!("{model} cuda device-argmax: tokens {ids:?}");
    let sampling: Vec<RowSampling> = (0..2)
        .map(|i| RowSampling {
            temperature: 0.8,
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            uniform: 0.31 + 0.4 * i as f64,
            logprobs: Some(3),
        })
        .collect();
    let sampled = b.forward_sampled(&rows(21, 11), &sampling)?;
    let mut bits = Vec::new();
    let mut ids = Vec::new();
    for s in sampled {
        let s = s.map_err(|e| anyhow::anyhow!("{e}"))?;
        ids.push(s.id);
        bits.extend(s.logprob.map(f32::to_bits));
        for (t, lp) in s.top_logprobs {
            bits.push(t);
            bits.push(lp.to_bits());
        }
    }
    println!(
        "{model} cuda device-sampling: tokens {ids:?} logprobs digest {:016x}",
        fnv(bits)
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((device, models)) = args.split_first() else {
        bail!("usage: logits_digest cpu|cuda MODEL[@LEN]...");
    };
    for spec in models {
        let (path, len) = match spec.rsplit_once('@') {
            Some((p, l)) => (p, l.parse::<usize>().context("prompt length")?),
            None => (spec.as_str(), 40),
        };
        let model = kiln_load::load(path).with_context(|| format!("loading {path}"))?;
        let vocab = model.config.vocab_size;
        let context = (len + 64).next_multiple_of(16);
        match device.as_str() {
            "cpu" => {
                let opts = kiln_cpu::CpuOptions {
                    kv_blocks: 3 * context / 16,
                    block_size: 16,
                    threads: None,
                    host_blocks: 0,
                    fp8: false,
                };
                let mut b = kiln_cpu::CpuBackend::new(model.weights.as_ref(), opts, None)?;
                let mut run = Run {
                    b: &mut b,
                    vocab,
                    next_block: 0,
                };
                workload(spec, "cpu", &mut run, len)?;
            }
            "cuda" => {
                let opts = kiln_cuda::CudaOptions {
                    kv_cache_bytes: Some(2 << 30),
                    max_seqs: 8,
                    max_context: Some(context.max(256)),
                    ..kiln_cuda::CudaOptions::default()
                };
                let mut b = kiln_cuda::CudaBackend::new(model.weights.as_ref(), opts, None)?;
                let mut run = Run {
                    b: &mut b,
                    vocab,
                    next_block: 0,
                };
                workload(spec, "cuda", &mut run, len)?;
                device_paths(spec, &mut b, vocab)?;
            }
            other => bail!("unknown device {other}: cpu or cuda"),
        }
    }
    Ok(())
}
