//! The bytes of a model file: memory-mapped from disk, or owned (for parsers fed from memory,
//! such as the fuzzer and tests). Readers hand out views borrowed from here, never copies.

use std::path::Path;

use memmap2::Mmap;

use crate::{FormatError, Result};

pub(crate) enum FileBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Maps `path` read-only.
    pub(crate) fn map(path: &Path) -> Result<FileBytes> {
        let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
        // SAFETY: the map is read-only; a file truncated underneath us by another process is the
        // one hazard every mmap-based reader accepts (llama.cpp and safetensors do too).
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))?;
        Ok(FileBytes::Mapped(mmap))
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}
