//! `kiln tokenize`: the ids a model gets for a text as its prompt, as a JSON array.

use clap::Args;

use crate::backend_choice::ModelArgs;

#[derive(Debug, Clone, Args)]
pub struct TokenizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to tokenize.
    pub text: String,
    /// Leave out the BOS/EOS tokens the model's settings would add.
    #[arg(long)]
    pub no_special: bool,
}

pub fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let model = args.model.load()?;
    let ids = model.tokenizer.encode(&args.text, !args.no_special)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
