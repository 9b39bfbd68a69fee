//! Quick GPU benchmark of the CUDA backend on a dummy model (default dummy:llama3-8b):
//! prefill tok/s at 2k, 8k and 32k (in 2048-token chunks, as the engine runs them; the median of
//! three prompts), decode tok/s at batch 1 from depth 0 and 8k, and total decode tok/s at batch
//! 8, 32 and 128, each with the fraction of the H200 floor where one is known; short prompts
//! (32 and 128 tokens, one step each: the CUDA graph prefill buckets) as mean milliseconds per
//! prompt. Human lines on stderr, one JSON object on stdout; KILN_CUDA_GRAPHS=0 for the eager
//! figures.
//! Usage: cuda_bench [PRESET] [decode|decode-batch|verify|attn|deep|prefill]   ("decode": only
//! decode at batch 1, depth 0; "decode-batch": decode at batch 1, 8, 32 and 128 only; "verify":
//! a speculative verify step of 1 + k rows of one sequence against a 1-row step, k = 1..8;
//! "attn": the attention kernels alone, see attn_bench.rs; "deep": what attention moves,
//! prefill 2k/8k/32k and decode at depth 8k at batch 1, 8 and 32; "prefill": prefill
//! 2k/8k/32k only; "decode-grid": decode at batch 1, 8, 32 and 128 from depth 0 and at batch 1,
//! 8 and 32 from depth 8k, the figures the decode switches are judged by; "decode-tc": decode
//! at batch 32 and 128 from depth 0 only, the quick A/B of KILN_SKINNY_TC; "gemm": the decode
//! GEMM kernels alone, see gemm_bench.rs; "fp8-gemm": an fp8 projection's decode GEMM kernels
//! alone, see fp8_gemm_bench.rs; "mixed-gemm": one fp8 projection in a step of prompt and
//! decode rows, see mixed_gemm_bench.rs; "decode-profile N [depth=D]": N sequences from depth D
//! (0), three warm-up steps, then two steps between cuProfilerStart and cuProfilerStop;
//! "prefill-profile N": a prompt of N tokens whose last chunk runs between them; both for `ncu
//! --profile-from-start off`, see scripts/step-profile.sh). A `chunk=N` argument after them
//! sets the prefill chunk (default 2048).

use std::time::Instant;

use anyhow::{Context, Result};
use kiln_cuda::{CudaBackend, CudaOptions};
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput, StepOutput, Want};

mod attn_bench;
mod fp8_gemm_bench;
mod gemm_bench;
mod mixed_gemm_bench;

/// Prefill chunk (tokens per step) unless a `chunk=N` argument says otherwise.
const CHUNK: usize = 2048;
/// Prompts timed per prefill length (the median reported).
const PREFILL_RUNS: usize = 3;
/// Longest prefill measured, plus room for the decode steps after it.
const MAX_CONTEXT: usize = 32_768 + 256;

struct Bench {
    b: CudaBackend,
    chunk: usize,
    next_block: u32,
    bs: usize,
    vocab: usize,
    /// The last prefill's device time: its steps' busy spans (first copy to last, the gaps
    /// between kernels inside) summed, and the idle between them.
    prefill_busy_s: f64,
    prefill_idle_s: f64,
    /// Prefill chunks queued one ahead of their answers, as the engine runs them
    /// (`KILN_BENCH_AHEAD=0`: each chunk waited for before the next is sent).
    ahead: bool,
}

impl Bench {
    fn table(&mut self, tokens: usize) -> Vec<u32> {
        let n = tokens.div_ceil(self.bs) as u32;
        if self.next_block + n > self.b.kv_geometry().num_blocks as u32 {
            self.next_block = 0;
        }
        let t = (self.next_block..self.next_block + n).collect();
        self.next_block += n;
        t
    }

    fn prompt(&self, len: usize, salt: usize) -> Vec<u32> {
        (0..len)
            .map(|i| ((i * 7919 + salt * 104_729) % self.vocab) as u32)
            .collect()
    }

    /// Prefills a prompt in chunks of `self.chunk` tokens; returns (seconds, block table).
    fn prefill(&mut self, len: usize, extra: usize, salt: usize) -> Result<(f64, Vec<u32>, u32)> {
        self.prefill_with(len, extra, salt, |_| Ok(()))
    }

    /// [`Bench::prefill`], calling `before(start)` before the chunk that starts at `start` and
    /// `before(len)` after the last.
    fn prefill_with(
        &mut self,
        len: usize,
        extra: usize,
        salt: usize,
        mut before: impl FnMut(usize) -> Result<()>,
    ) -> Result<(f64, Vec<u32>, u32)> {
        let prompt = self.prompt(len, salt);
        let table = self.table(len + extra);
        let t = Instant::now();
        let mut last = 0;
        (self.prefill_busy_s, self.prefill_idle_s) = (0.0, 0.0);
        let mut queued = 0;
        for start in (0..len).step_by(self.chunk) {
            let end = (start + self.chunk).min(len);
            before(start)?;
            let chunk = ChunkInput {
                tokens: &prompt[start..end],
                start_pos: start,
                block_table: &table,
                want_logits: end == len,
            };
            if self.ahead {
                // As the engine runs a prompt: the next chunk is queued while this one runs.
                self.b.launch(&[chunk], Want::Argmax, &[])?;
                queued += 1;
                if queued == 2 {
                    last = self.collect_chunk(start > 0)?.unwrap_or(last);
                    queued -= 1;
                }
            } else {
                let picks = self.b.forward_greedy(&[chunk])?;
                last = picks.last().copied().unwrap_or(0);
                self.note_timing(start > 0);
            }
        }
        while queued > 0 {
            last = self.collect_chunk(true)?.unwrap_or(last);
            queued -= 1;
        }
        let secs = t.elapsed().as_secs_f64();
        before(len)?;
        Ok((secs, table, last))
    }

    /// The oldest queued chunk's pick (None when it picked nothing), its device time noted.
    fn collect_chunk(&mut self, not_first: bool) -> Result<Option<u32>> {
        let pick = match self.b.collect()? {
            StepOutput::Tokens(t) => t.last().map(|r| r.as_ref().map_or(0, |s| s.id)),
            StepOutput::Logits(_) => anyhow::bail!("the argmax step returned logits"),
        };
        self.note_timing(not_first);
        Ok(pick)
    }

    fn note_timing(&mut self, not_first: bool) {
        if let Some(d) = self.b.device_timing() {
            self.prefill_busy_s += d.busy_s;
            if not_first {
                self.prefill_idle_s += d.idle_before_s;
            }
        }
    }

    /// `batch` sequences at depth `depth` decode `steps` tokens together; returns total tok/s.
    fn decode(&mut self, batch: usize, depth: usize, steps: usize) -> Result<f64> {
        self.decode_with(batch, depth, steps, |_| Ok(()))
    }

    /// [`Bench::decode`], calling `before(step)` before each step (0 the warm-up) and
    /// `before(steps + 1)` after the last.
    fn decode_with(
        &mut self,
        batch: usize,
        depth: usize,
        steps: usize,
        mut before: impl FnMut(usize) -> Result<()>,
    ) -> Result<f64> {
        let mut seqs = Vec::new();
        for s in 0..batch {
            let (_, table, first) = self.prefill(depth.max(1), steps + 1, s + 1)?;
            seqs.push((table, first));
        }
        // One warm-up step, then the timed ones.
        let mut t = Instant::now();
        for step in 0..=steps {
            if step == 1 {
                t = Instant::now();
            }
            before(step)?;
            let toks: Vec<[u32; 1]> = seqs.iter().map(|s| [s.1]).collect();
            let pos = depth.max(1) + step;
            let chunks: Vec<ChunkInput<'_>> = seqs
                .iter()
                .zip(&toks)
                .map(|(s, tk)| ChunkInput {
                    tokens: tk,
                    start_pos: pos,
                    block_table: &s.0,
                    want_logits: true,
                })
                .collect();
            let ids = self.b.forward_greedy(&chunks)?;
            for (s, id) in seqs.iter_mut().zip(ids) {
                s.1 = id;
            }
        }
        let secs = t.elapsed().as_secs_f64();
        before(steps + 1)?;
        Ok((batch * steps) as f64 / secs)
    }

    /// Mean milliseconds of a verify step of one sequence at `depth`: its last token and `k`
    /// drafted ones as `k + 1` decode rows (single-token chunks at consecutive positions), as
    /// the engine runs them. `k = 0` is a plain decode step.
    fn verify(&mut self, depth: usize, k: usize, steps: usize) -> Result<f64> {
        let (_, table, first) = self.prefill(depth.max(1), k + 2, 7)?;
        let toks: Vec<[u32; 1]> = (0..=k)
            .map(|j| [(first as usize + j) as u32 % self.vocab as u32])
            .collect();
        let mut t = Instant::now();
        for step in 0..=steps {
            if step == 1 {
                t = Instant::now();
            }
            let chunks: Vec<ChunkInput<'_>> = toks
                .iter()
                .enumerate()
                .map(|(j, tk)| ChunkInput {
                    tokens: tk,
                    start_pos: depth.max(1) + j,
                    block_table: &table,
                    want_logits: true,
                })
                .collect();
            self.b.forward_greedy(&chunks)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3 / steps as f64)
    }
}

fn main() -> Result<()> {
    let preset = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "llama3-8b".into());
    let mode = std::env::args().nth(2).unwrap_or_default();
    let chunk = std::env::args()
        .find_map(|a| a.strip_prefix("chunk=").and_then(|n| n.parse().ok()))
        .unwrap_or(CHUNK);
    // decode-profile's context per sequence before its profiled steps (depth=N; default 0).
    let depth: usize = std::env::args()
        .find_map(|a| a.strip_prefix("depth=").and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    if mode == "attn" {
        return attn_bench::run(std::env::args().nth(3).as_deref());
    }
    if mode == "gemm" {
        return gemm_bench::run();
    }
    if mode == "fp8-gemm" {
        return fp8_gemm_bench::run();
    }
    if mode == "mixed-gemm" {
        return mixed_gemm_bench::run();
    }
    let verify_only = mode == "verify";
    let decode_only = matches!(
        mode.as_str(),
        "decode" | "decode-batch" | "decode-grid" | "decode-tc"
    );
    let deep = mode == "deep";
    let prefill_only = mode == "prefill";
    let src = DummySource::preset(&preset)?;
    let t = Instant::now();
    // Under the profiler a small KV pool: Nsight Compute saves and restores the device memory
    // a kernel may write, and a pool of most of the GPU made every kernel take seconds. It
    // holds what the run needs, at least 4 GiB: blocks are handed out in order and never freed,
    // so the warm-up chunk, then each sequence's context and steps.
    let profiling = mode.ends_with("-profile");
    // decode-profile's sequences.
    let profile_rows: usize = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(128);
    let profile_pool = {
        let c = src.config();
        let per_token = c.num_layers * 2 * c.num_kv_heads * c.head_dim * 2;
        let need = if mode == "decode-profile" {
            (chunk + profile_rows * (depth + 64)) * per_token * 5 / 4
        } else {
            0
        };
        need.max(4 << 30)
    };
    let opts = CudaOptions {
        prefill_chunk: chunk,
        max_seqs: 128,
        max_context: Some(MAX_CONTEXT),
        kv_cache_bytes: profiling.then_some(profile_pool),
        ..CudaOptions::default()
    };
    let b = CudaBackend::new(&src, opts, None).context("starting the CUDA backend")?;
    let load = t.elapsed().as_secs_f64();
    eprintln!("dummy:{preset} loaded in {load:.2}s\n{}", b.describe());
    let bs = b.kv_geometry().block_size;
    let vocab = b.config().vocab_size;
    let mut bench = Bench {
        b,
        chunk,
        next_block: 0,
        bs,
        vocab,
        prefill_busy_s: 0.0,
        prefill_idle_s: 0.0,
        ahead: std::env::var("KILN_BENCH_AHEAD").map_or(true, |v| v != "0"),
    };
    bench.prefill(chunk, 0, 99)?; // warm-up
    let mut json = vec![
        format!("\"model\":\"dummy:{preset}\""),
        format!("\"load_s\":{load:.3}"),
        format!("\"prefill_chunk\":{chunk}"),
    ];
    if mode == "decode-profile" {
        // Steps 0-2 warm up (graphs captured, caches filled); steps 3 and 4 are profiled.
        let rows = profile_rows;
        // The profiler calls act on the context current on this thread.
        bench.b.gpu().bind()?;
        let tps = bench.decode_with(rows, depth, 4, |step| {
            match step {
                3 => cudarc::driver::profiler_start()?,
                5 => cudarc::driver::profiler_stop()?,
                _ => {}
            }
            Ok(())
        })?;
        eprintln!("BENCH decode-profile batch {rows} depth {depth}: {tps:.1} tok/s over steps 1-4");
        println!("{{\"decode_profile_b{rows}_d{depth}_tok_s\":{tps:.2}}}");
        return Ok(());
    }
    if mode == "prefill-profile" {
        // One whole prompt first (graphs and caches warm), then the same length again with
        // its last chunk profiled.
        let len: usize = std::env::args()
            .nth(3)
            .and_then(|s| s.parse().ok())
            .unwrap_or(8192);
        let last = (len - 1) / chunk * chunk;
        bench.prefill(len, 0, 5)?;
        bench.b.gpu().bind()?;
        let (secs, _, _) = bench.prefill_with(len, 0, 6, |start| {
            if start == last {
                cudarc::driver::profiler_start()?;
            } else if start == len {
                cudarc::driver::profiler_stop()?;
            }
            Ok(())
        })?;
        let tps = len as f64 / secs;
        eprintln!(
            "BENCH prefill-profile {len}: {tps:.0} tok/s, chunk {chunk} from {last} profiled"
        );
        println!("{{\"prefill_profile_{len}_tok_s\":{tps:.1}}}");
        return Ok(());
    }
    if verify_only {
        // Verify steps of 1 + k rows of one sequence against a 1-row step, depth 512 and 8k.
        for depth in [512, 8192] {
            let one = bench.verify(depth, 0, 100)?;
            let mut line = format!("BENCH verify depth {depth}: 1 row {one:.3} ms");
            for k in 1..=8 {
                let ms = bench.verify(depth, k, 100)?;
                line += &format!("; {} rows {ms:.3} ms ({:.2}x)", k + 1, ms / one);
                json.push(format!("\"verify_d{depth}_rows{}_ms\":{ms:.4}", k + 1));
            }
            json.push(format!("\"verify_d{depth}_rows1_ms\":{one:.4}"));
            eprintln!("{line}");
        }
        println!("{{{}}}", json.join(","));
        return Ok(());
    }
    let prefills: &[(usize, f64)] = if decode_only {
        &[]
    } else {
        &[(2048, 54_000.0), (8192, 50_000.0), (32_768, 35_000.0)]
    };
    let decodes: &[(usize, usize, Option<f64>)] = if prefill_only {
        &[]
    } else if mode == "decode" {
        &[(1, 0, Some(270.0))]
    } else if deep {
        &[(1, 8192, Some(265.0)), (8, 8192, None), (32, 8192, None)]
    } else if mode == "decode-grid" {
        &[
            (1, 0, Some(270.0)),
            (8, 0, None),
            (32, 0, None),
            (128, 0, None),
            (1, 8192, Some(265.0)),
            (8, 8192, None),
            (32, 8192, None),
        ]
    } else if mode == "decode-tc" {
        &[(32, 0, None), (128, 0, None)]
    } else if mode == "decode-batch" {
        &[
            (1, 0, Some(270.0)),
            (8, 512, None),
            (32, 512, None),
            (128, 512, None),
        ]
    } else {
        &[
            (1, 0, Some(270.0)),
            (1, 8192, Some(265.0)),
            (8, 512, None),
            (32, 512, None),
            (128, 512, None),
        ]
    };
    for &(len, floor) in prefills {
        // The median of three prompts (one 2k prompt is ~50 ms: a single run spread by 3-4%).
        // Each run with its device time: what the host adds is the wall time less the steps'
        // busy spans and the idle between them.
        let mut runs = (0..PREFILL_RUNS)
            .map(|r| {
                let secs = bench.prefill(len, 0, len + r)?.0;
                Ok((secs, bench.prefill_busy_s, bench.prefill_idle_s))
            })
            .collect::<Result<Vec<(f64, f64, f64)>>>()?;
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (secs, busy, idle) = runs[PREFILL_RUNS / 2];
        let tps = len as f64 / secs;
        eprintln!(
            "BENCH prefill {len}: {tps:.0} tok/s ({:.1} ms, median of {PREFILL_RUNS}; {:.1}-{:.1}), {:.2} of the ~{floor:.0} tok/s floor; device busy {:.1} ms, idle between chunks {:.2} ms",
            secs * 1e3,
            runs[0].0 * 1e3,
            runs[PREFILL_RUNS - 1].0 * 1e3,
            tps / floor,
            busy * 1e3,
            idle * 1e3
        );
        json.push(format!("\"prefill_{len}_busy_ms\":{:.2}", busy * 1e3));
        json.push(format!("\"prefill_{len}_tok_s\":{tps:.1}"));
    }
    let short: &[usize] = if decode_only || deep || prefill_only {
        &[]
    } else {
        &[32, 128]
    };
    for &len in short {
        const REPS: usize = 20;
        let mut secs = 0.0;
        for rep in 0..REPS {
            secs += bench.prefill(len, 0, 1000 + rep)?.0;
        }
        let ms = secs / REPS as f64 * 1e3;
        eprintln!(
            "BENCH prompt {len}: {ms:.2} ms ({:.0} tok/s)",
            len as f64 / ms * 1e3
        );
        json.push(format!("\"prompt_{len}_ms\":{ms:.3}"));
    }
    for &(batch, depth, floor) in decodes {
        let tps = bench.decode(batch, depth, 64)?;
        let frac = floor
            .map(|f| format!(", {:.2} of the ~{f:.0} tok/s floor", tps / f))
            .unwrap_or_default();
        eprintln!("BENCH decode batch {batch} depth {depth}: {tps:.1} tok/s{frac}");
        json.push(format!("\"decode_b{batch}_d{depth}_tok_s\":{tps:.2}"));
    }
    if deep {
        // A verify step of 5 rows (4 drafts) at depth 8k against a plain decode step.
        let one = bench.verify(8192, 0, 50)?;
        let five = bench.verify(8192, 4, 50)?;
        eprintln!(
            "BENCH verify depth 8192: 5 rows {five:.3} ms, 1 row {one:.3} ms ({:.2}x)",
            five / one
        );
        json.push(format!("\"verify_d8192_rows5_ratio\":{:.3}", five / one));
    }
    let g = bench.b.graph_counters();
    eprintln!("graphs: {:?}", g);
    json.push(format!("\"cuda_graphs\":{}", bench.b.graphs_on()));
    println!("{{{}}}", json.join(","));
    Ok(())
}
