//! GGUF v2/v3 reader: the header and metadata are parsed into owned values, tensor data stays in
//! the memory map and is handed out as zero-copy [`TensorView`]s.
//!
//! Every length read from the file is checked against the bytes that remain before anything is
//! allocated, so a lying header cannot make us allocate gigabytes or read out of bounds.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::file_bytes::FileBytes;
use crate::{DType, FormatError, Result, TensorView};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Nesting limit for arrays of arrays; real files use one level.
const MAX_ARRAY_DEPTH: usize = 4;

/// One metadata value. Arrays keep their element type so that an empty array is still typed.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// Any integer type, as u64 (negative values give None).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    /// Any integer type, as i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::U64(v) => i64::try_from(v).ok(),
            GgufValue::I8(v) => Some(v as i64),
            GgufValue::I16(v) => Some(v as i64),
            GgufValue::I32(v) => Some(v as i64),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().map(|v| v as i64),
        }
    }
    /// Any numeric type, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
    fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "u8",
            GgufValue::I8(_) => "i8",
            GgufValue::U16(_) => "u16",
            GgufValue::I16(_) => "i16",
            GgufValue::U32(_) => "u32",
            GgufValue::I32(_) => "i32",
            GgufValue::F32(_) => "f32",
            GgufValue::Bool(_) => "bool",
            GgufValue::String(_) => "string",
            GgufValue::Array(_) => "array",
            GgufValue::U64(_) => "u64",
            GgufValue::I64(_) => "i64",
            GgufValue::F64(_) => "f64",
        }
    }
}

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
    mmap: FileBytes,
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
        Self::parse(path, bytes)
    }

    /// Parses a GGUF image held in memory; errors name it `<memory>`.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(PathBuf::from("<memory>"), FileBytes::Owned(bytes))
    }

    fn parse(path: PathBuf, mmap: FileBytes) -> Result<GgufFile> {
        let bytes: &[u8] = &mmap;
        let mut r = Reader {
            buf: bytes,
            pos: 0,
            path: &path,
        };
        let magic = r.take(4, "magic")?;
        if magic != MAGIC {
            return Err(FormatError::invalid(
                &path,
                format!("not a GGUF file (magic bytes {magic:02x?}, expected \"GGUF\")"),
            ));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(FormatError::invalid(
                &path,
                format!("GGUF version {version} is not supported (kiln reads versions 2 and 3)"),
            ));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        // Each metadata entry takes at least 12 bytes, each tensor info at least 24.
        r.check_count(n_kv, 12, "metadata entries")?;
        r.check_count(n_tensors, 24, "tensor infos")?;

        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = r.string(&format!("metadata key #{i}"))?;
            let ty = r.u32(&format!("type of metadata '{key}'"))?;
            let value = r.value(ty, &key, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(FormatError::invalid(
                    &path,
                    format!("metadata key '{key}' appears twice"),
                ));
            }
            metadata.push((key, value));
        }

        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a,
                _ => {
                    return Err(FormatError::invalid(
                        &path,
                        format!("general.alignment {v:?} is not a power of two"),
                    ))
                }
            },
        };

        struct RawInfo {
            name: String,
            shape: Vec<usize>,
            dtype: DType,
            rel_offset: u64,
            n_bytes: usize,
        }
        let mut raw = Vec::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(&format!("tensor name #{i}"))?;
            let n_dims = r.u32(&format!("dimension count of tensor '{name}'"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(FormatError::invalid(
                    &path,
                    format!("tensor '{name}' has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
                ));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                ne.push(r.u64(&format!("dimensions of tensor '{name}'"))?);
            }
            let ty = r.u32(&format!("type of tensor '{name}'"))?;
            let rel_offset = r.u64(&format!("offset of tensor '{name}'"))?;
            let dtype = DType::from_ggml(ty).ok_or_else(|| {
                FormatError::invalid(
                    &path,
                    format!(
                        "tensor '{name}' has type {} (id {ty}), which kiln cannot read \
                         (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)",
                        DType::ggml_name(ty)
                    ),
                )
            })?;
            let mut n: usize = 1;
            for &d in &ne {
                n = usize::try_from(d)
                    .ok()
                    .and_then(|d| n.checked_mul(d))
                    .ok_or_else(|| {
                        FormatError::invalid(
                            &path,
                            format!("tensor '{name}' dimensions {ne:?} overflow"),
                        )
                    })?;
            }
            let n_bytes = dtype.bytes_for(n).ok_or_else(|| {
                FormatError::invalid(
                    &path,
                    format!("tensor '{name}' of type {dtype} has {n} elements, not a whole number of blocks of {}", dtype.block_elems()),
                )
            })?;
            if dtype.is_quantized() && !(ne[0] as usize).is_multiple_of(dtype.block_elems()) {
                return Err(FormatError::invalid(
                    &path,
                    format!(
                        "tensor '{name}' row length {} is not a multiple of the {dtype} block",
                        ne[0]
                    ),
                ));
            }
            if rel_offset % alignment != 0 {
                return Err(FormatError::invalid(
                    &path,
                    format!("tensor '{name}' offset {rel_offset} is not aligned to {alignment}"),
                ));
            }
            let shape = ne.iter().rev().map(|&d| d as usize).collect();
            raw.push(RawInfo {
                name,
                shape,
                dtype,
                rel_offset,
                n_bytes,
            });
        }

        let data_offset = align_up(r.pos as u64, alignment)
            .ok_or_else(|| FormatError::invalid(&path, "data offset overflows"))?
            as usize;
        let mut tensors = Vec::with_capacity(raw.len());
        let mut tensor_index = HashMap::with_capacity(raw.len());
        for t in raw {
            let start = (data_offset as u64).checked_add(t.rel_offset);
            let end = start.and_then(|s| s.checked_add(t.n_bytes as u64));
            match end {
                Some(end) if end <= bytes.len() as u64 => {}
                _ => {
                    return Err(FormatError::invalid(
                        &path,
                        format!(
                            "tensor '{}' ({} bytes at offset {}) runs past the end of the file ({} bytes): the file is truncated or corrupt",
                            t.name,
                            t.n_bytes,
                            data_offset as u64 + t.rel_offset.min(u64::MAX - data_offset as u64),
                            bytes.len()
                        ),
                    ))
                }
            }
            if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
                return Err(FormatError::invalid(
                    &path,
                    format!("tensor '{}' appears twice", t.name),
                ));
            }
            tensors.push(TensorInfo {
                name: t.name,
                shape: t.shape,
                dtype: t.dtype,
                offset: data_offset + t.rel_offset as usize,
                n_bytes: t.n_bytes,
            });
        }

        Ok(GgufFile {
            path,
            mmap,
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the mapped file in bytes.
    pub fn file_size(&self) -> usize {
        self.mmap.len()
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
            data: &self.mmap[t.offset..t.offset + t.n_bytes],
        })
    }

    /// An error naming this file.
    pub fn invalid(&self, msg: impl Into<String>) -> FormatError {
        FormatError::invalid(&self.path, msg)
    }
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? / a * a)
}

/// A bounds-checked little-endian cursor over the header.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(FormatError::invalid(
                self.path,
                format!(
                    "file ends while reading {what} at byte {} (needs {n} bytes, {} left): the file is truncated or corrupt",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Refuses a count that could not fit in the rest of the file at `min_each` bytes apiece.
    fn check_count(&self, n: u64, min_each: u64, what: &str) -> Result<()> {
        if n.saturating_mul(min_each) > self.remaining() as u64 {
            return Err(FormatError::invalid(
                self.path,
                format!(
                    "header claims {n} {what}, more than the {} bytes left in the file could hold",
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(FormatError::invalid(
                self.path,
                format!("{what}: string length {len} runs past the end of the file: the file is truncated or corrupt"),
            ));
        }
        let bytes = self.take(len as usize, what)?;
        // Vocabularies hold byte-level pieces that are not always valid UTF-8 (llama.cpp keeps them
        // as raw bytes); replace rather than reject so such a file still loads.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<GgufValue> {
        Ok(match ty {
            0 => GgufValue::U8(self.u8(key)?),
            1 => GgufValue::I8(self.u8(key)? as i8),
            2 => GgufValue::U16(self.u16(key)?),
            3 => GgufValue::I16(self.u16(key)? as i16),
            4 => GgufValue::U32(self.u32(key)?),
            5 => GgufValue::I32(self.u32(key)? as i32),
            6 => GgufValue::F32(f32::from_bits(self.u32(key)?)),
            7 => match self.u8(key)? {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => {
                    return Err(FormatError::invalid(
                        self.path,
                        format!("metadata '{key}': bool byte {b} is neither 0 nor 1"),
                    ))
                }
            },
            8 => GgufValue::String(self.string(key)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(FormatError::invalid(
                        self.path,
                        format!("metadata '{key}': arrays nested too deeply"),
                    ));
                }
                let elem_ty = self.u32(key)?;
                let n = self.u64(key)?;
                let min_each = match elem_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10 | 11 | 12 => 8,
                    9 => 12,
                    t => {
                        return Err(FormatError::invalid(
                            self.path,
                            format!("metadata '{key}': unknown array element type {t}"),
                        ))
                    }
                };
                self.check_count(n, min_each, &format!("elements in metadata array '{key}'"))?;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(elem_ty, key, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(self.u64(key)?),
            11 => GgufValue::I64(self.u64(key)? as i64),
            12 => GgufValue::F64(f64::from_bits(self.u64(key)?)),
            t => {
                return Err(FormatError::invalid(
                    self.path,
                    format!("metadata '{key}' has unknown value type {t}"),
                ))
            }
        })
    }
}
