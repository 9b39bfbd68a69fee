//! The architecture table: one row per architecture kiln runs, with the names it goes by in
//! each file format and the defaults its Hugging Face configuration class assumes. The config
//! parsers (config_hf.rs, config_gguf.rs) read everything architecture-specific from here.

use crate::Role;

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
    /// Gemma 4 (dense text models): sliding and full layers with their own head shapes and
    /// RoPE, per-layer inputs, KV shared by the last layers, sandwich norms, GeGLU.
    Gemma4,
    /// Gemma 4's assistant (`gemma4_assistant`): a draft model of Gemma 4 blocks that reads its
    /// target's KV cache and last hidden state instead of keeping a cache of its own.
    #[serde(rename = "gemma4_assistant")]
    Gemma4Assistant,
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
    /// `sliding_window` applies to the `sliding_attention` layers of `layer_types`, which the
    /// architecture always has (Gemma 4: five sliding layers to one full one by default).
    LayerTypes,
}

/// How an architecture's layer is built beyond the Llama block (pre-norm attention and
/// feed-forward, each added to the residual stream). `PLAIN` for the Llama family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockTraits {
    /// RMSNorm on the attention and feed-forward outputs before each residual add; the
    /// feed-forward's pre-norm is spelled `pre_feedforward_layernorm` (Gemma's sandwich norms).
    pub post_norms: bool,
    /// Token embeddings are multiplied by sqrt(hidden_size) (Gemma).
    pub scaled_embedding: bool,
    /// RMSNorm without a weight on each V head (Gemma 4).
    pub v_norm: bool,
    /// Attention scores are not scaled by 1/sqrt(head_dim): Q and K are normalised instead
    /// (Gemma 4's `scaling = 1.0`).
    pub unscaled_attention: bool,
    /// Each layer's output is multiplied by a learned scalar (Gemma 4's `layer_scalar`).
    pub layer_output_scale: bool,
}

impl BlockTraits {
    /// The Llama block: nothing beyond pre-norms and residual adds.
    pub const PLAIN: BlockTraits = BlockTraits {
        post_norms: false,
        scaled_embedding: false,
        v_norm: false,
        unscaled_attention: false,
        layer_output_scale: false,
    };
}

/// The multimodal Hugging Face checkpoint that holds this architecture's text model
/// (Gemma 4's `Gemma4ForConditionalGeneration`): its config nests the text model's under
/// `text_config` and its tensors under `text_prefix`; the towers under `skipped` are not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultimodalHf {
    pub model_type: &'static str,
    pub class: &'static str,
    /// Replaces the `model.` of the text model's tensor names.
    pub text_prefix: &'static str,
    /// Tensor name prefixes of the parts kiln does not run, with what they are.
    pub skipped: &'static [(&'static str, &'static str)],
}

/// transformers' defaults for the options of Gemma 4's configuration (`Gemma4TextConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma4Defaults {
    /// `global_head_dim`: the head dim of full-attention layers.
    pub full_head_dim: usize,
    /// `hidden_size_per_layer_input` (0: no per-layer inputs).
    pub per_layer_input: usize,
    /// Every `sliding_pattern`-th layer is a full-attention one when `layer_types` is absent.
    pub sliding_pattern: usize,
    /// `rope_parameters` when absent: sliding layers' base, full layers' base and the fraction
    /// of their head that rotates ("proportional" RoPE).
    pub sliding_rope_theta: f32,
    pub full_rope_theta: f32,
    pub full_partial_rotary: f64,
}

/// What transformers assumes for a field that `config.json` leaves out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HfDefaults {
    /// `head_dim`; None: `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    pub max_position: usize,
    /// `sliding_window`, where the architecture has one.
    pub sliding_window: Option<usize>,
    /// `max_window_layers` (WindowRule::FromMaxWindowLayers).
    pub max_window_layers: usize,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`.
    pub tie_embeddings: bool,
    /// The activation's config key (`hidden_act`, Gemma's `hidden_activation`) and its default.
    pub activation_key: &'static str,
    pub activation: &'static str,
    /// The config may carry Gemma 4's options (per-layer inputs, shared KV layers,
    /// `attention_k_eq_v`, ...), with these defaults; None: it has none of them and their keys
    /// are ignored, as transformers ignores them.
    pub gemma4: Option<Gemma4Defaults>,
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
    /// A GGUF's `rope_freqs.weight` holds the full-attention layers' proportional RoPE
    /// (factors 1 for the turning pairs, 1e30 for the rest), as llama.cpp's Gemma 4 converter
    /// writes it; the sliding layers do not use it.
    pub gguf_proportional_rope_freqs: bool,
    /// Q, K and V projections carry a bias.
    pub qkv_bias: bool,
    /// RMSNorm on each head of Q and K before RoPE.
    pub qk_norm: bool,
    pub window: WindowRule,
    pub block: BlockTraits,
    /// Hugging Face spellings of per-layer tensors that differ from Llama's (suffixes after
    /// `model.layers.N.`).
    pub hf_names: &'static [(Role, &'static str)],
    /// The multimodal checkpoint that may hold this architecture's text model.
    pub hf_multimodal: Option<MultimodalHf>,
    /// A draft model for targets of this architecture (Gemma 4's assistant): its Hugging Face
    /// config nests the blocks' config under `text_config`, beside its own options.
    pub draft_of: Option<Arch>,
    pub hf: HfDefaults,
}

/// The Llama family's defaults for the fields every row has.
const LLAMA_HF: HfDefaults = HfDefaults {
    head_dim: None,
    max_position: 2048,
    sliding_window: None,
    max_window_layers: 0,
    rms_norm_eps: 1e-6,
    tie_embeddings: false,
    activation_key: "hidden_act",
    activation: "silu",
    gemma4: None,
};

pub const ARCHS: [ArchInfo; 6] = [
    ArchInfo {
        arch: Arch::Llama,
        name: "llama",
        hf_model_type: "llama",
        hf_class: "LlamaForCausalLM",
        gguf_name: "llama",
        gguf_llama_with_window: false,
        gguf_proportional_rope_freqs: false,
        qkv_bias: false,
        qk_norm: false,
        window: WindowRule::None,
        block: BlockTraits::PLAIN,
        hf_names: &[],
        hf_multimodal: None,
        draft_of: None,
        hf: LLAMA_HF,
    },
    ArchInfo {
        arch: Arch::Mistral,
        name: "mistral",
        hf_model_type: "mistral",
        hf_class: "MistralForCausalLM",
        gguf_name: "llama",
        gguf_llama_with_window: true,
        gguf_proportional_rope_freqs: false,
        qkv_bias: false,
        qk_norm: false,
        window: WindowRule::AllLayers,
        block: BlockTraits::PLAIN,
        hf_names: &[],
        hf_multimodal: None,
        draft_of: None,
        hf: HfDefaults {
            max_position: 131_072,
            sliding_window: Some(4096),
            ..LLAMA_HF
        },
    },
    ArchInfo {
        arch: Arch::Qwen2,
        name: "qwen2",
        hf_model_type: "qwen2",
        hf_class: "Qwen2ForCausalLM",
        gguf_name: "qwen2",
        gguf_llama_with_window: false,
        gguf_proportional_rope_freqs: false,
        qkv_bias: true,
        qk_norm: false,
        window: WindowRule::FromMaxWindowLayers,
        block: BlockTraits::PLAIN,
        hf_names: &[],
        hf_multimodal: None,
        draft_of: None,
        hf: HfDefaults {
            max_position: 32_768,
            sliding_window: Some(4096),
            max_window_layers: 28,
            ..LLAMA_HF
        },
    },
    ArchInfo {
        arch: Arch::Qwen3,
        name: "qwen3",
        hf_model_type: "qwen3",
        hf_class: "Qwen3ForCausalLM",
        gguf_name: "qwen3",
        gguf_llama_with_window: false,
        gguf_proportional_rope_freqs: false,
        qkv_bias: false,
        qk_norm: true,
        window: WindowRule::FromMaxWindowLayers,
        block: BlockTraits::PLAIN,
        hf_names: &[],
        hf_multimodal: None,
        draft_of: None,
        hf: HfDefaults {
            head_dim: Some(128),
            max_position: 32_768,
            sliding_window: Some(4096),
            max_window_layers: 28,
            ..LLAMA_HF
        },
    },
    ArchInfo {
        arch: Arch::Gemma4,
        name: "gemma4",
        hf_model_type: "gemma4_text",
        hf_class: "Gemma4ForCausalLM",
        gguf_name: "gemma4",
        gguf_llama_with_window: false,
        gguf_proportional_rope_freqs: true,
        qkv_bias: false,
        qk_norm: true,
        window: WindowRule::LayerTypes,
        block: GEMMA4_BLOCK,
        hf_names: GEMMA4_HF_NAMES,
        hf_multimodal: Some(MultimodalHf {
            model_type: "gemma4",
            class: "Gemma4ForConditionalGeneration",
            text_prefix: "model.language_model.",
            skipped: &[
                ("model.vision_tower.", "vision tower"),
                ("model.embed_vision.", "vision embedder"),
                ("model.audio_tower.", "audio tower"),
                ("model.embed_audio.", "audio embedder"),
            ],
        }),
        draft_of: None,
        hf: GEMMA4_HF,
    },
    ArchInfo {
        arch: Arch::Gemma4Assistant,
        name: "gemma4_assistant",
        hf_model_type: "gemma4_assistant",
        hf_class: "Gemma4AssistantForCausalLM",
        gguf_name: "gemma4-assistant",
        gguf_llama_with_window: false,
        gguf_proportional_rope_freqs: true,
        qkv_bias: false,
        qk_norm: true,
        window: WindowRule::LayerTypes,
        block: GEMMA4_BLOCK,
        hf_names: GEMMA4_HF_NAMES,
        hf_multimodal: None,
        draft_of: Some(Arch::Gemma4),
        hf: GEMMA4_HF,
    },
];

/// Gemma 4's block, also its assistant's.
const GEMMA4_BLOCK: BlockTraits = BlockTraits {
    post_norms: true,
    scaled_embedding: true,
    v_norm: true,
    unscaled_attention: true,
    layer_output_scale: true,
};

const GEMMA4_HF_NAMES: &[(Role, &str)] = &[
    (Role::PostAttnNorm, "post_attention_layernorm.weight"),
    (Role::FfnNorm, "pre_feedforward_layernorm.weight"),
];

/// The defaults of `Gemma4TextConfig` (an assistant's `text_config` is one too).
const GEMMA4_HF: HfDefaults = HfDefaults {
    head_dim: Some(256),
    max_position: 131_072,
    sliding_window: Some(512),
    max_window_layers: 0,
    rms_norm_eps: 1e-6,
    tie_embeddings: true,
    activation_key: "hidden_activation",
    activation: "gelu_pytorch_tanh",
    gemma4: Some(Gemma4Defaults {
        full_head_dim: 512,
        per_layer_input: 256,
        sliding_pattern: 6,
        sliding_rope_theta: 10_000.0,
        full_rope_theta: 1_000_000.0,
        full_partial_rotary: 0.25,
    }),
};

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

    /// The architecture whose text model a multimodal checkpoint of this `model_type` or class
    /// holds, with how the checkpoint is laid out.
    pub fn from_hf_multimodal(
        model_type: Option<&str>,
        class: Option<&str>,
    ) -> Option<(Arch, &'static MultimodalHf)> {
        let found = |a: &&ArchInfo| {
            a.hf_multimodal
                .as_ref()
                .is_some_and(|m| Some(m.model_type) == model_type || Some(m.class) == class)
        };
        let info = ARCHS.iter().find(found)?;
        Some((info.arch, info.hf_multimodal.as_ref()?))
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
        for a in [
            Arch::Llama,
            Arch::Mistral,
            Arch::Qwen2,
            Arch::Qwen3,
            Arch::Gemma4,
            Arch::Gemma4Assistant,
        ] {
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
        assert_eq!(
            Arch::supported_list(),
            "llama, mistral, qwen2, qwen3, gemma4 and gemma4_assistant"
        );
        // The multimodal Gemma 4 checkpoint holds a gemma4 text model; nothing else is one.
        let (arch, mm) = Arch::from_hf_multimodal(None, Some("Gemma4ForConditionalGeneration"))
            .expect("Gemma 4's multimodal class");
        assert_eq!((arch, mm.model_type), (Arch::Gemma4, "gemma4"));
        assert!(Arch::from_hf_multimodal(Some("qwen2"), Some("Qwen2ForCausalLM")).is_none());
    }
}
