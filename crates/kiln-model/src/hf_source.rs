//! Weights from a Hugging Face folder: `config.json` plus safetensors (one file or shards).

use std::path::Path;

use anyhow::{anyhow, bail};
use kiln_formats::SafetensorsModel;

use crate::schema::IfAbsent;
use crate::{HostTensor, ModelConfig, TensorId, WeightSource};
use kiln_formats::dequant::to_f32;

pub struct HfSource {
    weights: SafetensorsModel,
    config: ModelConfig,
}

impl HfSource {
    /// Opens `dir/config.json` and the safetensors weights, checking that every tensor the
    /// configuration needs is present with the expected shape.
    pub fn open(dir: &Path) -> anyhow::Result<HfSource> {
        let config = ModelConfig::from_hf_file(&dir.join("config.json"))?;
        let weights = SafetensorsModel::open(dir)?;
        for (id, if_absent) in crate::schema::tensors(&config.spec()) {
            let name = id.hf_name();
            if !weights.has(&name) {
                if if_absent == IfAbsent::Zeros {
                    continue;
                }
                bail!("{}: tensor '{name}' is missing", dir.display());
            }
            let view = weights.tensor(&name)?;
            let want = id.shape(&config);
            if view.shape != want {
                bail!(
                    "{}: tensor '{name}' has shape {:?}, config.json needs {want:?}",
                    dir.display(),
                    view.shape
                );
            }
        }
        Ok(HfSource { weights, config })
    }

    pub fn weights(&self) -> &SafetensorsModel {
        &self.weights
    }
}

impl WeightSource for HfSource {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has(&self, id: TensorId) -> bool {
        id.exists_in(&self.config) && self.weights.has(&id.hf_name())
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        let root = self.weights.path().display();
        if !self.has(id) {
            bail!("{root}: the model has no tensor {}", id.hf_name());
        }
        let view = self.weights.tensor(&id.hf_name())?;
        let data = to_f32(&view).map_err(|e| anyhow!("{root}: {e}"))?;
        Ok(HostTensor {
            shape: view.shape.clone(),
            data,
        })
    }
}
