//! Exactness contract (b): a sequence's logits are the same bits whether it runs alone or in
//! a batch of 2, 7 or 32 with other sequences of different lengths and phases, at any row of
//! the step, prefilled whole or in chunks, with any number of threads.

use crate::support;

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_step::{Backend, ChunkInput};
use support::{configs, random_tokens, same_bits, shuffled_blocks, RandomSource, Rng};

const BLOCK: usize = 4;
const POOL: usize = 1200;

/// A sequence as the engine would drive it: a prompt prefilled in chunks, then forced
/// continuation tokens decoded one per step, starting at a given step.
struct Sim {
    tokens: Vec<u32>,
    prompt: usize,
    chunk: usize,
    start_step: usize,
    done: usize,
    table: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

impl Sim {
    fn next_len(&self, step: usize) -> usize {
        if step < self.start_step || self.done == self.tokens.len() {
            0
        } else if self.done < self.prompt {
            self.chunk.min(self.prompt - self.done)
        } else {
            1
        }
    }
}

/// Runs every sequence to the end, shuffling the chunk order each step.
fn run(b: &mut CpuBackend, sims: &mut [Sim], seed: u64) {
    let mut rng = Rng::new(seed);
    for step in 0.. {
        let mut order: Vec<usize> = (0..sims.len())
            .filter(|&i| sims[i].next_len(step) > 0)
            .collect();
        if order.is_empty() && sims.iter().all(|s| s.done == s.tokens.len()) {
            break;
        }
        rng.shuffle(&mut order);
        let lens: Vec<usize> = order.iter().map(|&i| sims[i].next_len(step)).collect();
        let chunks: Vec<ChunkInput<'_>> = order
            .iter()
            .zip(&lens)
            .map(|(&i, &n)| {
                let s = &sims[i];
                ChunkInput {
                    tokens: &s.tokens[s.done..s.done + n],
                    start_pos: s.done,
                    block_table: &s.table,
                    want_logits: s.done + n >= s.prompt,
                }
            })
            .collect();
        let wanted: Vec<usize> = chunks
            .iter()
            .zip(&order)
            .filter(|(c, _)| c.want_logits)
            .map(|(_, &i)| i)
            .collect();
        let logits = b.forward(&chunks).unwrap();
        let vocab = b.config().vocab_size;
        assert_eq!(logits.len(), wanted.len() * vocab);
        for (row, &i) in logits.chunks_exact(vocab).zip(&wanted) {
            sims[i].logits.push(row.to_vec());
        }
        for (&i, &n) in order.iter().zip(&lens) {
            sims[i].done += n;
        }
    }
}

fn new_backend(src: &RandomSource, threads: Option<usize>) -> CpuBackend {
    let mut b = CpuBackend::new(
        src,
        CpuOptions {
            kv_blocks: POOL,
            block_size: BLOCK,
            threads,
            host_blocks: 0,
            fp8: false,
        },
        None,
    )
    .unwrap();
    b.poison_kv_cache();
    b
}

/// The target sequence (prompt 37, 5 decode steps) with the given prefill chunk size, plus
/// `neighbours` others of random lengths, chunk sizes and start steps.
fn sims(vocab: usize, target_chunk: usize, neighbours: usize, seed: u64) -> Vec<Sim> {
    let mut rng = Rng::new(seed);
    let mut blocks = shuffled_blocks(POOL, seed).into_iter();
    let mut sim =
        |prompt: usize, decode: usize, chunk: usize, start_step: usize, token_seed: u64| {
            let tokens = random_tokens(prompt + decode, vocab, token_seed);
            let table = blocks.by_ref().take(tokens.len().div_ceil(BLOCK)).collect();
            Sim {
                tokens,
                prompt,
                chunk,
                start_step,
                done: 0,
                table,
                logits: Vec::new(),
            }
        };
    let mut all = vec![sim(37, 5, target_chunk, 0, 1)];
    for n in 0..neighbours {
        let (prompt, decode, chunk, start) = (
            1 + rng.below(60),
            rng.below(8),
            1 + rng.below(24),
            rng.below(6),
        );
        all.push(sim(prompt, decode, chunk, start, 100 + n as u64));
    }
    all
}

#[test]
fn a_sequence_gets_the_same_logits_alone_and_in_any_batch() {
    for (name, cfg) in configs::all_with_gemma4() {
        let src = RandomSource::new(cfg.clone(), 31);
        let mut alone = sims(cfg.vocab_size, 37, 0, 1);
        run(&mut new_backend(&src, None), &mut alone, 0);
        let expected = &alone[0].logits;
        assert_eq!(expected.len(), 6);

        for (batch, target_chunk, threads) in [
            (2, 37, None),
            (7, 8, None),
            (32, 5, Some(3)),
            (32, 37, Some(1)),
        ] {
            let mut batched = sims(cfg.vocab_size, target_chunk, batch - 1, batch as u64);
            run(&mut new_backend(&src, threads), &mut batched, batch as u64);
            let got = &batched[0].logits;
            assert_eq!(got.len(), expected.len());
            for (step, (g, e)) in got.iter().zip(expected).enumerate() {
                assert!(
                    same_bits(g, e),
                    "{name}: batch {batch}, chunk {target_chunk}, threads {threads:?}: step {step} differs"
                );
            }
            assert!(batched
                .iter()
                .all(|s| s.logits.iter().flatten().all(|v| v.is_finite())));
        }
    }
}

#[test]
fn portable_kernels_pass_the_same_test() {
    support::rerun_with_portable_kernels(
        module_path!(),
        "a_sequence_gets_the_same_logits_alone_and_in_any_batch",
    );
}
