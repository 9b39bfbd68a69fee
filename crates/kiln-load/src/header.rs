//! What a model file says about itself without its weights: the tokenizer, the stated shape,
//! the architecture and the tensors listed. Enough for `kiln tokenize` and `kiln info` on a
//! vocabulary-only GGUF, a Hugging Face folder without safetensors, or an architecture kiln
//! does not run yet, which then says what is missing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use kiln_formats::GgufFile;
use kiln_model::presets::PRESETS;
use kiln_model::{DummySource, GgufSource, HfSource, ModelConfig, TensorId, WeightSource};
use kiln_tokenizer::Tokenizer;
use serde_json::Value;

use crate::sampling_defaults::SamplingDefaults;
use crate::shape::Shape;

/// A model's header: everything but the weights.
pub struct ModelHeader {
    /// A short name: the GGUF's `general.name`, the folder's name, or `dummy:PRESET`.
    pub name: String,
    /// "GGUF v3", "safetensors (2 files)", "Hugging Face folder", "dummy (generated weights)".
    pub format: String,
    /// The architecture as the file names it (`general.architecture`, `model_type`).
    pub arch_name: String,
    /// The configuration kiln runs, or why it cannot read one (an architecture it lacks).
    pub config: Result<ModelConfig, String>,
    /// The shape as the header states it, also when `config` is an error.
    pub shape: Shape,
    /// The tokenizer, or why kiln cannot read it (a kind it does not implement).
    pub tokenizer: Result<Tokenizer, String>,
    /// Tensor storage types and how many tensors use each; empty for a vocabulary-only file.
    pub tensor_types: BTreeMap<String, usize>,
    /// Bytes of the tensors as stored (f32 for generated dummy weights).
    pub weight_bytes: u64,
    /// Why the weights cannot be loaded (a vocabulary-only file, no safetensors, a tensor
    /// missing); None when they can.
    pub weights_missing: Option<String>,
    /// The sampling settings the model's files recommend.
    pub sampling: SamplingDefaults,
    /// What the files hold that kiln does not run (a multimodal checkpoint's vision and audio
    /// towers).
    pub notes: Vec<String>,
}

impl std::fmt::Debug for ModelHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelHeader")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("arch_name", &self.arch_name)
            .field("config", &self.config)
            .field("weights_missing", &self.weights_missing)
            .finish()
    }
}

impl ModelHeader {
    /// What kiln lacks to run this model, each with what to do; empty when it can run it.
    pub fn missing(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(why) = &self.tokenizer {
            out.push(why.clone());
        }
        if let Err(why) = &self.config {
            out.push(why.clone());
        }
        if let Some(why) = &self.weights_missing {
            out.push(why.clone());
        }
        out
    }

    /// The tokenizer, or an error that says why there is none and what still works.
    pub fn tokenizer(&self) -> anyhow::Result<&Tokenizer> {
        self.tokenizer
            .as_ref()
            .map_err(|why| anyhow!("{why}; `kiln info` still shows the rest of the header"))
    }

    /// The number of weights the stated shape implies (None when kiln cannot read the shape).
    pub fn param_count(&self) -> Option<u64> {
        self.config.as_ref().ok().map(ModelConfig::param_count)
    }
}

/// A header and, where the files hold them, the weights (what `load` goes on with).
pub(crate) struct Opened {
    pub header: ModelHeader,
    pub weights: Option<Arc<dyn WeightSource>>,
}

/// Reads the header of `spec`: a `.gguf` file, a Hugging Face folder, or `dummy:PRESET`. Fails
/// only when the file or folder cannot be read as a model; a tokenizer or an architecture kiln
/// lacks and absent weights are reported in the header.
pub fn inspect(spec: &str) -> anyhow::Result<ModelHeader> {
    open(spec).map(|o| o.header)
}

pub(crate) fn open(spec: &str) -> anyhow::Result<Opened> {
    if let Some(preset) = spec.strip_prefix("dummy:") {
        return open_dummy(preset);
    }
    let path = Path::new(spec);
    if path.is_dir() {
        return open_hf(path);
    }
    if path.is_file() {
        return open_gguf(path);
    }
    bail!(
        "'{spec}' is not a file or folder; give a .gguf file, a Hugging Face folder, or \
         dummy:PRESET ({})",
        PRESETS.join(", ")
    )
}

fn open_dummy(preset: &str) -> anyhow::Result<Opened> {
    let source = DummySource::preset(preset)?;
    let config = source.config().clone();
    // Generated f32 values, or blocks where the preset names a quantisation.
    let mut tensor_types = BTreeMap::new();
    let mut weight_bytes = 4 * config.param_count();
    for id in TensorId::all(&config) {
        let dtype = source
            .quantized_dtype(id)
            .unwrap_or(kiln_formats::DType::F32);
        *tensor_types.entry(dtype.to_string()).or_insert(0) += 1;
        let n: usize = id.shape(&config).iter().product();
        if let Some(bytes) = dtype.bytes_for(n).filter(|_| dtype.is_quantized()) {
            weight_bytes -= (4 * n - bytes) as u64;
        }
    }
    let header = ModelHeader {
        name: format!("dummy:{preset}"),
        format: "dummy (generated weights)".into(),
        arch_name: config.arch.name().to_string(),
        shape: Shape::of_config(&config),
        tokenizer: Ok(Tokenizer::byte_level(config.vocab_size)),
        tensor_types,
        weight_bytes,
        config: Ok(config),
        weights_missing: None,
        sampling: SamplingDefaults::default(),
        notes: Vec::new(),
    };
    Ok(Opened {
        header,
        weights: Some(Arc::new(source)),
    })
}

fn open_hf(dir: &Path) -> anyhow::Result<Opened> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        bail!(
            "{}: not a Hugging Face model folder (no config.json); give the folder that holds \
             config.json and tokenizer.json, or a .gguf file",
            dir.display()
        );
    }
    let tokenizer = Tokenizer::from_hf_dir(dir).map_err(|e| format!("tokenizer: {e:#}"));
    let text = std::fs::read_to_string(&config_path)
        .with_context(|| format!("{}: cannot read", config_path.display()))?;
    let json: Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: invalid JSON", config_path.display()))?;
    let arch_name = json
        .get("model_type")
        .and_then(Value::as_str)
        .or_else(|| json.pointer("/architectures/0").and_then(Value::as_str))
        .unwrap_or("unknown")
        .to_string();
    let config = ModelConfig::from_hf_file(&config_path).map_err(|e| format!("{e:#}"));
    let shape = match &config {
        Ok(c) => Shape::of_config(c),
        Err(_) => Shape::of_hf(&json),
    };
    let mut tensor_types = BTreeMap::new();
    let mut weight_bytes = 0;
    let mut format = "Hugging Face folder".to_string();
    let mut notes = Vec::new();
    let (weights, weights_missing) = match &config {
        Err(_) => (None, None),
        Ok(_) => match HfSource::open(dir) {
            Ok(source) => {
                let st = source.weights();
                let files = st.files().count();
                for name in st.names() {
                    let t = st.tensor(name)?;
                    *tensor_types.entry(t.dtype.to_string()).or_insert(0) += 1;
                    weight_bytes += t.data.len() as u64;
                }
                format = format!("safetensors ({files} file{})", plural(files));
                notes = source.notes().to_vec();
                let source: Arc<dyn WeightSource> = Arc::new(source);
                (Some(source), None)
            }
            Err(e) => (
                None,
                Some(format!(
                    "weights: {e:#}; the folder needs the model's *.safetensors files to run \
                     (tokenize and info work without them)"
                )),
            ),
        },
    };
    let header = ModelHeader {
        name: folder_name(dir),
        format,
        arch_name,
        config,
        shape,
        tokenizer,
        tensor_types,
        weight_bytes,
        weights_missing,
        sampling: SamplingDefaults::from_hf_dir(dir)?,
        notes,
    };
    Ok(Opened { header, weights })
}

fn open_gguf(path: &Path) -> anyhow::Result<Opened> {
    let file = Arc::new(GgufFile::open(path)?);
    let tokenizer = Tokenizer::from_gguf(&file).map_err(|e| format!("tokenizer: {e:#}"));
    let arch_name = file.architecture().unwrap_or("unknown").to_string();
    let config = ModelConfig::from_gguf(&file).map_err(|e| format!("{e:#}"));
    let shape = match &config {
        Ok(c) => Shape::of_config(c),
        Err(_) => Shape::of_gguf(&file, &arch_name),
    };
    let mut tensor_types = BTreeMap::new();
    for t in &file.tensors {
        *tensor_types.entry(t.dtype.to_string()).or_insert(0) += 1;
    }
    let weight_bytes = file.tensors.iter().map(|t| t.n_bytes as u64).sum();
    let (weights, weights_missing) = match (&config, file.tensors.is_empty()) {
        (_, true) => (
            None,
            Some(
                "weights: the file holds a vocabulary only (no tensors); kiln tokenize and kiln \
                 info work on it, to generate give the model's full GGUF"
                    .to_string(),
            ),
        ),
        (Err(_), false) => (None, None),
        (Ok(_), false) => match GgufSource::new(file.clone()) {
            Ok(source) => {
                let source: Arc<dyn WeightSource> = Arc::new(source);
                (Some(source), None)
            }
            Err(e) => (None, Some(format!("weights: {e:#}"))),
        },
    };
    let name = match file.get_str("general.name")? {
        Some(n) if !n.trim().is_empty() => n.to_string(),
        _ => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{}: no file name", path.display()))?,
    };
    let header = ModelHeader {
        name,
        format: format!("GGUF v{}", file.version),
        arch_name,
        config,
        shape,
        tokenizer,
        tensor_types,
        weight_bytes,
        weights_missing,
        sampling: SamplingDefaults::from_gguf(&file),
        notes: Vec::new(),
    };
    Ok(Opened { header, weights })
}

fn folder_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
