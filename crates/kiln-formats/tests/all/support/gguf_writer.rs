//! A small GGUF writer for tests. Besides well-formed files it can plant raw, lying fields
//! (counts, lengths, offsets, type ids) so tests can check how the reader rejects them.

use kiln_formats::GgufValue;

pub const GGUF_TYPE_ARRAY: u32 = 9;

/// The GGUF metadata type id of a value.
pub fn type_id(v: &GgufValue) -> u32 {
    match v {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::String(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

pub fn push_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The payload of a value (without its type id).
pub fn encode_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::String(s) => push_str(out, s),
        GgufValue::Array(items) => {
            // An empty array needs some element type; u8 is as good as any.
            let elem = items.first().map_or(0, type_id);
            encode_array(out, elem, items);
        }
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

pub fn encode_array(out: &mut Vec<u8>, elem_type: u32, items: &[GgufValue]) {
    out.extend_from_slice(&elem_type.to_le_bytes());
    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for it in items {
        encode_value(out, it);
    }
}

/// Builds a GGUF file in memory. Counts are computed unless overridden.
pub struct GgufWriter {
    pub version: u32,
    pub alignment: usize,
    kvs: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
    count_override: Option<(u64, u64)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            alignment: 32,
            kvs: Vec::new(),
            n_kv: 0,
            infos: Vec::new(),
            n_tensors: 0,
            data: Vec::new(),
            count_override: None,
        }
    }

    pub fn kv(&mut self, key: &str, v: &GgufValue) -> &mut Self {
        let mut payload = Vec::new();
        encode_value(&mut payload, v);
        self.kv_raw(key, type_id(v), &payload)
    }

    /// An array with an explicit element type (needed to write a typed empty array).
    pub fn kv_array(&mut self, key: &str, elem_type: u32, items: &[GgufValue]) -> &mut Self {
        let mut payload = Vec::new();
        encode_array(&mut payload, elem_type, items);
        self.kv_raw(key, GGUF_TYPE_ARRAY, &payload)
    }

    /// A metadata entry with any type id and payload bytes, however wrong.
    pub fn kv_raw(&mut self, key: &str, type_id: u32, payload: &[u8]) -> &mut Self {
        push_str(&mut self.kvs, key);
        self.kvs.extend_from_slice(&type_id.to_le_bytes());
        self.kvs.extend_from_slice(payload);
        self.n_kv += 1;
        self
    }

    /// Sets `general.alignment` and pads the data section to it.
    pub fn with_alignment(&mut self, a: u32) -> &mut Self {
        self.alignment = a as usize;
        self.kv("general.alignment", &GgufValue::U32(a))
    }

    /// A tensor with its data placed at the next aligned offset. `ne` is GGUF order (innermost first).
    pub fn tensor(&mut self, name: &str, ne: &[u64], ggml_type: u32, data: &[u8]) -> &mut Self {
        while !self.data.len().is_multiple_of(self.alignment) {
            self.data.push(0);
        }
        let offset = self.data.len() as u64;
        self.data.extend_from_slice(data);
        self.tensor_raw(name, ne.len() as u32, ne, ggml_type, offset)
    }

    /// A tensor info with any field values; no data is added.
    pub fn tensor_raw(
        &mut self,
        name: &str,
        n_dims: u32,
        ne: &[u64],
        ggml_type: u32,
        offset: u64,
    ) -> &mut Self {
        push_str(&mut self.infos, name);
        self.infos.extend_from_slice(&n_dims.to_le_bytes());
        for d in ne {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&ggml_type.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    /// Bytes appended to the data section as they are.
    pub fn data_raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.data.extend_from_slice(bytes);
        self
    }

    /// Header counts that differ from what was written.
    pub fn counts(&mut self, n_tensors: u64, n_kv: u64) -> &mut Self {
        self.count_override = Some((n_tensors, n_kv));
        self
    }

    pub fn build(&self) -> Vec<u8> {
        let (n_tensors, n_kv) = self.count_override.unwrap_or((self.n_tensors, self.n_kv));
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&n_tensors.to_le_bytes());
        out.extend_from_slice(&n_kv.to_le_bytes());
        out.extend_from_slice(&self.kvs);
        out.extend_from_slice(&self.infos);
        if !self.data.is_empty() {
            while !out.len().is_multiple_of(self.alignment) {
                out.push(0);
            }
            out.extend_from_slice(&self.data);
        }
        out
    }
}
