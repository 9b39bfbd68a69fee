//! One entry point for every kind of model a user can name: a `.gguf` file, a Hugging Face
//! folder, or `dummy:PRESET`. It pairs the weights (kiln-model) with the tokenizer
//! (kiln-tokenizer), which is why it is a crate of its own: backends depend on kiln-model and
//! never pull in a tokenizer. [`inspect`] reads the header alone (tokenizer, shape, tensor
//! list); [`load`] also needs the weights and an architecture kiln runs.

mod describe;
mod header;
mod sampling_defaults;
mod shape;

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use kiln_model::{ModelConfig, WeightSource};
use kiln_tokenizer::Tokenizer;

pub use describe::{human_count, tensor_types, ModelDescription};
pub use header::{inspect, ModelHeader};
pub use sampling_defaults::SamplingDefaults;
pub use shape::Shape;

/// A model ready to hand to a backend: its weights (not yet read: files stay memory-mapped and
/// tensors are decoded when a backend asks), its configuration and its tokenizer.
pub struct LoadedModel {
    /// A short name: the GGUF's `general.name`, the folder's name, or `dummy:PRESET`.
    pub name: String,
    pub config: ModelConfig,
    pub weights: Arc<dyn WeightSource>,
    pub tokenizer: Tokenizer,
    pub description: ModelDescription,
    /// The sampling settings the model's files recommend (generation_config.json, GGUF
    /// general.sampling.*).
    pub sampling: SamplingDefaults,
    /// What the files hold that kiln does not run (a multimodal checkpoint's vision and audio
    /// towers), for the log and `kiln info`.
    pub notes: Vec<String>,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("description", &self.description)
            .field("notes", &self.notes)
            .finish()
    }
}

/// Loads `spec`: a `.gguf` file, a Hugging Face folder (config.json + safetensors +
/// tokenizer.json), or `dummy:PRESET`.
pub fn load(spec: &str) -> anyhow::Result<LoadedModel> {
    let header::Opened { header, weights } = header::open(spec)?;
    let tokenizer = header.tokenizer()?.clone();
    let config = match header.config {
        Ok(c) => c,
        Err(why) => {
            bail!("{why}; `kiln info` and `kiln tokenize` still read its header and tokenizer")
        }
    };
    let Some(weights) = weights else {
        return Err(anyhow!(
            "{}",
            header
                .weights_missing
                .unwrap_or_else(|| "the weights cannot be read".into())
        ));
    };
    check_vocab(&tokenizer, &config, spec)?;
    let description = ModelDescription {
        format: header.format,
        tensor_types: header.tensor_types,
        tokenizer_kind: tokenizer.kind().to_string(),
        has_chat_template: tokenizer.chat_template().is_some(),
        param_count: config.param_count(),
        weight_bytes: header.weight_bytes,
    };
    Ok(LoadedModel {
        name: header.name,
        config,
        weights,
        tokenizer,
        description,
        sampling: header.sampling,
        notes: header.notes,
    })
}

/// A model's weights and configuration without its tokenizer: a draft model that drafts in its
/// target's vocabulary (Gemma 4's assistant, whose folder need not hold a tokenizer).
pub struct LoadedWeights {
    pub name: String,
    pub config: ModelConfig,
    pub weights: Arc<dyn WeightSource>,
}

/// Loads `spec`'s weights and configuration as [`load`] does, without asking for a tokenizer.
pub fn load_weights(spec: &str) -> anyhow::Result<LoadedWeights> {
    let header::Opened { header, weights } = header::open(spec)?;
    let config = header.config.map_err(|why| anyhow!("{why}"))?;
    let weights = weights.ok_or_else(|| {
        anyhow!(
            "{}",
            header
                .weights_missing
                .clone()
                .unwrap_or_else(|| "the weights cannot be read".into())
        )
    })?;
    Ok(LoadedWeights {
        name: header.name,
        config,
        weights,
    })
}

/// A tokenizer that produces ids past the embedding table would crash a forward pass later.
fn check_vocab(tokenizer: &Tokenizer, config: &ModelConfig, origin: &str) -> anyhow::Result<()> {
    if tokenizer.vocab_size() > config.vocab_size {
        bail!(
            "{}: the tokenizer has {} tokens but the model's embedding has only {} rows",
            Path::new(origin).display(),
            tokenizer.vocab_size(),
            config.vocab_size
        );
    }
    Ok(())
}
