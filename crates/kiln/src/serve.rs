//! `kiln serve`: load a model, start the engine on a backend, serve the OpenAI API until
//! SIGINT/SIGTERM.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use kiln_engine::EngineConfig;
use kiln_server::{Access, ConnectionLimits, Limits, PromptRules, ServeOptions};

use crate::backend_choice::{build_backend_with, DeviceArgs, ModelArgs, Quantize, BLOCK_SIZE};
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
    /// TCP port to listen on.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The model name clients use (`model` in requests); defaults to the loaded model's name.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Sequences decoded together at most (default: 256 on the GPU, 64 on the CPU).
    #[arg(long)]
    pub max_num_seqs: Option<usize>,
    /// Token budget of one engine step (decode tokens plus prefill chunks); default 4096 on the
    /// GPU with `--quantize fp8`, else 2048. A larger budget admits a burst of prompts in fewer
    /// steps (shorter waits for the first token, more throughput) and makes those steps longer
    /// (longer gaps between tokens while they run): docs/SERVER.md has the measurements.
    #[arg(long)]
    pub max_batched_tokens: Option<usize>,
    /// Most prompt tokens of one sequence per step.
    #[arg(long, default_value_t = 512)]
    pub prefill_chunk: usize,
    /// While no sequence is decoding, let a prompt take the whole step budget
    /// (--max-batched-tokens) instead of --prefill-chunk: a prompt alone runs in fewer, larger
    /// chunks (each step of a quantised model on the GPU expands its weights once). On by
    /// default on the GPU, off on the CPU; `--prefill-alone=off` turns it off.
    #[arg(long, num_args = 0..=1, default_missing_value = "on")]
    pub prefill_alone: Option<Toggle>,
    /// KV cache blocks (of 16 tokens) to allocate on the CPU; the GPU takes most of its free memory.
    #[arg(long, default_value_t = 1024)]
    pub kv_blocks: usize,
    /// Requests that may wait beyond the running ones; more get HTTP 429.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// Longest sequence (prompt plus completion); defaults to the model's context length. More
    /// than the model's is refused unless --allow-long-context.
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Accept --max-context above the model's context length (positions the model was not
    /// trained for usually give garbage).
    #[arg(long)]
    pub allow_long_context: bool,
    /// Recompute every prompt from its first token instead of reusing the KV blocks of earlier
    /// requests that began with the same tokens (`KILN_PREFIX_CACHE=0` does the same).
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Finish each engine step before planning the next, instead of planning and launching it
    /// while the GPU runs the one before (`KILN_OVERLAP=0` does the same). For A/B runs.
    #[arg(long)]
    pub no_overlap: bool,
    /// Largest request body in bytes; larger ones get HTTP 413.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds a request body may take to arrive once its headers have; slower ones get 408.
    #[arg(long, default_value_t = 30)]
    pub body_timeout_secs: u64,
    /// Seconds a client has to send a request's headers, from when it connects or from the end
    /// of its previous response (so idle keep-alive connections close too).
    #[arg(long, default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// Connections open at once; more are answered 503 and closed. Lowered to fit the open-file
    /// limit (ulimit -n).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Threads that parse, template and tokenise request bodies (default: half the cores).
    #[arg(long)]
    pub prompt_threads: Option<usize>,
    /// Requests that may wait for a prompt thread; more get HTTP 429.
    #[arg(long, default_value_t = 256)]
    pub prompt_queue: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (401 otherwise).
    /// KILN_API_KEY does the same without showing the key in the process list.
    #[arg(long)]
    pub api_key: Option<String>,
    /// With an API key, /metrics needs it too (by default /metrics stays open for scrapers).
    #[arg(long)]
    pub metrics_need_key: bool,
    /// Read control-token text inside chat messages (`<|im_end|>`) as the control token, as
    /// kiln did before. By default it is plain text, so that a user cannot end their turn and
    /// write a system one.
    #[arg(long)]
    pub special_tokens_in_messages: bool,
    /// Seconds in-flight requests may run on after SIGINT/SIGTERM before they are cancelled; a
    /// second signal stops at once.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_secs: u64,
    /// Leave the model's sampling defaults (generation_config.json, GGUF general.sampling.*)
    /// unused: a request that omits a field gets the OpenAI default.
    #[arg(long)]
    pub ignore_generation_config: bool,
}

/// `--max-context`, checked against what the model was trained for.
fn max_context(args: &ServeArgs, model_context: usize) -> anyhow::Result<usize> {
    match args.max_context {
        None => Ok(model_context),
        Some(n) if n <= model_context || args.allow_long_context => Ok(n),
        Some(n) => Err(anyhow::anyhow!(
            "--max-context {n} is more than the model's context length of {model_context} \
             tokens: positions beyond it usually give garbage. Lower it, or pass \
             --allow-long-context to use it anyway."
        )),
    }
}

/// `--max-num-seqs` when not given. On the GPU a decode step's weight reads are shared by all its
/// rows: on the H200 (Llama-3-8B, 128 clients of scripts/serve_load.py, 2026-12-02) 64
/// sequences served 3,560 tok/s with TTFT p50 2.4 s, 128 and 256 4,090-4,410 with p50 0.28-0.5
/// s, and 256 clients need 256. On the CPU a row costs nearly its own weight pass, so more rows
/// only lengthen every client's steps.
fn default_max_num_seqs(on_gpu: bool) -> usize {
    if on_gpu {
        256
    } else {
        64
    }
}

/// A switch whose default depends on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Toggle {
    /// Turned on.
    On,
    /// Turned off.
    Off,
}

/// The step budget without --max-batched-tokens: 4096 where the GPU prefills with fp8
/// projections, which read prompts about 1.5x as fast as bf16, so a full step lasts about what
/// a 2048-token bf16 one does. 128 clients of the recorded workload on an H200 (2026-12-05)
/// got 8,172-8,234 tok/s with TTFT p99 977-982 ms at 4096 against 7,981 and 1,090 ms at 2048,
/// ITL p99 80 against 49 ms (bf16 at 2048: 72 ms). Else 2048 (docs/SERVER.md).
fn default_max_batched_tokens(on_gpu: bool, fp8: bool) -> usize {
    if on_gpu && fp8 {
        4096
    } else {
        2048
    }
}

/// `--prefill-alone` when not given. On the GPU a lone prompt read in 2048-token chunks instead
/// of 512 prefilled 8k tokens 4.7% faster with F16 weights and 27% faster with Q4_K_M and Q8_0
/// (H200, Llama-3-8B, 2026-12-03): the GEMMs run fuller and quantised matrices are expanded a
/// quarter as often. On the CPU a step's cost grows with its tokens alike, and a longer step only
/// delays a prompt that arrives during it.
fn default_prefill_alone(on_gpu: bool) -> bool {
    on_gpu
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
    let on_gpu = args.device.expects_cuda(&model);
    let fp8 = args.device.quantize == Some(Quantize::Fp8);
    let cfg = EngineConfig {
        max_num_seqs: args
            .max_num_seqs
            .unwrap_or_else(|| default_max_num_seqs(on_gpu)),
        max_batched_tokens: args
            .max_batched_tokens
            .unwrap_or_else(|| default_max_batched_tokens(on_gpu, fp8)),
        prefill_chunk: args.prefill_chunk,
        prefill_alone: args
            .prefill_alone
            .map_or_else(|| default_prefill_alone(on_gpu), |t| t == Toggle::On),
        max_queue: args.max_queue,
        max_context: max_context(&args, model.config.max_position)?,
        prefix_cache: !args.no_prefix_cache,
        overlap: !args.no_overlap,
        output_thread: true,
    };
    // The GPU backend sizes its step buffers from the engine's limits.
    let inputs = args.draft.inputs_per_seq();
    let assistant = args.draft.assistant(&model)?;
    let backend = build_backend_with(
        &model,
        &args.device,
        &cfg,
        args.kv_blocks * BLOCK_SIZE,
        cfg.max_context,
        inputs,
        assistant.as_ref(),
    )?;
    let drafting = args
        .draft
        .build(&model, &args.device, &cfg, assistant.is_some())?;
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
    let api_key = args
        .api_key
        .clone()
        .or_else(|| std::env::var("KILN_API_KEY").ok())
        .filter(|k| !k.is_empty());
    let opts = ServeOptions {
        host: args.host,
        port: args.port,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            body_timeout: Duration::from_secs(args.body_timeout_secs),
            prompt_threads: args
                .prompt_threads
                .unwrap_or_else(kiln_server::state::default_prompt_threads),
            prompt_queue: args.prompt_queue,
        },
        connections: ConnectionLimits {
            header_timeout: Duration::from_secs(args.header_timeout_secs),
            max_connections: args.max_connections,
        },
        access: Access {
            api_key,
            metrics_need_key: args.metrics_need_key,
        },
        rules: PromptRules {
            special_tokens_in_messages: args.special_tokens_in_messages,
        },
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
        sampling_defaults: request_defaults(&model.sampling, args.ignore_generation_config),
    };
    kiln_server::serve_blocking(listener, engine, model.tokenizer, name, opts)
}

/// The model's sampling defaults as the server applies them to requests that leave them out.
fn request_defaults(
    d: &kiln_load::SamplingDefaults,
    ignore: bool,
) -> kiln_server::SamplingDefaults {
    if ignore || d.is_empty() {
        return kiln_server::SamplingDefaults::default();
    }
    tracing::info!(
        "requests that leave sampling out get the model's {} ({}; --ignore-generation-config drops them)",
        d.summary(),
        d.source.as_deref().unwrap_or("settings")
    );
    kiln_server::SamplingDefaults {
        temperature: d.temperature.map(f64::from),
        top_p: d.top_p.map(f64::from),
        top_k: d.top_k.and_then(|k| i64::try_from(k).ok()),
        min_p: d.min_p.map(f64::from),
        repetition_penalty: d.repetition_penalty.map(f64::from),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{ServeArgs, Toggle};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn prefill_alone(args: &[&str]) -> Result<Option<Toggle>, clap::Error> {
        let argv = ["kiln", "--model", "dummy:tiny"].iter().chain(args);
        Ok(Cli::try_parse_from(argv)?.serve.prefill_alone)
    }

    #[test]
    fn prefill_alone_is_the_device_default_unless_given() {
        assert_eq!(prefill_alone(&[]).unwrap(), None);
        assert_eq!(
            prefill_alone(&["--prefill-alone"]).unwrap(),
            Some(Toggle::On)
        );
        assert_eq!(
            prefill_alone(&["--prefill-alone=off"]).unwrap(),
            Some(Toggle::Off)
        );
        assert_eq!(
            prefill_alone(&["--prefill-alone", "on"]).unwrap(),
            Some(Toggle::On)
        );
        assert!(prefill_alone(&["--prefill-alone=maybe"]).is_err());
        assert!(super::default_prefill_alone(true) && !super::default_prefill_alone(false));
    }

    #[test]
    fn the_step_budget_is_4096_for_fp8_on_the_gpu_unless_given() {
        let parse = |args: &[&str]| {
            let argv = ["kiln", "--model", "dummy:tiny"].iter().chain(args);
            Cli::try_parse_from(argv).map(|c| c.serve.max_batched_tokens)
        };
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(
            parse(&["--max-batched-tokens", "1024"]).unwrap(),
            Some(1024)
        );
        assert!(parse(&["--max-batched-tokens", "many"]).is_err());
        let budget = super::default_max_batched_tokens;
        assert_eq!(budget(true, true), 4096);
        assert_eq!([budget(true, false), budget(false, true)], [2048, 2048]);
    }

    #[test]
    fn decode_gemm_is_the_switch_default_unless_named() {
        use crate::backend_choice::DecodeGemm;
        let parse = |args: &[&str]| {
            let argv = ["kiln", "--model", "dummy:tiny"].iter().chain(args);
            Cli::try_parse_from(argv).map(|c| c.serve.device.decode_gemm)
        };
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(
            parse(&["--decode-gemm", "prefill-order"]).unwrap(),
            Some(DecodeGemm::PrefillOrder)
        );
        assert_eq!(
            parse(&["--decode-gemm=skinny"]).unwrap(),
            Some(DecodeGemm::Skinny)
        );
        let err = parse(&["--decode-gemm", "fast"]).unwrap_err().to_string();
        assert!(err.contains("prefill-order"), "{err}");
    }
}
