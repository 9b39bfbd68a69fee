//! `kiln info`: what a model is (architecture, size, tensor types, tokenizer, chat template),
//! as text or as one JSON object. Reads the header only, so it also describes a
//! vocabulary-only file, a folder without weights, or an architecture kiln does not run yet,
//! and then says what kiln lacks to run it.

use clap::Args;
use kiln_load::{human_count, tensor_types, ModelHeader};
use kiln_model::{ModelConfig, RopeScaling};

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
    let header = args.model.inspect()?;
    if args.json {
        println!("{}", to_json(&header));
    } else {
        print!("{}", text(&header));
    }
    Ok(())
}

fn text(h: &ModelHeader) -> String {
    let mut lines = vec![
        format!("model:         {}", h.name),
        format!("format:        {}", h.format),
    ];
    match &h.config {
        Ok(c) => {
            lines.push(format!("architecture:  {}", c.arch.name()));
            lines.push(format!("shape:         {}", h.shape.summary()));
            config_lines(c, !h.tensor_types.is_empty(), &mut lines);
        }
        Err(_) => {
            lines.push(format!(
                "architecture:  {} (kiln does not run it yet)",
                h.arch_name
            ));
            lines.push(format!("shape:         {}", h.shape.summary()));
            if let Some(ctx) = h.shape.context {
                lines.push(format!("context:       {ctx} tokens"));
            }
        }
    }
    // A file without tensors cannot say whether the LM head is tied, so no count is shown.
    if let Some(n) = h.param_count().filter(|_| !h.tensor_types.is_empty()) {
        lines.push(format!("parameters:    {}", human_count(n)));
    }
    lines.push(format!("tensor types:  {}", tensor_types(&h.tensor_types)));
    match &h.tokenizer {
        Ok(t) => {
            lines.push(format!("tokenizer:     {}", t.kind()));
            lines.push(format!(
                "chat template: {}",
                if t.chat_template().is_some() {
                    "yes"
                } else {
                    "no"
                }
            ));
            lines.push(format!(
                "vocabulary:    {} tokens, BOS {}, EOS {:?}",
                t.vocab_size(),
                t.bos_id().map_or("none".to_string(), |b| b.to_string()),
                t.eos_ids()
            ));
        }
        Err(_) => lines.push("tokenizer:     not readable by kiln (see below)".into()),
    }
    lines.push(format!(
        "sampling:      {}",
        match &h.sampling.source {
            Some(from) => format!("{} (from {from})", h.sampling.summary()),
            None => "the model sets no defaults".to_string(),
        }
    ));
    for note in &h.notes {
        lines.push(format!("note:          {note}"));
    }
    let missing = h.missing();
    if missing.is_empty() {
        lines.push("runs:          yes".into());
    } else {
        lines.push("runs:          no; kiln lacks:".into());
        lines.extend(missing.iter().map(|m| format!("  - {m}")));
    }
    lines.join("\n") + "\n"
}

/// The configuration's lines; `has_tensors`: whether the file lists tensors (tied embeddings
/// are read from the LM head's absence, which says nothing in a vocabulary-only file).
fn config_lines(c: &ModelConfig, has_tensors: bool, lines: &mut Vec<String>) {
    let full = (0..c.num_layers).find(|&l| c.is_full_attention(l));
    if let Some(l) = full.filter(|_| !c.layer_shapes.is_empty()) {
        let s = c.layer_shape(l);
        lines.push(format!(
            "full layers:   {} KV heads of {}",
            s.num_kv_heads, s.head_dim
        ));
    }
    lines.push(format!("context:       {} tokens", c.max_position));
    lines.push(format!(
        "rope:          theta {}, {}, {:?} style",
        c.rope_theta,
        scaling_name(&c.rope_scaling),
        c.rope_style
    ));
    if let Some(full) = &c.full_attention_rope {
        lines.push(format!(
            "full rope:     theta {}, {}",
            full.theta,
            scaling_name(&full.scaling)
        ));
    }
    if let Some(w) = c.sliding_window {
        lines.push(format!("window:        {w} tokens"));
    }
    let extras: Vec<&str> = [
        (c.qkv_bias, "QKV bias"),
        (c.qk_norm, "Q/K norm"),
        (c.tie_embeddings && has_tensors, "tied embeddings"),
        (c.per_layer_input > 0, "per-layer inputs"),
        (c.kv_shared_layers > 0, "shared KV layers"),
        (c.full_attention_v_from_k, "V from K on full layers"),
        (c.double_wide_mlp, "double-wide MLP on shared layers"),
        (c.logit_softcap.is_some(), "logit soft-cap"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    if !extras.is_empty() {
        lines.push(format!("features:      {}", extras.join(", ")));
    }
}

fn to_json(h: &ModelHeader) -> serde_json::Value {
    let t = h.tokenizer.as_ref().ok();
    serde_json::json!({
        "name": h.name,
        "architecture": h.config.as_ref().map_or(h.arch_name.as_str(), |c| c.arch.name()),
        "supported_architecture": h.config.is_ok(),
        "parameters": h.param_count().filter(|_| !h.tensor_types.is_empty()),
        "parameters_human": h.param_count().filter(|_| !h.tensor_types.is_empty()).map(human_count),
        "format": h.format,
        "tensor_types": h.tensor_types,
        "shape": h.shape,
        "tokenizer": t.map(|t| t.kind()),
        "vocab_size": t.map(|t| t.vocab_size()),
        "bos_id": t.and_then(|t| t.bos_id()),
        "eos_ids": t.map(|t| t.eos_ids()),
        "chat_template": t.is_some_and(|t| t.chat_template().is_some()),
        "sampling_defaults": h.sampling,
        "runnable": h.missing().is_empty(),
        "missing": h.missing(),
        "notes": h.notes,
        "config": h.config.as_ref().ok(),
    })
}

fn scaling_name(s: &RopeScaling) -> String {
    match s {
        RopeScaling::None => "no scaling".into(),
        RopeScaling::Linear { factor } => format!("linear scaling x{factor}"),
        RopeScaling::Llama3 { factor, .. } => format!("llama3 scaling x{factor}"),
        RopeScaling::Yarn { factor, .. } => format!("yarn scaling x{factor}"),
        RopeScaling::FreqFactors(f) => format!("per-frequency factors ({} of them)", f.len()),
        RopeScaling::Proportional { rotated_pairs, .. } => {
            format!("proportional ({rotated_pairs} pairs turn)")
        }
    }
}
