//! The CPU backend against transformers on the parity fixtures (tests/fixtures, made by
//! scripts/reference/make_fixtures.py): for every fixture and both of its copies (Hugging Face
//! folder and GGUF), the logits of the prompt's last position and of each greedy step are within
//! 1e-4 relative of the reference, the greedy continuation is the reference's token for token,
//! and the two copies give the same logits.

#[path = "../../kiln-model/tests/support/fixtures.rs"]
mod fixtures;

use fixtures::{argmax, rel_err, Fixture, HF_ONLY_FIXTURES};
use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_model::{
    DummyFill, GgufSource, HfSource, HostTensor, ModelConfig, TensorId, WeightSource,
};
use kiln_step::{Backend, ChunkInput};

const TOLERANCE: f32 = 1e-4;
const BLOCK: usize = 16;

/// Prefills the prompt in one chunk, then decodes greedily, feeding back the backend's own
/// argmax; returns one logits row per step.
fn greedy_logits(source: &dyn WeightSource, f: &Fixture) -> Vec<Vec<f32>> {
    let steps = f.continuation_ids.len();
    let total = f.prompt_ids.len() + steps;
    let blocks = total.div_ceil(BLOCK);
    let opts = CpuOptions {
        kv_blocks: blocks,
        block_size: BLOCK,
        threads: None,
        host_blocks: 0,
    };
    let mut backend = CpuBackend::new(source, opts, None).unwrap();
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut rows = Vec::with_capacity(steps);
    let mut logits = backend
        .forward(&[ChunkInput {
            tokens: &f.prompt_ids,
            start_pos: 0,
            block_table: &table,
            want_logits: true,
        }])
        .unwrap();
    for k in 0..steps {
        assert_eq!(logits.len(), f.vocab, "{}: one row of logits", f.name);
        let next = argmax(&logits);
        rows.push(logits);
        if k + 1 == steps {
            break;
        }
        let chunk = ChunkInput {
            tokens: &[next],
            start_pos: f.prompt_ids.len() + k,
            block_table: &table,
            want_logits: true,
        };
        logits = backend.forward(&[chunk]).unwrap();
    }
    rows
}

/// Checks one copy's rows against the reference; returns the worst relative error.
fn check_against_reference(f: &Fixture, copy: &str, rows: &[Vec<f32>]) -> f32 {
    let mut worst = 0f32;
    for (k, row) in rows.iter().enumerate() {
        let err = rel_err(row, f.row(k));
        assert!(
            err <= TOLERANCE,
            "{} ({copy}): step {k} logits off by {err:e} relative",
            f.name
        );
        assert_eq!(
            argmax(row),
            f.continuation_ids[k],
            "{} ({copy}): greedy token {k} differs from transformers",
            f.name
        );
        worst = worst.max(err);
    }
    worst
}

#[test]
fn cpu_matches_transformers_on_every_fixture() {
    for f in Fixture::all() {
        let hf = HfSource::open(&f.hf_dir).unwrap();
        let gguf = GgufSource::open(&f.gguf).unwrap();
        let hf_rows = greedy_logits(&hf, &f);
        let gguf_rows = greedy_logits(&gguf, &f);
        let hf_err = check_against_reference(&f, "hf", &hf_rows);
        let gguf_err = check_against_reference(&f, "gguf", &gguf_rows);

        // Same weights and RoPE frequencies bit for bit (kiln-model's fixture_sources test),
        // so the same logits bit for bit.
        let copies_err = hf_rows
            .iter()
            .zip(&gguf_rows)
            .map(|(a, b)| rel_err(b, a))
            .fold(0f32, f32::max);
        assert!(
            hf_rows == gguf_rows,
            "{}: HF folder and GGUF logits differ ({copies_err:e})",
            f.name
        );
        eprintln!(
            "{}: max relative error hf {hf_err:.2e}, gguf {gguf_err:.2e}, between copies {copies_err:.2e}; \
             min greedy margin {:.3}",
            f.name, f.min_margin
        );
    }
}

/// A source with another configuration over the same weights: the fixture with its layer
/// types changed.
struct Reconfigured<'a> {
    inner: &'a dyn WeightSource,
    config: ModelConfig,
}

impl WeightSource for Reconfigured<'_> {
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

/// Qwen2 with a window on layer 1 only (max_window_layers 1): the per-layer spec, checked
/// against transformers. Windowing every layer or none gives other logits, so the test fails
/// if the layers' windows are not each their own.
#[test]
fn cpu_matches_transformers_with_per_layer_windows() {
    for name in HF_ONLY_FIXTURES {
        let f = Fixture::load(name);
        let hf = HfSource::open(&f.hf_dir).unwrap();
        let windows: Vec<_> = hf
            .config()
            .spec()
            .layers
            .iter()
            .map(|l| l.attn.window)
            .collect();
        assert_eq!(windows, [None, Some(16)], "{name}");
        let rows = greedy_logits(&hf, &f);
        let err = check_against_reference(&f, "hf", &rows);
        eprintln!("{name}: max relative error {err:.2e}");
        for (what, window) in [("no layer", None), ("every layer", Some(16))] {
            let mut config = hf.config().clone();
            config.layer_types = None;
            config.sliding_window = window;
            let other = Reconfigured { inner: &hf, config };
            let first = greedy_logits(&other, &f).remove(0);
            assert!(
                rel_err(&first, f.row(0)) > 100.0 * TOLERANCE,
                "{name}: windowing {what} gives the same logits; the test cannot tell"
            );
        }
    }
}
