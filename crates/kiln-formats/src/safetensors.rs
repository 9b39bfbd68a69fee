//! Hugging Face safetensors weights: one `model.safetensors`, the shards listed in
//! `model.safetensors.index.json`, or a single `.safetensors` file. Files are memory-mapped and
//! tensors are handed out as zero-copy [`TensorView`]s.
//!
//! Header parsing and validation are the `safetensors` crate's; this module maps its terse errors
//! to messages that name the file and the tensor at fault.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use ::safetensors::tensor::{Metadata, TensorInfo as StInfo};
use ::safetensors::{Dtype as StDtype, SafeTensorError, SafeTensors};

use crate::file_bytes::FileBytes;
use crate::{DType, FormatError, Result, TensorView};

/// File names Hugging Face uses in a model folder.
pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// An index file larger than this is not an index (real ones are well under 1 MB).
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// Safetensors weights from one file or a sharded folder.
pub struct SafetensorsModel {
    root: PathBuf,
    shards: Vec<Shard>,
    tensors: HashMap<String, Entry>,
}

struct Shard {
    path: PathBuf,
    bytes: FileBytes,
}

/// Where one tensor's bytes lie: absolute byte range inside its shard.
struct Entry {
    shard: usize,
    dtype: StDtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

#[derive(serde::Deserialize)]
struct IndexJson {
    weight_map: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsModel")
            .field("root", &self.root)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl SafetensorsModel {
    /// Opens a Hugging Face folder (its `model.safetensors`, else the shards its
    /// `model.safetensors.index.json` lists) or a single `.safetensors` file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsModel> {
        let root = path.as_ref().to_path_buf();
        let meta = std::fs::metadata(&root).map_err(|e| FormatError::io(&root, e))?;
        if !meta.is_dir() {
            return Self::open_single(root.clone(), root);
        }
        let single = root.join(SINGLE_FILE);
        if single.is_file() {
            return Self::open_single(root, single);
        }
        let index = root.join(INDEX_FILE);
        if index.is_file() {
            return Self::open_index(root, &index);
        }
        Err(FormatError::invalid(
            &root,
            format!("folder holds neither {SINGLE_FILE} nor {INDEX_FILE}"),
        ))
    }

    fn open_single(root: PathBuf, file: PathBuf) -> Result<SafetensorsModel> {
        let (shard, metadata) = Shard::open(file)?;
        let mut tensors = HashMap::new();
        for (name, info) in metadata.tensors() {
            tensors.insert(name, Entry::new(0, info, &shard, &metadata));
        }
        Ok(SafetensorsModel {
            root,
            shards: vec![shard],
            tensors,
        })
    }

    fn open_index(root: PathBuf, index_path: &Path) -> Result<SafetensorsModel> {
        let weight_map = read_index(index_path)?;
        let folder = index_path.parent().unwrap_or(Path::new("."));
        let shard_names: BTreeSet<&str> = weight_map.values().map(String::as_str).collect();

        let mut shards = Vec::with_capacity(shard_names.len());
        let mut tensors = HashMap::with_capacity(weight_map.len());
        for shard_name in shard_names {
            let shard_path = folder.join(shard_name);
            if !shard_path.is_file() {
                let example = weight_map
                    .iter()
                    .find(|(_, s)| *s == shard_name)
                    .map(|(t, _)| t);
                return Err(FormatError::invalid(
                    index_path,
                    format!(
                        "shard '{shard_name}' (holding tensor '{}' among others) is missing: \
                         expected it at {}",
                        example.map_or("?", |t| t.as_str()),
                        shard_path.display()
                    ),
                ));
            }
            let (shard, metadata) = Shard::open(shard_path)?;
            let shard_idx = shards.len();
            for (name, _) in weight_map.iter().filter(|(_, s)| *s == shard_name) {
                let info = metadata.info(name).ok_or_else(|| {
                    FormatError::invalid(
                        &shard.path,
                        format!(
                            "tensor '{name}' is listed in {INDEX_FILE} but absent from this shard"
                        ),
                    )
                })?;
                tensors.insert(name.clone(), Entry::new(shard_idx, info, &shard, &metadata));
            }
            shards.push(shard);
        }
        Ok(SafetensorsModel {
            root,
            shards,
            tensors,
        })
    }

    /// The folder or file this model was opened from.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The safetensors files behind this model, in the order they were opened.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// A zero-copy view of a tensor's bytes (little-endian, row-major).
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let (name, e) = self.tensors.get_key_value(name).ok_or_else(|| {
            FormatError::invalid(&self.root, format!("tensor '{name}' is missing"))
        })?;
        let shard = &self.shards[e.shard];
        let dtype = DType::from_safetensors(e.dtype).ok_or_else(|| {
            FormatError::invalid(
                &shard.path,
                format!(
                    "tensor '{name}' has dtype {}, which kiln cannot read \
                     (supported: F32, F16, BF16, F64, I8, I16, I32, I64)",
                    e.dtype
                ),
            )
        })?;
        Ok(TensorView {
            name,
            dtype,
            shape: e.shape.clone(),
            data: &shard.bytes[e.start..e.end],
        })
    }
}

impl Entry {
    fn new(shard: usize, info: &StInfo, file: &Shard, metadata: &Metadata) -> Entry {
        // The crate validated that offsets tile the data section exactly, which ends at the
        // end of the file, so these absolute offsets are in bounds.
        let data_start = file.bytes.len() - metadata.data_len();
        Entry {
            shard,
            dtype: info.dtype,
            shape: info.shape.clone(),
            start: data_start + info.data_offsets.0,
            end: data_start + info.data_offsets.1,
        }
    }
}

impl Shard {
    fn open(path: PathBuf) -> Result<(Shard, Metadata)> {
        let bytes = FileBytes::map(&path)?;
        match SafeTensors::read_metadata(&bytes) {
            Ok((_, metadata)) => Ok((Shard { path, bytes }, metadata)),
            Err(e) => {
                let msg = describe_error(&e, &bytes);
                Err(FormatError::invalid(path, msg))
            }
        }
    }
}

fn read_index(path: &Path) -> Result<BTreeMap<String, String>> {
    let len = std::fs::metadata(path)
        .map_err(|e| FormatError::io(path, e))?
        .len();
    if len > MAX_INDEX_BYTES {
        return Err(FormatError::invalid(
            path,
            format!("index file is {len} bytes, too large to be a shard index"),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| FormatError::io(path, e))?;
    let index: IndexJson = serde_json::from_str(&text).map_err(|e| {
        FormatError::invalid(
            path,
            format!("not a valid shard index ({e}); expected {{\"weight_map\": {{tensor: file}}}}"),
        )
    })?;
    if index.weight_map.is_empty() {
        return Err(FormatError::invalid(path, "weight_map lists no tensors"));
    }
    for (tensor, shard) in &index.weight_map {
        // Shards live inside the folder: refuse paths that would reach outside it.
        let inside = Path::new(shard)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if shard.is_empty() || !inside {
            return Err(FormatError::invalid(
                path,
                format!("tensor '{tensor}' maps to '{shard}', which is not a file name inside the model folder"),
            ));
        }
    }
    Ok(index.weight_map)
}

/// Turns the crate's error into a sentence naming the problem, and the tensor where one is at fault.
fn describe_error(e: &SafeTensorError, bytes: &[u8]) -> String {
    let header_len = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    match e {
        SafeTensorError::HeaderTooSmall => format!(
            "file is {} bytes, too short for the 8-byte safetensors header length: the file is truncated or not safetensors",
            bytes.len()
        ),
        SafeTensorError::HeaderTooLarge => format!(
            "header length {} is larger than safetensors allows (100 MB): the file is corrupt or not safetensors",
            header_len.unwrap_or(0)
        ),
        SafeTensorError::InvalidHeaderLength => format!(
            "header length {} runs past the end of the file ({} bytes): the file is truncated or corrupt",
            header_len.unwrap_or(0),
            bytes.len()
        ),
        SafeTensorError::InvalidHeader(u) => format!("header is not valid UTF-8 ({u})"),
        SafeTensorError::InvalidHeaderDeserialization(j) | SafeTensorError::JsonError(j) => {
            format!("header is not valid safetensors JSON: {j}")
        }
        other => {
            let header = header_len
                .and_then(|n| bytes.get(8..8usize.checked_add(usize::try_from(n).ok()?)?))
                .and_then(|h| std::str::from_utf8(h).ok());
            let data_len = bytes.len().saturating_sub(8 + header.map_or(0, str::len));
            header
                .and_then(|h| find_bad_tensor(h, data_len))
                .unwrap_or_else(|| format!("invalid header: {other}"))
        }
    }
}

/// Walks the header's tensors in data order and names the first one whose byte range is wrong,
/// or reports that the data section does not match the file size.
fn find_bad_tensor(header: &str, data_len: usize) -> Option<String> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(header).ok()?;
    let mut infos: Vec<(String, StInfo)> = map
        .into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .filter_map(|(k, v)| serde_json::from_value(v).ok().map(|i| (k, i)))
        .collect();
    infos.sort_by_key(|(_, i)| i.data_offsets);
    let mut expected = 0usize;
    for (name, info) in &infos {
        let (s, e) = info.data_offsets;
        if s != expected || e < s {
            return Some(format!(
                "tensor '{name}' has data offsets [{s}, {e}], expected to start at {expected}: \
                 tensors overlap or leave gaps"
            ));
        }
        let bits = info
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(info.dtype.bitsize()));
        let Some(bits) = bits else {
            return Some(format!("tensor '{name}' shape {:?} overflows", info.shape));
        };
        if bits % 8 != 0 || e - s != bits / 8 {
            return Some(format!(
                "tensor '{name}' of dtype {} and shape {:?} needs {} bits but its data offsets [{s}, {e}] hold {} bytes",
                info.dtype,
                info.shape,
                bits,
                e - s
            ));
        }
        expected = e;
    }
    if expected > data_len {
        return Some(format!(
            "tensor data needs {expected} bytes after the header but only {data_len} remain: the file is truncated"
        ));
    }
    if expected < data_len {
        return Some(format!(
            "tensor data needs {expected} bytes after the header but {data_len} follow it: the file has trailing bytes or is corrupt"
        ));
    }
    None
}
