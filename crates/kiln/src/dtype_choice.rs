//! `--dtype`: the number format weights and activations are stored in, checked against the
//! backend chosen and, for f16, against the checkpoint.

use std::collections::BTreeMap;

use clap::ValueEnum;

/// The number format weights and activations are computed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// The device's own: bf16 on the GPU, f32 on the CPU.
    Auto,
    /// bfloat16 weights and activations (the GPU's default).
    Bf16,
    /// float16 weights and activations, f32 sums (the GPU, for checkpoints stored in f16).
    F16,
    /// float32 throughout: the CPU's format, and on the GPU an f32 checkpoint computed as the CPU
    /// and transformers compute it (no TF32).
    F32,
}

impl Dtype {
    /// The CUDA backend's storage type for this choice (auto: bf16).
    pub fn cuda_store(self) -> kiln_cuda::StoreType {
        match self {
            Dtype::Auto | Dtype::Bf16 => kiln_cuda::StoreType::Bf16,
            Dtype::F16 => kiln_cuda::StoreType::F16,
            Dtype::F32 => kiln_cuda::StoreType::F32,
        }
    }

    /// Refuses a format the chosen backend does not compute in, and f16 for a checkpoint not
    /// stored in f16 (`tensor_types`: storage type -> tensor count, as `kiln info` lists them).
    pub fn check(self, cuda: bool, tensor_types: &BTreeMap<String, usize>) -> anyhow::Result<()> {
        match (self, cuda) {
            (Dtype::Auto | Dtype::F32, _) | (Dtype::Bf16, true) => Ok(()),
            (Dtype::F16, true) if stored_in_f16(tensor_types) => Ok(()),
            (Dtype::F16, true) => anyhow::bail!(
                "--dtype f16 is for checkpoints stored in f16 (their activations are meant to fit \
                 its range, 65504 at most); this one stores {}: use --dtype bf16 (the default) or \
                 f32",
                kiln_load::tensor_types(tensor_types)
            ),
            (Dtype::Bf16 | Dtype::F16, false) => anyhow::bail!(
                "the CPU backend computes in f32 (it is the exact reference); --dtype bf16 and \
                 f16 are GPU formats: use --device cuda, or --dtype auto"
            ),
        }
    }
}

/// Whether the checkpoint's weights are f16: some tensors in f16 and the rest (norms, biases)
/// in f32, none in bf16 or a block quantisation.
fn stored_in_f16(tensor_types: &BTreeMap<String, usize>) -> bool {
    tensor_types.contains_key("F16") && tensor_types.keys().all(|t| t == "F16" || t == "F32")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(v: &[(&str, usize)]) -> BTreeMap<String, usize> {
        v.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    #[test]
    fn each_backend_takes_its_formats() {
        let f32_file = types(&[("F32", 20)]);
        for cuda in [false, true] {
            Dtype::Auto.check(cuda, &f32_file).unwrap();
            Dtype::F32.check(cuda, &f32_file).unwrap();
        }
        Dtype::Bf16.check(true, &f32_file).unwrap();
        for d in [Dtype::Bf16, Dtype::F16] {
            let err = d.check(false, &f32_file).unwrap_err().to_string();
            assert!(
                err.contains("computes in f32") && err.contains("--device cuda"),
                "{err}"
            );
        }
    }

    #[test]
    fn f16_needs_an_f16_checkpoint() {
        Dtype::F16
            .check(true, &types(&[("F16", 145), ("F32", 65)]))
            .unwrap();
        Dtype::F16.check(true, &types(&[("F16", 3)])).unwrap();
        for file in [
            types(&[("F32", 20)]),
            types(&[("BF16", 20)]),
            types(&[("F16", 10), ("Q8_0", 100)]),
            types(&[]),
        ] {
            let err = Dtype::F16.check(true, &file).unwrap_err().to_string();
            assert!(
                err.contains("stored in f16") && err.contains("--dtype bf16"),
                "{err}"
            );
        }
    }

    #[test]
    fn each_choice_maps_to_a_storage_type() {
        use kiln_cuda::StoreType;
        assert_eq!(Dtype::Auto.cuda_store(), StoreType::Bf16);
        assert_eq!(Dtype::Bf16.cuda_store(), StoreType::Bf16);
        assert_eq!(Dtype::F16.cuda_store(), StoreType::F16);
        assert_eq!(Dtype::F32.cuda_store(), StoreType::F32);
    }
}
