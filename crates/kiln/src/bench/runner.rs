//! Drives a [`Backend`] the way the engine does: block tables from the engine's block manager,
//! prompts split into prefill chunks, one decode row per stream per step, each row sampled by
//! the engine's sampler and fed back. Every timing is wall time around forwards that end in the
//! backend's host synchronisation, which is what a user waits for.

use std::time::Instant;

use anyhow::{anyhow, ensure};
use kiln_engine::block_manager::BlockManager;
use kiln_engine::sampler::{sample, History};
use kiln_engine::scheduler::chunk_len;
use kiln_engine::SamplingParams;
use kiln_step::sampling::{sample_row, splitmix64, uniform};
use kiln_step::{Backend, ChunkInput, RowSampling, SampleError, Sampled, StepOutput, Want};

use super::stats::Spread;

/// Decode warm-up runs this many steps at most: enough to touch every kernel of the shape.
const DECODE_WARMUP_STEPS: usize = 16;

/// Timings of one prompt length over the repeats, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillTiming {
    pub tokens: usize,
    /// The forwards of all chunks, up to the last chunk's logits on the host.
    pub forward_s: Spread,
    /// Start of the prompt to the first token sampled.
    pub ttft_s: Spread,
}

/// A prompt whose leading tokens are cached, against the same prompt cold, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumedTiming {
    /// Tokens of history (cached) and of the new turn after it.
    pub history: usize,
    pub new_tokens: usize,
    /// Prompt tokens the cache held.
    pub cached: usize,
    /// Start of the prompt to its first token, with nothing cached.
    pub cold_ttft_s: Spread,
    /// The same with the history cached.
    pub ttft_s: Spread,
    /// The same with the history copied back from the host tier (when the backend has one).
    pub host_ttft_s: Option<Spread>,
}

/// Timings of one decode case over the repeats, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeTiming {
    pub depth: usize,
    pub concurrency: usize,
    /// Decode steps per run; each step makes one token per stream.
    pub steps: usize,
    pub elapsed_s: Spread,
}

/// How decode rows pick their tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecodeMode {
    /// Greedy: the backend's argmax (`Want::Argmax`, on the device where it has one), as the
    /// engine asks when every request of a step is greedy.
    Greedy,
    /// Greedy from logits copied to the host.
    HostGreedy,
    /// Temperature and top-p with a per-stream seed: the backend's sampler (`Want::Sample`, on
    /// the device where it has one) unless `on_host`, which copies the logits to the host and
    /// samples them there, on one thread.
    Sampled {
        temperature: f32,
        top_p: f32,
        on_host: bool,
    },
}

/// Streams filled to a depth, ready to decode from it.
pub struct Streams {
    ids: Vec<u64>,
    first_tokens: Vec<u32>,
    depth: usize,
}

pub struct Runner<'a> {
    backend: &'a mut dyn Backend,
    blocks: BlockManager,
    vocab: usize,
    chunk: usize,
    next_seq: u64,
    rng: u64,
    mode: DecodeMode,
}

impl<'a> Runner<'a> {
    pub fn new(backend: &'a mut dyn Backend, vocab: usize, chunk: usize) -> Runner<'a> {
        // Blocks become findable only where a case asks (`resumed`); lookups only there too.
        // A backend keeping its sliding-window layers' KV as a ring gives each sequence its
        // first blocks from the ring-capable ids, as the engine's scheduler does, and has no
        // prefix cache.
        let blocks = match backend.kv_ring() {
            Some(ring) => BlockManager::with_kv_ring(backend.kv_geometry(), ring),
            None => BlockManager::with_prefix_cache(backend.kv_geometry())
                .with_host_tier(backend.host_blocks()),
        };
        Runner {
            backend,
            blocks,
            vocab: vocab.max(1),
            chunk: chunk.max(1),
            next_seq: 0,
            rng: 0x6b69_6c6e,
            mode: DecodeMode::HostGreedy,
        }
    }

    /// Whether greedy decode steps take the backend's on-device argmax, as the engine's
    /// greedy-only steps do.
    pub fn set_mode(&mut self, mode: DecodeMode) {
        self.mode = mode;
    }

    /// Prefills a prompt of `len` random tokens `warmup + repeats` times into the same blocks.
    pub fn prefill(
        &mut self,
        len: usize,
        warmup: usize,
        repeats: usize,
    ) -> anyhow::Result<PrefillTiming> {
        let seq = self.new_sequence(len)?;
        let prompt = self.random_tokens(len);
        let (mut forward, mut ttft) = (Vec::new(), Vec::new());
        for run in 0..warmup + repeats {
            let started = Instant::now();
            let logits = self.run_prompt(seq, &prompt, 0, true)?;
            let forward_s = started.elapsed().as_secs_f64();
            greedy_rows(&logits, self.vocab)?;
            let ttft_s = started.elapsed().as_secs_f64();
            if run >= warmup {
                forward.push(forward_s);
                ttft.push(ttft_s);
            }
        }
        self.blocks.release(seq);
        Ok(PrefillTiming {
            tokens: len,
            forward_s: spread(&forward)?,
            ttft_s: spread(&ttft)?,
        })
    }

    /// The first token of a prompt of `history` tokens and a new turn of `new_tokens`: cold,
    /// then with the history's blocks in the prefix cache (as the engine finds them when a chat
    /// sends its conversation again), `warmup + repeats` times each.
    pub fn resumed(
        &mut self,
        history: usize,
        new_tokens: usize,
        warmup: usize,
        repeats: usize,
    ) -> anyhow::Result<ResumedTiming> {
        anyhow::ensure!(
            self.blocks.prefix_cache_on(),
            "a resumed prompt needs the prefix cache, which a KV ring turns off (unset KILN_KV_RING)"
        );
        let mut prompt = self.random_tokens(history);
        prompt.extend(self.random_tokens(new_tokens));
        let bs = self.blocks.block_size();
        let mut cold = Vec::new();
        for run in 0..warmup + repeats {
            let seq = self.new_sequence(prompt.len())?;
            let started = Instant::now();
            let logits = self.run_prompt(seq, &prompt, 0, true)?;
            greedy_rows(&logits, self.vocab)?;
            if run >= warmup {
                cold.push(started.elapsed().as_secs_f64());
            }
            self.blocks.release(seq);
        }
        // The earlier turn: its blocks become cached as its prefill runs.
        let earlier = self.new_sequence(history)?;
        self.run_prompt(earlier, &prompt[..history], 0, false)?;
        self.blocks.cache_computed(earlier, &prompt, history / bs);
        self.blocks.release(earlier);
        let mut warm = Vec::new();
        let mut cached = 0;
        for run in 0..warmup + repeats {
            let (secs, hit) = self.resumed_run(&prompt)?;
            if run >= warmup {
                warm.push(secs);
            }
            cached = hit;
        }
        // From the host tier: each run first pushes the history out of the pool (a filler takes
        // every free block, so the cached ones are copied to the host), untimed.
        let mut host = Vec::new();
        if self.backend.host_blocks() > history / bs {
            for run in 0..warmup + repeats {
                let filler = self.next_seq;
                self.next_seq += 1;
                let all = self.blocks.num_free() * bs;
                ensure!(
                    self.blocks.grow(filler, all),
                    "the filler takes every free block"
                );
                self.backend.copy_blocks(&self.blocks.take_copies())?;
                self.blocks.release(filler);
                let (secs, hit) = self.resumed_run(&prompt)?;
                ensure!(
                    hit == cached,
                    "the host tier gave {hit} tokens, the pool {cached}"
                );
                if run >= warmup {
                    host.push(secs);
                }
            }
        }
        Ok(ResumedTiming {
            history,
            new_tokens,
            cached,
            cold_ttft_s: spread(&cold)?,
            ttft_s: spread(&warm)?,
            host_ttft_s: (!host.is_empty()).then(|| spread(&host)).transpose()?,
        })
    }

    /// One timed resumed prompt: the cached prefix taken (and any copies back from the host
    /// tier made), the rest prefilled, the first token picked. Returns (seconds, cached tokens).
    fn resumed_run(&mut self, prompt: &[u32]) -> anyhow::Result<(f64, usize)> {
        let bs = self.blocks.block_size();
        let seq = self.next_seq;
        self.next_seq += 1;
        let started = Instant::now();
        let hit = self
            .blocks
            .take_cached(seq, prompt, prompt.len().saturating_sub(2) / bs);
        ensure!(
            self.blocks.grow(seq, prompt.len()),
            "the KV pool has no room for the resumed prompt"
        );
        self.backend.copy_blocks(&self.blocks.take_copies())?;
        let logits = self.run_prompt(seq, &prompt[hit * bs..], hit * bs, true)?;
        greedy_rows(&logits, self.vocab)?;
        let secs = started.elapsed().as_secs_f64();
        self.blocks.release(seq);
        Ok((secs, hit * bs))
    }

    /// Makes `count` sequences with `depth` random tokens in the KV cache and room for `steps`
    /// more. The fill is not timed.
    pub fn fill_streams(
        &mut self,
        count: usize,
        depth: usize,
        steps: usize,
    ) -> anyhow::Result<Streams> {
        let mut ids = Vec::with_capacity(count);
        let mut first_tokens = Vec::with_capacity(count);
        for _ in 0..count {
            let seq = self.new_sequence(depth + steps)?;
            let prompt = self.random_tokens(depth);
            if depth > 0 {
                self.run_prompt(seq, &prompt, 0, false)?;
            }
            ids.push(seq);
            first_tokens.push(self.random_tokens(1)[0]);
        }
        Ok(Streams {
            ids,
            first_tokens,
            depth,
        })
    }

    /// Decodes `steps` tokens on the first `concurrency` streams, `warmup + repeats` times from
    /// the same depth (each run overwrites the slots of the one before).
    pub fn decode(
        &mut self,
        streams: &Streams,
        concurrency: usize,
        steps: usize,
        warmup: usize,
        repeats: usize,
    ) -> anyhow::Result<DecodeTiming> {
        ensure!(
            concurrency <= streams.ids.len(),
            "{concurrency} streams asked for, {} filled",
            streams.ids.len()
        );
        for _ in 0..warmup {
            self.decode_run(streams, concurrency, steps.min(DECODE_WARMUP_STEPS))?;
        }
        let mut elapsed = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            elapsed.push(self.decode_run(streams, concurrency, steps)?);
        }
        Ok(DecodeTiming {
            depth: streams.depth,
            concurrency,
            steps,
            elapsed_s: spread(&elapsed)?,
        })
    }

    /// Gives the streams' blocks back.
    pub fn release(&mut self, streams: Streams) {
        for seq in streams.ids {
            self.blocks.release(seq);
        }
    }

    /// One timed run: `steps` steps of one decode row per stream.
    fn decode_run(
        &mut self,
        streams: &Streams,
        concurrency: usize,
        steps: usize,
    ) -> anyhow::Result<f64> {
        let ids = &streams.ids[..concurrency];
        let mut tokens = streams.first_tokens[..concurrency].to_vec();
        let started = Instant::now();
        for step in 0..steps {
            let chunks: Vec<ChunkInput<'_>> = ids
                .iter()
                .zip(&tokens)
                .map(|(&seq, token)| ChunkInput {
                    tokens: std::slice::from_ref(token),
                    start_pos: streams.depth + step,
                    block_table: self.blocks.table(seq),
                    want_logits: true,
                })
                .collect();
            let next = step_tokens(&mut *self.backend, self.mode, self.vocab, &chunks, step)?;
            drop(chunks);
            tokens = next;
            ensure!(
                tokens.len() == concurrency,
                "the backend returned {} logit rows for {concurrency} decode rows",
                tokens.len()
            );
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Runs `tokens` at `start..` in prefill chunks; the last chunk asks for logits when `want_last`.
    fn run_prompt(
        &mut self,
        seq: u64,
        tokens: &[u32],
        start: usize,
        want_last: bool,
    ) -> anyhow::Result<Vec<f32>> {
        let mut logits = Vec::new();
        let mut at = 0;
        while at < tokens.len() {
            // Cut as the scheduler cuts: no chunk of one token, none leaving one.
            let len = chunk_len(tokens.len() - at, self.chunk, self.chunk >= 3);
            let end = at + len;
            let chunk = ChunkInput {
                tokens: &tokens[at..end],
                start_pos: start + at,
                block_table: self.blocks.table(seq),
                want_logits: want_last && end == tokens.len(),
            };
            logits = self.backend.forward(std::slice::from_ref(&chunk))?;
            at = end;
        }
        Ok(logits)
    }

    fn new_sequence(&mut self, tokens: usize) -> anyhow::Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        ensure!(
            self.blocks.grow(seq, tokens),
            "the KV pool ({} blocks) has no room for {tokens} more tokens",
            self.blocks.num_free()
        );
        Ok(seq)
    }

    /// Token ids spread over the vocabulary, the same on every run of the benchmark.
    fn random_tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| {
                self.rng = splitmix64(self.rng);
                (self.rng % self.vocab as u64) as u32
            })
            .collect()
    }
}

fn spread(samples: &[f64]) -> anyhow::Result<Spread> {
    Spread::of(samples)
        .ok_or_else(|| anyhow!("no usable timing (no repeat ran, or a clock failed)"))
}

/// One decode step's forward on `backend` and the next token of every stream, as `mode` says.
fn step_tokens(
    backend: &mut dyn Backend,
    mode: DecodeMode,
    vocab: usize,
    chunks: &[ChunkInput<'_>],
    step: usize,
) -> anyhow::Result<Vec<u32>> {
    let (temperature, top_p, on_host) = match mode {
        DecodeMode::Greedy => return tokens_of(backend.step(chunks, Want::Argmax)?),
        DecodeMode::HostGreedy => return greedy_rows(&backend.forward(chunks)?, vocab),
        DecodeMode::Sampled {
            temperature,
            top_p,
            on_host,
        } => (temperature, top_p, on_host),
    };
    let rows: Vec<RowSampling> = (0..chunks.len())
        .map(|i| RowSampling {
            temperature,
            top_k: 0,
            top_p,
            min_p: 0.0,
            uniform: uniform(i as u64, step as u64),
            logprobs: None,
        })
        .collect();
    if !on_host {
        return tokens_of(backend.step(chunks, Want::Sample(&rows))?);
    }
    let logits = backend.forward(chunks)?;
    let sampled: Vec<Result<Sampled, SampleError>> = logits
        .chunks_exact(vocab)
        .zip(&rows)
        .map(|(row, r)| sample_row(row, r))
        .collect();
    tokens_of(StepOutput::Tokens(sampled))
}

/// The token ids of a step that returned tokens.
fn tokens_of(output: StepOutput) -> anyhow::Result<Vec<u32>> {
    let StepOutput::Tokens(sampled) = output else {
        anyhow::bail!("the backend returned logits where tokens were asked");
    };
    sampled
        .into_iter()
        .map(|s| {
            s.map(|s| s.id)
                .map_err(|e| anyhow!("sampling the benchmark's token: {e}"))
        })
        .collect()
}

/// The engine's greedy choice for each row of logits.
fn greedy_rows(logits: &[f32], vocab: usize) -> anyhow::Result<Vec<u32>> {
    ensure!(
        !logits.is_empty() && logits.len().is_multiple_of(vocab),
        "the backend returned {} logits, not whole rows of {}",
        logits.len(),
        vocab
    );
    let greedy = SamplingParams::default();
    let history = History {
        prompt: &[],
        generated: &[],
    };
    logits
        .chunks_exact(vocab)
        .map(|row| {
            sample(row, &greedy, history, 0, 0, None)
                .map(|s| s.id)
                .map_err(|e| anyhow!("sampling the benchmark's token: {e}"))
        })
        .collect()
}
