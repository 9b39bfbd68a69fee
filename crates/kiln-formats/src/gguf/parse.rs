//! Parsing a GGUF image: header, metadata, tensor infos, then placing each tensor's bytes in the
//! data section. Each step checks what it reads, so a bad file stops at the first wrong field
//! with an error naming it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::reader::{prealloc, Reader};
use super::{GgufFile, GgufValue, TensorInfo};
use crate::file_bytes::FileBytes;
use crate::{DType, FormatError, Result};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// The fewest bytes a metadata entry (empty key, type, 1-byte value) and a tensor info (empty
/// name, one dimension, type, offset) take on disk.
const MIN_ENTRY_BYTES: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// A tensor info as read, before its offset is placed in the data section.
struct RawInfo {
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    rel_offset: u64,
    n_bytes: usize,
}

pub(super) fn parse(path: PathBuf, bytes: FileBytes) -> Result<GgufFile> {
    let buf: &[u8] = &bytes;
    let invalid = |msg: String| FormatError::invalid(&path, msg);
    let mut r = Reader::new(buf, &path);

    let magic = r.take(4, "magic")?;
    if magic != MAGIC {
        return Err(invalid(format!(
            "not a GGUF file (magic bytes {magic:02x?}, expected \"GGUF\")"
        )));
    }
    let version = r.u32("version")?;
    if !(2..=3).contains(&version) {
        let hint = if (2..=3).contains(&version.swap_bytes()) {
            " (this is a big-endian GGUF, which kiln does not read)"
        } else {
            " (kiln reads versions 2 and 3)"
        };
        return Err(invalid(format!(
            "GGUF version {version} is not supported{hint}"
        )));
    }
    let n_tensors = r.u64("tensor count")?;
    let n_kv = r.u64("metadata count")?;
    r.check_count(n_kv, MIN_ENTRY_BYTES, "metadata entries")?;

    let mut metadata = Vec::with_capacity(prealloc(n_kv));
    let mut index = HashMap::with_capacity(prealloc(n_kv));
    for i in 0..n_kv {
        let (key, value) = r.entry(i)?;
        if index.insert(key.clone(), metadata.len()).is_some() {
            return Err(invalid(format!("metadata key '{key}' appears twice")));
        }
        metadata.push((key, value));
    }
    let alignment = alignment(&metadata).map_err(invalid)?;

    r.check_count(n_tensors, MIN_TENSOR_INFO_BYTES, "tensor infos")?;
    let mut raw = Vec::with_capacity(prealloc(n_tensors));
    for i in 0..n_tensors {
        raw.push(tensor_info(&mut r, i, alignment)?);
    }

    let data_offset = r
        .pos
        .checked_next_multiple_of(alignment as usize)
        .ok_or_else(|| invalid("data offset overflows".into()))?;
    let (tensors, tensor_index) = place(&path, raw, data_offset, buf.len())?;

    Ok(GgufFile {
        path,
        bytes,
        version,
        metadata,
        index,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

/// `general.alignment`, or GGUF's default of 32.
fn alignment(metadata: &[(String, GgufValue)]) -> Result<u64, String> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, v)) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 20 => Ok(a),
            _ => Err(format!(
                "metadata 'general.alignment' must be a power of two up to 1 MiB, found {} {v:?}",
                v.type_name()
            )),
        },
    }
}

fn tensor_info(r: &mut Reader, i: u64, alignment: u64) -> Result<RawInfo> {
    let name = r.string(&format!("tensor name #{i}"))?;
    let path = r.path();
    let invalid = |msg: String| FormatError::invalid(path, msg);
    let n_dims = r.u32(&format!("dimension count of tensor '{name}'"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(invalid(format!(
            "tensor '{name}' has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"
        )));
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        ne.push(r.u64(&format!("dimensions of tensor '{name}'"))?);
    }
    let ty = r.u32(&format!("type of tensor '{name}'"))?;
    let rel_offset = r.u64(&format!("offset of tensor '{name}'"))?;

    let dtype = DType::from_ggml(ty).ok_or_else(|| {
        invalid(format!(
            "tensor '{name}' has type {} (id {ty}), which kiln cannot read \
             (supported: F32, F16, BF16, F64, Q8_0, Q4_0, Q4_K, Q6_K, I8-I64)",
            DType::ggml_name(ty)
        ))
    })?;
    let n = element_count(&ne).ok_or_else(|| {
        invalid(format!(
            "tensor '{name}' dimensions {ne:?} overflow (more elements than fit in memory)"
        ))
    })?;
    if !(ne[0] as usize).is_multiple_of(dtype.block_elems()) {
        return Err(invalid(format!(
            "tensor '{name}' row length {} is not a multiple of the {dtype} block of {}",
            ne[0],
            dtype.block_elems()
        )));
    }
    let n_bytes = dtype.bytes_for(n).ok_or_else(|| {
        invalid(format!(
            "tensor '{name}' of type {dtype} with {n} elements overflows"
        ))
    })?;
    if !rel_offset.is_multiple_of(alignment) {
        return Err(invalid(format!(
            "tensor '{name}' offset {rel_offset} is not aligned to {alignment} bytes"
        )));
    }
    let shape = ne.iter().rev().map(|&d| d as usize).collect();
    Ok(RawInfo {
        name,
        shape,
        dtype,
        rel_offset,
        n_bytes,
    })
}

/// The number of elements, or None when a dimension or the product (ignoring zero dimensions,
/// which would hide an overflow) exceeds what ggml's signed 64-bit sizes and memory allow.
fn element_count(ne: &[u64]) -> Option<usize> {
    let mut nonzero: usize = 1;
    for &d in ne {
        if d > i64::MAX as u64 {
            return None;
        }
        nonzero = nonzero.checked_mul(usize::try_from(d.max(1)).ok()?)?;
    }
    i64::try_from(nonzero).ok()?;
    Some(if ne.contains(&0) { 0 } else { nonzero })
}

type Placed = (Vec<TensorInfo>, HashMap<String, usize>);

/// Turns data-relative offsets into absolute ones, checking each tensor lies inside the file,
/// names are unique, and no two tensors share bytes.
fn place(path: &Path, raw: Vec<RawInfo>, data_offset: usize, file_len: usize) -> Result<Placed> {
    let invalid = |msg: String| FormatError::invalid(path, msg);
    let mut tensors = Vec::with_capacity(raw.len());
    let mut tensor_index = HashMap::with_capacity(raw.len());
    for t in raw {
        let start = (data_offset as u64).checked_add(t.rel_offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes as u64));
        if !matches!(end, Some(end) if end <= file_len as u64) {
            return Err(invalid(format!(
                "tensor '{}' ({} bytes at data offset {}) runs past the end of the file \
                 ({file_len} bytes, data section from byte {data_offset}): the file is truncated or corrupt",
                t.name, t.n_bytes, t.rel_offset
            )));
        }
        if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
            return Err(invalid(format!("tensor '{}' appears twice", t.name)));
        }
        tensors.push(TensorInfo {
            name: t.name,
            shape: t.shape,
            dtype: t.dtype,
            offset: data_offset + t.rel_offset as usize,
            n_bytes: t.n_bytes,
        });
    }

    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.offset < a.offset + a.n_bytes {
            return Err(invalid(format!(
                "tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap: the file is corrupt",
                a.name,
                a.offset,
                a.offset + a.n_bytes,
                b.name,
                b.offset,
                b.offset + b.n_bytes
            )));
        }
    }
    Ok((tensors, tensor_index))
}
