//! `kiln info`: what a model is (architecture, size, tensor types, tokenizer, chat template),
//! as text or as one JSON object.

use clap::Args;
use kiln_load::LoadedModel;
use kiln_model::RopeScaling;

use crate::backend_choice::ModelArgs;

#[derive(Debug, Clone, Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InfoArgs) -> anyhow::Result<()> {
    let model = args.model.load()?;
    if args.json {
        println!("{}", to_json(&model));
    } else {
        print_text(&model);
    }
    Ok(())
}

fn print_text(m: &LoadedModel) {
    let c = &m.config;
    let t = &m.tokenizer;
    println!("model:         {}", m.name);
    println!("architecture:  {}", arch_name(m));
    println!(
        "shape:         {} layers, hidden {}, {} heads ({} KV) of {}, FFN {}, vocab {}",
        c.num_layers,
        c.hidden_size,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        c.intermediate_size,
        c.vocab_size
    );
    println!("context:       {} tokens", c.max_position);
    println!(
        "rope:          theta {}, {}, {:?} style",
        c.rope_theta,
        scaling_name(&c.rope_scaling),
        c.rope_style
    );
    if let Some(w) = c.sliding_window {
        println!("window:        {w} tokens");
    }
    let extras: Vec<&str> = [
        (c.qkv_bias, "QKV bias"),
        (c.qk_norm, "Q/K norm"),
        (c.tie_embeddings, "tied embeddings"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    if !extras.is_empty() {
        println!("features:      {}", extras.join(", "));
    }
    println!("{}", m.description);
    println!(
        "vocabulary:    {} tokens, BOS {}, EOS {:?}",
        t.vocab_size(),
        t.bos_id().map_or("none".to_string(), |b| b.to_string()),
        t.eos_ids()
    );
}

fn to_json(m: &LoadedModel) -> serde_json::Value {
    let d = &m.description;
    serde_json::json!({
        "name": m.name,
        "architecture": arch_name(m),
        "parameters": d.param_count,
        "format": d.format,
        "tensor_types": d.tensor_types,
        "tokenizer": d.tokenizer_kind,
        "vocab_size": m.tokenizer.vocab_size(),
        "bos_id": m.tokenizer.bos_id(),
        "eos_ids": m.tokenizer.eos_ids(),
        "chat_template": d.has_chat_template,
        "config": m.config,
    })
}

fn arch_name(m: &LoadedModel) -> String {
    serde_json::to_value(m.config.arch)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn scaling_name(s: &RopeScaling) -> String {
    match s {
        RopeScaling::None => "no scaling".into(),
        RopeScaling::Linear { factor } => format!("linear scaling x{factor}"),
        RopeScaling::Llama3 { factor, .. } => format!("llama3 scaling x{factor}"),
        RopeScaling::Yarn { factor, .. } => format!("yarn scaling x{factor}"),
        RopeScaling::FreqFactors(f) => format!("per-frequency factors ({} of them)", f.len()),
    }
}
