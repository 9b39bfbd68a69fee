//! The architecture table: one row per architecture kiln runs, with the names it goes by in
//! each file format and the defaults its Hugging Face configuration class assumes. The config
//! parsers (config_hf.rs, config_gguf.rs) read everything architecture-specific from here.

/// The architectures kiln runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama 2 / 3.x (and models shaped like them).
    Llama,
    /// Mistral: llama with a sliding attention window.
    Mistral,
    /// Qwen2 / Qwen2.5: bias on Q, K and V.
    Qwen2,
    /// Qwen3: RMSNorm on each head of Q and K, no QKV bias.
    Qwen3,
}

/// How a Hugging Face config says which layers attend through the sliding window, when its
/// `layer_types` list (transformers 5) is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowRule {
    /// The architecture has no window; `sliding_window` is ignored.
    None,
    /// `sliding_window` applies to every layer.
    AllLayers,
    /// Qwen: `use_sliding_window` turns it on, for the layers from `max_window_layers` on.
    FromMaxWindowLayers,
}

/// What transformers assumes for a field that `config.json` leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HfDefaults {
    /// `head_dim`; None: `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    pub max_position: usize,
    /// `sliding_window`, where the architecture has one.
    pub sliding_window: Option<usize>,
    /// `max_window_layers` (WindowRule::FromMaxWindowLayers).
    pub max_window_layers: usize,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArchInfo {
    pub arch: Arch,
    /// The short name kiln prints.
    pub name: &'static str,
    /// Hugging Face `model_type`.
    pub hf_model_type: &'static str,
    /// Hugging Face `architectures` class.
    pub hf_class: &'static str,
    /// GGUF `general.architecture`.
    pub gguf_name: &'static str,
    /// Read through llama.cpp's llama graph: a GGUF of this name with a sliding window is this
    /// architecture (llama.cpp's converter writes Mistral as `llama`).
    pub gguf_llama_with_window: bool,
    /// Q, K and V projections carry a bias.
    pub qkv_bias: bool,
    /// RMSNorm on each head of Q and K before RoPE.
    pub qk_norm: bool,
    pub window: WindowRule,
    pub hf: HfDefaults,
}

pub const ARCHS: [ArchInfo; 4] = [
    ArchInfo {
        arch: Arch::Llama,
        name: "llama",
        hf_model_type: "llama",
        hf_class: "LlamaForCausalLM",
        gguf_name: "llama",
        gguf_llama_with_window: false,
        qkv_bias: false,
        qk_norm: false,
        window: WindowRule::None,
        hf: HfDefaults {
            head_dim: None,
            max_position: 2048,
            sliding_window: None,
            max_window_layers: 0,
        },
    },
    ArchInfo {
        arch: Arch::Mistral,
        name: "mistral",
        hf_model_type: "mistral",
        hf_class: "MistralForCausalLM",
        gguf_name: "llama",
        gguf_llama_with_window: true,
        qkv_bias: false,
        qk_norm: false,
        window: WindowRule::AllLayers,
        hf: HfDefaults {
            head_dim: None,
            max_position: 131_072,
            sliding_window: Some(4096),
            max_window_layers: 0,
        },
    },
    ArchInfo {
        arch: Arch::Qwen2,
        name: "qwen2",
        hf_model_type: "qwen2",
        hf_class: "Qwen2ForCausalLM",
        gguf_name: "qwen2",
        gguf_llama_with_window: false,
        qkv_bias: true,
        qk_norm: false,
        window: WindowRule::FromMaxWindowLayers,
        hf: HfDefaults {
            head_dim: None,
            max_position: 32_768,
            sliding_window: Some(4096),
            max_window_layers: 28,
        },
    },
    ArchInfo {
        arch: Arch::Qwen3,
        name: "qwen3",
        hf_model_type: "qwen3",
        hf_class: "Qwen3ForCausalLM",
        gguf_name: "qwen3",
        gguf_llama_with_window: false,
        qkv_bias: false,
        qk_norm: true,
        window: WindowRule::FromMaxWindowLayers,
        hf: HfDefaults {
            head_dim: Some(128),
            max_position: 32_768,
            sliding_window: Some(4096),
            max_window_layers: 28,
        },
    },
];

impl Arch {
    /// This architecture's row of the table.
    pub fn info(self) -> &'static ArchInfo {
        ARCHS
            .iter()
            .find(|a| a.arch == self)
            .expect("every architecture has a row in ARCHS")
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The architecture of a Hugging Face config: by `model_type`, else by its class name.
    pub fn from_hf(model_type: Option<&str>, class: Option<&str>) -> Option<Arch> {
        let by_type = ARCHS.iter().find(|a| Some(a.hf_model_type) == model_type);
        by_type
            .or_else(|| ARCHS.iter().find(|a| Some(a.hf_class) == class))
            .map(|a| a.arch)
    }

    /// The architecture of a GGUF `general.architecture`; `has_window`: the file sets a
    /// sliding window.
    pub fn from_gguf(name: &str, has_window: bool) -> Option<Arch> {
        let candidates = ARCHS.iter().filter(|a| a.gguf_name == name);
        let mut plain = None;
        for a in candidates {
            if a.gguf_llama_with_window == has_window {
                return Some(a.arch);
            }
            if !a.gguf_llama_with_window {
                plain = Some(a.arch);
            }
        }
        plain
    }

    /// "llama, mistral, qwen2 and qwen3": for errors about unsupported architectures.
    pub fn supported_list() -> String {
        let names: Vec<&str> = ARCHS.iter().map(|a| a.name).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_architecture_has_one_row_and_is_found_by_its_names() {
        for a in [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3] {
            assert_eq!(ARCHS.iter().filter(|r| r.arch == a).count(), 1);
            let info = a.info();
            assert_eq!(Arch::from_hf(Some(info.hf_model_type), None), Some(a));
            assert_eq!(Arch::from_hf(None, Some(info.hf_class)), Some(a));
            assert_eq!(
                Arch::from_gguf(info.gguf_name, info.gguf_llama_with_window),
                Some(a)
            );
        }
        // A qwen2 file with a window is still qwen2; llama with one is Mistral.
        assert_eq!(Arch::from_gguf("qwen2", true), Some(Arch::Qwen2));
        assert_eq!(Arch::from_gguf("llama", true), Some(Arch::Mistral));
        assert_eq!(Arch::from_gguf("gemma9", false), None);
        assert_eq!(Arch::from_hf(Some("gemma9"), Some("X")), None);
        assert_eq!(Arch::supported_list(), "llama, mistral, qwen2 and qwen3");
    }
}
