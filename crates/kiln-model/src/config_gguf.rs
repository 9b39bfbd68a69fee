//! [`ModelConfig`] from GGUF metadata (the `{arch}.*` keys llama.cpp's converter writes).

use anyhow::{anyhow, bail};
use kiln_formats::GgufFile;

use crate::config_gguf_layers::{gguf_layers, Meta};
use crate::names::GGUF_ROPE_FREQS;
use crate::rope::yarn_mscale;
use crate::{Activation, Arch, ModelConfig, Role, RopeParams, RopeScaling, RopeStyle, TensorId};

impl ModelConfig {
    /// Reads the hyper-parameters of a GGUF model. Every error names the file.
    pub fn from_gguf(g: &GgufFile) -> anyhow::Result<ModelConfig> {
        let origin = g.path().display().to_string();
        let arch_name = g.architecture()?;
        let m = Meta {
            g,
            arch: arch_name,
            origin: &origin,
        };

        let sliding_window = m.opt("attention.sliding_window")?.filter(|w| *w > 0);
        let arch = Arch::from_gguf(arch_name, sliding_window.is_some()).ok_or_else(|| {
            anyhow!(
                "{origin}: unsupported architecture '{arch_name}'; kiln runs {} models",
                Arch::supported_list()
            )
        })?;
        let info = arch.info();
        if info.draft_of.is_some() {
            bail!("{origin}: {arch} GGUF files are not supported yet; use the Hugging Face folder");
        }
        if let Some(experts) = m.opt("expert_count")?.filter(|n| *n > 0) {
            bail!(
                "{origin}: Mixture-of-Experts {arch} models ({experts} experts) are not supported yet"
            );
        }

        let hidden_size = m.req("embedding_length")?;
        let num_layers = m.req("block_count")?;
        let num_heads = m.req("attention.head_count")?;
        let k_eq_v = info.hf.gemma4.is_some();
        let layers = gguf_layers(&m, num_layers, num_heads, hidden_size, k_eq_v)?;
        let eps = g
            .get_f64(&m.key("attention.layer_norm_rms_epsilon"))?
            .ok_or_else(|| {
                anyhow!(
                    "{origin}: metadata '{}' is missing",
                    m.key("attention.layer_norm_rms_epsilon")
                )
            })?;

        // The embedding's rows are the logits' width; the token list can be shorter when a
        // model pads its vocabulary. Vocab-only files have neither tensor nor padding.
        let embd_rows = g
            .tensor_info(&TensorId::global(Role::TokenEmbd).gguf_name())
            .and_then(|t| t.shape.first().copied());
        let vocab_size = match (embd_rows, m.opt("vocab_size")?) {
            (Some(rows), _) => rows,
            (None, Some(v)) => v,
            (None, None) => g
                .get_array("tokenizer.ggml.tokens")?
                .map(|t| t.len())
                .ok_or_else(|| {
                    anyhow!("{origin}: no token_embd.weight, vocab_size or token list")
                })?,
        };

        let has = |role: Role| {
            g.tensor_info(&TensorId::layer(0, role).gguf_name())
                .is_some()
        };
        let sliding_theta = g.get_f64(&m.key("rope.freq_base_swa"))?;
        let full_theta = g.get_f64(&m.key("rope.freq_base"))?.unwrap_or(10_000.0) as f32;
        let freqs_head_dim = match info.gguf_proportional_rope_freqs {
            true => layers.full_head_dim,
            false => layers.head_dim,
        };
        let mut rope_scaling = rope_scaling(g, arch_name, freqs_head_dim)?;
        // Gemma 4's converter writes the full-attention layers' proportional RoPE as
        // rope_freqs factors; the sliding layers turn at plain frequencies of their own base.
        let full_attention_rope = match (info.gguf_proportional_rope_freqs, &rope_scaling) {
            (true, RopeScaling::FreqFactors(f)) => {
                let scaling = proportional_from_factors(f)
                    .ok_or_else(|| anyhow!("{origin}: '{GGUF_ROPE_FREQS}' is not a proportional RoPE (factors 1, then 1e30)"))?;
                rope_scaling = RopeScaling::None;
                Some(RopeParams {
                    theta: full_theta,
                    scaling,
                })
            }
            _ => sliding_theta.map(|_| RopeParams {
                theta: full_theta,
                scaling: rope_scaling.clone(),
            }),
        };
        let full_attention_rope = full_attention_rope.filter(|_| layers.types.is_some());
        let activation = Activation::from_hf(info.hf.activation)
            .ok_or_else(|| anyhow!("{origin}: {arch} has no activation kiln runs"))?;
        let config = ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: layers.intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads: layers.num_kv_heads,
            head_dim: layers.head_dim,
            rms_norm_eps: eps as f32,
            rope_theta: match (&full_attention_rope, sliding_theta) {
                (Some(_), Some(t)) => t as f32,
                _ => full_theta,
            },
            rope_scaling,
            rope_style: RopeStyle::Neox,
            max_position: m.opt("context_length")?.unwrap_or(4096),
            sliding_window,
            layer_types: layers.types,
            qkv_bias: [Role::QBias, Role::KBias, Role::VBias].into_iter().any(has),
            qk_norm: has(Role::QNorm),
            tie_embeddings: g
                .tensor_info(&TensorId::global(Role::Output).gguf_name())
                .is_none(),
            activation,
            layer_shapes: layers.shapes,
            full_attention_rope,
            per_layer_input: m.opt("embedding_length_per_layer_input")?.unwrap_or(0),
            kv_shared_layers: layers.kv_shared_layers,
            full_attention_v_from_k: layers.v_from_k,
            double_wide_mlp: layers.double_wide_mlp,
            logit_softcap: g
                .get_f64(&m.key("final_logit_softcapping"))?
                .filter(|c| *c > 0.0)
                .map(|c| c as f32),
            assistant: None,
        };
        if info.qk_norm && !config.qk_norm {
            bail!("{origin}: {arch} model without attn_q_norm tensors");
        }
        config.validate(&origin)?;
        Ok(config)
    }
}

/// `[1; k] ++ [1e30; rest]` (llama.cpp's spelling of a RoPE that turns the first k pairs) as
/// a proportional RoPE.
fn proportional_from_factors(factors: &[f32]) -> Option<RopeScaling> {
    let rotated = factors.iter().take_while(|f| **f == 1.0).count();
    factors[rotated..]
        .iter()
        .all(|f| *f >= 1e30)
        .then_some(RopeScaling::Proportional {
            rotated_pairs: rotated,
            factor: 1.0,
        })
}

fn rope_scaling(g: &GgufFile, arch: &str, head_dim: usize) -> anyhow::Result<RopeScaling> {
    let origin = g.path().display();
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let factor = match g.get_f64(&key("factor"))? {
        Some(f) => Some(f as f32),
        // Older files spell linear scaling this way.
        None => g
            .get_f64(&format!("{arch}.rope.scale_linear"))?
            .map(|f| f as f32),
    };
    let kind = g
        .get_str(&key("type"))?
        .unwrap_or(if factor.is_some() { "linear" } else { "none" });
    let scaling = match kind {
        "none" => RopeScaling::None,
        "linear" => match factor {
            Some(f) if f != 1.0 && f != 0.0 => RopeScaling::Linear { factor: f },
            _ => RopeScaling::None,
        },
        "yarn" => {
            let factor = factor.ok_or_else(|| {
                anyhow!("{origin}: yarn RoPE scaling without '{}'", key("factor"))
            })?;
            let orig = g.get_u64(&key("original_context_length"))?.ok_or_else(|| {
                anyhow!(
                    "{origin}: yarn RoPE scaling without '{}'",
                    key("original_context_length")
                )
            })?;
            // llama.cpp multiplies YaRN's mscale by the optional yarn_attn_factor.
            let extra = g
                .get_f64(&key("yarn_attn_factor"))?
                .filter(|a| *a > 0.0)
                .unwrap_or(1.0);
            let attn_factor = yarn_mscale(factor, 1.0) * extra as f32;
            RopeScaling::Yarn {
                factor,
                original_max_position: usize::try_from(orig).unwrap_or(usize::MAX),
                beta_fast: g.get_f64(&key("yarn_beta_fast"))?.unwrap_or(32.0) as f32,
                beta_slow: g.get_f64(&key("yarn_beta_slow"))?.unwrap_or(1.0) as f32,
                attn_factor,
                truncate: true,
            }
        }
        other => {
            bail!("{origin}: RoPE scaling type '{other}' is not supported (none, linear, yarn are)")
        }
    };
    // Llama 3.1-style scaling arrives as per-frequency divisors in a tensor, not as metadata.
    if let Some(info) = g.tensor_info(GGUF_ROPE_FREQS) {
        if scaling != RopeScaling::None {
            bail!(
                "{origin}: both '{}' and {kind} RoPE scaling are present",
                info.name
            );
        }
        let view = g.tensor(GGUF_ROPE_FREQS)?;
        let factors = kiln_formats::dequant::to_f32(&view).map_err(|e| anyhow!("{origin}: {e}"))?;
        if factors.len() != head_dim / 2 {
            bail!(
                "{origin}: '{}' has {} factors, expected {}",
                info.name,
                factors.len(),
                head_dim / 2
            );
        }
        return Ok(RopeScaling::FreqFactors(factors));
    }
    Ok(scaling)
}
