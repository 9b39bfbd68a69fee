//! Canonical tensor names, and their spelling in each file format.

/// What a tensor does. Per-layer roles carry their layer in [`TensorId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    TokenEmbd,
    OutputNorm,
    /// The LM head; absent when embeddings are tied.
    Output,
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    /// Per-head RMSNorm weights of Q and K (Qwen3).
    QNorm,
    KNorm,
    O,
    FfnNorm,
    Gate,
    Up,
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorId {
    pub layer: Option<usize>,
    pub role: Role,
}
