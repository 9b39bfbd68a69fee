//! Exactness contract (a): a prompt prefilled whole, in chunks of any sizes, or token by token
//! gives the same logits, bit for bit, and so do the decode steps that follow.

use crate::support;

use kiln_step::{Backend, ChunkInput};
use support::{
    backend, configs, prefill_then_decode, random_tokens, run_in_chunks, same_bits,
    shuffled_blocks, RandomSource,
};

const PROMPT: usize = 40;
const DECODE: usize = 6;

#[test]
fn whole_chunked_and_token_by_token_prefill_give_identical_logits() {
    for (name, cfg) in configs::all_with_gemma4() {
        let src = RandomSource::new(cfg.clone(), 21);
        let tokens = random_tokens(PROMPT + DECODE, cfg.vocab_size, 8);
        for block_size in [4, 16] {
            let pool = 64;
            let mut b = backend(&src, pool, block_size);
            let blocks = (PROMPT + DECODE).div_ceil(block_size);
            let tables: Vec<Vec<u32>> = shuffled_blocks(pool, 9)
                .chunks(blocks)
                .take(3)
                .map(|c| c.to_vec())
                .collect();

            let whole = prefill_then_decode(&mut b, &tokens, &tables[0], &[PROMPT]);
            let chunk_sizes = [1, 3, 7, 16, 13];
            let chunked = prefill_then_decode(&mut b, &tokens, &tables[1], &chunk_sizes);
            let one_by_one = prefill_then_decode(&mut b, &tokens, &tables[2], &[1; PROMPT]);

            // Chunk ends: every position the chunked run produced logits for.
            let mut end = 0;
            for (i, n) in chunk_sizes.iter().enumerate() {
                end += n;
                assert!(
                    same_bits(&chunked[i], &one_by_one[end - 1]),
                    "{name} bs {block_size}: position {} differs",
                    end - 1
                );
            }
            // End of prompt and the decode steps after it.
            for step in 0..=DECODE {
                let (w, c, t) = (
                    &whole[step],
                    &chunked[chunk_sizes.len() - 1 + step],
                    &one_by_one[PROMPT - 1 + step],
                );
                assert!(
                    same_bits(w, c) && same_bits(w, t),
                    "{name} bs {block_size}: step {step} after the prompt differs"
                );
                assert!(w.iter().all(|v| v.is_finite()), "{name}: non-finite logits");
            }
        }
    }
}

#[test]
fn portable_kernels_pass_the_same_test() {
    support::rerun_with_portable_kernels(
        module_path!(),
        "whole_chunked_and_token_by_token_prefill_give_identical_logits",
    );
}

#[test]
fn a_prefill_without_logits_returns_none_and_changes_nothing_after_it() {
    let src = RandomSource::new(configs::qwen2(), 5);
    let tokens = random_tokens(20, 101, 6);
    let table: Vec<u32> = (0..5).collect();
    let mut b = backend(&src, 8, 4);
    let silent = ChunkInput {
        tokens: &tokens[..19],
        start_pos: 0,
        block_table: &table,
        want_logits: false,
    };
    assert!(b.forward(&[silent]).unwrap().is_empty());
    let last = ChunkInput {
        tokens: &tokens[19..],
        start_pos: 19,
        block_table: &table,
        want_logits: true,
    };
    let after_silent = b.forward(&[last]).unwrap();

    let mut fresh = backend(&src, 8, 4);
    let whole = run_in_chunks(&mut fresh, &tokens, &table, &[20]);
    assert!(same_bits(&after_silent, &whole[0]));
}
