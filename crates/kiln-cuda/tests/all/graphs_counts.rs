//! CUDA graph bookkeeping over a run of 100 steps of growing length and two requests: the
//! start-up buckets are captured once, a mixed step's shape once when first seen, no step
//! captures again however long its context; a prompt too long for any bucket runs eagerly.
//! Rebuilding the KV pool records every held graph again and updates it in place (no new
//! instantiation), and the updated graphs give the same tokens as eager launches.

use crate::common;
use crate::common::models;

use common::{gpu_or_skip, Checks};
use kiln_cuda::graphs::GraphCounters;
use kiln_cuda::kv_cache::KvCache;
use kiln_cuda::CudaBackend;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput};
use models::{cuda_backend, dummy_mid, Blocks};

const STEPS: usize = 100;
/// Request A: a prompt past the largest prefill bucket, so its first step runs eagerly.
const PROMPT_A: usize = 300;
/// Request B joins at this step with a prompt that fits a bucket; A leaves at A_ENDS.
const B_JOINS: usize = 40;
const PROMPT_B: usize = 50;
const A_ENDS: usize = 70;

struct Req {
    tokens: Vec<u32>,
    done: usize,
    table: Vec<u32>,
}

/// Runs the two-request schedule; returns every generated token and the counters after
/// each step.
fn schedule(b: &mut CudaBackend, vocab: usize) -> (Vec<u32>, Vec<GraphCounters>) {
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(b);
    let mut req = |len: usize, salt: usize| Req {
        tokens: (0..len)
            .map(|i| ((i * 31 + salt * 977) % vocab) as u32)
            .collect(),
        done: 0,
        table: blocks.take(len + STEPS + 1, bs),
    };
    let mut reqs = [req(PROMPT_A, 1), req(PROMPT_B, 2)];
    let (mut out, mut counters) = (Vec::new(), Vec::new());
    for step in 0..STEPS {
        let active: Vec<usize> = [(0, step < A_ENDS), (1, step >= B_JOINS)]
            .iter()
            .filter(|a| a.1)
            .map(|a| a.0)
            .collect();
        let chunks: Vec<ChunkInput<'_>> = active
            .iter()
            .map(|&i| ChunkInput {
                tokens: &reqs[i].tokens[reqs[i].done..],
                start_pos: reqs[i].done,
                block_table: &reqs[i].table,
                want_logits: true,
            })
            .collect();
        let ids = b.forward_greedy(&chunks).expect("forward_greedy");
        drop(chunks);
        for (&i, id) in active.iter().zip(ids) {
            reqs[i].done = reqs[i].tokens.len();
            reqs[i].tokens.push(id);
            out.push(id);
        }
        counters.push(b.graph_counters());
    }
    (out, counters)
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_graphs_capture_once_per_shape_and_update_in_place() {
    let Some(_gpu) = gpu_or_skip("gpu_graphs_capture_once_per_shape_and_update_in_place") else {
        return;
    };
    let mut c = Checks::new("graphs_counts");
    let src = dummy_mid();
    let vocab = src.config().vocab_size;
    let mut b = cuda_backend(&src, 2048);
    b.set_graphs(true).expect("graphs on");
    let startup = b.graph_buckets().startup_shapes().len() as u64;
    let s0 = b.graph_counters();
    c.check(
        s0.captures == startup
            && s0.instantiations == startup
            && s0.updates == 0
            && s0.replays == 0,
        format!("start-up: {startup} bucket shapes, counters {s0:?}"),
    );

    let (graph_tokens, per_step) = schedule(&mut b, vocab);
    let end = *per_step.last().unwrap();
    // Only B's first step (decode row of A + B's prompt) is a shape not captured at start-up.
    let capturing: Vec<usize> = (0..STEPS)
        .filter(|&i| per_step[i].captures != if i == 0 { s0 } else { per_step[i - 1] }.captures)
        .collect();
    c.check(
        capturing == vec![B_JOINS],
        format!("steps that captured a graph: {capturing:?} (want only step {B_JOINS}, the first mixed step)"),
    );
    c.check(
        end.captures == startup + 1 && end.instantiations == startup + 1 && end.updates == 0,
        format!("after {STEPS} steps: {end:?}"),
    );
    c.check(
        end.replays == (STEPS - 1) as u64 && end.eager_steps == 1,
        format!(
            "{} replays and {} eager steps (want {} and 1: A's {PROMPT_A}-token prompt fits no bucket)",
            end.replays,
            end.eager_steps,
            STEPS - 1
        ),
    );

    b.set_graphs(false).expect("graphs off");
    let (eager_tokens, eager_steps) = schedule(&mut b, vocab);
    let e = *eager_steps.last().unwrap();
    c.check(
        e.replays == end.replays && e.eager_steps == end.eager_steps + STEPS as u64,
        format!("graphs off: every step eager, counters {e:?}"),
    );
    c.identical("tokens, graphs vs eager", &graph_tokens, &eager_tokens);

    // A new pool at another size: every held graph is recorded again and updated in place.
    let held = b.graph_shapes().len() as u64;
    let bytes = 768 << 20;
    let geo = b
        .rebuild_kv_cache(Some(bytes))
        .expect("rebuilding the KV pool");
    let block = KvCache::block_bytes(&src.config().spec(), geo.block_size, b.gpu().store);
    let r = b.graph_counters();
    c.check(
        geo.num_blocks == bytes / block,
        format!("rebuilt pool: {} blocks of {block} bytes", geo.num_blocks),
    );
    c.check(
        r.captures == e.captures + held
            && r.updates == e.updates + held
            && r.instantiations == e.instantiations,
        format!("KV pool rebuild with {held} graphs held: {r:?}"),
    );
    b.set_graphs(true).expect("graphs on");
    let (rebuilt_tokens, after) = schedule(&mut b, vocab);
    let a = *after.last().unwrap();
    c.check(
        a.captures == r.captures && a.replays == r.replays + (STEPS - 1) as u64,
        format!("after the rebuild, graphs replay with no capture: {a:?}"),
    );
    c.identical(
        "tokens, updated graphs on the new pool vs eager",
        &rebuilt_tokens,
        &eager_tokens,
    );
    eprintln!("{}", b.describe());
    c.finish();
}
