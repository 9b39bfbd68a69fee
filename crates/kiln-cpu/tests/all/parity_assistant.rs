//! The CPU backend's Gemma 4 assistant against transformers (tests/fixtures/gemma4_assistant*):
//! at each point of the target's sequence, with the target's KV of the positions before it and
//! its final hidden state at the position before, every draft step's logits are within 1e-4
//! relative of the reference and the greedy drafts are the reference's; drafting every point
//! at once gives the same bits as one at a time; and the fixture would catch a window, a
//! position or a hidden state off by one.

use crate::assistant_fixture;
use crate::fixtures;

use assistant_fixture::{AssistantFixture, ASSISTANT_FIXTURES};
use fixtures::rel_err;
use kiln_cpu::{CpuBackend, CpuOptions, Drafted};
use kiln_model::{DummyFill, HfSource, HostTensor, ModelConfig, TensorId, WeightSource};
use kiln_step::{Backend, ChunkInput, DraftRow};

const TOLERANCE: f32 = 1e-4;
const BLOCK: usize = 16;

/// The target with the assistant attached, a KV pool of `seqs` sequences of the fixture's
/// length.
fn backend(f: &AssistantFixture, assistant: &dyn WeightSource, seqs: usize) -> CpuBackend {
    let target = HfSource::open(&f.target_dir).unwrap();
    let opts = CpuOptions {
        kv_blocks: seqs * f.tokens.len().div_ceil(BLOCK),
        block_size: BLOCK,
        threads: None,
        host_blocks: 0,
        fp8: false,
    };
    let mut b = CpuBackend::new(&target, opts, None).unwrap();
    b.attach_draft_model(assistant, None).unwrap();
    b
}

/// Prefills the tokens before each point (one chunk each, its own blocks) in one step, then
/// drafts every point at once; `hidden_shift` takes the hidden state that many positions late
/// (a planted bug).
fn draft_points(
    b: &mut CpuBackend,
    f: &AssistantFixture,
    points: &[usize],
    hidden_shift: usize,
) -> Drafted {
    let per = f.tokens.len().div_ceil(BLOCK);
    let tables: Vec<Vec<u32>> = (0..points.len())
        .map(|i| ((i * per) as u32..((i + 1) * per) as u32).collect())
        .collect();
    let chunks: Vec<ChunkInput<'_>> = points
        .iter()
        .zip(&tables)
        .map(|(&n, t)| ChunkInput {
            tokens: &f.tokens[..n + hidden_shift],
            start_pos: 0,
            block_table: t,
            want_logits: true,
        })
        .collect();
    b.forward(&chunks).unwrap();
    let rows: Vec<DraftRow<'_>> = points
        .iter()
        .zip(&tables)
        .enumerate()
        .map(|(i, (&n, t))| DraftRow {
            token: f.tokens[n],
            pos: n,
            block_table: t,
            hidden_row: i,
        })
        .collect();
    b.draft_with_logits(&rows, f.steps()).unwrap()
}

/// The worst relative error of `d` (drafted at the points `which` indexes) against the
/// reference, and whether every draft token is the reference's.
fn compare(f: &AssistantFixture, which: &[usize], d: &Drafted) -> (f32, bool) {
    let mut worst = 0f32;
    let mut same = true;
    for (row, &p) in which.iter().enumerate() {
        same &= d.tokens[row] == f.draft_ids[p];
        for s in 0..f.steps() {
            let got = &d.logits[s][row * f.vocab..(row + 1) * f.vocab];
            worst = worst.max(rel_err(got, f.row(p, s)));
        }
    }
    (worst, same)
}

#[test]
fn cpu_assistant_matches_transformers() {
    for name in ASSISTANT_FIXTURES {
        let f = AssistantFixture::load(name);
        let assistant = HfSource::open(&f.assistant_dir).unwrap();
        let mut b = backend(&f, &assistant, f.points.len());
        let all: Vec<usize> = (0..f.points.len()).collect();
        let together = draft_points(&mut b, &f, &f.points, 0);
        let (worst, same) = compare(&f, &all, &together);
        assert!(worst <= TOLERANCE, "{name}: draft logits off by {worst:e}");
        assert!(
            same,
            "{name}: drafts {:?}, transformers {:?}",
            together.tokens, f.draft_ids
        );
        // Each point alone: the same bits.
        for (i, &n) in f.points.iter().enumerate() {
            let alone = draft_points(&mut b, &f, &[n], 0);
            assert_eq!(alone.tokens[0], together.tokens[i], "{name}: point {n}");
            for s in 0..f.steps() {
                let row = &together.logits[s][i * f.vocab..(i + 1) * f.vocab];
                assert_eq!(alone.logits[s], row, "{name}: point {n} step {s} alone");
            }
        }
        eprintln!("{name}: draft logits within {worst:e} relative");
    }
}

/// The assistant's config with another sliding window.
struct Windowed<'a> {
    inner: &'a dyn WeightSource,
    config: ModelConfig,
}

impl WeightSource for Windowed<'_> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn has(&self, id: TensorId) -> bool {
        self.inner.has(id)
    }
    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        self.inner.load_f32(id)
    }
    fn dummy_fill(&self, _id: TensorId) -> Option<DummyFill> {
        None
    }
}

#[test]
fn the_fixture_catches_a_window_or_a_hidden_state_off_by_one() {
    let f = AssistantFixture::load("gemma4_assistant");
    let assistant = HfSource::open(&f.assistant_dir).unwrap();
    let all: Vec<usize> = (0..f.points.len()).collect();
    // The target's window (16 keys) instead of transformers' 17.
    let mut config = assistant.config().clone();
    config.sliding_window = config.sliding_window.map(|w| w - 1);
    let narrow = Windowed {
        inner: &assistant,
        config,
    };
    let mut b = backend(&f, &narrow, f.points.len());
    let (worst, _) = compare(&f, &all, &draft_points(&mut b, &f, &f.points, 0));
    assert!(
        worst > 100.0 * TOLERANCE,
        "a narrower window passes ({worst:e})"
    );
    // The hidden state of the pending token's own position (and its KV in the cache).
    let mut b = backend(&f, &assistant, f.points.len());
    let (worst, _) = compare(&f, &all, &draft_points(&mut b, &f, &f.points, 1));
    assert!(
        worst > 100.0 * TOLERANCE,
        "a later hidden state passes ({worst:e})"
    );
}
