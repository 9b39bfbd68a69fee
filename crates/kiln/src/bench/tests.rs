//! `kiln bench` end to end on dummy:tiny with the CPU backend: argument parsing, the cases it
//! runs and the JSON it writes. Behaviour only; no test looks at how fast anything ran.

use clap::Parser;

use super::*;
use crate::backend_choice::Device;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
}

#[test]
fn defaults_are_the_issue_cases() {
    let a = parse(&[]).unwrap();
    assert_eq!((a.prefill.clone(), a.depth.clone()), (None, None));
    let (p, notes) = a.plan(131_072);
    assert_eq!(p.prefill, vec![2048, 8192, 32768]);
    assert_eq!(p.depths, vec![0, 8192]);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!((a.decode, a.repeats, a.warmup, a.chunk), (128, 3, 1, 2048));
    assert_eq!(a.concurrency, vec![1, 8, 32]);
    assert_eq!(a.device.device, Device::Auto);
    assert!(a.json.is_none());
}

#[test]
fn lists_and_devices_parse_and_bad_values_are_refused() {
    let a = parse(&[
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "16,1k",
        "--depth",
        "0",
        "--concurrency",
        "2",
        "--json",
        "out.json",
    ])
    .unwrap();
    assert_eq!(a.model.model, "dummy:tiny");
    assert_eq!(a.device.device, Device::Cpu);
    assert_eq!(a.prefill, Some(vec![16, 1024]));
    assert_eq!(a.concurrency, vec![2]);
    assert_eq!(a.json.as_deref(), Some(std::path::Path::new("out.json")));
    assert_eq!(
        parse(&["--prefill", "none"]).unwrap().prefill,
        Some(Vec::<usize>::new())
    );
    let err = parse(&["--prefill", "2048,x"]).unwrap_err().to_string();
    assert!(err.contains("`x`"), "{err}");
    assert!(parse(&["--device", "tpu"]).is_err());
    assert!(parse(&["--repeats", "-1"]).is_err());
    assert_eq!(
        parse(&["--kv-cache-gb", "1.5"]).unwrap().device.kv_cache_gb,
        Some(1.5)
    );
    for bad in ["0", "nan", "lots"] {
        let err = parse(&["--kv-cache-gb", bad]).unwrap_err().to_string();
        assert!(err.contains("not a size in GiB"), "{err}");
    }
}

#[test]
fn a_prompt_longer_than_the_context_is_an_error_before_the_backend_starts() {
    // dummy:tiny has a 4096-token context.
    let a = parse(&[
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "8192",
        "--decode",
        "0",
    ])
    .unwrap();
    let err = format!("{:#}", run(a).unwrap_err());
    assert!(err.contains("8192") && err.contains("4096"), "{err}");
}

#[test]
fn bench_on_dummy_tiny_writes_every_case_to_json() {
    let dir = std::env::temp_dir().join(format!("kiln-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("bench.json");
    let out_arg = out.to_str().unwrap();
    // A chunk smaller than the prompt: the 40-token prompt runs as three forwards.
    let a = parse(&[
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--prefill",
        "40,8",
        "--decode",
        "5",
        "--depth",
        "0,20",
        "--concurrency",
        "1,3",
        "--repeats",
        "2",
        "--chunk",
        "16",
        "--json",
        out_arg,
    ])
    .unwrap();
    run(a).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(j["model"], "dummy:tiny");
    assert_eq!(j["backend"], "cpu");
    assert!(
        j["device"].as_str().unwrap().contains("1 threads"),
        "{}",
        j["device"]
    );
    assert!(j["date"].as_str().unwrap().ends_with('Z'));
    assert!(!j["commit"].as_str().unwrap().is_empty());
    assert_eq!(j["model_info"]["num_layers"], 4);
    assert_eq!(j["settings"]["repeats"], 2);
    assert!(j["peak_memory_bytes"].as_u64().unwrap() > 0);

    let rows = j["rows"].as_array().unwrap();
    let key = |r: &serde_json::Value| {
        (
            r["test"].as_str().unwrap().to_string(),
            r["tokens"].as_u64().unwrap(),
            r["concurrency"].as_u64().unwrap(),
        )
    };
    let keys: Vec<_> = rows.iter().map(key).collect();
    let want = [
        ("prefill", 40, 1),
        ("prefill", 8, 1),
        ("decode", 0, 1),
        ("decode", 0, 3),
        ("decode", 20, 1),
        ("decode", 20, 3),
    ];
    assert_eq!(keys, want.map(|(t, n, c)| (t.to_string(), n, c)).to_vec());
    for r in rows {
        assert_eq!(r["engine"], "kiln");
        let (med, lo, hi) = (
            r["tok_s"].as_f64().unwrap(),
            r["tok_s_min"].as_f64().unwrap(),
            r["tok_s_max"].as_f64().unwrap(),
        );
        assert!(med > 0.0 && lo <= med && med <= hi, "{r}");
        if r["test"] == "prefill" {
            assert!(r["ttft_ms"].as_f64().unwrap() >= r["ttft_ms_min"].as_f64().unwrap());
        } else {
            assert_eq!(r["generated"], 5);
            let per = r["tok_s_per_stream"].as_f64().unwrap();
            let c = r["concurrency"].as_f64().unwrap();
            assert!((per * c - med).abs() <= 1e-9 * med, "{r}");
        }
    }
}

/// The CPU backend with an argmax on its side, counting which path each decode step took.
struct CountingArgmax {
    inner: kiln_cpu::CpuBackend,
    vocab: usize,
    forwards: usize,
    argmaxes: usize,
}

impl kiln_step::Backend for CountingArgmax {
    fn kv_geometry(&self) -> kiln_step::KvGeometry {
        self.inner.kv_geometry()
    }

    fn step(
        &mut self,
        chunks: &[kiln_step::ChunkInput<'_>],
        want: kiln_step::Want<'_>,
    ) -> anyhow::Result<kiln_step::StepOutput> {
        let logits = self.inner.forward(chunks)?;
        if want != kiln_step::Want::Argmax {
            self.forwards += 1;
            return want.from_logits(logits, self.vocab);
        }
        self.argmaxes += 1;
        let ids = logits
            .chunks_exact(self.vocab)
            .map(|row| {
                let best = row
                    .iter()
                    .enumerate()
                    .fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
                Ok(kiln_step::Sampled::id_only(best as u32))
            })
            .collect();
        Ok(kiln_step::StepOutput::Tokens(ids))
    }
}

/// A fresh CPU backend on dummy:tiny (one thread, 64 blocks) and its vocabulary size.
fn tiny_cpu() -> (kiln_cpu::CpuBackend, usize) {
    use kiln_model::WeightSource;
    let source = kiln_model::DummySource::preset("tiny").unwrap();
    let opts = kiln_cpu::CpuOptions {
        kv_blocks: 64,
        block_size: 16,
        threads: Some(1),
        host_blocks: 0,
        fp8: false,
    };
    let vocab = source.config().vocab_size;
    (
        kiln_cpu::CpuBackend::new(&source, opts, None).unwrap(),
        vocab,
    )
}

/// Fills `streams` prompts of 10 tokens and decodes `steps` steps on all of them in `mode`.
fn decode_with(
    backend: &mut dyn kiln_step::Backend,
    vocab: usize,
    mode: DecodeMode,
    streams: usize,
    steps: usize,
) {
    let mut runner = Runner::new(backend, vocab, 16);
    runner.set_mode(mode);
    let filled = runner.fill_streams(streams, 10, 4).unwrap();
    let timing = runner.decode(&filled, streams, steps, 0, 1).unwrap();
    assert_eq!((timing.concurrency, timing.steps), (streams, steps));
    runner.release(filled);
}

#[test]
fn decode_takes_the_device_argmax_unless_host_sampling_is_asked_for() {
    for (mode, forwards, argmaxes) in [(DecodeMode::Greedy, 2, 4), (DecodeMode::HostGreedy, 6, 0)] {
        let (inner, vocab) = tiny_cpu();
        let mut backend = CountingArgmax {
            inner,
            vocab,
            forwards: 0,
            argmaxes: 0,
        };
        decode_with(&mut backend, vocab, mode, 2, 4);
        // The fill ran two prompts through forward; the 4 decode steps took one path.
        assert_eq!((backend.forwards, backend.argmaxes), (forwards, argmaxes));
    }
}

/// The CPU backend with a sampler on its side (the host reference, as a device sampler must
/// match it), counting the decode steps that used it.
struct CountingSampler {
    inner: kiln_cpu::CpuBackend,
    vocab: usize,
    samples: usize,
}

impl kiln_step::Backend for CountingSampler {
    fn kv_geometry(&self) -> kiln_step::KvGeometry {
        self.inner.kv_geometry()
    }

    fn step(
        &mut self,
        chunks: &[kiln_step::ChunkInput<'_>],
        want: kiln_step::Want<'_>,
    ) -> anyhow::Result<kiln_step::StepOutput> {
        let kiln_step::Want::Sample(rows) = want else {
            return self.inner.step(chunks, want);
        };
        self.samples += 1;
        let logits = self.inner.forward(chunks)?;
        let rows = logits
            .chunks_exact(self.vocab)
            .zip(rows)
            .map(|(l, r)| kiln_step::sample_row(l, r))
            .collect();
        Ok(kiln_step::StepOutput::Tokens(rows))
    }
}

#[test]
fn sampled_decode_takes_the_backends_sampler_unless_host_sampling_is_asked_for() {
    for on_host in [false, true] {
        let (inner, vocab) = tiny_cpu();
        let mut backend = CountingSampler {
            inner,
            vocab,
            samples: 0,
        };
        let mode = DecodeMode::Sampled {
            temperature: 0.8,
            top_p: 0.95,
            on_host,
        };
        decode_with(&mut backend, vocab, mode, 3, 5);
        assert_eq!(backend.samples, if on_host { 0 } else { 5 });
    }
}

#[test]
fn the_resumed_case_finds_the_history_cached_and_reports_both_ttfts() {
    let (mut backend, vocab) = tiny_cpu();
    let mut runner = Runner::new(&mut backend, vocab, 16);
    // 70 tokens of history: 4 full blocks of 16 are cached; 10 new tokens follow.
    let t = runner.resumed(70, 10, 0, 2).unwrap();
    assert_eq!((t.history, t.new_tokens, t.cached), (70, 10, 64));
    assert!(t.ttft_s.median > 0.0 && t.cold_ttft_s.median > 0.0);
    let row = Row::Resumed(t).to_json();
    assert_eq!(row["test"], "resumed");
    assert_eq!(row["tokens"], 80);
    assert_eq!(row["cached_tokens"], 64);
    assert!(row["cold_ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(row["host_ttft_ms"].is_null(), "no host tier, no host case");
    // With a host tier the history is also timed back from it, and found whole.
    let source = kiln_model::DummySource::preset("tiny").unwrap();
    let opts = kiln_cpu::CpuOptions {
        kv_blocks: 64,
        block_size: 16,
        threads: Some(1),
        host_blocks: 8,
        fp8: false,
    };
    let mut backend = kiln_cpu::CpuBackend::new(&source, opts, None).unwrap();
    let mut runner = Runner::new(&mut backend, vocab, 16);
    let t = runner.resumed(70, 10, 1, 2).unwrap();
    assert_eq!(t.cached, 64);
    assert!(t.host_ttft_s.is_some_and(|h| h.median > 0.0));
    // The same through the command line's plan.
    let a = parse(&[
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "none",
        "--decode",
        "0",
        "--resumed",
        "48",
        "--new-turn",
        "20",
        "--repeats",
        "1",
    ])
    .unwrap();
    run(a).unwrap();
}

#[test]
fn the_draft_case_decodes_with_and_without_drafts_and_checks_they_agree() {
    let dir = std::env::temp_dir().join(format!("kiln-bench-draft-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("bench.json");
    let a = parse(&[
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "none",
        "--decode",
        "40",
        "--depth",
        "0",
        "--concurrency",
        "1",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--draft",
        "ngram",
        "--json",
        out.to_str().unwrap(),
    ])
    .unwrap();
    run(a).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let row = j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["draft"] == "ngram")
        .expect("a drafted row");
    assert_eq!(row["test"], "decode");
    assert_eq!(row["generated"], 40);
    assert!(row["plain_tok_s"].as_f64().unwrap() > 0.0);
    assert!(row["speed_up"].as_f64().unwrap() > 0.0);
    assert!(row["target_passes"].as_u64().unwrap() > 0, "{row}");
}

/// A backend keeping a KV ring: the runner takes each sequence's first blocks from the
/// ring-capable ids, as the engine does (else the backend refuses the step), and refuses a
/// resumed case, which needs the prefix cache a ring turns off.
#[test]
fn a_kv_ring_backend_gets_ring_blocks_and_no_resumed_case() {
    use kiln_model::WeightSource;
    let source = kiln_model::DummySource::preset("gemma4-tiny").unwrap();
    let opts = kiln_cpu::CpuOptions {
        kv_blocks: 64,
        block_size: 16,
        threads: Some(1),
        host_blocks: 0,
        fp8: false,
    };
    let vocab = source.config().vocab_size;
    let mut backend = kiln_cpu::CpuBackend::new(&source, opts, None).unwrap();
    let ring = backend.enable_kv_ring(2, 16).unwrap();
    let mut runner = Runner::new(&mut backend, vocab, 16);
    // Deeper than the ring, so the decode steps write past its first lap.
    let depth = ring.blocks * 16 + 7;
    let filled = runner.fill_streams(2, depth, 8).unwrap();
    let timing = runner.decode(&filled, 2, 8, 0, 1).unwrap();
    assert_eq!((timing.concurrency, timing.steps), (2, 8));
    runner.release(filled);
    let err = runner.resumed(40, 8, 0, 1).unwrap_err().to_string();
    assert!(err.contains("prefix cache"), "{err}");
}
