//! CUDA graphs vs eager launches: greedy continuations of 256 tokens are identical, on every
//! fixture model (GGUF and HF), on dummy:llama3-8b, on Gemma 4 dummies (whose 256 decode
//! steps cross the sliding window) and, in a test of their own, on Q4_K_M dummies
//! (block-quantised weights), for one sequence (its logits bit for bit as well) and for 7 sequences of different prompt lengths
//! joining a running batch at different steps (decode-only, prefill-only and mixed steps, padded
//! to their buckets). Contexts shorter than prompt + 256 (the qwen3 fixture's 256) end
//! generation at the context. The same in f32 on every fixture, a head-dim-128 dummy model and
//! the Gemma 4 dummies.

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, Checks};
use kiln_cuda::{CudaBackend, StoreType};
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};
use models::{argmax, cuda_backend_in, dummy_mid, fixture_sources, Blocks};

const GEN: usize = 256;
/// Prompt lengths of the mixed batch and the step at which each sequence joins.
const MIXED: [(usize, usize); 7] = [
    (3, 0),
    (17, 0),
    (40, 3),
    (9, 7),
    (64, 7),
    (100, 12),
    (30, 20),
];

fn prompt(len: usize, salt: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|i| ((i * 7919 + salt * 104_729 + 11) % vocab) as u32)
        .collect()
}

/// FNV-1a over a row's bits: two rows with the same hash are taken as bit-identical.
fn bits_hash(row: &[f32]) -> u64 {
    row.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
        (h ^ v.to_bits() as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One sequence: prompt in one step, then greedy decode; the tokens and each logits row's hash.
fn single(b: &mut CudaBackend, p: &[u32], gen: usize, table: &[u32]) -> (Vec<u32>, Vec<u64>) {
    let mut tokens = p.to_vec();
    let (mut out, mut hashes) = (Vec::new(), Vec::new());
    let mut done = 0;
    while out.len() < gen {
        let row = b
            .forward(&[ChunkInput {
                tokens: &tokens[done..],
                start_pos: done,
                block_table: table,
                want_logits: true,
            }])
            .expect("forward");
        done = tokens.len();
        hashes.push(bits_hash(&row));
        let next = argmax(&row);
        out.push(next);
        tokens.push(next);
    }
    (out, hashes)
}

struct Running {
    tokens: Vec<u32>,
    done: usize,
    gen: usize,
    table: Vec<u32>,
}

/// The mixed batch through forward_greedy: each sequence's generated tokens.
fn mixed(b: &mut CudaBackend, seqs: &mut [Running], joins: &[usize]) -> Vec<Vec<u32>> {
    let prompts: Vec<usize> = seqs.iter().map(|s| s.tokens.len()).collect();
    let mut out = vec![Vec::new(); seqs.len()];
    for s in seqs.iter_mut() {
        s.done = 0;
    }
    let mut step = 0;
    while out.iter().zip(seqs.iter()).any(|(o, s)| o.len() < s.gen) {
        let active: Vec<usize> = (0..seqs.len())
            .filter(|&i| joins[i] <= step && out[i].len() < seqs[i].gen)
            .collect();
        let chunks: Vec<ChunkInput<'_>> = active
            .iter()
            .map(|&i| {
                let s = &seqs[i];
                ChunkInput {
                    tokens: &s.tokens[s.done..],
                    start_pos: s.done,
                    block_table: &s.table,
                    want_logits: true,
                }
            })
            .collect();
        let ids = if chunks.is_empty() {
            Vec::new()
        } else {
            b.forward_greedy(&chunks).expect("forward_greedy")
        };
        drop(chunks);
        for (&i, id) in active.iter().zip(ids) {
            let s = &mut seqs[i];
            s.done = s.tokens.len();
            s.tokens.push(id);
            out[i].push(id);
        }
        step += 1;
    }
    for (s, &len) in seqs.iter_mut().zip(&prompts) {
        s.tokens.truncate(len);
    }
    out
}

fn compare(c: &mut Checks, name: &str, src: &dyn WeightSource, dtype: StoreType) {
    let mut b = cuda_backend_in(src, 2048, dtype);
    let name = &format!("{name} {dtype}");
    let vocab = src.config().vocab_size;
    let ctx = src.config().max_position.min(8192);
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(&b);

    // One sequence.
    let p = prompt(21, 1, vocab);
    let gen = GEN.min(ctx - p.len());
    let table = blocks.take(p.len() + gen + 1, bs);
    b.set_graphs(true).expect("graphs on");
    let before = b.graph_counters();
    let (g_tok, g_hash) = single(&mut b, &p, gen, &table);
    let replays = b.graph_counters().replays - before.replays;
    b.set_graphs(false).expect("graphs off");
    let (e_tok, e_hash) = single(&mut b, &p, gen, &table);
    c.check(
        replays as usize == gen,
        format!(
            "{name}: batch 1, {gen} steps, {replays} ran as graph replays; {}",
            b.describe().lines().nth(2).unwrap_or("")
        ),
    );
    c.identical(
        &format!("{name}: batch 1, {gen} greedy tokens"),
        &g_tok,
        &e_tok,
    );
    c.identical(&format!("{name}: batch 1, logits bits"), &g_hash, &e_hash);

    // Seven sequences joining at different steps.
    let mut seqs: Vec<Running> = MIXED
        .iter()
        .enumerate()
        .map(|(i, &(len, _))| {
            let len = len.min(ctx / 2);
            let gen = GEN.min(ctx - len);
            Running {
                tokens: prompt(len, i + 2, vocab),
                done: 0,
                gen,
                table: blocks.take(len + gen + 1, bs),
            }
        })
        .collect();
    let joins: Vec<usize> = MIXED.iter().map(|m| m.1).collect();
    b.set_graphs(true).expect("graphs on");
    let before = b.graph_counters();
    let graph = mixed(&mut b, &mut seqs, &joins);
    let after = b.graph_counters();
    b.set_graphs(false).expect("graphs off");
    let eager = mixed(&mut b, &mut seqs, &joins);
    c.check(
        after.replays > before.replays && after.eager_steps == before.eager_steps,
        format!(
            "{name}: mixed batch ran {} steps as graph replays, {} captured on the way, {} eager",
            after.replays - before.replays,
            after.captures - before.captures,
            after.eager_steps - before.eager_steps
        ),
    );
    for (i, (g, e)) in graph.iter().zip(&eager).enumerate() {
        c.identical(
            &format!(
                "{name}: mixed batch sequence {i} (prompt {}, joins at step {}), {} greedy tokens",
                seqs[i].tokens.len(),
                joins[i],
                g.len()
            ),
            g,
            e,
        );
    }
}

/// Every fixture, then `dummy` (a preset name, or None for the head-dim-128 dummy model).
fn models(test: &str, dtype: StoreType, dummy: Option<&str>) {
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut c = Checks::new(test);
    let fixtures = fixture_sources();
    if fixtures.is_empty() && std::env::var("KILN_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("no fixture models found (set KILN_FIXTURES)");
    }
    for (name, src) in &fixtures {
        compare(&mut c, name, src.as_ref(), dtype);
    }
    match dummy {
        Some(preset) => {
            let src = DummySource::preset(preset).expect("a dummy preset");
            compare(&mut c, &format!("dummy:{preset}"), &src, dtype);
        }
        None => compare(&mut c, "dummy mid", &dummy_mid(), dtype),
    }
    let gemma = DummySource::preset("gemma4-tiny").expect("dummy:gemma4-tiny");
    compare(&mut c, "dummy:gemma4-tiny", &gemma, dtype);
    let wide = models::dummy_gemma_wide();
    compare(&mut c, "dummy gemma4-tiny, hd 512", &wide, dtype);
    c.finish();
}

/// Block-quantised weights (held quantised with KILN_GPU_QUANT=1): the prefill scratch and the
/// quantised launches in graphs.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_graphs_give_the_tokens_of_eager_launches_quantised() {
    let test = "graphs_parity_quantised";
    let Some(_gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut c = Checks::new(test);
    for preset in ["tiny:q4_k_m", "llama3-1b:q4_k_m"] {
        let src = DummySource::preset(preset).expect("a quantised preset");
        compare(&mut c, &format!("dummy:{preset}"), &src, StoreType::Bf16);
    }
    c.finish();
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_graphs_give_the_tokens_of_eager_launches() {
    models("graphs_parity", StoreType::Bf16, Some("llama3-8b"));
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_f32_graphs_give_the_tokens_of_eager_launches() {
    models("graphs_parity_f32", StoreType::F32, None);
}
