//! [`ModelConfig`] from a Hugging Face `config.json`.
//!
//! Defaults follow the transformers 5 configuration classes of each architecture, so a
//! config.json that leaves a field out means what transformers would make of it.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use serde_json::{Map, Value};

use crate::arch::{ArchInfo, MultimodalHf, WindowRule};
use crate::config_hf_layers::{gemma4_options, layer_ropes, layer_shapes, Gemma4Options};
use crate::rope::yarn_mscale;
use crate::{
    Activation, Arch, AssistantConfig, LayerType, ModelConfig, OrderedEmbeddings, RopeScaling,
    RopeStyle,
};

/// Where a Hugging Face checkpoint keeps the text model's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HfLayout {
    /// A multimodal checkpoint (Gemma 4's `Gemma4ForConditionalGeneration`): the text model's
    /// tensors sit under its prefix, and its other towers are not run.
    pub multimodal: Option<&'static MultimodalHf>,
}

impl HfLayout {
    /// The checkpoint's name of the tensor the text model alone calls `name`.
    pub fn tensor_name(&self, name: &str) -> String {
        match (self.multimodal, name.strip_prefix("model.")) {
            (Some(m), Some(rest)) => format!("{}{rest}", m.text_prefix),
            _ => name.to_string(),
        }
    }
}

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
        Ok(Self::from_hf_config_with_layout(json)?.0)
    }

    /// Parses the text of a `config.json`, with where the checkpoint keeps the tensors.
    pub fn from_hf_config_with_layout(json: &str) -> anyhow::Result<(ModelConfig, HfLayout)> {
        let root: Value = serde_json::from_str(json).context("invalid JSON")?;
        let obj = root
            .as_object()
            .ok_or_else(|| anyhow!("the top level is not a JSON object"))?;
        let top = Json(obj);
        let (model_type, class) = (top.str("model_type")?, first_class(&top));
        if let Some((arch, mm)) = Arch::from_hf_multimodal(model_type, class) {
            let text = match obj.get("text_config") {
                Some(Value::Object(m)) => m,
                _ => bail!("a {} config without a 'text_config' object", mm.class),
            };
            // The wrapper's own tie_word_embeddings decides whether its LM head is tied.
            let tie = top.bool("tie_word_embeddings")?;
            let config = parse_text_config(Json(text), Some(arch), tie)
                .with_context(|| format!("in 'text_config' of the {} config", mm.class))?;
            return Ok((
                config,
                HfLayout {
                    multimodal: Some(mm),
                },
            ));
        }
        if let Some(arch) = Arch::from_hf(model_type, class).filter(|a| a.info().draft_of.is_some())
        {
            return Ok((parse_assistant_config(top, arch)?, HfLayout::default()));
        }
        Ok((parse_text_config(top, None, None)?, HfLayout::default()))
    }
}

/// A draft model's config (`Gemma4AssistantConfig`): its blocks' config under `text_config`,
/// its own options beside it, with transformers' defaults and checks.
fn parse_assistant_config(top: Json<'_>, arch: Arch) -> anyhow::Result<ModelConfig> {
    let text = match top.0.get("text_config") {
        Some(Value::Object(m)) => Json(m),
        _ => bail!(
            "a {} config without a 'text_config' object",
            arch.info().hf_class
        ),
    };
    // transformers: every layer reads the target's KV; 0 or none means all of them.
    let layers = text.usize("num_hidden_layers")?.unwrap_or(0);
    if let Some(n) = text
        .usize("num_kv_shared_layers")?
        .filter(|&n| n != 0 && n != layers)
    {
        bail!("all layers of an assistant read its target's KV; 'num_kv_shared_layers' is {n} of {layers}");
    }
    if let Some(p) = text
        .usize("hidden_size_per_layer_input")?
        .filter(|&p| p != 0)
    {
        bail!("an assistant has no per-layer inputs; 'hidden_size_per_layer_input' is {p}");
    }
    if text.bool("use_double_wide_mlp")?.unwrap_or(false) {
        bail!("an assistant has no double-wide feed-forward ('use_double_wide_mlp')");
    }
    let mut text_map = text.0.clone();
    // The per-layer inputs default to 256 in Gemma4TextConfig: an assistant's are 0. Its
    // blocks are read as a model of their own first (no KV sharing), then made to share.
    text_map.insert("hidden_size_per_layer_input".into(), Value::from(0));
    text_map.insert("num_kv_shared_layers".into(), Value::from(0));
    let tie = top.bool("tie_word_embeddings")?.or(Some(true));
    let mut config = parse_text_config(Json(&text_map), Some(arch), tie)
        .with_context(|| format!("in 'text_config' of the {} config", arch.info().hf_class))?;
    let ordered = top.bool("use_ordered_embeddings")?.unwrap_or(false);
    config.kv_shared_layers = config.num_layers;
    config.assistant = Some(AssistantConfig {
        backbone_hidden_size: top.usize("backbone_hidden_size")?.unwrap_or(1536),
        ordered_embeddings: ordered
            .then(|| -> anyhow::Result<OrderedEmbeddings> {
                Ok(OrderedEmbeddings {
                    centroids: top.usize("num_centroids")?.unwrap_or(2048),
                    top_k: top.usize("centroid_intermediate_top_k")?.unwrap_or(32),
                })
            })
            .transpose()?,
    });
    config.validate("config.json")?;
    Ok(config)
}

fn first_class<'a>(j: &Json<'a>) -> Option<&'a str> {
    match j.0.get("architectures") {
        Some(Value::Array(a)) => a.first().and_then(Value::as_str),
        _ => None,
    }
}

/// A text model's config: the whole config.json, or a multimodal one's `text_config` (whose
/// architecture `known` is, and whose wrapper may decide `tie`).
fn parse_text_config(
    j: Json<'_>,
    known: Option<Arch>,
    tie: Option<bool>,
) -> anyhow::Result<ModelConfig> {
    let arch = match known {
        Some(a) => a,
        None => detect_arch(&j)?,
    };

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

    let act_key = info.hf.activation_key;
    let act = j.str(act_key)?.unwrap_or(info.hf.activation);
    let activation = Activation::from_hf(act).ok_or_else(|| {
        anyhow!("{act_key} '{act}' is not supported (silu and gelu_pytorch_tanh are)")
    })?;
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
    let options = match info.hf.gemma4 {
        Some(d) => gemma4_options(&j, d)?,
        None => Gemma4Options::default(),
    };
    let shapes = layer_shapes(
        &j,
        info,
        num_layers,
        layer_types.as_deref(),
        num_kv_heads,
        head_dim,
        options.v_from_k,
    )?;
    let ropes = layer_ropes(
        &j,
        info,
        max_position,
        layer_types.as_deref(),
        &shapes,
        head_dim,
    )?;
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
        rms_norm_eps: j.f64("rms_norm_eps")?.unwrap_or(info.hf.rms_norm_eps) as f32,
        rope_theta: ropes.base.theta,
        rope_scaling: ropes.base.scaling,
        rope_style: RopeStyle::Neox,
        max_position,
        sliding_window,
        layer_types,
        qkv_bias,
        qk_norm: info.qk_norm,
        tie_embeddings: match tie {
            Some(t) => t,
            None => j
                .bool("tie_word_embeddings")?
                .unwrap_or(info.hf.tie_embeddings),
        },
        activation,
        layer_shapes: shapes,
        full_attention_rope: ropes.full,
        per_layer_input: options.per_layer_input,
        kv_shared_layers: options.kv_shared_layers,
        full_attention_v_from_k: options.v_from_k,
        double_wide_mlp: options.double_wide_mlp,
        logit_softcap: options.logit_softcap,
        assistant: None,
    };
    config.validate("config.json")?;
    Ok(config)
}

fn detect_arch(j: &Json) -> anyhow::Result<Arch> {
    let model_type = j.str("model_type")?;
    let class = first_class(j);
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
        WindowRule::AllLayers | WindowRule::LayerTypes => given()?,
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
        None | Some(Value::Null) => match (rule, info.hf.gemma4) {
            // Gemma 4: every `sliding_pattern`-th layer is a full one.
            (WindowRule::LayerTypes, Some(d)) => Some(
                (0..num_layers)
                    .map(|l| match (l + 1) % d.sliding_pattern {
                        0 => LayerType::FullAttention,
                        _ => LayerType::SlidingAttention,
                    })
                    .collect(),
            ),
            (WindowRule::FromMaxWindowLayers, _) => {
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
    // transformers' Gemma 4 makes the last layer a full-attention one, whatever the list says.
    let types = match (rule, types) {
        (WindowRule::LayerTypes, Some(mut t)) => {
            if let Some(last) = t.last_mut() {
                *last = LayerType::FullAttention;
            }
            Some(t)
        }
        (_, t) => t,
    };
    // Without a window every layer attends to everything, whatever its type says (Gemma 4
    // keeps the types: they choose each layer's head shape and RoPE too).
    let keep = window.is_some() || rule == WindowRule::LayerTypes;
    Ok((window, types.filter(|_| keep)))
}

/// The object of transformers 5's `rope_parameters` or the older `rope_scaling`, if any.
pub(crate) fn rope_object<'a>(j: &Json<'a>) -> anyhow::Result<Option<Json<'a>>> {
    ["rope_parameters", "rope_scaling"]
        .iter()
        .find_map(|k| match j.0.get(*k) {
            Some(Value::Object(m)) => Some(Ok(Json(m))),
            None | Some(Value::Null) => None,
            Some(other) => Some(Err(anyhow!("'{k}' should be an object, found {other}"))),
        })
        .transpose()
}

/// RoPE base and scaling from transformers 5's `rope_parameters` or the older `rope_theta` +
/// `rope_scaling` (with `type` or `rope_type`).
pub(crate) fn parse_rope(j: &Json, max_position: usize) -> anyhow::Result<(f32, RopeScaling)> {
    let empty = Map::new();
    let p = rope_object(j)?.unwrap_or(Json(&empty));
    parse_rope_params(j, p, max_position, None)
}

/// One RoPE's base and scaling from its parameters `p` (`j`: the whole config, for keys
/// transformers reads there). `head_dim`: the heads a proportional RoPE turns part of.
pub(crate) fn parse_rope_params(
    j: &Json,
    p: Json,
    max_position: usize,
    head_dim: Option<usize>,
) -> anyhow::Result<(f32, RopeScaling)> {
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
    let scaling =
        match kind {
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
            "proportional" if head_dim.is_some() => {
                let head_dim = head_dim.unwrap_or_default();
                let fraction = p.f64("partial_rotary_factor")?.unwrap_or(1.0);
                // transformers: int(partial_rotary_factor * head_dim // 2).
                let rotated = (fraction * head_dim as f64 / 2.0).floor();
                if !(0.0..=(head_dim / 2) as f64).contains(&rotated) {
                    bail!("partial_rotary_factor {fraction} does not fit a {head_dim}-wide head");
                }
                RopeScaling::Proportional {
                    rotated_pairs: rotated as usize,
                    factor: p.f64("factor")?.unwrap_or(1.0) as f32,
                }
            }
            other => bail!(
            "RoPE scaling type '{other}' is not supported (default, linear, llama3, yarn{} are)",
            if head_dim.is_some() { ", proportional" } else { "" }
        ),
        };
    Ok((theta, scaling))
}

/// Typed access to a JSON object where `null` means absent and a wrong type is an error.
#[derive(Clone, Copy)]
pub(crate) struct Json<'a>(pub &'a Map<String, Value>);

impl<'a> Json<'a> {
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    pub(crate) fn usize(&self, key: &str) -> anyhow::Result<Option<usize>> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| anyhow!("'{key}' should be a non-negative integer, found {v}"))
            })
            .transpose()
    }
    pub(crate) fn f64(&self, key: &str) -> anyhow::Result<Option<f64>> {
        self.get(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| anyhow!("'{key}' should be a number, found {v}"))
            })
            .transpose()
    }
    pub(crate) fn bool(&self, key: &str) -> anyhow::Result<Option<bool>> {
        self.get(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| anyhow!("'{key}' should be true or false, found {v}"))
            })
            .transpose()
    }
    pub(crate) fn str(&self, key: &str) -> anyhow::Result<Option<&'a str>> {
        self.get(key)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| anyhow!("'{key}' should be a string, found {v}"))
            })
            .transpose()
    }
}
