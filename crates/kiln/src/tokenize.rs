//! `kiln tokenize` and `kiln detokenize`: text to the ids a model gets as its prompt, and ids
//! back to text. Both read the tokenizer only (no weights), so they work on vocabulary-only
//! GGUF files, folders without safetensors and architectures kiln does not run yet.

use std::io::Read;

use anyhow::{bail, Context};
use clap::Args;
use kiln_tokenizer::Tokenizer;

use crate::backend_choice::ModelArgs;

#[derive(Debug, Clone, Args)]
pub struct TokenizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to tokenize (read from standard input when absent).
    pub text: Option<String>,
    /// Leave out the BOS/EOS tokens the model's settings would add.
    #[arg(long)]
    pub no_special: bool,
    /// Print each token's id and text, one per line, instead of a JSON array of ids.
    #[arg(long)]
    pub pieces: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DetokenizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Token ids: a JSON array ("[9906, 1917]") or numbers separated by spaces or commas (read
    /// from standard input when absent).
    pub ids: Vec<String>,
    /// Leave special tokens (BOS, EOS, chat markers) out of the text.
    #[arg(long)]
    pub skip_special: bool,
    /// Print the text as a JSON string (exact, whitespace and all) instead of as it is.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let header = args.model.inspect()?;
    let tokenizer = header.tokenizer()?;
    let text = match args.text {
        Some(t) => t,
        None => read_stdin()?,
    };
    let ids = tokenizer.encode(&text, !args.no_special)?;
    if args.pieces {
        for &id in &ids {
            let piece = String::from_utf8_lossy(&tokenizer.token_bytes(id)).into_owned();
            println!("{id:>8} {}", serde_json::to_string(&piece)?);
        }
    } else {
        println!("{}", serde_json::to_string(&ids)?);
    }
    Ok(())
}

pub fn run_detokenize(args: DetokenizeArgs) -> anyhow::Result<()> {
    let header = args.model.inspect()?;
    let tokenizer = header.tokenizer()?;
    let words = match args.ids.is_empty() {
        true => read_stdin()?,
        false => args.ids.join(" "),
    };
    let ids = parse_ids(&words, tokenizer)?;
    let text = tokenizer.decode(&ids, args.skip_special);
    if args.json {
        println!("{}", serde_json::to_string(&text)?);
    } else {
        println!("{text}");
    }
    Ok(())
}

fn read_stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("cannot read standard input")?;
    Ok(s)
}

/// "[1, 2, 3]", "1 2 3" or "1,2,3", each id inside the vocabulary.
fn parse_ids(text: &str, tokenizer: &Tokenizer) -> anyhow::Result<Vec<u32>> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    let mut ids = Vec::new();
    for word in inner
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        let id: u32 = word.parse().map_err(|_| {
            anyhow::anyhow!("`{word}` is not a token id; give ids as numbers, e.g. 9906 1917")
        })?;
        if id as usize >= tokenizer.vocab_size() {
            bail!(
                "token id {id} is outside the vocabulary ({} tokens, ids 0 to {})",
                tokenizer.vocab_size(),
                tokenizer.vocab_size() - 1
            );
        }
        ids.push(id);
    }
    if ids.is_empty() {
        bail!("no token ids given; pass them as arguments (kiln detokenize 9906 1917) or on standard input");
    }
    Ok(ids)
}
