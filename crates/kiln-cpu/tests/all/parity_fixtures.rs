//! The CPU backend against transformers on the parity fixtures (tests/fixtures, made by
//! scripts/reference/make_fixtures.py): for every fixture and both of its copies (Hugging Face
//! folder and GGUF), the logits of the prompt's last position and of each greedy step are within
//! 1e-4 relative of the reference, the greedy continuation is the reference's token for token,
//! and the two copies give the same logits.

use crate::fixtures;

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
        fp8: false,
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

/// Gemma 4 with the released models' 512-wide full-attention heads (HF folder only), layers 2
/// and 3 reading the KV of 0 and 1: logits within the tolerance, the same greedy tokens.
#[test]
fn cpu_matches_transformers_with_512_wide_full_heads() {
    let f = Fixture::load("gemma4_wide");
    let hf = HfSource::open(&f.hf_dir).unwrap();
    let spec = hf.config().spec();
    let dims: Vec<_> = spec.layers.iter().map(|l| l.attn.head_dim).collect();
    assert_eq!(dims, [16, 512, 16, 512]);
    assert!(spec.layers[3].attn.kv_from == Some(1) && spec.per_layer_input.is_some());
    let rows = greedy_logits(&hf, &f);
    let err = check_against_reference(&f, "hf", &rows);
    eprintln!("gemma4_wide: max relative error {err:.2e}");
}

/// The Gemma 4 fixture's per-layer inputs, soft cap, windows and full layers' own RoPE each
/// change the logits beyond the tolerance, so the parity test above would catch a backend
/// that skipped one of them.
#[test]
fn every_gemma4_option_shows_in_the_fixture_logits() {
    let f = Fixture::load("gemma4");
    let hf = HfSource::open(&f.hf_dir).unwrap();
    let c = hf.config();
    assert!(c.per_layer_input > 0 && c.logit_softcap.is_some() && c.kv_shared_layers == 2);
    type Change = fn(&mut ModelConfig);
    let changes: [(&str, Change); 4] = [
        ("without per-layer inputs", |c| c.per_layer_input = 0),
        ("without the soft cap", |c| c.logit_softcap = None),
        ("without the window", |c| c.sliding_window = None),
        ("with the sliding layers' RoPE on full layers", |c| {
            c.full_attention_rope = None
        }),
    ];
    for (what, change) in changes {
        let mut config = c.clone();
        change(&mut config);
        let other = Reconfigured { inner: &hf, config };
        let first = greedy_logits(&other, &f).remove(0);
        let err = rel_err(&first, f.row(0));
        assert!(
            err > 100.0 * TOLERANCE,
            "gemma4 {what}: logits within {err:e}; the fixture cannot tell"
        );
    }
}

/// A prompt prefilled in chunks that cross the 16-token window gives the logits of the whole
/// prompt, bit for bit, on every Gemma 4 fixture (KV-sharing layers read the KV that earlier
/// chunks wrote).
#[test]
fn gemma4_chunked_prefill_equals_whole() {
    for name in ["gemma4", "gemma4_kv", "gemma4_wide"] {
        let f = Fixture::load(name);
        let hf = HfSource::open(&f.hf_dir).unwrap();
        let prompt = &f.prompt_ids;
        let run = |sizes: &[usize]| {
            let opts = CpuOptions {
                kv_blocks: 8,
                block_size: BLOCK,
                threads: None,
                host_blocks: 0,
                fp8: false,
            };
            let mut b = CpuBackend::new(&hf, opts, None).unwrap();
            let table: Vec<u32> = (0..8).rev().collect();
            let mut start = 0;
            let mut last = Vec::new();
            for &n in sizes {
                last = b
                    .forward(&[ChunkInput {
                        tokens: &prompt[start..start + n],
                        start_pos: start,
                        block_table: &table,
                        want_logits: true,
                    }])
                    .unwrap();
                start += n;
            }
            last
        };
        let whole = run(&[prompt.len()]);
        assert!(rel_err(&whole, f.row(0)) <= TOLERANCE, "{name}");
        for sizes in [[7, 13, 20], [17, 1, 22], [30, 9, 1]] {
            assert!(
                run(&sizes) == whole,
                "{name}: prefill in chunks {sizes:?} differs from the whole prompt"
            );
        }
    }
}

/// The Gemma 4 text model inside a `Gemma4ForConditionalGeneration` checkpoint (vision and
/// audio towers beside it) is the same model: the same logits bit for bit, with notes that
/// name the towers left unread.
#[test]
fn gemma4_multimodal_checkpoint_runs_its_text_model() {
    let f = Fixture::load("gemma4");
    let folder = HfSource::open(&f.hf_dir).unwrap();
    let mm = HfSource::open(&f.hf_dir.with_file_name("multimodal")).unwrap();
    assert_eq!(mm.config(), folder.config());
    let notes = mm.notes().join("; ");
    assert!(
        notes.contains("vision tower") && notes.contains("audio tower"),
        "{notes}"
    );
    assert!(folder.notes().is_empty());
    let (a, b) = (greedy_logits(&folder, &f), greedy_logits(&mm, &f));
    assert!(a == b, "the multimodal checkpoint's logits differ");
}
