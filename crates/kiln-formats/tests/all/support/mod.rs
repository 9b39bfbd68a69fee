//! Helpers shared by the integration tests: scratch folders and writers that build small model
//! files byte by byte, so tests can plant exactly the defect they check for.
#![allow(dead_code)] // each test crate uses a different subset

pub mod gguf_writer;

use std::path::{Path, PathBuf};

/// A fresh, empty scratch folder for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("kiln-formats")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch folder");
    dir
}

use crate::test_data;

/// The read-only test material (vocabularies, templates): ../shared next to the repository, or
/// where tests/test_data.rs finds it.
pub fn shared_dir() -> PathBuf {
    test_data::dir()
}

/// A safetensors file from a raw JSON header and data section, padded as the format's writer pads.
pub fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// One tensor for [`safetensors_file`]: name, dtype name, shape, little-endian bytes.
pub struct StTensor<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [usize],
    pub data: Vec<u8>,
}

/// A valid safetensors file holding `tensors` packed in order.
pub fn safetensors_file(tensors: &[StTensor]) -> Vec<u8> {
    let mut entries = Vec::new();
    let mut data = Vec::new();
    for t in tensors {
        let start = data.len();
        data.extend_from_slice(&t.data);
        entries.push(format!(
            "\"{}\":{{\"dtype\":\"{}\",\"shape\":{:?},\"data_offsets\":[{},{}]}}",
            t.name,
            t.dtype,
            t.shape,
            start,
            data.len()
        ));
    }
    safetensors_bytes(&format!("{{{}}}", entries.join(",")), &data)
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The error text of a result that must have failed.
pub fn err_text<T: std::fmt::Debug>(r: Result<T, kiln_formats::FormatError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.to_string(),
    }
}
