//! The assistant draft's CUDA graphs (draft_graphs.rs) against its eager launches, on
//! random-weight assistants (both assistant fixtures beside their targets, and the
//! gemma4-tiny-assistant dummy beside gemma4-tiny), so that every draft depends on its
//! attention inputs, its token and its hidden state: at batch sizes 1 to 16 (padded to the
//! buckets 1, 2, 4, 8, 16) and past the largest bucket (eager, silently), sequences of
//! different lengths (past the sliding window too), a graph's first replay and a later one
//! draft the eager call's tokens and every step's logits bit for bit, with logits kept and
//! without; the counters show which path ran.

use crate::common;
use crate::common::assistant;
use crate::common::models;

use common::{f32_bits, gpu_or_skip, Checks};
use kiln_cuda::CudaBackend;
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::{Backend, ChunkInput, DraftRow};
use models::{cuda_backend, Blocks};

/// Batch sizes: inside the buckets (exact and padded) and past the largest (16).
const BATCHES: [usize; 7] = [1, 2, 3, 5, 8, 16, 23];

/// `n` sequences of different lengths over `tokens` (cycled), prefilled one by one, then one
/// decode step of all of them whose rows the drafts start from; the draft rows, each at the
/// position after its sequence.
fn prepared(b: &mut CudaBackend, tokens: &[u32], n: usize) -> (Vec<Vec<u32>>, Vec<(u32, usize)>) {
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(b);
    let token = |i: usize| tokens[i % tokens.len()];
    let lens: Vec<usize> = (0..n).map(|i| 6 + (i * 37) % 150).collect();
    let tables: Vec<Vec<u32>> = lens.iter().map(|&l| blocks.take(l + 2, bs)).collect();
    for (l, t) in lens.iter().zip(&tables) {
        let prompt: Vec<u32> = (0..l - 1).map(token).collect();
        b.forward(&[ChunkInput {
            tokens: &prompt,
            start_pos: 0,
            block_table: t,
            want_logits: false,
        }])
        .expect("prefill");
    }
    let last: Vec<[u32; 1]> = lens.iter().map(|&l| [token(l - 1)]).collect();
    let chunks: Vec<ChunkInput<'_>> = lens
        .iter()
        .zip(&tables)
        .zip(&last)
        .map(|((&l, t), tok)| ChunkInput {
            tokens: tok,
            start_pos: l - 1,
            block_table: t,
            want_logits: true,
        })
        .collect();
    b.forward(&chunks)
        .expect("the decode step drafts start from");
    let rows = lens.iter().map(|&l| (token(l), l)).collect();
    (tables, rows)
}

fn check_model(
    c: &mut Checks,
    name: &str,
    target: &dyn WeightSource,
    draft: &dyn WeightSource,
    tokens: &[u32],
) {
    let mut b = cuda_backend(target, 512);
    b.attach_draft_model(draft, None).unwrap();
    for (i, &n) in BATCHES.iter().enumerate() {
        let k = 3 + i % 3;
        let (tables, rows) = prepared(&mut b, tokens, n);
        let rows: Vec<DraftRow<'_>> = rows
            .iter()
            .zip(&tables)
            .enumerate()
            .map(|(i, (&(token, pos), t))| DraftRow {
                token,
                pos,
                block_table: t,
                hidden_row: i,
            })
            .collect();
        b.set_draft_graphs(false);
        let eager = b.draft_with_logits(&rows, k, true).expect("eager draft");
        b.set_draft_graphs(true);
        let before = b.draft_graph_counters().unwrap();
        let first = b.draft_with_logits(&rows, k, true).expect("graph draft");
        let again = b.draft_with_logits(&rows, k, true).expect("graph replay");
        let plain = b
            .draft_with_logits(&rows, k, false)
            .expect("graph draft, no logits");
        let after = b.draft_graph_counters().unwrap();
        let case = format!("{name} batch {n}, {k} steps");
        for (what, d) in [("first replay", &first), ("later replay", &again)] {
            c.identical(
                &format!("{case}: {what} tokens"),
                &flat(&d.tokens),
                &flat(&eager.tokens),
            );
            for s in 0..k {
                c.identical(
                    &format!("{case}: {what} step {s} logits"),
                    &f32_bits(&d.logits[s]),
                    &f32_bits(&eager.logits[s]),
                );
            }
        }
        c.identical(
            &format!("{case}: tokens of a graph without logits"),
            &flat(&plain.tokens),
            &flat(&eager.tokens),
        );
        let graphs = n <= kiln_cuda::draft_graphs::DRAFT_GRAPH_ROWS;
        let (replays, eager_groups) = (
            after.replays - before.replays,
            after.eager_groups - before.eager_groups,
        );
        c.check(
            if graphs {
                replays == 3 && eager_groups == 0
            } else {
                replays == 0 && eager_groups == 3
            },
            format!("{case}: {replays} replays, {eager_groups} eager groups (graphs expected: {graphs})"),
        );
    }
}

fn flat(t: &[Vec<u32>]) -> Vec<u32> {
    t.concat()
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn graph_drafts_equal_eager_drafts() {
    if gpu_or_skip("graph_drafts_equal_eager_drafts").is_none() {
        return;
    }
    let mut c = Checks::new("graph_drafts_equal_eager_drafts");
    for name in assistant::FIXTURES {
        let f = assistant::fixture(name);
        check_model(&mut c, name, &f.target, &f.assistant, &f.tokens);
    }
    let target = DummySource::preset("gemma4-tiny").unwrap();
    let draft = DummySource::preset("gemma4-tiny-assistant").unwrap();
    let tokens: Vec<u32> = (0..97u32).map(|i| (i * 37 + 11) % 512).collect();
    check_model(&mut c, "dummy gemma4-tiny", &target, &draft, &tokens);
    c.finish();
}
