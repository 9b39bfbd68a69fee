//! A model's shape as its header states it, read without kiln-model's architecture table, so
//! that `kiln info` can describe a file whose architecture kiln does not run yet.

use kiln_formats::GgufFile;
use kiln_model::ModelConfig;
use serde_json::Value;

/// The hyper-parameters every decoder-only transformer states; each is None when the header
/// leaves it out (or gives it per layer).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    pub layers: Option<usize>,
    pub hidden: Option<usize>,
    pub heads: Option<usize>,
    pub kv_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub ffn: Option<usize>,
    pub vocab: Option<usize>,
    pub context: Option<usize>,
}

impl Shape {
    /// The shape kiln runs, from a parsed configuration.
    pub fn of_config(c: &ModelConfig) -> Shape {
        Shape {
            layers: Some(c.num_layers),
            hidden: Some(c.hidden_size),
            heads: Some(c.num_heads),
            kv_heads: Some(c.num_kv_heads),
            head_dim: Some(c.head_dim),
            ffn: Some(c.intermediate_size),
            vocab: Some(c.vocab_size),
            context: Some(c.max_position),
        }
    }

    /// The `{arch}.*` keys of a GGUF file (llama.cpp's names, shared by every architecture).
    pub fn of_gguf(g: &GgufFile, arch: &str) -> Shape {
        let num = |k: &str| {
            g.get_u64(&format!("{arch}.{k}"))
                .ok()
                .flatten()
                .and_then(|v| usize::try_from(v).ok())
        };
        let vocab = num("vocab_size").or_else(|| {
            g.get_array("tokenizer.ggml.tokens")
                .ok()
                .flatten()
                .map(|t| t.len())
        });
        let (hidden, heads) = (num("embedding_length"), num("attention.head_count"));
        Shape {
            layers: num("block_count"),
            hidden,
            heads,
            kv_heads: num("attention.head_count_kv").or(heads),
            head_dim: num("attention.key_length").or(match (hidden, heads) {
                (Some(h), Some(n)) if n > 0 => Some(h / n),
                _ => None,
            }),
            ffn: num("feed_forward_length"),
            vocab,
            context: num("context_length"),
        }
    }

    /// A Hugging Face `config.json` (multimodal configs keep these under `text_config`).
    pub fn of_hf(config: &Value) -> Shape {
        let text = config.get("text_config").unwrap_or(config);
        let num = |k: &str| {
            text.get(k)
                .or_else(|| config.get(k))
                .and_then(Value::as_u64)
                .and_then(|v| usize::try_from(v).ok())
        };
        let (hidden, heads) = (num("hidden_size"), num("num_attention_heads"));
        Shape {
            layers: num("num_hidden_layers"),
            hidden,
            heads,
            kv_heads: num("num_key_value_heads").or(heads),
            head_dim: num("head_dim").or(match (hidden, heads) {
                (Some(h), Some(n)) if n > 0 => Some(h / n),
                _ => None,
            }),
            ffn: num("intermediate_size"),
            vocab: num("vocab_size"),
            context: num("max_position_embeddings"),
        }
    }

    /// "32 layers, hidden 4096, 32 heads (8 KV) of 128, FFN 14336, vocab 128256", with "?"
    /// for what the header does not say.
    pub fn summary(&self) -> String {
        let n = |v: Option<usize>| v.map_or("?".to_string(), |v| v.to_string());
        format!(
            "{} layers, hidden {}, {} heads ({} KV) of {}, FFN {}, vocab {}",
            n(self.layers),
            n(self.hidden),
            n(self.heads),
            n(self.kv_heads),
            n(self.head_dim),
            n(self.ffn),
            n(self.vocab)
        )
    }
}
