//! `kiln bench`: prefill, time-to-first-token and decode figures of the engine's forward passes
//! on any model, as a table on stdout and JSON for scripts (scripts/bench-cpu.sh,
//! scripts/bench-gpu.sh put them beside llama.cpp and transformers; docs/BENCH.md keeps them).

mod compare;
mod constrained;
mod plan;
mod report;
mod runner;
mod speculative;
mod stats;
mod target;
mod versus;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use crate::backend_choice::{DeviceArgs, ModelArgs};
use crate::draft_choice::DraftArgs;
use plan::{parse_list, Plan, DEFAULT_DEPTHS, DEFAULT_PREFILL};
use report::{Header, Row};
use runner::{DecodeMode, Runner};
use target::Target;
use versus::{parse_reference, Reference};

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Prompt lengths to prefill, comma-separated ("none" for no prefill cases) [default:
    /// 2048,8192,32768, those longer than the model's context left out].
    #[arg(long, value_parser = parse_list)]
    pub prefill: Option<std::vec::Vec<usize>>,
    /// Tokens each decode case generates per stream (0: no decode cases).
    #[arg(long, default_value_t = 128)]
    pub decode: usize,
    /// KV depths the decode cases start from, comma-separated [default: 0,8192, those whose
    /// cases pass the model's context left out].
    #[arg(long, value_parser = parse_list)]
    pub depth: Option<std::vec::Vec<usize>>,
    /// Streams decoded together, comma-separated: one decode row each per step.
    #[arg(long, default_value = "1,8,32", value_parser = parse_list)]
    pub concurrency: std::vec::Vec<usize>,
    /// Timed runs per case; the table shows their median and range.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Untimed runs per case first (a decode warm-up runs at most 16 steps).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Most prompt tokens per forward, as the engine's prefill chunk.
    #[arg(long, default_value_t = 2048)]
    pub chunk: usize,
    /// Decode with the logits copied to the host and sampled there, as the engine does for
    /// sampled requests. By default greedy decode rows take the backend's on-device argmax
    /// where it has one, as the engine does when every request of a step is greedy.
    #[arg(long)]
    pub host_sampling: bool,
    /// Decode with this temperature (and `--top-p`), each stream with its own seed: sampled
    /// on the device where the backend can (only the chosen ids cross to the host), else on
    /// the host; with `--host-sampling` always on the host. 0: greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus cut for `--temperature`.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Histories whose time to first token is measured with the history in the prefix cache,
    /// against the same prompt cold, each followed by `--new-turn` new tokens ("none": no
    /// resumed cases).
    #[arg(long, default_value = "none", value_parser = parse_list)]
    pub resumed: std::vec::Vec<usize>,
    /// New tokens after each `--resumed` history.
    #[arg(long, default_value_t = 100)]
    pub new_turn: usize,
    /// With --draft: decode `--decode` tokens through the engine with and without drafting.
    #[command(flatten)]
    pub draft: DraftArgs,
    /// The prompt of the --draft case (default: a code-editing prompt that quotes a source file
    /// of `--draft-file-bytes` and asks for it again).
    #[arg(long)]
    pub draft_prompt: Option<String>,
    /// Size of the source file the default --draft prompt quotes, in bytes.
    #[arg(long, default_value_t = 1100)]
    pub draft_file_bytes: usize,
    /// Decode `--decode` tokens through the engine at each `--concurrency` with every stream
    /// held to this grammar, against the same streams unconstrained: `json_object`,
    /// `regex:PATTERN`, `lark:FILE` or a JSON schema's file. Repeat for several.
    #[arg(long)]
    pub grammar: Vec<String>,
    /// Also run a reference engine on the same file in this call and print kiln's figures
    /// beside its own (kiln / reference): `llama.cpp=PATH/TO/llama-bench` (llama-batched-bench
    /// beside it runs the cases of several streams), or `transformers[=PYTHON]`. May be
    /// repeated.
    #[arg(long = "vs", value_name = "ENGINE", value_parser = parse_reference)]
    pub vs: Vec<Reference>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

impl BenchArgs {
    fn decode_mode(&self) -> anyhow::Result<DecodeMode> {
        let sampling = kiln_engine::SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            ..Default::default()
        };
        sampling.validate().map_err(|e| anyhow::anyhow!(e))?;
        Ok(match (self.temperature > 0.0, self.host_sampling) {
            (false, false) => DecodeMode::Greedy,
            (false, true) => DecodeMode::HostGreedy,
            (true, on_host) => DecodeMode::Sampled {
                temperature: self.temperature,
                top_p: self.top_p,
                on_host,
            },
        })
    }

    /// The cases of this run on a model of `context` tokens: values given stay as given (and
    /// `Plan::validate` refuses those that do not fit), defaults that do not fit are left out
    /// with a note.
    fn plan(&self, context: usize) -> (Plan, Vec<String>) {
        let mut notes = Vec::new();
        let prefill = match &self.prefill {
            Some(p) => p.clone(),
            None => {
                let (kept, note) =
                    plan::fit_defaults(&DEFAULT_PREFILL, 0, context, "--prefill", || {
                        plan::power_of_two_up_to(context)
                    });
                notes.extend(note);
                kept
            }
        };
        let depths = match &self.depth {
            Some(d) => d.clone(),
            None if self.decode == 0 => DEFAULT_DEPTHS[..1].to_vec(),
            None => {
                let (kept, note) =
                    plan::fit_defaults(&DEFAULT_DEPTHS, self.decode, context, "--depth", || None);
                notes.extend(note);
                kept
            }
        };
        let plan = Plan {
            prefill,
            decode: self.decode,
            depths,
            concurrency: self.concurrency.clone(),
            repeats: self.repeats,
            warmup: self.warmup,
            chunk: self.chunk,
            resumed: self.resumed.clone(),
            new_turn: self.new_turn,
        };
        (plan, notes)
    }
}

fn describe_mode(mode: DecodeMode) -> String {
    match mode {
        DecodeMode::Greedy => "greedy, device argmax where available".into(),
        DecodeMode::HostGreedy => "greedy, on the host".into(),
        DecodeMode::Sampled {
            temperature,
            top_p,
            on_host,
        } => format!(
            "temperature {temperature}, top-p {top_p}, {}",
            if on_host {
                "on the host"
            } else {
                "on the device where available"
            }
        ),
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let model = args.model.load()?;
    let (plan, notes) = args.plan(model.config.max_position);
    for note in notes {
        eprintln!("{note}");
    }
    plan.validate(model.config.max_position)
        .with_context(|| format!("model `{}`", model.name))?;
    let model_path = args.model.resolved();
    check_references(&args.vs, &model_path)?;
    let mut target = Target::build(&model, &args.device, &plan)?;
    let mode = args.decode_mode()?;
    let mut rows = measure(target.backend(), &plan, model.config.vocab_size, mode)?;
    let (device_name, kind, memory) = (target.device_name(), target.kind(), target.memory());
    // The references, the drafted and the constrained cases run on backends of their own: this
    // one's memory goes first.
    drop(target);
    let cases = versus::Cases {
        prefill: plan.prefill.clone(),
        decode: plan.decode,
        depths: plan.depths.clone(),
        concurrency: plan.concurrency.clone(),
        repeats: plan.repeats,
        chunk: plan.chunk,
        gpu: kind == "cuda",
        threads: args.device.threads,
    };
    let mut references = versus::RefRun::default();
    for r in &args.vs {
        let path = std::path::Path::new(&model_path);
        let run = match r {
            Reference::LlamaCpp { bench } => versus::run_llama_cpp(bench, path, &cases),
            Reference::Transformers { python } => versus::run_transformers(python, path, &cases),
        }
        .with_context(|| format!("the {} reference run", r.engine()))?;
        references.rows.extend(run.rows);
        references.notes.extend(run.notes);
        if let Some(v) = run.version {
            references.notes.push(v);
        }
    }
    if args.draft.draft.is_some() {
        let text = match &args.draft_prompt {
            Some(p) => p.clone(),
            None => speculative::edit_prompt(args.draft_file_bytes),
        };
        let prompt = model.tokenizer.encode(&text, true)?;
        let tokens = plan.decode.max(2);
        let t = speculative::measure(
            &model,
            &args.device,
            &args.draft,
            &prompt,
            tokens,
            plan.warmup,
            plan.repeats,
        )
        .context("the --draft case")?;
        eprintln!(
            "decode with draft {}: {:.1} tok/s against {:.1} plain",
            t.drafter, t.drafted_tok_s.median, t.plain_tok_s.median
        );
        rows.push(Row::Speculative(t));
    }
    if !args.grammar.is_empty() {
        let prompt = model
            .tokenizer
            .encode("Reply with the record, as JSON:", true)?;
        let most = plan.concurrency.iter().copied().max().unwrap_or(1);
        let tokens = plan.decode.max(2);
        let engine = constrained::engine(&model, &args.device, &prompt, tokens, most)?;
        for spec in &args.grammar {
            let grammar = constrained::parse_grammar(spec)?;
            for &streams in &plan.concurrency {
                let t = constrained::measure(
                    &engine,
                    &grammar,
                    &prompt,
                    tokens,
                    streams,
                    args.temperature,
                    plan.warmup,
                    plan.repeats,
                )
                .with_context(|| format!("the --grammar {spec} case at {streams} streams"))?;
                eprintln!(
                    "decode under {} at {streams} streams: {:.1} tok/s against {:.1} plain",
                    t.grammar, t.constrained_tok_s.median, t.plain_tok_s.median
                );
                rows.push(Row::Constrained(t));
            }
        }
        engine.shutdown();
    }

    let header = Header {
        date: report::utc_now(),
        commit: report::commit(),
        device: device_name,
        backend: kind,
        model: model.name.clone(),
        model_info: model_info(&model),
        settings: json!({
            "repeats": plan.repeats,
            "warmup": plan.warmup,
            "chunk": plan.chunk,
            "decode": plan.decode,
            "new_turn": plan.new_turn,
            "threads": args.device.threads,
            "decode_sampling": describe_mode(mode),
            "quantize": args.device.quantize.map(|q| format!("{q:?}").to_lowercase()),
        }),
        memory,
    };
    print!("{}", report::table(&header, &rows));
    let mut doc = report::to_json(&header, &rows);
    // fp8 projections are the rows' weights whatever the file holds.
    if args.device.quantize.is_some() {
        for row in doc["rows"].as_array_mut().into_iter().flatten() {
            row["weights"] = json!("fp8");
        }
    }
    if !args.vs.is_empty() {
        let lines = compare::compare(
            doc["rows"].as_array().map_or(&[], Vec::as_slice),
            &references.rows,
        );
        print!("{}", compare::table(&lines, &[], &references.notes));
        if let Some(all) = doc["rows"].as_array_mut() {
            all.extend(references.rows.iter().map(versus::RefRow::to_json));
        }
        doc["comparison"] = json!(lines.iter().map(compare::Line::to_json).collect::<Vec<_>>());
        doc["reference_notes"] = json!(references.notes);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&doc)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write the results to {}", path.display()))?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}

/// Refuses, before anything runs, a reference that cannot read the model: the references read
/// the file itself, so a dummy preset has none, and llama.cpp reads GGUF files only.
fn check_references(refs: &[Reference], model: &str) -> anyhow::Result<()> {
    for r in refs {
        if model.starts_with("dummy:") {
            anyhow::bail!(
                "--vs {} needs a model file the reference can read (a .gguf or a Hugging Face \
                 folder); dummy presets exist only inside kiln",
                r.engine()
            );
        }
        if matches!(r, Reference::LlamaCpp { .. }) && std::path::Path::new(model).is_dir() {
            anyhow::bail!(
                "--vs llama.cpp reads GGUF files only; give the model as a .gguf, or compare this \
                 folder with --vs transformers"
            );
        }
    }
    Ok(())
}

/// Runs every case of `plan` on `backend`: the prefill lengths, then each depth's decode cases
/// (streams are filled once per depth for the largest concurrency and shared by the smaller).
fn measure(
    backend: &mut dyn kiln_engine::Backend,
    plan: &Plan,
    vocab: usize,
    mode: DecodeMode,
) -> anyhow::Result<Vec<Row>> {
    let mut runner = Runner::new(backend, vocab, plan.chunk);
    runner.set_mode(mode);
    let mut rows = Vec::new();
    for &len in &plan.prefill {
        let t = runner
            .prefill(len, plan.warmup, plan.repeats)
            .with_context(|| format!("prefill of {len} tokens"))?;
        let row = Row::Prefill(t);
        eprintln!("prefill {len}: {:.1} tok/s", row.tok_s().median);
        rows.push(row);
    }
    for &history in &plan.resumed {
        let t = runner
            .resumed(history, plan.new_turn, plan.warmup, plan.repeats)
            .with_context(|| format!("resumed prompt of {history} + {} tokens", plan.new_turn))?;
        eprintln!(
            "resumed {history}+{}: TTFT {:.1} ms, cold {:.1} ms{}",
            plan.new_turn,
            t.ttft_s.median * 1e3,
            t.cold_ttft_s.median * 1e3,
            t.host_ttft_s.map_or(String::new(), |h| format!(
                ", from host {:.1} ms",
                h.median * 1e3
            ))
        );
        rows.push(Row::Resumed(t));
    }
    if plan.decode == 0 {
        return Ok(rows);
    }
    for &depth in &plan.depths {
        let streams = runner
            .fill_streams(plan.max_concurrency(), depth, plan.decode)
            .with_context(|| format!("filling the KV cache to depth {depth}"))?;
        for &c in &plan.concurrency {
            let t = runner
                .decode(&streams, c, plan.decode, plan.warmup, plan.repeats)
                .with_context(|| format!("decode at depth {depth} with {c} streams"))?;
            let row = Row::Decode(t);
            eprintln!("decode depth {depth} x{c}: {:.1} tok/s", row.tok_s().median);
            rows.push(row);
        }
        runner.release(streams);
    }
    Ok(rows)
}

/// The model's shape and size, enough for a script to work out bytes and FLOPs per token.
fn model_info(model: &kiln_load::LoadedModel) -> serde_json::Value {
    let c = &model.config;
    json!({
        "arch": c.arch.name(),
        "params": model.description.param_count,
        "format": model.description.format,
        "tensor_types": model.description.tensor_types,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_layers": c.num_layers,
        "num_heads": c.num_heads,
        "num_kv_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "tie_embeddings": c.tie_embeddings,
    })
}

#[cfg(test)]
mod tests;
