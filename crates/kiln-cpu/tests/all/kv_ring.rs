//! The sliding-window layers' KV kept as a ring of blocks per sequence (kiln_step::KvRing):
//! the same logits bit for bit as the whole cache, across the window's edge and past many
//! wraps of the ring, prefilled whole, in chunks or token by token, alone or beside other
//! sequences; and the ring layers' pool holds only the ring-capable blocks.

use crate::support;

use kiln_cpu::CpuBackend;
use kiln_step::{Backend, ChunkInput, KvRing};
use support::{backend, configs, random_tokens, same_bits, RandomSource};

const BS: usize = 4;
const POOL: usize = 200;

/// A sequence's table: its first `ring.blocks` blocks ring-capable (from `first_ring`), the
/// rest from `first_other` on.
fn table(ring: &KvRing, n: usize, first_ring: u32, first_other: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| match (i as usize) < ring.blocks {
            true => first_ring + i,
            false => first_other + i,
        })
        .collect()
}

/// Logits after each chunk (sizes summing to the prompt), then one decode step per token.
fn run(b: &mut CpuBackend, tokens: &[u32], table: &[u32], sizes: &[usize]) -> Vec<Vec<f32>> {
    let mut rows = Vec::new();
    let mut start = 0;
    for &n in sizes.iter().chain(std::iter::repeat(&1)) {
        if start >= tokens.len() {
            break;
        }
        let n = n.min(tokens.len() - start);
        rows.push(
            b.forward(&[ChunkInput {
                tokens: &tokens[start..start + n],
                start_pos: start,
                block_table: table,
                want_logits: true,
            }])
            .unwrap(),
        );
        start += n;
    }
    rows
}

#[test]
fn a_ring_gives_the_bits_of_the_whole_cache() {
    for (name, cfg) in [
        ("gemma4", configs::gemma4()),
        ("mistral", configs::mistral()),
    ] {
        let src = RandomSource::new(cfg.clone(), 31);
        let window = cfg.sliding_window.unwrap();
        // Past the window and past many wraps of a ring of a few blocks.
        let tokens = random_tokens(12 * window + 37, cfg.vocab_size, 32);
        let blocks = tokens.len().div_ceil(BS);
        let mut whole = backend(&src, POOL, BS);
        let plain_table: Vec<u32> = (0..blocks as u32).collect();
        for max_chunk in [1, 3, 7] {
            let mut ringed = backend(&src, POOL, BS);
            let ring = ringed.enable_kv_ring(2, max_chunk).unwrap();
            assert_eq!(ring.blocks, KvRing::blocks_for(window, max_chunk, BS));
            assert!(
                ring.blocks * BS < tokens.len() / 4,
                "{name}: the ring must wrap"
            );
            ringed.poison_kv_cache();
            let t = table(&ring, blocks, 0, ring.capable as u32);
            let sizes: Vec<usize> = [max_chunk, 2.min(max_chunk), max_chunk]
                .into_iter()
                .cycle()
                .take(tokens.len())
                .collect();
            let want = run(&mut whole, &tokens, &plain_table, &sizes);
            let got = run(&mut ringed, &tokens, &t, &sizes);
            assert_eq!(want.len(), got.len());
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert!(same_bits(w, g), "{name} chunk {max_chunk}: row {i} differs");
            }
        }
    }
}

#[test]
fn sequences_beside_each_other_keep_their_own_rings() {
    let cfg = configs::gemma4();
    let src = RandomSource::new(cfg.clone(), 41);
    let mut ringed = backend(&src, POOL, BS);
    let ring = ringed.enable_kv_ring(3, 4).unwrap();
    ringed.poison_kv_cache();
    let n = 9 * cfg.sliding_window.unwrap() + 3;
    let seqs: Vec<Vec<u32>> = (0..3)
        .map(|s| random_tokens(n + s, cfg.vocab_size, 50 + s as u64))
        .collect();
    let blocks = (n + 2).div_ceil(BS);
    let tables: Vec<Vec<u32>> = (0..3)
        .map(|s| {
            let first_other = ring.capable as u32 + (s * blocks) as u32;
            table(&ring, blocks, (s * ring.blocks) as u32, first_other)
        })
        .collect();
    // Alone, on a fresh backend each, in chunks of 4 then decode.
    let alone: Vec<Vec<Vec<f32>>> = (0..3)
        .map(|s| {
            let mut b = backend(&src, POOL, BS);
            b.enable_kv_ring(3, 4).unwrap();
            run(&mut b, &seqs[s], &tables[s], &[4; 8])
        })
        .collect();
    // Together: each step one chunk (or token) of each, in lockstep.
    let mut done = [0usize; 3];
    let mut rows: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 3];
    while (0..3).any(|s| done[s] < seqs[s].len()) {
        let live: Vec<usize> = (0..3).filter(|&s| done[s] < seqs[s].len()).collect();
        // Steps of at most 4 tokens over all sequences (the capacity): one sequence's chunk.
        for &s in &live {
            let len = if done[s] < 32 { 4 } else { 1 };
            let len = len.min(seqs[s].len() - done[s]);
            let out = ringed
                .forward(&[ChunkInput {
                    tokens: &seqs[s][done[s]..done[s] + len],
                    start_pos: done[s],
                    block_table: &tables[s],
                    want_logits: true,
                }])
                .unwrap();
            rows[s].push(out);
            done[s] += len;
        }
    }
    for s in 0..3 {
        assert_eq!(rows[s].len(), alone[s].len());
        for (i, (a, b)) in alone[s].iter().zip(&rows[s]).enumerate() {
            assert!(same_bits(a, b), "sequence {s} row {i}");
        }
    }
}

#[test]
fn steps_outside_the_ring_are_refused() {
    let cfg = configs::gemma4();
    let src = RandomSource::new(cfg.clone(), 51);
    let mut b = backend(&src, POOL, BS);
    let ring = b.enable_kv_ring(2, 3).unwrap();
    assert_eq!(b.kv_ring(), Some(ring));
    let tokens = [1u32; 4];
    let t: Vec<u32> = (0..20).collect();
    let step = |n: usize, table: &[u32]| {
        let mut b2 = backend(&src, POOL, BS);
        b2.enable_kv_ring(2, 3).unwrap();
        b2.forward(&[ChunkInput {
            tokens: &tokens[..n],
            start_pos: 0,
            block_table: table,
            want_logits: true,
        }])
        .map(|_| ())
    };
    assert!(step(3, &t).is_ok());
    // Longer than the step capacity the ring was sized for.
    assert!(step(4, &t).is_err());
    // A first block outside the ring-capable ids.
    let mut bad = t.clone();
    bad[0] = ring.capable as u32;
    assert!(step(3, &bad).unwrap_err().to_string().contains("ring"));
    // Models with no window have no ring.
    let mut llama = backend(&RandomSource::new(configs::llama(), 1), POOL, BS);
    assert!(llama.enable_kv_ring(2, 3).is_err());
}
