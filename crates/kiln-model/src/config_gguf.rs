//! [`ModelConfig`] from GGUF metadata (the `{arch}.*` keys llama.cpp's converter writes).

use anyhow::{anyhow, bail};
use kiln_formats::GgufFile;

use crate::names::GGUF_ROPE_FREQS;
use crate::rope::yarn_mscale;
use crate::{Arch, ModelConfig, Role, RopeScaling, RopeStyle, TensorId};

impl ModelConfig {
    /// Reads the hyper-parameters of a GGUF model. Every error names the file.
    pub fn from_gguf(g: &GgufFile) -> anyhow::Result<ModelConfig> {
        let origin = g.path().display().to_string();
        let arch_name = g.architecture()?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let req = |k: &str| -> anyhow::Result<usize> {
            let v = g
                .get_u64(&key(k))?
                .ok_or_else(|| anyhow!("{origin}: metadata '{}' is missing", key(k)))?;
            usize::try_from(v).map_err(|_| anyhow!("{origin}: metadata '{}' is too large", key(k)))
        };
        let opt = |k: &str| -> anyhow::Result<Option<usize>> {
            g.get_u64(&key(k))?
                .map(|v| {
                    usize::try_from(v)
                        .map_err(|_| anyhow!("{origin}: metadata '{}' is too large", key(k)))
                })
                .transpose()
        };

        let sliding_window = opt("attention.sliding_window")?.filter(|w| *w > 0);
        let arch = Arch::from_gguf(arch_name, sliding_window.is_some()).ok_or_else(|| {
            anyhow!(
                "{origin}: unsupported architecture '{arch_name}'; kiln runs {} models",
                Arch::supported_list()
            )
        })?;
        let info = arch.info();

        let hidden_size = req("embedding_length")?;
        let num_heads = req("attention.head_count")?;
        let num_kv_heads = opt("attention.head_count_kv")?.unwrap_or(num_heads);
        let head_dim = opt("attention.key_length")?.unwrap_or(hidden_size / num_heads.max(1));
        if let Some(v) = opt("attention.value_length")? {
            if v != head_dim {
                bail!("{origin}: value head size {v} differs from key head size {head_dim}");
            }
        }
        if let Some(rot) = opt("rope.dimension_count")? {
            if rot != head_dim {
                bail!("{origin}: partial RoPE ({rot} of {head_dim} dimensions) is not supported");
            }
        }
        let eps = g
            .get_f64(&key("attention.layer_norm_rms_epsilon"))?
            .ok_or_else(|| {
                anyhow!(
                    "{origin}: metadata '{}' is missing",
                    key("attention.layer_norm_rms_epsilon")
                )
            })?;

        // The embedding's rows are the logits' width; the token list can be shorter when a
        // model pads its vocabulary. Vocab-only files have neither tensor nor padding.
        let embd_rows = g
            .tensor_info(&TensorId::global(Role::TokenEmbd).gguf_name())
            .and_then(|t| t.shape.first().copied());
        let vocab_size = match (embd_rows, opt("vocab_size")?) {
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
        let config = ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: req("feed_forward_length")?,
            num_layers: req("block_count")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: eps as f32,
            rope_theta: g.get_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0) as f32,
            rope_scaling: rope_scaling(g, arch_name, head_dim)?,
            rope_style: RopeStyle::Neox,
            max_position: opt("context_length")?.unwrap_or(4096),
            sliding_window,
            layer_types: None,
            qkv_bias: [Role::QBias, Role::KBias, Role::VBias].into_iter().any(has),
            qk_norm: has(Role::QNorm),
            tie_embeddings: g
                .tensor_info(&TensorId::global(Role::Output).gguf_name())
                .is_none(),
        };
        if info.qk_norm && !config.qk_norm {
            bail!("{origin}: {arch} model without attn_q_norm tensors");
        }
        config.validate(&origin)?;
        Ok(config)
    }
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
