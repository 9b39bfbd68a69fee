//! The `kiln` binary: thin commands over the crates that do the work.

mod backend_choice;
mod bench;
mod draft_choice;
mod generate;
mod info;
mod serve;
mod tokenize;

use clap::{Parser, Subcommand};

/// The model used when `--model` is absent: the small model kiln ships (models/README.md).
pub const DEFAULT_MODEL: &str = "models/kiln-4m/kiln-4m-f16.gguf";

#[derive(Debug, Parser)]
#[command(
    name = "kiln",
    version,
    about = "LLM inference engine and OpenAI-compatible server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text from a prompt and stream it to stdout.
    Generate(generate::GenerateArgs),
    /// Print the token ids of a text as a JSON array.
    Tokenize(tokenize::TokenizeArgs),
    /// Describe a model: architecture, parameters, tensor types, tokenizer, chat template.
    Info(info::InfoArgs),
    /// Serve the OpenAI-compatible HTTP API.
    Serve(serve::ServeArgs),
    /// Measure prefill, time to first token and decode speed.
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        init_logging();
    }
    let result = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Info(args) => info::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (stdout carries the command's output), warnings and up unless RUST_LOG says
/// otherwise.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
