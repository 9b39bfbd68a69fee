//! The storage type: the number format of the tensors a backend keeps in its own format
//! (weights, GEMM inputs, Q, the KV cache, attention outputs). The residual stream, GEMM outputs
//! and logits are f32 in every format. Kernels are written once against `store_t`
//! (kernels/common.cuh); kernel_sources.rs builds each typed module for the backend's format.

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
