//! The per-layer hyper-parameters of a GGUF: llama.cpp's `attention.sliding_window_pattern`
//! (which layers slide), `*_swa` keys (the sliding layers' head size), per-layer arrays of KV
//! heads and feed-forward widths, `attention.shared_kv_layers`, and which layers lack a V
//! projection (Gemma 4's `attention_k_eq_v`).

use anyhow::{anyhow, bail};
use kiln_formats::GgufFile;

use crate::{LayerShape, LayerType, Role, TensorId};

/// A GGUF's `{arch}.*` metadata, with errors that name the file.
pub(crate) struct Meta<'a> {
    pub g: &'a GgufFile,
    pub arch: &'a str,
    pub origin: &'a str,
}

impl Meta<'_> {
    pub fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    pub fn opt(&self, k: &str) -> anyhow::Result<Option<usize>> {
        self.g
            .get_u64(&self.key(k))?
            .map(|v| {
                usize::try_from(v).map_err(|_| {
                    anyhow!("{}: metadata '{}' is too large", self.origin, self.key(k))
                })
            })
            .transpose()
    }

    pub fn req(&self, k: &str) -> anyhow::Result<usize> {
        self.opt(k)?
            .ok_or_else(|| anyhow!("{}: metadata '{}' is missing", self.origin, self.key(k)))
    }

    /// A value per layer, given as one number for all or as an array of `n`.
    fn per_layer(&self, k: &str, n: usize) -> anyhow::Result<Option<Vec<usize>>> {
        let key = self.key(k);
        if self.g.get_array(&key).ok().flatten().is_none() {
            return Ok(self.opt(k)?.map(|v| vec![v; n]));
        }
        let values = self.g.get_i64_array(&key)?.unwrap_or_default();
        if values.len() != n {
            bail!(
                "{}: metadata '{key}' has {} entries for {n} layers",
                self.origin,
                values.len()
            );
        }
        values
            .into_iter()
            .map(|v| {
                usize::try_from(v).map_err(|_| anyhow!("{}: metadata '{key}' has {v}", self.origin))
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .map(Some)
    }
}

/// What the layers are, as `ModelConfig` holds it.
pub(crate) struct GgufLayers {
    pub types: Option<Vec<LayerType>>,
    /// The model's head dim and KV heads: the sliding layers' when layers are typed.
    pub head_dim: usize,
    pub num_kv_heads: usize,
    /// The full-attention layers' head dim (the model's when layers are not typed).
    pub full_head_dim: usize,
    pub shapes: Vec<LayerShape>,
    pub intermediate_size: usize,
    pub kv_shared_layers: usize,
    pub v_from_k: bool,
    pub double_wide_mlp: bool,
}

/// The layers of a GGUF with `n` blocks; `k_eq_v`: the architecture may take V from K.
pub(crate) fn gguf_layers(
    m: &Meta,
    n: usize,
    num_heads: usize,
    hidden_size: usize,
    k_eq_v: bool,
) -> anyhow::Result<GgufLayers> {
    let origin = m.origin;
    let types: Option<Vec<LayerType>> =
        match m.g.get_array(&m.key("attention.sliding_window_pattern"))? {
            Some(pattern) => {
                if pattern.len() != n {
                    bail!(
                        "{origin}: sliding_window_pattern has {} entries for {n} layers",
                        pattern.len()
                    );
                }
                let types = pattern
                    .iter()
                    .map(|v| match v.as_bool() {
                        Some(true) => Ok(LayerType::SlidingAttention),
                        Some(false) => Ok(LayerType::FullAttention),
                        None => Err(anyhow!(
                            "{origin}: sliding_window_pattern holds {}",
                            v.type_name()
                        )),
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Some(types)
            }
            None => None,
        };
    let slides = |l: usize| {
        types
            .as_ref()
            .is_some_and(|t| t[l] == LayerType::SlidingAttention)
    };

    let full_head_dim = m
        .opt("attention.key_length")?
        .unwrap_or(hidden_size / num_heads.max(1));
    let sliding_head_dim = m.opt("attention.key_length_swa")?.unwrap_or(full_head_dim);
    for (key, value, k) in [
        (
            "attention.value_length",
            m.opt("attention.value_length")?,
            full_head_dim,
        ),
        (
            "attention.value_length_swa",
            m.opt("attention.value_length_swa")?,
            sliding_head_dim,
        ),
    ] {
        if let Some(v) = value.filter(|v| *v != k) {
            bail!(
                "{origin}: value head size {v} ('{}') differs from key head size {k}",
                m.key(key)
            );
        }
    }
    for (key, head) in [
        ("rope.dimension_count", full_head_dim),
        ("rope.dimension_count_swa", sliding_head_dim),
    ] {
        if let Some(rot) = m.opt(key)?.filter(|r| *r != head) {
            bail!(
                "{origin}: partial RoPE ({rot} of {head} dimensions, '{}') is not supported",
                m.key(key)
            );
        }
    }
    let kv_heads = m
        .per_layer("attention.head_count_kv", n)?
        .unwrap_or_else(|| vec![num_heads; n]);
    let head_dims: Vec<usize> = (0..n)
        .map(|l| match slides(l) {
            true => sliding_head_dim,
            false => full_head_dim,
        })
        .collect();
    // The model's shape is the sliding layers' (transformers' head_dim and
    // num_key_value_heads), else the first layer's.
    let model_layer = (0..n).find(|&l| slides(l)).unwrap_or(0);
    let (head_dim, num_kv_heads) = (
        head_dims.get(model_layer).copied().unwrap_or(full_head_dim),
        kv_heads.get(model_layer).copied().unwrap_or(num_heads),
    );
    let shapes: Vec<LayerShape> = (0..n)
        .map(|l| LayerShape {
            head_dim: head_dims[l],
            num_kv_heads: kv_heads[l],
        })
        .collect();
    let uniform = shapes
        .iter()
        .all(|s| s.head_dim == head_dim && s.num_kv_heads == num_kv_heads);

    let kv_shared_layers = m.opt("attention.shared_kv_layers")?.unwrap_or(0);
    let first_shared = n.saturating_sub(kv_shared_layers);
    let widths = m.per_layer("feed_forward_length", n)?.ok_or_else(|| {
        anyhow!(
            "{origin}: metadata '{}' is missing",
            m.key("feed_forward_length")
        )
    })?;
    let intermediate_size = widths.first().copied().unwrap_or(0);
    let double = |l: usize| l >= first_shared && kv_shared_layers > 0;
    let double_wide_mlp = widths
        .iter()
        .enumerate()
        .any(|(l, w)| *w != intermediate_size && double(l));
    for (l, w) in widths.iter().enumerate() {
        let want = intermediate_size * if double_wide_mlp && double(l) { 2 } else { 1 };
        if *w != want {
            bail!("{origin}: layer {l}'s feed-forward is {w} wide; kiln runs one width, doubled on KV-sharing layers");
        }
    }

    // A full-attention layer that owns its KV but has no V projection uses K as V.
    let lacks_v = |l: usize| {
        m.g.tensor_info(&TensorId::layer(l, Role::V).gguf_name())
            .is_none()
    };
    let full_owners: Vec<usize> = (0..first_shared).filter(|&l| !slides(l)).collect();
    let v_from_k = !full_owners.is_empty() && full_owners.iter().all(|&l| lacks_v(l));
    let has_tensors = k_eq_v && !m.g.tensors.is_empty();
    if has_tensors && !v_from_k && full_owners.iter().any(|&l| lacks_v(l)) {
        bail!("{origin}: some full-attention layers have a V projection and others do not");
    }
    Ok(GgufLayers {
        types,
        head_dim,
        num_kv_heads,
        full_head_dim,
        shapes: if uniform { Vec::new() } else { shapes },
        intermediate_size,
        kv_shared_layers,
        v_from_k: v_from_k && has_tensors,
        double_wide_mlp,
    })
}
