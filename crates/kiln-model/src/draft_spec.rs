//! A draft model bound to its target (Gemma 4's assistant): which of the target's KV caches
//! each of its layers reads, checked to fit. transformers hands the assistant the KV of the
//! target's last KV-owning layer of each type (`shared_kv_states`); every assistant layer of
//! that type reads it. Also the token ordering of an ordered LM head, as files store it.

use anyhow::{anyhow, bail, ensure};

use crate::{ModelConfig, ModelSpec};

impl ModelConfig {
    /// The spec a backend runs this draft model with beside `target`: each layer's `kv_from`
    /// names the target's layer whose KV it reads, and the input is scaled as the target
    /// scales its embedding. An error says why the two do not fit.
    pub fn draft_spec(&self, target: &ModelConfig) -> anyhow::Result<ModelSpec> {
        let Some(a) = self.assistant else {
            bail!("a {} model is not a draft model", self.arch);
        };
        let Some(of) = self.arch.info().draft_of else {
            bail!("a {} model drafts for no architecture", self.arch);
        };
        ensure!(
            target.arch == of && target.assistant.is_none(),
            "it drafts for {of} models, and the target is a {} model",
            target.arch
        );
        ensure!(
            a.backbone_hidden_size == target.hidden_size,
            "it was trained with a target of hidden size {}, and the target's is {}",
            a.backbone_hidden_size,
            target.hidden_size
        );
        ensure!(
            self.vocab_size == target.vocab_size,
            "its vocabulary has {} tokens, the target's {}",
            self.vocab_size,
            target.vocab_size
        );
        let theirs = target.spec();
        let mut spec = self.spec();
        for (l, layer) in spec.layers.iter_mut().enumerate() {
            let full = self.is_full_attention(l);
            let kind = if full { "full-attention" } else { "sliding" };
            let source = (0..theirs.layers.len())
                .rev()
                .find(|&t| theirs.layers[t].attn.writes_kv() && target.is_full_attention(t) == full)
                .ok_or_else(|| {
                    anyhow!("its layer {l} reads the KV of a {kind} layer, and the target has none")
                })?;
            let (ours, src) = (layer.attn, theirs.layers[source].attn);
            ensure!(
                (ours.num_kv_heads, ours.head_dim) == (src.num_kv_heads, src.head_dim),
                "its layer {l} reads {} KV heads of width {} from the target's {kind} layer {source}, which has {} of width {}",
                ours.num_kv_heads,
                ours.head_dim,
                src.num_kv_heads,
                src.head_dim
            );
            layer.attn.kv_from = Some(source);
        }
        if let Some(d) = spec.draft.as_mut() {
            d.input_embed_scale = theirs.embed_scale.unwrap_or(1.0);
        }
        Ok(spec)
    }
}

/// A token ordering as a file stores it (integers), checked to list every token id once.
pub fn token_ordering(values: &[f32], vocab: usize) -> anyhow::Result<Vec<u32>> {
    ensure!(
        values.len() == vocab,
        "the token ordering has {} entries for {vocab} tokens",
        values.len()
    );
    let mut seen = vec![false; vocab];
    values
        .iter()
        .map(|&v| {
            let id = v as usize;
            ensure!(
                v >= 0.0 && v.fract() == 0.0 && id < vocab && !seen[id],
                "the token ordering is not a permutation of the {vocab} token ids (entry {v})"
            );
            seen[id] = true;
            Ok(id as u32)
        })
        .collect()
}

/// The ordering dummy weights use: `i * m mod vocab` for the first `m >= 7919` prime to
/// `vocab`, a permutation that scatters each centroid's tokens over the vocabulary.
pub fn dummy_token_ordering(vocab: usize) -> Vec<f32> {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let m = (7919..).find(|&m| gcd(m, vocab.max(1)) == 1).unwrap_or(1);
    (0..vocab).map(|i| ((i * m) % vocab) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    #[test]
    fn the_assistant_reads_the_targets_last_kv_layer_of_each_type() {
        let target = preset("gemma4-tiny").unwrap();
        let draft = preset("gemma4-tiny-assistant").unwrap();
        let spec = draft.draft_spec(&target).unwrap();
        // gemma4-tiny: layers 0, 1, 3 slide, 2 and 5 are full; 4 and 5 share KV.
        let kv: Vec<_> = spec.layers.iter().map(|l| l.attn.kv_from).collect();
        assert_eq!(kv, [Some(3), Some(2)]);
        let d = spec.draft.unwrap();
        assert_eq!((d.backbone_hidden, d.input_embed_scale), (256, 16.0));
        // One key more than the window; no K or V of its own; no cap, no embedding scale.
        assert_eq!(spec.layers[0].attn.window, Some(65));
        assert_eq!(spec.layers[1].attn.window, None);
        assert!(spec
            .layers
            .iter()
            .all(|l| l.attn.qkv_rows() == l.attn.q_dim()));
        assert_eq!((spec.logit_softcap, spec.embed_scale), (None, None));
    }

    #[test]
    fn a_mismatched_target_is_refused_by_what_differs() {
        let draft = preset("gemma4-tiny-assistant").unwrap();
        let err = |t: &ModelConfig| format!("{:#}", draft.draft_spec(t).unwrap_err());
        let mut wide = preset("gemma4-tiny").unwrap();
        wide.hidden_size = 384;
        assert!(err(&wide).contains("hidden size 256"), "{}", err(&wide));
        assert!(err(&preset("tiny").unwrap()).contains("llama"));
        let mut heads = preset("gemma4-tiny").unwrap();
        heads.layer_shapes[2].num_kv_heads = 2;
        heads.layer_shapes[5].num_kv_heads = 2;
        assert!(
            err(&heads).contains("target's full-attention layer 2"),
            "{}",
            err(&heads)
        );
        let target = preset("gemma4-tiny").unwrap();
        assert!(target.draft_spec(&target).is_err());
    }

    #[test]
    fn orderings_are_permutations() {
        let d = dummy_token_ordering(512);
        assert_eq!(token_ordering(&d, 512).unwrap().len(), 512);
        assert!(token_ordering(&[0.0, 0.0], 2).is_err());
        assert!(token_ordering(&[0.0, 2.0], 2).is_err());
        assert!(token_ordering(&[1.5, 0.0], 2).is_err());
        assert!(token_ordering(&[1.0, 0.0], 2).is_ok());
    }
}
