//! A bounds-checked little-endian cursor over a GGUF header.
//!
//! Every length and count read from the file is checked against the bytes that remain before
//! anything is allocated, and the number of values decoded is capped: a u8 array element takes
//! one byte on disk but a whole [`GgufValue`] in memory, so a lying array count over a large
//! file could otherwise ask for tens of gigabytes.

use std::path::Path;

use super::GgufValue;
use crate::{FormatError, Result};

/// Nesting limit for arrays of arrays; real files use one level.
const MAX_ARRAY_DEPTH: usize = 4;
/// Most metadata values (entries plus array elements) a header may hold. Real files hold a
/// few million at most (vocabularies of ~260k tokens, with scores, types and merges).
pub(super) const MAX_METADATA_VALUES: u64 = 1 << 24;
/// Vectors sized from a header count start no larger than this and grow as values are read.
const MAX_PREALLOC: usize = 1 << 12;

pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pub(super) pos: usize,
    path: &'a Path,
    /// Metadata values still allowed (see [`MAX_METADATA_VALUES`]).
    values_left: u64,
}

/// A capacity for a vector of `n` items announced by the file, capped (see [`MAX_PREALLOC`]).
pub(super) fn prealloc(n: u64) -> usize {
    n.min(MAX_PREALLOC as u64) as usize
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], path: &'a Path) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            path,
            values_left: MAX_METADATA_VALUES,
        }
    }

    pub(super) fn path(&self) -> &'a Path {
        self.path
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn invalid(&self, msg: String) -> FormatError {
        FormatError::invalid(self.path, msg)
    }

    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.invalid(format!(
                "file ends while reading {what} at byte {} (needs {n} bytes, {} left): \
                 the file is truncated or corrupt",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Refuses a count that could not fit in the rest of the file at `min_each` bytes apiece.
    pub(super) fn check_count(&self, n: u64, min_each: u64, what: &str) -> Result<()> {
        if n.saturating_mul(min_each) > self.remaining() as u64 {
            return Err(self.invalid(format!(
                "header claims {n} {what}, more than the {} bytes left in the file could hold: \
                 the file is truncated or corrupt",
                self.remaining()
            )));
        }
        Ok(())
    }

    /// Counts `n` values against the header's value budget.
    fn spend_values(&mut self, n: u64, key: &str) -> Result<()> {
        if n > self.values_left {
            return Err(self.invalid(format!(
                "metadata '{key}' brings the header past {MAX_METADATA_VALUES} values, \
                 far more than any model holds: the file is corrupt"
            )));
        }
        self.values_left -= n;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.take(N, what)?;
        Ok(b.try_into().expect("take returns exactly N bytes"))
    }
    pub(super) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(super) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(super) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(super) fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(self.invalid(format!(
                "{what}: string length {len} runs past the end of the file ({} bytes left): \
                 the file is truncated or corrupt",
                self.remaining()
            )));
        }
        let bytes = self.take(len as usize, what)?;
        // Vocabularies hold byte-level pieces that are not always valid UTF-8 (llama.cpp keeps them
        // as raw bytes); replace rather than reject so such a file still loads.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// One metadata entry: key, type id, value.
    pub(super) fn entry(&mut self, i: u64) -> Result<(String, GgufValue)> {
        let key = self.string(&format!("metadata key #{i}"))?;
        let ty = self.u32(&format!("type of metadata '{key}'"))?;
        self.spend_values(1, &key)?;
        let value = self.value(ty, &key, 0)?;
        Ok((key, value))
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
                    return Err(self.invalid(format!(
                        "metadata '{key}': bool byte {b} is neither 0 nor 1"
                    )))
                }
            },
            8 => GgufValue::String(self.string(key)?),
            9 => self.array_value(key, depth)?,
            10 => GgufValue::U64(self.u64(key)?),
            11 => GgufValue::I64(self.u64(key)? as i64),
            12 => GgufValue::F64(f64::from_bits(self.u64(key)?)),
            t => return Err(self.invalid(format!("metadata '{key}' has unknown value type {t}"))),
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<GgufValue> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.invalid(format!(
                "metadata '{key}': arrays nested more than {MAX_ARRAY_DEPTH} deep"
            )));
        }
        let elem_ty = self.u32(key)?;
        let n = self.u64(key)?;
        // The fewest bytes one element of each type can take on disk.
        let min_each = match elem_ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            t => {
                return Err(
                    self.invalid(format!("metadata '{key}': unknown array element type {t}"))
                )
            }
        };
        self.check_count(n, min_each, &format!("elements in metadata array '{key}'"))?;
        self.spend_values(n, key)?;
        let mut items = Vec::with_capacity(prealloc(n));
        for _ in 0..n {
            items.push(self.value(elem_ty, key, depth + 1)?);
        }
        Ok(GgufValue::Array(items))
    }
}
