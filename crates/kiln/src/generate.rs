//! `kiln generate`: one prompt through the engine, text streamed to stdout, timings to stderr
//! (or one JSON object with `--json`).

use std::io::Write;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use kiln_engine::{EngineConfig, Finish, GenEvent, GenerateRequest};
use kiln_tokenizer::{ChatMessage, Tokenizer};

use crate::backend_choice::{build_backend_with, DeviceArgs, ModelArgs};
use crate::draft_choice::DraftArgs;
use crate::sampling_choice::SamplingArgs;

#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub draft: DraftArgs,
    /// The prompt text.
    #[arg(long, short = 'p')]
    pub prompt: String,
    /// Send the prompt as a user message through the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// A system message to put before the prompt (with --chat).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// Tokens to generate at most (fewer if the context ends first).
    #[arg(short = 'n', long = "max-tokens", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when the text contains this string (may be repeated).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object (prompt_ids, ids, text, finish_reason, timings) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let model = args.model.load()?;
    let prompt_ids = prompt_ids(&model.tokenizer, &args)?;
    let max_context = model.config.max_position;
    anyhow::ensure!(
        prompt_ids.len() < max_context,
        "the prompt has {} tokens but the model's context is {max_context}",
        prompt_ids.len()
    );
    let room = max_context - prompt_ids.len();
    let max_tokens = (args.max_tokens as usize).min(room);
    if max_tokens < args.max_tokens as usize {
        eprintln!(
            "note: only {room} tokens fit in the context after the prompt; generating at most that"
        );
    }
    let cfg = EngineConfig {
        max_num_seqs: 1,
        max_queue: 1,
        max_context,
        ..EngineConfig::default()
    };
    let kv_tokens = prompt_ids.len() + max_tokens;
    let assistant = args.draft.assistant(&model)?;
    let backend = build_backend_with(
        &model,
        &args.device,
        &cfg,
        kv_tokens,
        kv_tokens,
        args.draft.inputs_per_seq(),
        assistant.as_ref(),
    )?;
    let load_s = t0.elapsed().as_secs_f64();

    let drafting = args
        .draft
        .build(&model, &args.device, &cfg, assistant.is_some())?;
    let engine = kiln_engine::start_with_drafter(backend, model.tokenizer.clone(), cfg, drafting);
    if let Some(d) = args.sampling.model_defaults(&model.sampling) {
        eprintln!(
            "sampling: {} from the model's {} (flags override; --ignore-generation-config drops them)",
            d.summary(),
            d.source.as_deref().unwrap_or("settings")
        );
    }
    let sampling = args.sampling.resolve(&model.sampling);
    if args.draft.draft.is_some() && sampling.has_penalties() {
        eprintln!(
            "note: no drafting with a repetition penalty (penalties read every token before the \
             next); --repetition-penalty 1 drafts"
        );
    }
    let request = GenerateRequest {
        prompt: prompt_ids.clone(),
        sampling,
        max_tokens,
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        ..GenerateRequest::default()
    };
    let started = Instant::now();
    let result = stream(&engine, request, !args.json);
    let total_s = started.elapsed().as_secs_f64();
    engine.shutdown();
    let (ids, text, finish) = result?;

    let timings = Timings::new(load_s, total_s, prompt_ids.len(), &finish);
    if args.json {
        let out = serde_json::json!({
            "model": model.name,
            "prompt_ids": prompt_ids,
            "ids": ids,
            "text": text,
            "finish_reason": finish.reason,
            "timings": timings.to_json(),
            "draft": finish.draft,
        });
        println!("{out}");
    } else {
        println!();
        timings.print();
        let d = finish.draft;
        if d.target_passes > 0 {
            eprintln!(
                "draft: {} of {} proposed tokens accepted over {} verify steps",
                d.accepted, d.proposed, d.target_passes
            );
        }
    }
    Ok(())
}

/// The prompt's token ids, through the chat template with `--chat`.
fn prompt_ids(tokenizer: &Tokenizer, args: &GenerateArgs) -> anyhow::Result<Vec<u32>> {
    if !args.chat {
        return tokenizer.encode(&args.prompt, true);
    }
    let template = tokenizer
        .chat_template()
        .context("this model has no chat template; run without --chat")?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage {
            role: "system".into(),
            content: system.clone(),
        });
    }
    messages.push(ChatMessage {
        role: "user".into(),
        content: args.prompt.clone(),
    });
    let text = template
        .render(&messages, true)
        .context("the chat template failed to render")?;
    // Templates usually write the BOS token themselves; don't add a second one.
    let bos_text = tokenizer.bos_id().map(|b| tokenizer.decode(&[b], false));
    let has_bos = bos_text.is_some_and(|b| !b.is_empty() && text.starts_with(&b));
    tokenizer.encode(&text, !has_bos)
}

/// Runs the request, echoing text as it comes when `echo`.
fn stream(
    engine: &kiln_engine::EngineHandle,
    request: GenerateRequest,
    echo: bool,
) -> anyhow::Result<(Vec<u32>, String, Finish)> {
    let mut events = engine.submit(request)?;
    let (mut ids, mut text) = (Vec::new(), String::new());
    let mut out = std::io::stdout().lock();
    while let Some(event) = events.blocking_next() {
        let piece = match event {
            GenEvent::Token(t) => {
                ids.push(t.id);
                t.text
            }
            GenEvent::Done(finish) => {
                text.push_str(&finish.trailing_text);
                if echo {
                    write!(out, "{}", finish.trailing_text)?;
                    out.flush()?;
                }
                return Ok((ids, text, finish));
            }
            GenEvent::Error(e) => anyhow::bail!("generation failed: {e}"),
        };
        if echo && !piece.is_empty() {
            write!(out, "{piece}")?;
            out.flush()?;
        }
        text.push_str(&piece);
    }
    anyhow::bail!("the engine stopped before the request finished")
}

struct Timings {
    load_s: f64,
    total_s: f64,
    prompt_tokens: usize,
    /// Submission to first token: the prompt's prefill (and one sample).
    prompt_s: f64,
    generated_tokens: usize,
    /// First token to last: the decode steps.
    generation_s: f64,
}

impl Timings {
    fn new(load_s: f64, total_s: f64, prompt_tokens: usize, finish: &Finish) -> Timings {
        let prompt_s = finish.time_to_first_token.unwrap_or(total_s);
        Timings {
            load_s,
            total_s,
            prompt_tokens,
            prompt_s,
            generated_tokens: finish.completion_tokens,
            generation_s: (total_s - prompt_s).max(0.0),
        }
    }

    fn prompt_rate(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_s)
    }

    /// The first token comes out of the prefill; the rest are decode steps.
    fn generation_rate(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.generation_s)
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "load_s": self.load_s,
            "prompt_tokens": self.prompt_tokens,
            "prompt_s": self.prompt_s,
            "prompt_tokens_per_s": self.prompt_rate(),
            "generated_tokens": self.generated_tokens,
            "generation_s": self.generation_s,
            "generation_tokens_per_s": self.generation_rate(),
            "total_s": self.total_s,
        })
    }

    fn print(&self) {
        eprintln!("load: {:.2} s", self.load_s);
        eprintln!(
            "prompt: {} tokens in {:.3} s ({:.1} tok/s)",
            self.prompt_tokens,
            self.prompt_s,
            self.prompt_rate()
        );
        eprintln!(
            "generation: {} tokens in {:.3} s ({:.1} tok/s)",
            self.generated_tokens,
            self.generation_s,
            self.generation_rate()
        );
    }
}

fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}
