//! The parts of a Hugging Face config that make layers differ: transformers 5's
//! `per_layer_config` (Gemma 4's full-attention head shape, also spelled `global_head_dim` and
//! `num_global_key_value_heads`), `rope_parameters` keyed by layer type, and the options of
//! Gemma 4's configuration. Every option is read and either supported or refused by name.

use anyhow::{anyhow, bail};
use serde_json::{Map, Value};

use crate::arch::{ArchInfo, Gemma4Defaults};
use crate::config_hf::{parse_rope, parse_rope_params, rope_object, Json};
use crate::{LayerShape, LayerType, RopeParams, RopeScaling};

/// Gemma 4's options, as [`crate::ModelConfig`] holds them (all off for other architectures).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Gemma4Options {
    pub per_layer_input: usize,
    pub kv_shared_layers: usize,
    pub v_from_k: bool,
    pub double_wide_mlp: bool,
    pub logit_softcap: Option<f32>,
}

/// Reads Gemma 4's options, refusing those kiln does not run.
pub(crate) fn gemma4_options(j: &Json, d: Gemma4Defaults) -> anyhow::Result<Gemma4Options> {
    if j.bool("enable_moe_block")?.unwrap_or(false) {
        bail!("'enable_moe_block': Mixture-of-Experts Gemma 4 models are not supported yet");
    }
    match j.str("use_bidirectional_attention")? {
        // "vision" makes image tokens attend both ways; text tokens stay causal.
        None | Some("vision") => {}
        Some(other) => bail!(
            "'use_bidirectional_attention' '{other}' is not supported (kiln runs causal text models)"
        ),
    }
    let per_layer_input = j
        .usize("hidden_size_per_layer_input")?
        .unwrap_or(d.per_layer_input);
    if per_layer_input > 0 {
        let vocab = j.usize("vocab_size")?;
        let table = j.usize("vocab_size_per_layer_input")?;
        if let (Some(v), Some(t)) = (vocab, table) {
            if v != t {
                bail!(
                    "'vocab_size_per_layer_input' {t} differs from 'vocab_size' {v}; kiln needs one per-layer row per token"
                );
            }
        }
    }
    let logit_softcap = j.f64("final_logit_softcapping")?.map(|c| c as f32);
    Ok(Gemma4Options {
        per_layer_input,
        kv_shared_layers: j.usize("num_kv_shared_layers")?.unwrap_or(0),
        v_from_k: j.bool("attention_k_eq_v")?.unwrap_or(false),
        double_wide_mlp: j.bool("use_double_wide_mlp")?.unwrap_or(false),
        logit_softcap,
    })
}

/// Each layer's attention shape when layers differ: `per_layer_config` when the config has
/// one, else (Gemma 4) `global_head_dim` and, with `attention_k_eq_v`,
/// `num_global_key_value_heads` on the full-attention layers. Empty when every layer has the
/// model's shape.
pub(crate) fn layer_shapes(
    j: &Json,
    info: &ArchInfo,
    num_layers: usize,
    types: Option<&[LayerType]>,
    num_kv_heads: usize,
    head_dim: usize,
    v_from_k: bool,
) -> anyhow::Result<Vec<LayerShape>> {
    let model = LayerShape {
        head_dim,
        num_kv_heads,
    };
    let mut shapes = vec![model; num_layers];
    match (j.get("per_layer_config"), info.hf.gemma4) {
        (None, None) => {}
        (Some(Value::Object(m)), _) if m.is_empty() => {}
        (Some(Value::Object(m)), Some(_)) => apply_per_layer_config(m, &mut shapes)?,
        (Some(Value::Object(_)), None) => {
            bail!("'per_layer_config' is not supported for {}", info.name)
        }
        (Some(other), _) => bail!("'per_layer_config' should be an object, found {other}"),
        (None, Some(d)) => {
            let full = LayerShape {
                head_dim: j.usize("global_head_dim")?.unwrap_or(d.full_head_dim),
                // transformers reads num_global_key_value_heads only with attention_k_eq_v.
                num_kv_heads: match v_from_k {
                    true => j
                        .usize("num_global_key_value_heads")?
                        .unwrap_or(num_kv_heads),
                    false => num_kv_heads,
                },
            };
            for (l, shape) in shapes.iter_mut().enumerate() {
                if types.and_then(|t| t.get(l)) == Some(&LayerType::FullAttention) {
                    *shape = full;
                }
            }
        }
    }
    match shapes.iter().all(|s| *s == model) {
        true => Ok(Vec::new()),
        false => Ok(shapes),
    }
}

/// transformers 5's `per_layer_config`: `{"5": {"head_dim": 512, ...}}` (keys may be
/// zero-padded).
fn apply_per_layer_config(m: &Map<String, Value>, shapes: &mut [LayerShape]) -> anyhow::Result<()> {
    for (key, overrides) in m {
        let l: usize = key
            .parse()
            .map_err(|_| anyhow!("'per_layer_config' key '{key}' is not a layer index"))?;
        let n = shapes.len();
        let shape = shapes
            .get_mut(l)
            .ok_or_else(|| anyhow!("'per_layer_config' names layer {l} of {n}"))?;
        let Value::Object(o) = overrides else {
            bail!("'per_layer_config' entry {key} should be an object, found {overrides}");
        };
        let o = Json(o);
        for attr in o.0.keys() {
            if !["head_dim", "num_key_value_heads"].contains(&attr.as_str()) {
                bail!(
                    "'per_layer_config' sets '{attr}' for layer {l}; kiln supports head_dim and num_key_value_heads there"
                );
            }
        }
        if let Some(h) = o.usize("head_dim")? {
            shape.head_dim = h;
        }
        if let Some(k) = o.usize("num_key_value_heads")? {
            shape.num_kv_heads = k;
        }
    }
    Ok(())
}

/// The model's RoPE and, when full-attention layers have their own, theirs.
pub(crate) struct LayerRopes {
    pub base: RopeParams,
    pub full: Option<RopeParams>,
}

/// RoPE settings: one for every layer, or (Gemma 4) `rope_parameters` keyed by layer type:
/// sliding layers get the model's, full-attention layers their own. A proportional RoPE is
/// resolved against the head dim of the layers of its type.
pub(crate) fn layer_ropes(
    j: &Json,
    info: &ArchInfo,
    max_position: usize,
    types: Option<&[LayerType]>,
    shapes: &[LayerShape],
    head_dim: usize,
) -> anyhow::Result<LayerRopes> {
    let Some(d) = info.hf.gemma4 else {
        let (theta, scaling) = parse_rope(j, max_position)?;
        return Ok(LayerRopes {
            base: RopeParams { theta, scaling },
            full: None,
        });
    };
    let type_head_dim = |want: LayerType| -> anyhow::Result<usize> {
        let dims: Vec<usize> = (0..types.map_or(0, |t| t.len()))
            .filter(|&l| types.and_then(|t| t.get(l)) == Some(&want))
            .map(|l| shapes.get(l).map_or(head_dim, |s| s.head_dim))
            .collect();
        match dims.split_first() {
            Some((first, rest)) if rest.iter().any(|h| h != first) => {
                bail!("the {want:?} layers have different head dims ({dims:?}); their RoPE would differ")
            }
            Some((first, _)) => Ok(*first),
            None => Ok(head_dim),
        }
    };
    let sliding_dim = type_head_dim(LayerType::SlidingAttention)?;
    let full_dim = type_head_dim(LayerType::FullAttention)?;
    let Some(p) = rope_object(j)? else {
        let base = RopeParams {
            theta: d.sliding_rope_theta,
            scaling: RopeScaling::None,
        };
        let rotated = (d.full_partial_rotary * full_dim as f64 / 2.0).floor() as usize;
        let full = RopeParams {
            theta: d.full_rope_theta,
            scaling: RopeScaling::Proportional {
                rotated_pairs: rotated,
                factor: 1.0,
            },
        };
        return Ok(LayerRopes {
            base,
            full: Some(full),
        });
    };
    let has = |t: LayerType| types.is_some_and(|ts| ts.contains(&t));
    let of_type = |key: &str, dim: usize, used: bool| -> anyhow::Result<RopeParams> {
        let m = match p.get(key) {
            Some(Value::Object(m)) => m,
            // transformers only reads the types its layers have.
            None if !used => {
                return Ok(RopeParams {
                    theta: d.sliding_rope_theta,
                    scaling: RopeScaling::None,
                })
            }
            _ => bail!("'rope_parameters' has no '{key}' object (Gemma 4 keys it by layer type)"),
        };
        let (theta, scaling) = parse_rope_params(j, Json(m), max_position, Some(dim))
            .map_err(|e| anyhow!("'rope_parameters.{key}': {e}"))?;
        Ok(RopeParams { theta, scaling })
    };
    Ok(LayerRopes {
        base: of_type(
            "sliding_attention",
            sliding_dim,
            has(LayerType::SlidingAttention),
        )?,
        full: Some(of_type(
            "full_attention",
            full_dim,
            has(LayerType::FullAttention),
        )?),
    })
}
