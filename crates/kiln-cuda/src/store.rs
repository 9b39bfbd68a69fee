//! The storage type: the number format of the tensors a backend keeps in its own format
//! (weights, GEMM inputs, Q, the KV cache, attention outputs). The residual stream, GEMM outputs
//! and logits are f32 in every format. Kernels are written once against `store_t`
//! (kernels/common.cuh); kernel_sources.rs builds each typed module for the backend's format.
//! On the host side such tensors live in [`StoreBuf`]s, whose element size is the format's.

use anyhow::{bail, Result};

use crate::device::{DevBuf, Gpu};

/// A backend's storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StoreType {
    /// bfloat16 (the default; the tensor-core kernels are written for it).
    #[default]
    Bf16,
    /// IEEE half precision.
    F16,
    /// float32 throughout, as the CPU reference computes.
    F32,
}

impl StoreType {
    pub const ALL: [StoreType; 3] = [StoreType::Bf16, StoreType::F16, StoreType::F32];

    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            StoreType::Bf16 | StoreType::F16 => 2,
            StoreType::F32 => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StoreType::Bf16 => "bf16",
            StoreType::F16 => "f16",
            StoreType::F32 => "f32",
        }
    }

    /// `x` rounded to this format as the device rounds it (to nearest even), back in f32.
    pub fn round(self, x: f32) -> f32 {
        match self {
            StoreType::Bf16 => half::bf16::from_f32(x).to_f32(),
            StoreType::F16 => half::f16::from_f32(x).to_f32(),
            StoreType::F32 => x,
        }
    }

    /// The format's bytes of `v`, rounded as [`StoreType::round`] does (little-endian).
    pub fn encode(self, v: &[f32]) -> Vec<u8> {
        match self {
            StoreType::Bf16 => v
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect(),
            StoreType::F16 => v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
            StoreType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// The values of the format's bytes `b` (exact).
    pub fn decode(self, b: &[u8]) -> Vec<f32> {
        match self {
            StoreType::Bf16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            StoreType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            StoreType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        }
    }

    /// The NVRTC option that selects this format in common.cuh; bf16 is the default and needs
    /// none, so the bf16 build is the text it always was.
    pub fn nvrtc_define(self) -> Option<&'static str> {
        match self {
            StoreType::Bf16 => None,
            StoreType::F16 => Some("-DKILN_STORE_F16"),
            StoreType::F32 => Some("-DKILN_STORE_F32"),
        }
    }
}

impl std::fmt::Display for StoreType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A device address of elements of a storage type: offsets and row slices are counted in
/// elements, as with [`crate::device::DevPtr`].
#[derive(Debug, Clone, Copy)]
pub struct StorePtr {
    addr: u64,
    store: StoreType,
}

impl StorePtr {
    pub fn new(addr: u64, store: StoreType) -> StorePtr {
        StorePtr { addr, store }
    }

    pub fn addr(self) -> u64 {
        self.addr
    }

    /// `elems` elements further on.
    pub fn offset(self, elems: usize) -> StorePtr {
        StorePtr::new(self.addr + (elems * self.store.bytes()) as u64, self.store)
    }

    /// Row `row` of a row-major matrix `width` elements wide that starts here.
    pub fn row(self, row: usize, width: usize) -> StorePtr {
        self.offset(row * width)
    }
}

/// A device allocation of `len` elements of a storage type at a fixed address, freed on drop.
pub struct StoreBuf {
    raw: DevBuf<u8>,
    len: usize,
    store: StoreType,
}

impl StoreBuf {
    /// A zeroed buffer of `len` elements of `store`.
    pub fn new(gpu: &Gpu, store: StoreType, len: usize) -> Result<StoreBuf> {
        Ok(StoreBuf {
            raw: gpu.alloc(len * store.bytes())?,
            len,
            store,
        })
    }

    pub fn store(&self) -> StoreType {
        self.store
    }

    pub fn ptr(&self) -> u64 {
        self.raw.ptr()
    }

    pub fn dev_ptr(&self) -> StorePtr {
        StorePtr::new(self.raw.ptr(), self.store)
    }

    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.dev_ptr().offset(i).addr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.raw.bytes()
    }

    /// Writes `v`, rounded to the format, to elements `offset..` and waits (load time, tests).
    pub fn upload_f32(&self, offset: usize, v: &[f32]) -> Result<()> {
        if offset + v.len() > self.len {
            bail!(
                "upload of {} elements at {offset} overruns a buffer of {}",
                v.len(),
                self.len
            );
        }
        self.raw
            .upload(offset * self.store.bytes(), &self.store.encode(v))
    }

    /// Reads `len` elements from `offset` as f32, after everything queued before.
    pub fn download_f32(&self, gpu: &Gpu, offset: usize, len: usize) -> Result<Vec<f32>> {
        let b = self.store.bytes();
        Ok(self
            .store
            .decode(&self.raw.download(gpu, offset * b, len * b)?))
    }

    /// Sets every byte to `byte` (0xFF poisons with NaN in every format).
    pub fn fill_bytes(&self, byte: u8) -> Result<()> {
        self.raw.fill_bytes(byte)
    }
}

impl Gpu {
    /// A zeroed buffer of `len` elements of this device's storage type.
    pub fn alloc_store(&self, len: usize) -> Result<StoreBuf> {
        StoreBuf::new(self, self.store, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_rounds_to_nearest_even_and_decode_is_exact() {
        let v = [
            1.0f32,
            -2.5,
            1.0 + 1.0 / 256.0 + 1e-7,
            65520.0,
            1e-8,
            f32::INFINITY,
        ];
        for store in StoreType::ALL {
            let bytes = store.encode(&v);
            assert_eq!(bytes.len(), v.len() * store.bytes(), "{store}");
            let back = store.decode(&bytes);
            for (x, y) in v.iter().zip(&back) {
                assert_eq!(store.round(*x).to_bits(), y.to_bits(), "{store} {x}");
            }
        }
        assert_eq!(StoreType::F32.round(1.0 + 1e-7), 1.0 + 1e-7);
        // bf16 keeps 8 bits of mantissa, f16 11: 1 + 2^-8 (+ a little) rounds up in bf16 only.
        assert_eq!(
            StoreType::Bf16.round(1.0 + 1.0 / 256.0 + 1e-7),
            1.0 + 1.0 / 128.0
        );
        assert_eq!(StoreType::F16.round(1.0 + 1.0 / 256.0), 1.0 + 1.0 / 256.0);
        // f16 overflows past 65504 (65520 rounds up to infinity).
        assert_eq!(StoreType::F16.round(65520.0), f32::INFINITY);
    }

    #[test]
    fn pointers_step_by_the_element_size() {
        for (store, size) in [
            (StoreType::Bf16, 2),
            (StoreType::F16, 2),
            (StoreType::F32, 4),
        ] {
            let p = StorePtr::new(1000, store);
            assert_eq!(p.offset(3).addr(), 1000 + 3 * size);
            assert_eq!(p.row(2, 5).addr(), 1000 + 10 * size);
        }
    }
}
