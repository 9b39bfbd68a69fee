/// Tensor element types kiln reads. Block-quantised types store `block_elems` values in
/// `block_bytes` bytes; plain types have a block of one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl DType {
    /// The GGML type id used in GGUF tensor infos, or None for ids kiln cannot read.
    pub fn from_ggml(id: u32) -> Option<DType> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            3 => DType::Q4_1,
            6 => DType::Q5_0,
            7 => DType::Q5_1,
            8 => DType::Q8_0,
            12 => DType::Q4K,
            13 => DType::Q5K,
            14 => DType::Q6K,
            24 => DType::I8,
            25 => DType::I16,
            26 => DType::I32,
            27 => DType::I64,
            28 => DType::F64,
            30 => DType::BF16,
            _ => return None,
        })
    }

    /// Human name of a GGML type id, also for the ones kiln cannot read (for error messages).
    pub fn ggml_name(id: u32) -> &'static str {
        const NAMES: [&str; 40] = [
            "F32",
            "F16",
            "Q4_0",
            "Q4_1",
            "Q4_2",
            "Q4_3",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "Q8_1",
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ3_XXS",
            "IQ1_S",
            "IQ4_NL",
            "IQ3_S",
            "IQ2_S",
            "IQ4_XS",
            "I8",
            "I16",
            "I32",
            "I64",
            "F64",
            "IQ1_M",
            "BF16",
            "Q4_0_4_4",
            "Q4_0_4_8",
            "Q4_0_8_8",
            "TQ1_0",
            "TQ2_0",
            "IQ4_NL_4_4",
            "IQ4_NL_4_8",
            "IQ4_NL_8_8",
            "MXFP4",
        ];
        NAMES.get(id as usize).copied().unwrap_or("unknown")
    }

    /// The safetensors dtype name, for the types safetensors can hold.
    pub fn from_safetensors(d: safetensors::Dtype) -> Option<DType> {
        use safetensors::Dtype as S;
        Some(match d {
            S::F32 => DType::F32,
            S::F16 => DType::F16,
            S::BF16 => DType::BF16,
            S::F64 => DType::F64,
            S::I8 => DType::I8,
            S::I16 => DType::I16,
            S::I32 => DType::I32,
            S::I64 => DType::I64,
            _ => return None,
        })
    }

    pub fn block_elems(self) -> usize {
        match self {
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 => 32,
            DType::Q4K | DType::Q5K | DType::Q6K => 256,
            _ => 1,
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F64 | DType::I64 => 8,
            DType::I8 => 1,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
        }
    }

    /// Bytes needed for `n` elements, or None if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_elems()) {
            return None;
        }
        (n / self.block_elems()).checked_mul(self.block_bytes())
    }

    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F64 => "F64",
            DType::I8 => "I8",
            DType::I16 => "I16",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q4K => "Q4_K",
            DType::Q5K => "Q5_K",
            DType::Q6K => "Q6_K",
        };
        f.write_str(s)
    }
}
