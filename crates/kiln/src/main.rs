//! The `kiln` binary: thin commands over the crates that do the work.

mod backend_choice;
mod bench;
mod draft_choice;
mod dtype_choice;
mod generate;
mod info;
mod memory_fit;
mod sampling_choice;
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
    /// Print the token ids of a text as a JSON array (needs the tokenizer only).
    Tokenize(tokenize::TokenizeArgs),
    /// Print the text of token ids (needs the tokenizer only).
    Detokenize(tokenize::DetokenizeArgs),
    /// Describe a model: architecture, parameters, tensor types, tokenizer, chat template,
    /// and what kiln lacks to run it (reads the header only).
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
        Command::Detokenize(args) => tokenize::run_detokenize(args),
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command, option and choice of a value says what it is in `--help`.
    #[test]
    fn every_command_option_and_value_is_described() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
                if a.get_action().takes_values() {
                    for v in a.get_possible_values() {
                        if !v.is_hide_set() && v.get_help().is_none() {
                            missing.push(format!("{path} {id}={}", v.get_name()));
                        }
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kiln", &mut missing);
        assert!(missing.is_empty(), "no description in --help: {missing:#?}");
    }
}
