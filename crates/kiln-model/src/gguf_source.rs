//! Weights from a GGUF file: tensors by their llama.cpp names, dequantised to f32, with the
//! converter's Q/K row permutation undone for llama-architecture files.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use kiln_formats::GgufFile;

use crate::permute::unpermute_rows;
use crate::schema::IfAbsent;
use crate::{HostTensor, ModelConfig, QuantTensor, Role, TensorId, WeightSource};
use kiln_formats::dequant::to_f32;

pub struct GgufSource {
    file: Arc<GgufFile>,
    config: ModelConfig,
    /// llama.cpp's converter permuted Q/K rows (llama architecture, which includes Mistral).
    permuted_qk: bool,
}

impl GgufSource {
    pub fn open(path: &Path) -> anyhow::Result<GgufSource> {
        Self::new(Arc::new(GgufFile::open(path)?))
    }

    /// Reads the configuration and checks that every tensor the model needs is present with
    /// the expected shape, so that a bad file fails at open rather than halfway through loading.
    pub fn new(file: Arc<GgufFile>) -> anyhow::Result<GgufSource> {
        let config = ModelConfig::from_gguf(&file)?;
        let permuted_qk = file.architecture()? == "llama";
        for (id, if_absent) in crate::schema::tensors(&config.spec()) {
            let name = id.gguf_name();
            let Some(info) = file.tensor_info(&name) else {
                if if_absent != IfAbsent::Error {
                    continue;
                }
                bail!("{}: tensor '{name}' is missing", file.path().display());
            };
            let want = id.shape(&config);
            if info.shape != want {
                bail!(
                    "{}: tensor '{name}' has shape {:?}, the configuration needs {want:?}",
                    file.path().display(),
                    info.shape
                );
            }
        }
        Ok(GgufSource {
            file,
            config,
            permuted_qk,
        })
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}

impl WeightSource for GgufSource {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has(&self, id: TensorId) -> bool {
        id.exists_in(&self.config) && self.file.tensor_info(&id.gguf_name()).is_some()
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        let path = self.file.path().display();
        if !self.has(id) {
            bail!("{path}: the model has no tensor {id}");
        }
        let view = self.file.tensor(&id.gguf_name())?;
        let data = to_f32(&view).map_err(|e| anyhow!("{path}: {e}"))?;
        let shape = view.shape.clone();
        let rows = shape[0];
        let cols = data.len() / rows.max(1);
        let c = &self.config;
        let data = match id.role {
            Role::Q | Role::QBias if self.permuted_qk => {
                unpermute_rows(&data, rows, cols, c.num_heads)?
            }
            Role::K | Role::KBias if self.permuted_qk => {
                unpermute_rows(&data, rows, cols, c.num_kv_heads)?
            }
            _ => data,
        };
        Ok(HostTensor { shape, data })
    }

    fn quantized_dtype(&self, id: TensorId) -> Option<kiln_formats::DType> {
        if !self.has(id) {
            return None;
        }
        let info = self.file.tensor_info(&id.gguf_name())?;
        (info.dtype.is_quantized() && info.shape.len() == 2).then_some(info.dtype)
    }

    fn load_quantized(&self, id: TensorId) -> anyhow::Result<Option<QuantTensor>> {
        let path = self.file.path().display();
        if !self.has(id) {
            bail!("{path}: the model has no tensor {id}");
        }
        let view = self.file.tensor(&id.gguf_name())?;
        if !view.dtype.is_quantized() || view.shape.len() != 2 {
            return Ok(None);
        }
        let shape = view.shape.clone();
        let rows = shape[0].max(1);
        let row_bytes = view.data.len() / rows;
        let c = &self.config;
        let data = match id.role {
            Role::Q if self.permuted_qk => unpermute_rows(view.data, rows, row_bytes, c.num_heads)?,
            Role::K if self.permuted_qk => {
                unpermute_rows(view.data, rows, row_bytes, c.num_kv_heads)?
            }
            _ => view.data.to_vec(),
        };
        Ok(Some(QuantTensor {
            shape,
            dtype: view.dtype,
            data,
        }))
    }
}
