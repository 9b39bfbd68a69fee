//! Gemma 4's assistant drafting on the GPU (tests/fixtures/gemma4_assistant*, random-weight
//! assistants beside their Gemma 4 targets): after the target prefills the tokens before each
//! of the fixture's points, the CUDA backend's drafts (every draft step's logits and tokens)
//! match the CPU backend's: logits within the bf16 storage budget of the CPU emulating the
//! GPU's rounding (common/parity.rs), tokens identical where the CPU's margin exceeds the
//! logit error; drafting every point at once gives the bits of each point alone; and through
//! the engine, drafted generation gives plain generation's greedy tokens.

use crate::common;
use crate::common::assistant;
use crate::common::models;
use crate::common::parity;

use assistant::{fixture, Fixture, FIXTURES};
use common::{gpu_or_skip, Checks};
use kiln_cpu::CpuBackend;
use kiln_cuda::{CudaBackend, StoreType};
use kiln_engine::{BackendDrafter, DraftConfig, EngineConfig, GenEvent, GenerateRequest};
use kiln_model::{DummyFill, HostTensor, ModelConfig, QuantTensor, Role, TensorId, WeightSource};
use kiln_step::{Backend, ChunkInput, DraftRow};
use models::{cuda_backend, rel_err, Rounded};
use parity::{gpu_rounding, logit_rtol, margin, reference_cpu};

/// `Rounded`, but the token ordering: its values are token ids, kept exact.
struct RoundedWeights<'a>(Rounded<'a>);

impl WeightSource for RoundedWeights<'_> {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }

    fn has(&self, id: TensorId) -> bool {
        self.0.has(id)
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        match id.role {
            Role::TokenOrdering => self.0.inner.load_f32(id),
            _ => self.0.load_f32(id),
        }
    }

    fn load_quantized(&self, id: TensorId) -> anyhow::Result<Option<QuantTensor>> {
        self.0.load_quantized(id)
    }

    fn dummy_fill(&self, id: TensorId) -> Option<DummyFill> {
        self.0.dummy_fill(id)
    }
}

/// Each point's block table (blocks of its own) and the chunk of the tokens before it.
fn tables(b: &dyn Backend, f: &Fixture, points: &[usize]) -> Vec<Vec<u32>> {
    let per = f.tokens.len().div_ceil(b.kv_geometry().block_size) as u32;
    (0..points.len() as u32)
        .map(|i| (i * per..(i + 1) * per).collect())
        .collect()
}

/// Prefills the tokens before each of `points` in one step and returns the draft rows.
fn prefill<'a>(
    b: &mut dyn Backend,
    f: &Fixture,
    points: &[usize],
    tables: &'a [Vec<u32>],
) -> Vec<DraftRow<'a>> {
    let chunks: Vec<ChunkInput<'_>> = points
        .iter()
        .zip(tables)
        .map(|(&n, t)| ChunkInput {
            tokens: &f.tokens[..n],
            start_pos: 0,
            block_table: t,
            want_logits: true,
        })
        .collect();
    b.forward(&chunks).expect("the target's prefill");
    points
        .iter()
        .zip(tables)
        .enumerate()
        .map(|(i, (&n, t))| DraftRow {
            token: f.tokens[n],
            pos: n,
            block_table: t,
            hidden_row: i,
        })
        .collect()
}

/// Drafts: per row its tokens; per step the rows' logits.
type Drafts = (Vec<Vec<u32>>, Vec<Vec<f32>>);

fn gpu_drafts(gpu: &mut CudaBackend, f: &Fixture, points: &[usize]) -> Drafts {
    let t = tables(gpu, f, points);
    let rows = prefill(gpu, f, points, &t);
    let d = gpu
        .draft_with_logits(&rows, f.steps, true)
        .expect("GPU draft");
    (d.tokens, d.logits)
}

fn cpu_drafts(cpu: &mut CpuBackend, f: &Fixture) -> Drafts {
    let t = tables(cpu, f, &f.points);
    let rows = prefill(cpu, f, &f.points, &t);
    let d = cpu.draft_with_logits(&rows, f.steps).expect("CPU draft");
    (d.tokens, d.logits)
}

/// Row `r`'s logits of step `s`.
fn row(d: &Drafts, s: usize, r: usize, vocab: usize) -> &[f32] {
    &d.1[s][r * vocab..(r + 1) * vocab]
}

/// Per row, the draft steps whose logits two runs can be compared at: up to and including the
/// first step whose tokens differ (the steps after it start from different tokens).
fn comparable(a: &Drafts, b: &Drafts) -> Vec<usize> {
    a.0.iter()
        .zip(&b.0)
        .map(|(x, y)| {
            x.iter()
                .zip(y)
                .position(|(p, q)| p != q)
                .map_or(x.len(), |i| i + 1)
        })
        .collect()
}

/// The worst relative error of `a` against `b` over the comparable steps.
fn worst(a: &Drafts, b: &Drafts, vocab: usize) -> f64 {
    let mut w = 0f64;
    for (r, &n) in comparable(a, b).iter().enumerate() {
        for s in 0..n {
            w = w.max(rel_err(row(a, s, r, vocab), row(b, s, r, vocab)));
        }
    }
    w
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn gpu_drafts_match_the_cpu() {
    if gpu_or_skip("gpu_drafts_match_the_cpu").is_none() {
        return;
    }
    let mut c = Checks::new("gpu_drafts_match_the_cpu");
    let dtype = StoreType::Bf16;
    for name in FIXTURES {
        let f = fixture(name);
        let vocab = f.target.config().vocab_size;
        let mut cpu = reference_cpu(&f.target, None);
        cpu.attach_draft_model(&f.assistant, None).unwrap();
        let want = cpu_drafts(&mut cpu, &f);
        let (t, a) = (
            Rounded {
                inner: &f.target,
                store: dtype,
            },
            RoundedWeights(Rounded {
                inner: &f.assistant,
                store: dtype,
            }),
        );
        let mut emu = reference_cpu(&t, gpu_rounding(dtype));
        emu.attach_draft_model(&a, None).unwrap();
        let emulated = cpu_drafts(&mut emu, &f);
        let mut gpu = cuda_backend(&f.target, 512);
        gpu.attach_draft_model(&f.assistant, None).unwrap();
        let got = gpu_drafts(&mut gpu, &f, &f.points);

        // Logits: the storage budget (the emulation's distance from f32) or the fixed
        // tolerance, whichever is larger, of the emulation; 1.5 budgets of f32.
        let rtol = logit_rtol(dtype, true);
        let budget = worst(&emulated, &want, vocab);
        let d = worst(&got, &emulated, vocab);
        let tol = rtol.max(budget);
        c.check(d <= tol, format!("{name}: GPU vs the CPU's {dtype} emulation, {} steps at {} points: max rel err {d:.3e}, tol {tol:.3e} (budget {budget:.3e})", f.steps, f.points.len()));
        let d = worst(&got, &want, vocab);
        let tol = rtol.max(1.5 * budget);
        c.check(
            d <= tol,
            format!("{name}: GPU vs CPU f32 drafts: max rel err {d:.3e}, tol {tol:.3e}"),
        );
        // Tokens: a difference only where the CPU's margin is within twice the logit error.
        let mut real = Vec::new();
        let mut ties = 0;
        for (r, &n) in comparable(&got, &want).iter().enumerate() {
            if n == f.steps && got.0[r] == want.0[r] {
                continue;
            }
            let s = n - 1;
            let (g, w) = (row(&got, s, r, vocab), row(&want, s, r, vocab));
            let err = g.iter().zip(w).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            match margin(w) <= 2.0 * err {
                true => ties += 1,
                false => real.push(format!(
                    "point {}: step {s} drafts {} vs the CPU's {} (margin {:.2e}, error {err:.2e})",
                    f.points[r],
                    got.0[r][s],
                    want.0[r][s],
                    margin(w)
                )),
            }
        }
        c.check(
            real.is_empty(),
            format!(
                "{name}: draft tokens as the CPU's; near-ties {ties}; real differences {real:?}"
            ),
        );

        // Every point at once == each alone, bit for bit (a fresh backend each time).
        for (i, &p) in f.points.iter().enumerate() {
            let mut alone = cuda_backend(&f.target, 512);
            alone.attach_draft_model(&f.assistant, None).unwrap();
            let one = gpu_drafts(&mut alone, &f, &[p]);
            c.identical(
                &format!("{name}: point {p} alone vs together, tokens"),
                &one.0[0],
                &got.0[i],
            );
            for s in 0..f.steps {
                c.identical(
                    &format!("{name}: point {p} alone vs together, step {s} logits"),
                    row(&one, s, 0, vocab),
                    row(&got, s, i, vocab),
                );
            }
        }
    }
    c.finish();
}

/// Greedy tokens of each request, all submitted at once.
fn generate(
    backend: CudaBackend,
    drafting: bool,
    vocab: usize,
    reqs: &[GenerateRequest],
) -> (Vec<Vec<u32>>, u64) {
    let cfg = EngineConfig {
        max_num_seqs: 8,
        max_batched_tokens: 256,
        prefill_chunk: 64,
        prefill_alone: false,
        max_queue: 64,
        max_context: 1024,
        prefix_cache: true,
        overlap: true,
        output_thread: true,
    };
    let draft = DraftConfig {
        max_tokens: 4,
        max_batch: 8,
    };
    let e = kiln_engine::start_with_drafter(
        Box::new(backend),
        kiln_tokenizer::Tokenizer::byte_level(vocab),
        cfg,
        drafting.then(|| {
            (
                Box::new(BackendDrafter) as Box<dyn kiln_engine::Drafter>,
                draft,
            )
        }),
    );
    let streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    let mut out = Vec::new();
    for mut s in streams {
        let mut ids = Vec::new();
        loop {
            match s.blocking_next().expect("the stream ended without Done") {
                GenEvent::Token(t) => ids.push(t.id),
                GenEvent::Done(_) => break,
                GenEvent::Error(e) => panic!("request failed: {e}"),
            }
        }
        out.push(ids);
    }
    let proposed = e.stats().draft_proposed;
    e.shutdown();
    (out, proposed)
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn drafted_generation_is_plain_generation() {
    if gpu_or_skip("drafted_generation_is_plain_generation").is_none() {
        return;
    }
    let mut c = Checks::new("drafted_generation_is_plain_generation");
    for name in FIXTURES {
        let f = fixture(name);
        let vocab = f.target.config().vocab_size;
        // Prompts from the fixture's tokens and past its sliding window, alone and together.
        let reqs: Vec<GenerateRequest> = (0..5usize)
            .map(|i| GenerateRequest {
                prompt: (0..10 + 23 * i)
                    .map(|j| f.tokens[(j * 7 + i) % f.tokens.len()])
                    .collect(),
                max_tokens: 48,
                ignore_eos: true,
                ..GenerateRequest::default()
            })
            .collect();
        let (plain, _) = generate(cuda_backend(&f.target, 512), false, vocab, &reqs);
        let mut gpu = cuda_backend(&f.target, 512);
        gpu.attach_draft_model(&f.assistant, None).unwrap();
        let (drafted, proposed) = generate(gpu, true, vocab, &reqs);
        for (i, (d, p)) in drafted.iter().zip(&plain).enumerate() {
            c.identical(&format!("{name}: request {i}, drafted vs plain"), d, p);
        }
        c.check(proposed > 0, format!("{name}: {proposed} tokens drafted"));
    }
    c.finish();
}
