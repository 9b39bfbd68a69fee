//! GGUF v2/v3 reader: the header and metadata are parsed into owned values, tensor data stays in
//! the memory map and is handed out as zero-copy [`TensorView`]s.
//!
//! Parsing and its bounds checks live in `parse.rs` and `reader.rs`; this file holds the open
//! file and its typed accessors.

mod parse;
mod reader;
mod value;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use value::GgufValue;

use crate::file_bytes::FileBytes;
use crate::{DType, FormatError, Result, TensorView};

/// Where one tensor lives in the file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Row-major, outermost first (GGUF's `ne[]` reversed).
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Absolute byte offset in the file.
    pub offset: usize,
    pub n_bytes: usize,
}

/// An open GGUF file.
pub struct GgufFile {
    path: PathBuf,
    bytes: FileBytes,
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute offset of the tensor data section.
    pub data_offset: usize,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps and parses `path`. The mapping stays alive as long as the returned value.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let bytes = FileBytes::map(&path)?;
        parse::parse(path, bytes)
    }

    /// Parses a GGUF image held in memory; errors name it `<memory>`.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        parse::parse(PathBuf::from("<memory>"), FileBytes::Owned(bytes))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the mapped file in bytes.
    pub fn file_size(&self) -> usize {
        self.bytes.len()
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The architecture name (`general.architecture`), the prefix of most hyper-parameter keys.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")?
            .ok_or_else(|| self.invalid("metadata 'general.architecture' is missing"))
    }

    /// A string value; Ok(None) when absent, an error when present with another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, GgufValue::as_str, "a string")
    }
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, GgufValue::as_u64, "a non-negative integer")
    }
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>> {
        self.typed(key, GgufValue::as_i64, "an integer")
    }
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, GgufValue::as_f64, "a number")
    }
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, GgufValue::as_bool, "a boolean")
    }
    pub fn get_array(&self, key: &str) -> Result<Option<&[GgufValue]>> {
        self.typed(key, GgufValue::as_array, "an array")
    }
    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        self.array_of(key, GgufValue::as_str, "strings")
    }
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.array_of(key, |v| v.as_f64().map(|x| x as f32), "numbers")
    }
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.array_of(key, GgufValue::as_i64, "integers")
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        f: impl Fn(&'a GgufValue) -> Option<T>,
        what: &str,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| {
                self.invalid(format!(
                    "metadata '{key}' should be {what}, found {}",
                    v.type_name()
                ))
            }),
        }
    }

    fn array_of<'a, T>(
        &'a self,
        key: &str,
        f: impl Fn(&'a GgufValue) -> Option<T>,
        what: &str,
    ) -> Result<Option<Vec<T>>> {
        let Some(arr) = self.get_array(key)? else {
            return Ok(None);
        };
        arr.iter()
            .enumerate()
            .map(|(i, v)| {
                f(v).ok_or_else(|| {
                    self.invalid(format!(
                        "metadata '{key}'[{i}] should be one of {what}, found {}",
                        v.type_name()
                    ))
                })
            })
            .collect::<Result<Vec<T>>>()
            .map(Some)
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A zero-copy view of a tensor's bytes.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let t = self
            .tensor_info(name)
            .ok_or_else(|| self.invalid(format!("tensor '{name}' is missing")))?;
        Ok(TensorView {
            name: &t.name,
            dtype: t.dtype,
            shape: t.shape.clone(),
            data: &self.bytes[t.offset..t.offset + t.n_bytes],
        })
    }

    /// An error naming this file.
    pub fn invalid(&self, msg: impl Into<String>) -> FormatError {
        FormatError::invalid(&self.path, msg)
    }
}
