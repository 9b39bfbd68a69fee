//! `kiln serve`: load a model, start the engine on a backend, serve the OpenAI API until
//! SIGINT/SIGTERM.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Args;
use kiln_engine::EngineConfig;
use kiln_server::{Limits, ServeOptions};

use crate::backend_choice::{build_backend_for, DeviceArgs, ModelArgs, BLOCK_SIZE};
use crate::draft_choice::DraftArgs;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub draft: DraftArgs,
    /// Address to listen on. Use 0.0.0.0 to accept connections from other machines.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The model name clients use (`model` in requests); defaults to the loaded model's name.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Sequences decoded together at most.
    #[arg(long, default_value_t = 64)]
    pub max_num_seqs: usize,
    /// Token budget of one engine step (decode tokens plus prefill chunks).
    #[arg(long, default_value_t = 2048)]
    pub max_batched_tokens: usize,
    /// Most prompt tokens of one sequence per step.
    #[arg(long, default_value_t = 512)]
    pub prefill_chunk: usize,
    /// KV cache blocks (of 16 tokens) to allocate on the CPU; the GPU takes most of its free memory.
    #[arg(long, default_value_t = 1024)]
    pub kv_blocks: usize,
    /// Requests that may wait beyond the running ones; more get HTTP 429.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// Longest sequence (prompt plus completion); defaults to the model's context length.
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Recompute every prompt from its first token instead of reusing the KV blocks of earlier
    /// requests that began with the same tokens (`KILN_PREFIX_CACHE=0` does the same).
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Largest request body in bytes; larger ones get HTTP 413.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds in-flight requests may run on after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_secs: u64,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // The address line must reach the user even if main set no subscriber up.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();

    let listener = kiln_server::bind(&args.host, args.port)?;
    let t0 = Instant::now();
    let model = args.model.load()?;
    let cfg = EngineConfig {
        max_num_seqs: args.max_num_seqs,
        max_batched_tokens: args.max_batched_tokens,
        prefill_chunk: args.prefill_chunk,
        max_queue: args.max_queue,
        max_context: args.max_context.unwrap_or(model.config.max_position),
        prefix_cache: !args.no_prefix_cache,
    };
    // The GPU backend sizes its step buffers from the engine's limits.
    let inputs = args.draft.inputs_per_seq();
    let backend = build_backend_for(
        &model,
        &args.device,
        &cfg,
        args.kv_blocks * BLOCK_SIZE,
        inputs,
    )?;
    let drafting = args.draft.build(&model, &args.device, &cfg)?;
    let engine = kiln_engine::start_with_drafter(backend, model.tokenizer.clone(), cfg, drafting);
    let name = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| model.name.clone());
    tracing::info!(
        "loaded `{}` in {:.1}s: context {} tokens, KV pool {} blocks of {BLOCK_SIZE} tokens",
        args.model.model,
        t0.elapsed().as_secs_f64(),
        engine.max_context(),
        engine.kv_capacity() / BLOCK_SIZE,
    );
    let opts = ServeOptions {
        host: args.host,
        port: args.port,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
        },
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
    };
    kiln_server::serve_blocking(listener, engine, model.tokenizer, name, opts)
}
