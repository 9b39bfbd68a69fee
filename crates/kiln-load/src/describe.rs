//! What `kiln info` shows about where a model came from, and counts in the units people read.

use std::collections::BTreeMap;

/// What `kiln info` shows about where a model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDescription {
    /// "GGUF v3", "safetensors (2 files)", "dummy (generated weights)".
    pub format: String,
    /// Tensor storage types and how many tensors use each ("F32" -> 12, "Q4_K" -> 190).
    pub tensor_types: BTreeMap<String, usize>,
    pub tokenizer_kind: String,
    pub has_chat_template: bool,
    pub param_count: u64,
    /// Bytes of the weights as stored (generated f32 for dummy models).
    pub weight_bytes: u64,
}

impl std::fmt::Display for ModelDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "format:        {}", self.format)?;
        writeln!(f, "parameters:    {}", human_count(self.param_count))?;
        writeln!(f, "tensor types:  {}", tensor_types(&self.tensor_types))?;
        writeln!(f, "tokenizer:     {}", self.tokenizer_kind)?;
        write!(
            f,
            "chat template: {}",
            if self.has_chat_template { "yes" } else { "no" }
        )
    }
}

/// "F16 x 200, F32 x 41", or "none" for a file without tensors.
pub fn tensor_types(types: &BTreeMap<String, usize>) -> String {
    if types.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = types.iter().map(|(t, n)| format!("{t} x{n}")).collect();
    parts.join(", ")
}

/// A count in the units model cards use: 4.00M, 8.03B, 950K, 12 (three significant digits
/// from a thousand on).
pub fn human_count(n: u64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")];
    let x = n as f64;
    for (scale, unit) in UNITS {
        if x >= scale {
            let v = x / scale;
            let digits = if v >= 100.0 {
                0
            } else if v >= 10.0 {
                1
            } else {
                2
            };
            return format!("{v:.digits$}{unit}");
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_in_model_card_units() {
        assert_eq!(human_count(0), "0");
        assert_eq!(human_count(999), "999");
        assert_eq!(human_count(4_000_512), "4.00M");
        assert_eq!(human_count(421_376), "421K");
        assert_eq!(human_count(8_030_261_248), "8.03B");
        assert_eq!(human_count(70_553_706_496), "70.6B");
        assert_eq!(human_count(1_500), "1.50K");
        assert_eq!(human_count(1_200_000_000_000), "1.20T");
    }

    #[test]
    fn the_description_prints_parameters_in_units() {
        let d = ModelDescription {
            format: "GGUF v3".into(),
            tensor_types: [("F16".to_string(), 3), ("F32".to_string(), 2)].into(),
            tokenizer_kind: "byte-level BPE".into(),
            has_chat_template: true,
            param_count: 4_000_512,
            weight_bytes: 8_001_024,
        };
        let text = d.to_string();
        assert!(text.contains("parameters:    4.00M\n"), "{text}");
        assert!(text.contains("F16 x3, F32 x2"), "{text}");
        assert_eq!(tensor_types(&BTreeMap::new()), "none");
    }
}
