//! One entry point for every kind of model a user can name: a `.gguf` file, a Hugging Face
//! folder, or `dummy:PRESET`. It pairs the weights (kiln-model) with the tokenizer
//! (kiln-tokenizer), which is why it is a crate of its own: backends depend on kiln-model and
//! never pull in a tokenizer.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

use kiln_model::presets::PRESETS;
use kiln_model::{DummySource, GgufSource, HfSource, ModelConfig, TensorId, WeightSource};

/// A model ready to hand to a backend: its weights (not yet read: files stay memory-mapped and
/// tensors are decoded when a backend asks), its configuration and its tokenizer.
pub struct LoadedModel {
    /// A short name: the GGUF's `general.name`, the folder's name, or `dummy:PRESET`.
    pub name: String,
    pub config: ModelConfig,
    pub weights: Arc<dyn WeightSource>,
    pub tokenizer: Tokenizer,
    pub description: ModelDescription,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("description", &self.description)
            .finish()
    }
}

/// What `kiln info` shows about where a model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDescription {
    /// "GGUF v3", "safetensors (2 files)", "dummy (generated weights)".
    pub format: String,
    /// Tensor storage types and how many tensors use each ("F32" -> 12, "Q4_K" -> 190).
    pub tensor_types: BTreeMap<String, usize>,
    pub tokenizer_kind: String,
    pub has_chat_template: bool,
    pub param_count: u64,
}

impl std::fmt::Display for ModelDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types: Vec<String> = self
            .tensor_types
            .iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect();
        writeln!(f, "format:        {}", self.format)?;
        writeln!(
            f,
            "parameters:    {} ({:.2}B)",
            self.param_count,
            self.param_count as f64 / 1e9
        )?;
        writeln!(f, "tensor types:  {}", types.join(", "))?;
        writeln!(f, "tokenizer:     {}", self.tokenizer_kind)?;
        write!(
            f,
            "chat template: {}",
            if self.has_chat_template { "yes" } else { "no" }
        )
    }
}

/// Loads `spec`: a `.gguf` file, a Hugging Face folder (config.json + safetensors +
/// tokenizer.json), or `dummy:PRESET`.
pub fn load(spec: &str) -> anyhow::Result<LoadedModel> {
    if let Some(preset) = spec.strip_prefix("dummy:") {
        return load_dummy(preset);
    }
    let path = Path::new(spec);
    if path.is_dir() {
        return load_hf(path);
    }
    if path.is_file() {
        return load_gguf(path);
    }
    bail!(
        "'{spec}' is not a file or folder; give a .gguf file, a Hugging Face folder, or dummy:PRESET ({})",
        PRESETS.join(", ")
    )
}

fn load_dummy(preset: &str) -> anyhow::Result<LoadedModel> {
    let source = DummySource::preset(preset)?;
    let config = source.config().clone();
    let tokenizer = Tokenizer::byte_level(config.vocab_size);
    let n = TensorId::all(&config).len();
    let description = describe(
        "dummy (generated weights)".into(),
        [("F32".to_string(), n)],
        &tokenizer,
        &config,
    );
    Ok(LoadedModel {
        name: format!("dummy:{preset}"),
        config,
        weights: Arc::new(source),
        tokenizer,
        description,
    })
}

fn load_hf(dir: &Path) -> anyhow::Result<LoadedModel> {
    if !dir.join("config.json").is_file() {
        bail!(
            "{}: not a Hugging Face model folder (no config.json)",
            dir.display()
        );
    }
    let source = HfSource::open(dir)?;
    let tokenizer = Tokenizer::from_hf_dir(dir)
        .with_context(|| format!("{}: cannot load the tokenizer", dir.display()))?;
    let config = source.config().clone();
    check_vocab(&tokenizer, &config, dir)?;
    let weights = source.weights();
    let files = weights.files().count();
    let format = format!(
        "safetensors ({files} file{})",
        if files == 1 { "" } else { "s" }
    );
    let mut types = BTreeMap::new();
    for name in weights.names() {
        *types
            .entry(weights.tensor(name)?.dtype.to_string())
            .or_insert(0) += 1;
    }
    let description = describe(format, types, &tokenizer, &config);
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    Ok(LoadedModel {
        name,
        config,
        weights: Arc::new(source),
        tokenizer,
        description,
    })
}

fn load_gguf(path: &Path) -> anyhow::Result<LoadedModel> {
    let file = Arc::new(GgufFile::open(path)?);
    let source = GgufSource::new(file.clone())?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("{}: cannot load the tokenizer", path.display()))?;
    let config = source.config().clone();
    check_vocab(&tokenizer, &config, path)?;
    let mut types = BTreeMap::new();
    for t in &file.tensors {
        *types.entry(t.dtype.to_string()).or_insert(0) += 1;
    }
    let description = describe(
        format!("GGUF v{}", file.version),
        types,
        &tokenizer,
        &config,
    );
    let name = match file.get_str("general.name")? {
        Some(n) if !n.trim().is_empty() => n.to_string(),
        _ => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{}: no file name", path.display()))?,
    };
    Ok(LoadedModel {
        name,
        config,
        weights: Arc::new(source),
        tokenizer,
        description,
    })
}

/// A tokenizer that produces ids past the embedding table would crash a forward pass later.
fn check_vocab(tokenizer: &Tokenizer, config: &ModelConfig, origin: &Path) -> anyhow::Result<()> {
    if tokenizer.vocab_size() > config.vocab_size {
        bail!(
            "{}: the tokenizer has {} tokens but the model's embedding has only {} rows",
            origin.display(),
            tokenizer.vocab_size(),
            config.vocab_size
        );
    }
    Ok(())
}

fn describe(
    format: String,
    types: impl IntoIterator<Item = (String, usize)>,
    tokenizer: &Tokenizer,
    config: &ModelConfig,
) -> ModelDescription {
    ModelDescription {
        format,
        tensor_types: types.into_iter().collect(),
        tokenizer_kind: tokenizer.kind().to_string(),
        has_chat_template: tokenizer.chat_template().is_some(),
        param_count: config.param_count(),
    }
}
