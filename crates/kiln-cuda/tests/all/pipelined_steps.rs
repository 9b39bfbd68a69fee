//! Steps launched ahead of their answers: a step launched before the one before it is
//! collected, its decode tokens copied on the device from that step's picks (feeds), gives the
//! tokens of whole steps whose tokens went through the host, bit for bit, greedy and sampled,
//! with a sequence joining mid-way, with CUDA graphs and without. And the feed kernel's
//! contract against a host reference.

use crate::common;
use crate::common::models;

use common::planted::planted_bugs_fail;
use common::{gpu_or_skip, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::CudaBackend;
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;
use kiln_step::sampling::uniform;
use kiln_step::{Backend, ChunkInput, Feed, RowSampling, Sampled, StepOutput, Want};
use models::{cuda_backend, dummy_mid, fixture_sources, Blocks};

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn feed_tokens_writes_the_picks_it_names() {
    crate::common::run_contract(
        "feed_tokens_writes_the_picks_it_names",
        "feed_tokens",
        feed_contract,
    );
}

/// feed_tokens with one planted bug each must fail the contract.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_feed_bugs_fail() {
    let good = "tokens[pairs[2 * i]] = picks[(long long)pairs[2 * i + 1] * stride];";
    let plants = [
        // The stride left out: row r's pick read at word r.
        (good, "tokens[pairs[2 * i]] = picks[pairs[2 * i + 1]];"),
        // The last pair never written.
        (
            good,
            "if (i + 1 < n) tokens[pairs[2 * i]] = picks[(long long)pairs[2 * i + 1] * stride];",
        ),
    ];
    planted_bugs_fail("feed_tokens planted bugs", "sample", &plants, feed_contract);
}

fn feed_contract(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    for (tokens, rows, stride, feeds) in [(1, 1, 1, 1), (300, 40, 44, 37), (2100, 600, 1, 513)] {
        let mut ids: Vec<i32> = (0..tokens).map(|_| rng.below(1 << 20) as i32).collect();
        let picks: Vec<i32> = (0..rows * stride)
            .map(|_| rng.below(1 << 20) as i32)
            .collect();
        let mut targets: Vec<usize> = (0..tokens).collect();
        rng.shuffle(&mut targets);
        let pairs: Vec<i32> = targets[..feeds]
            .iter()
            .flat_map(|&t| [t as i32, rng.below(rows) as i32])
            .collect();
        let dt = gpu.alloc::<i32>(tokens).unwrap();
        dt.upload(0, &ids).unwrap();
        let dp = gpu.alloc::<i32>(picks.len()).unwrap();
        dp.upload(0, &picks).unwrap();
        let dpairs = gpu.alloc::<i32>(pairs.len()).unwrap();
        dpairs.upload(0, &pairs).unwrap();
        gpu.feed_tokens(dt.ptr(), dp.ptr(), stride, dpairs.ptr(), feeds)
            .unwrap();
        let got = dt.download(gpu, 0, tokens).unwrap();
        for p in pairs.chunks_exact(2) {
            ids[p[0] as usize] = picks[p[1] as usize * stride];
        }
        c.identical(
            &format!("{tokens} tokens, {rows} rows of stride {stride}, {feeds} feeds"),
            &got,
            &ids,
        );
    }
}

/// How the test's steps pick their tokens.
#[derive(Clone, Copy)]
enum Mode {
    Greedy,
    Sampled,
}

/// One sequence of the schedule: its prompt, its blocks, and when it joins.
struct Stream {
    tokens: Vec<u32>,
    prompt: usize,
    table: Vec<u32>,
    joins: usize,
    picks: Vec<Sampled>,
}

/// The step `k` of the schedule: each stream that has joined runs its prompt (the step it joins)
/// or its last token; the row order is the stream order. Returns (stream, is_decode) per input.
fn step_members(streams: &[Stream], k: usize) -> Vec<(usize, bool)> {
    streams
        .iter()
        .enumerate()
        .filter(|(_, s)| s.joins <= k)
        .map(|(i, s)| (i, s.joins < k))
        .collect()
}

/// Each member's sampling at step `k`: its draw is that of its (k - joins)-th pick.
fn want_rows(streams: &[Stream], members: &[(usize, bool)], k: usize) -> Vec<RowSampling> {
    members
        .iter()
        .map(|&(i, _)| RowSampling {
            temperature: 0.8,
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            uniform: uniform(1000 + i as u64, (k - streams[i].joins) as u64),
            logprobs: Some(3),
        })
        .collect()
}

fn tokens_of(out: StepOutput) -> Vec<Sampled> {
    match out {
        StepOutput::Tokens(t) => t.into_iter().map(|r| r.expect("a pick")).collect(),
        StepOutput::Logits(_) => panic!("logits where tokens were asked"),
    }
}

/// Runs `steps` steps of the schedule: whole steps with the tokens fed back by the host, or
/// each step launched before the one before is collected, its decode tokens fed on the device.
fn run(b: &mut CudaBackend, streams: &mut [Stream], steps: usize, mode: Mode, ahead: bool) {
    let mut in_flight: Option<Vec<(usize, bool)>> = None;
    for k in 0..=steps {
        let members = if k < steps {
            step_members(streams, k)
        } else {
            Vec::new()
        };
        if !members.is_empty() {
            let rows = want_rows(streams, &members, k);
            let want = match mode {
                Mode::Greedy => Want::Argmax,
                Mode::Sampled => Want::Sample(&rows),
            };
            let stand_in = [0u32];
            let mut feeds = Vec::new();
            let chunks: Vec<ChunkInput<'_>> = members
                .iter()
                .enumerate()
                .map(|(input, &(i, decode))| {
                    let s = &streams[i];
                    let known = s.tokens.len();
                    if !decode {
                        return ChunkInput {
                            tokens: &s.tokens[..s.prompt],
                            start_pos: 0,
                            block_table: &s.table,
                            want_logits: true,
                        };
                    }
                    // Launched ahead, the last pick is still on the device: its position is
                    // one past the tokens the host knows.
                    match &in_flight {
                        Some(prev) if ahead => {
                            let row = prev.iter().position(|m| m.0 == i).expect("in flight");
                            feeds.push(Feed { input, row });
                            ChunkInput {
                                tokens: &stand_in,
                                start_pos: known,
                                block_table: &s.table,
                                want_logits: true,
                            }
                        }
                        _ => ChunkInput {
                            tokens: &s.tokens[known - 1..],
                            start_pos: known - 1,
                            block_table: &s.table,
                            want_logits: true,
                        },
                    }
                })
                .collect();
            if ahead {
                b.launch(&chunks, want, &feeds).expect("launch");
            } else {
                let out = tokens_of(b.step(&chunks, want).expect("step"));
                for (&(i, _), s) in members.iter().zip(out) {
                    streams[i].tokens.push(s.id);
                    streams[i].picks.push(s);
                }
                continue;
            }
        }
        if let Some(prev) = in_flight.take() {
            let out = tokens_of(b.collect().expect("collect"));
            for (&(i, _), s) in prev.iter().zip(out) {
                streams[i].tokens.push(s.id);
                streams[i].picks.push(s);
            }
        }
        if !members.is_empty() {
            in_flight = Some(members);
        }
    }
}

fn streams(vocab: usize, blocks: &mut Blocks, bs: usize, steps: usize) -> Vec<Stream> {
    [(37, 0), (5, 0), (130, 0), (64, 3), (2, 5)]
        .iter()
        .enumerate()
        .map(|(n, &(len, joins))| {
            let tokens: Vec<u32> = (0..len)
                .map(|i| ((i * 7919 + n * 131 + 3) % vocab) as u32)
                .collect();
            Stream {
                prompt: len,
                table: blocks.take(len + steps + 2, bs),
                tokens,
                joins,
                picks: Vec::new(),
            }
        })
        .collect()
}

fn compare(c: &mut Checks, name: &str, src: &dyn WeightSource) {
    let steps = 12;
    for graphs in [true, false] {
        let mut b = cuda_backend(src, 2048);
        b.set_graphs(graphs).expect("graphs switch");
        let vocab = src.config().vocab_size;
        let bs = b.kv_geometry().block_size;
        let mut blocks = Blocks::new(&b);
        for (mode, label) in [(Mode::Greedy, "greedy"), (Mode::Sampled, "sampled")] {
            let mut whole = streams(vocab, &mut blocks, bs, steps);
            run(&mut b, &mut whole, steps, mode, false);
            let mut ahead = streams(vocab, &mut blocks, bs, steps);
            run(&mut b, &mut ahead, steps, mode, true);
            for (i, (w, a)) in whole.iter().zip(&ahead).enumerate() {
                let case = format!("{name}: {label}, graphs {graphs}, stream {i}");
                c.identical(&format!("{case} tokens"), &a.tokens, &w.tokens);
                let lp = |s: &Stream| -> Vec<u32> {
                    s.picks
                        .iter()
                        .flat_map(|p| {
                            let mut v = vec![p.logprob.unwrap_or(0.0).to_bits()];
                            v.extend(p.top_logprobs.iter().flat_map(|t| [t.0, t.1.to_bits()]));
                            v
                        })
                        .collect()
                };
                c.identical(&format!("{case} log-probabilities"), &lp(a), &lp(w));
            }
        }
        let timing = b.device_timing();
        c.check(
            timing.is_some_and(|t| t.busy_s > 0.0),
            format!("{name}: the device timed the last step: {timing:?}"),
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn launched_steps_equal_whole_steps() {
    let Some(_gpu) = gpu_or_skip("launched_steps_equal_whole_steps") else {
        return;
    };
    let mut c = Checks::new("pipelined_steps");
    compare(&mut c, "dummy mid", &dummy_mid());
    compare(
        &mut c,
        "dummy:tiny",
        &DummySource::preset("tiny").expect("tiny"),
    );
    for (name, src) in fixture_sources().into_iter().take(2) {
        compare(&mut c, &name, src.as_ref());
    }
    c.finish();
}

/// A launch whose feeds are wrong is refused before anything runs, and the backend stays
/// usable.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn bad_feeds_are_refused() {
    let Some(_gpu) = gpu_or_skip("bad_feeds_are_refused") else {
        return;
    };
    let mut c = Checks::new("bad_feeds");
    let src = DummySource::preset("tiny").expect("tiny");
    let mut b = cuda_backend(&src, 2048);
    let bs = b.kv_geometry().block_size;
    let mut blocks = Blocks::new(&b);
    let t = blocks.take(64, bs);
    let prompt = [1u32, 2, 3];
    let one = [0u32];
    let chunk = |tokens, start_pos| one_chunk(tokens, start_pos, &t);
    let e = b.launch(
        &[chunk(&one, 3)],
        Want::Argmax,
        &[Feed { input: 0, row: 0 }],
    );
    c.check(
        e.is_err(),
        format!("feeds with no step before are refused: {e:?}"),
    );
    b.launch(&[chunk(&prompt[..], 0)], Want::Logits, &[])
        .expect("launch");
    let e = b.launch(
        &[chunk(&one, 3)],
        Want::Argmax,
        &[Feed { input: 0, row: 0 }],
    );
    c.check(
        e.is_err(),
        format!("feeds from a step whose picks are the host's are refused: {e:?}"),
    );
    let out = b.collect().expect("collect");
    c.check(
        matches!(out, StepOutput::Logits(ref l) if l.len() == src.config().vocab_size),
        "the logits step still answers".into(),
    );
    b.launch(&[chunk(&prompt[..], 0)], Want::Argmax, &[])
        .expect("launch");
    let e = b.launch(
        &[chunk(&one, 3)],
        Want::Argmax,
        &[Feed { input: 0, row: 1 }],
    );
    c.check(
        e.is_err(),
        format!("a row past the picks is refused: {e:?}"),
    );
    let ok = b.collect().map(tokens_of);
    c.check(ok.is_ok(), "the step before still answers".into());
    c.finish();
}

fn one_chunk<'a>(tokens: &'a [u32], start_pos: usize, table: &'a [u32]) -> ChunkInput<'a> {
    ChunkInput {
        tokens,
        start_pos,
        block_table: table,
        want_logits: true,
    }
}
