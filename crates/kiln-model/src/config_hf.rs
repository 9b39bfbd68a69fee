//! [`ModelConfig`] from a Hugging Face `config.json`.
//!
//! Defaults follow the transformers 5 configuration classes of each architecture, so a
//! config.json that leaves a field out means what transformers would make of it.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use serde_json::{Map, Value};

use crate::arch::{ArchInfo, WindowRule};
use crate::rope::yarn_mscale;
use crate::{Arch, LayerType, ModelConfig, RopeScaling, RopeStyle};

impl ModelConfig {
    /// Parses a `config.json` file, naming it in every error.
    pub fn from_hf_file(path: &Path) -> anyhow::Result<ModelConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        Self::from_hf_config(&text)
            .with_context(|| format!("{}: not a usable model config", path.display()))
    }

    /// Parses the text of a `config.json`.
    pub fn from_hf_config(json: &str) -> anyhow::Result<ModelConfig> {
        let root: Value = serde_json::from_str(json).context("invalid JSON")?;
        let obj = root
            .as_object()
            .ok_or_else(|| anyhow!("the top level is not a JSON object"))?;
        let j = Json(obj);
        let arch = detect_arch(&j)?;

        let hidden_size = j
            .usize("hidden_size")?
            .ok_or_else(|| anyhow!("'hidden_size' is missing"))?;
        let num_heads = j
            .usize("num_attention_heads")?
            .ok_or_else(|| anyhow!("'num_attention_heads' is missing"))?;
        let num_kv_heads = j.usize("num_key_value_heads")?.unwrap_or(num_heads);
        let info = arch.info();
        let default_head_dim = info.hf.head_dim.unwrap_or(hidden_size / num_heads.max(1));
        let head_dim = j.usize("head_dim")?.unwrap_or(default_head_dim);

        let act = j.str("hidden_act")?.unwrap_or("silu");
        if act != "silu" {
            bail!("hidden_act '{act}' is not supported (only silu)");
        }
        if j.bool("mlp_bias")?.unwrap_or(false) {
            bail!("'mlp_bias' is not supported");
        }
        let attention_bias = j.bool("attention_bias")?.unwrap_or(false);
        let qkv_bias = match info.qkv_bias {
            true => true,
            // Llama's attention_bias also adds a bias to the output projection, which the
            // architecture table does not carry.
            false if attention_bias => bail!("'attention_bias' is only supported for qwen2"),
            false => false,
        };

        let max_position = j
            .usize("max_position_embeddings")?
            .unwrap_or(info.hf.max_position);
        let num_layers = j
            .usize("num_hidden_layers")?
            .ok_or_else(|| anyhow!("'num_hidden_layers' is missing"))?;
        let (sliding_window, layer_types) = parse_windows(&j, info, num_layers)?;

        let (rope_theta, rope_scaling) = parse_rope(&j, max_position)?;
        let config = ModelConfig {
            arch,
            vocab_size: j
                .usize("vocab_size")?
                .ok_or_else(|| anyhow!("'vocab_size' is missing"))?,
            hidden_size,
            intermediate_size: j
                .usize("intermediate_size")?
                .ok_or_else(|| anyhow!("'intermediate_size' is missing"))?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: j.f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta,
            rope_scaling,
            rope_style: RopeStyle::Neox,
            max_position,
            sliding_window,
            layer_types,
            qkv_bias,
            qk_norm: info.qk_norm,
            tie_embeddings: j.bool("tie_word_embeddings")?.unwrap_or(false),
        };
        config.validate("config.json")?;
        Ok(config)
    }
}

fn detect_arch(j: &Json) -> anyhow::Result<Arch> {
    let model_type = j.str("model_type")?;
    let class = match j.0.get("architectures") {
        Some(Value::Array(a)) => a.first().and_then(Value::as_str),
        _ => None,
    };
    if let Some(a) = Arch::from_hf(model_type, class) {
        return Ok(a);
    }
    let supported = format!("kiln runs {} models", Arch::supported_list());
    match (model_type, class) {
        (None, None) => bail!("neither 'model_type' nor 'architectures' is given; {supported}"),
        (t, c) => bail!(
            "unsupported architecture (model_type '{}', architectures '{}'); {supported}",
            t.unwrap_or("-"),
            c.unwrap_or("-")
        ),
    }
}

/// The window and which layers slide: transformers 5's `layer_types` when the config has it,
/// else the architecture's rule (Qwen: `use_sliding_window` from `max_window_layers` on).
fn parse_windows(
    j: &Json,
    info: &ArchInfo,
    num_layers: usize,
) -> anyhow::Result<(Option<usize>, Option<Vec<LayerType>>)> {
    let rule = info.window;
    // A null sliding_window means none; a missing one, the architecture's default.
    let given = || -> anyhow::Result<Option<usize>> {
        match j.0.get("sliding_window") {
            None => Ok(info.hf.sliding_window),
            Some(_) => j.usize("sliding_window"),
        }
    };
    let window = match rule {
        WindowRule::None => return Ok((None, None)),
        WindowRule::AllLayers => given()?,
        WindowRule::FromMaxWindowLayers => match j.bool("use_sliding_window")?.unwrap_or(false) {
            true => given()?,
            false => None,
        },
    };
    let types = match j.0.get("layer_types") {
        Some(Value::Array(items)) => {
            let types = items
                .iter()
                .map(|v| {
                    v.as_str().and_then(LayerType::from_hf).ok_or_else(|| {
                        anyhow!("'layer_types' entry {v} is not supported (full_attention and sliding_attention are)")
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Some(types)
        }
        None | Some(Value::Null) => match rule {
            WindowRule::FromMaxWindowLayers => {
                let from = j
                    .usize("max_window_layers")?
                    .unwrap_or(info.hf.max_window_layers);
                let types = (0..num_layers)
                    .map(|l| match l >= from {
                        true => LayerType::SlidingAttention,
                        false => LayerType::FullAttention,
                    })
                    .collect();
                Some(types)
            }
            _ => None,
        },
        Some(other) => bail!("'layer_types' should be a list, found {other}"),
    };
    // Without a window every layer attends to everything, whatever its type says.
    Ok((window, types.filter(|_| window.is_some())))
}

/// RoPE base and scaling from transformers 5's `rope_parameters` or the older `rope_theta` +
/// `rope_scaling` (with `type` or `rope_type`).
fn parse_rope(j: &Json, max_position: usize) -> anyhow::Result<(f32, RopeScaling)> {
    let params = ["rope_parameters", "rope_scaling"]
        .iter()
        .find_map(|k| match j.0.get(*k) {
            Some(Value::Object(m)) => Some(Ok(Json(m))),
            None | Some(Value::Null) => None,
            Some(other) => Some(Err(anyhow!("'{k}' should be an object, found {other}"))),
        })
        .transpose()?;
    let empty = Map::new();
    let p = params.unwrap_or(Json(&empty));
    let theta = match p.f64("rope_theta")? {
        Some(t) => t,
        None => j.f64("rope_theta")?.unwrap_or(10_000.0),
    } as f32;
    let kind = match p.str("rope_type")? {
        Some(t) => t,
        None => p.str("type")?.unwrap_or("default"),
    };
    // transformers prefers a top-level original_max_position_embeddings (Phi-3 keeps it there).
    let original_max_position = || -> anyhow::Result<usize> {
        Ok(match j.usize("original_max_position_embeddings")? {
            Some(v) => v,
            None => p
                .usize("original_max_position_embeddings")?
                .unwrap_or(max_position),
        })
    };
    let factor = |what: &str| -> anyhow::Result<f32> {
        p.f64("factor")?
            .map(|f| f as f32)
            .ok_or_else(|| anyhow!("{what} RoPE scaling needs 'factor'"))
    };
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: factor("linear")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: factor("llama3")?,
            low_freq_factor: p
                .f64("low_freq_factor")?
                .ok_or_else(|| anyhow!("llama3 RoPE needs 'low_freq_factor'"))?
                as f32,
            high_freq_factor: p
                .f64("high_freq_factor")?
                .ok_or_else(|| anyhow!("llama3 RoPE needs 'high_freq_factor'"))?
                as f32,
            original_max_position: original_max_position()?,
        },
        "yarn" => {
            let orig = original_max_position()?;
            let factor = match p.f64("factor")? {
                Some(f) => f as f32,
                None => max_position as f32 / orig as f32,
            };
            let attn_factor = match p.f64("attention_factor")? {
                Some(a) => a as f32,
                None => match (p.f64("mscale")?, p.f64("mscale_all_dim")?) {
                    (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        yarn_mscale(factor, m as f32) / yarn_mscale(factor, all as f32)
                    }
                    _ => yarn_mscale(factor, 1.0),
                },
            };
            RopeScaling::Yarn {
                factor,
                original_max_position: orig,
                beta_fast: p.f64("beta_fast")?.filter(|b| *b != 0.0).unwrap_or(32.0) as f32,
                beta_slow: p.f64("beta_slow")?.filter(|b| *b != 0.0).unwrap_or(1.0) as f32,
                attn_factor,
                truncate: p.bool("truncate")?.unwrap_or(true),
            }
        }
        other => bail!(
            "RoPE scaling type '{other}' is not supported (default, linear, llama3, yarn are)"
        ),
    };
    Ok((theta, scaling))
}

/// Typed access to a JSON object where `null` means absent and a wrong type is an error.
#[derive(Clone, Copy)]
struct Json<'a>(&'a Map<String, Value>);

impl Json<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    fn usize(&self, key: &str) -> anyhow::Result<Option<usize>> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| anyhow!("'{key}' should be a non-negative integer, found {v}"))
            })
            .transpose()
    }
    fn f64(&self, key: &str) -> anyhow::Result<Option<f64>> {
        self.get(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| anyhow!("'{key}' should be a number, found {v}"))
            })
            .transpose()
    }
    fn bool(&self, key: &str) -> anyhow::Result<Option<bool>> {
        self.get(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| anyhow!("'{key}' should be true or false, found {v}"))
            })
            .transpose()
    }
    fn str(&self, key: &str) -> anyhow::Result<Option<&str>> {
        self.get(key)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| anyhow!("'{key}' should be a string, found {v}"))
            })
            .transpose()
    }
}
