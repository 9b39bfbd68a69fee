//! Weights from a Hugging Face folder: `config.json` plus safetensors (one file or shards).
//! A multimodal checkpoint (Gemma 4's `Gemma4ForConditionalGeneration`) gives its text model;
//! its other towers are left unread, and [`HfSource::notes`] says so.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use kiln_formats::SafetensorsModel;

use crate::schema::IfAbsent;
use crate::{HfLayout, HostTensor, ModelConfig, Role, TensorId, WeightSource};
use kiln_formats::dequant::to_f32;
use kiln_formats::{DType, TensorView};

pub struct HfSource {
    weights: SafetensorsModel,
    config: ModelConfig,
    layout: HfLayout,
    notes: Vec<String>,
}

impl HfSource {
    /// Opens `dir/config.json` and the safetensors weights, checking that every tensor the
    /// configuration needs is present with the expected shape.
    pub fn open(dir: &Path) -> anyhow::Result<HfSource> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let (config, layout) = ModelConfig::from_hf_config_with_layout(&text)
            .with_context(|| format!("{}: not a usable model config", path.display()))?;
        let weights = SafetensorsModel::open(dir)?;
        let spec = config.spec();
        for (id, if_absent) in crate::schema::tensors(&spec) {
            let name = hf_tensor_name(&config, &layout, id)?;
            if !weights.has(&name) {
                if if_absent != IfAbsent::Error {
                    continue;
                }
                bail!("{}: tensor '{name}' is missing", dir.display());
            }
            let view = weights.tensor(&name)?;
            let want = id.shape_in(&spec);
            if view.shape != want {
                bail!(
                    "{}: tensor '{name}' has shape {:?}, config.json needs {want:?}",
                    dir.display(),
                    view.shape
                );
            }
        }
        let notes = skipped_parts(&weights, &layout);
        Ok(HfSource {
            weights,
            config,
            layout,
            notes,
        })
    }

    pub fn weights(&self) -> &SafetensorsModel {
        &self.weights
    }

    /// What the folder holds that kiln does not run (a multimodal checkpoint's towers).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    fn name(&self, id: TensorId) -> anyhow::Result<String> {
        hf_tensor_name(&self.config, &self.layout, id)
    }
}

/// The checkpoint's name of a canonical tensor.
fn hf_tensor_name(c: &ModelConfig, layout: &HfLayout, id: TensorId) -> anyhow::Result<String> {
    let name = id
        .hf_name(c.arch)
        .ok_or_else(|| anyhow!("{} checkpoints have no Hugging Face name for {id}", c.arch))?;
    Ok(layout.tensor_name(&name))
}

/// One note per skipped part of a multimodal checkpoint that the folder has.
fn skipped_parts(weights: &SafetensorsModel, layout: &HfLayout) -> Vec<String> {
    let Some(mm) = layout.multimodal else {
        return Vec::new();
    };
    let mut notes: Vec<String> = mm
        .skipped
        .iter()
        .filter_map(|(prefix, what)| {
            let n = weights
                .names()
                .iter()
                .filter(|t| t.starts_with(prefix))
                .count();
            let tensors = if n == 1 { "tensor" } else { "tensors" };
            (n > 0).then(|| format!("{what} ({n} {tensors} under {prefix}) not loaded"))
        })
        .collect();
    notes.insert(
        0,
        format!(
            "{}: running the text model under {}",
            mm.class, mm.text_prefix
        ),
    );
    notes
}

impl WeightSource for HfSource {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has(&self, id: TensorId) -> bool {
        id.exists_in(&self.config) && self.name(id).is_ok_and(|name| self.weights.has(&name))
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        let root = self.weights.path().display();
        let name = self.name(id)?;
        if !self.has(id) {
            bail!("{root}: the model has no tensor {name}");
        }
        let view = self.weights.tensor(&name)?;
        let data = match id.role {
            Role::TokenOrdering => ids_to_f32(&view).map_err(|e| anyhow!("{root}: {name}: {e}"))?,
            _ => to_f32(&view).map_err(|e| anyhow!("{root}: {e}"))?,
        };
        Ok(HostTensor {
            shape: view.shape.clone(),
            data,
        })
    }
}

/// Token ids stored as integers (an ordered LM head's token ordering), as exact f32 values.
fn ids_to_f32(view: &TensorView) -> anyhow::Result<Vec<f32>> {
    let width = match view.dtype {
        DType::I32 => 4,
        DType::I64 => 8,
        // A float file of ids (as some converters write them): its values are taken as they are.
        _ => return Ok(to_f32(view)?),
    };
    view.data
        .chunks_exact(width)
        .map(|b| {
            let v = match width {
                4 => i32::from_le_bytes(b.try_into()?) as i64,
                _ => i64::from_le_bytes(b.try_into()?),
            };
            // Ids below 2^24 are exact in f32.
            anyhow::ensure!((0..1 << 24).contains(&v), "token id {v} is out of range");
            Ok(v as f32)
        })
        .collect()
}
