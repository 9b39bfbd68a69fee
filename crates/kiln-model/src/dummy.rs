//! Deterministic generated weights (`dummy:PRESET`), for benchmarks and demos without files.
//!
//! Every value is a pure function of the tensor's seed and the element's index, so any backend
//! can generate the same weights where they live (a CUDA kernel evaluates [`dummy_value`] on the
//! device) instead of copying them from the host:
//!
//! ```text
//! seed(tensor)  = splitmix64(((layer + 1 or 0 for globals) << 8) | role discriminant)
//! bits          = splitmix64(seed + (index + 1) * 0x9E3779B97F4A7C15)      (wrapping u64)
//! u             = (bits >> 40) * 2^-24                                      in [0, 1), exact in f32
//! value         = (2u - 1) * 0.034641016f                                   f32, one rounding
//! ```
//!
//! That is a uniform distribution with standard deviation 0.02 (half-range 0.02 * sqrt 3), as
//! transformers initialises linear layers. Norm weights are exactly 1.0.
//!
//! `dummy:PRESET:FORMAT` (e.g. `dummy:llama3-8b:q4_k_m`) gives the projections, the embedding
//! and the LM head as random GGML blocks instead (dummy_quant.rs), offered by `load_quantized`.

use anyhow::{anyhow, ensure};
use rayon::prelude::*;

use kiln_formats::DType;

use crate::dummy_quant::{random_blocks, DummyQuant};
use crate::presets::{preset, PRESETS};
use crate::{DummyFill, HostTensor, ModelConfig, QuantTensor, Role, TensorId, WeightSource};

/// Half the range of the uniform distribution: 0.02 * sqrt(3), for a standard deviation of 0.02.
pub const DUMMY_HALF_RANGE: f32 = 0.034_641_016;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's output mix (Steele, Lea and Flood 2014): a bijective 64-bit hash.
pub const fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of one tensor's value stream.
pub fn dummy_seed(id: TensorId) -> u64 {
    let layer = id.layer.map_or(0, |l| l as u64 + 1);
    splitmix64((layer << 8) | id.role.index())
}

/// Element `index` of the tensor with seed `tensor_seed`: uniform in [-0.0346, 0.0346).
#[inline]
pub fn dummy_value(tensor_seed: u64, index: u64) -> f32 {
    let bits = splitmix64(tensor_seed.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)));
    let u = (bits >> 40) as f32 * (1.0 / 16_777_216.0);
    (2.0 * u - 1.0) * DUMMY_HALF_RANGE
}

/// Generated weights of a given shape.
#[derive(Debug, Clone)]
pub struct DummySource {
    config: ModelConfig,
    /// Block-quantised matrices (`PRESET:FORMAT`), or f32 values everywhere.
    quant: Option<DummyQuant>,
}

impl DummySource {
    /// A source for a named preset (`tiny`, `llama3-1b`, `llama3-8b`, `qwen3-8b`, `mistral-7b`),
    /// optionally with a quantisation (`tiny:q4_k`, `llama3-8b:q4_k_m`).
    pub fn preset(name: &str) -> anyhow::Result<DummySource> {
        let (base, quant) = match name.split_once(':') {
            None => (name, None),
            Some((base, q)) => {
                let quant = DummyQuant::parse(q).ok_or_else(|| {
                    anyhow!(
                        "unknown dummy quantisation '{q}' in '{name}'; known: {}",
                        DummyQuant::names()
                    )
                })?;
                (base, Some(quant))
            }
        };
        let config = preset(base).ok_or_else(|| {
            anyhow!(
                "unknown dummy preset '{base}'; known presets: {} (each also as PRESET:FORMAT, \
                 FORMAT one of {})",
                PRESETS.join(", "),
                DummyQuant::names()
            )
        })?;
        Ok(DummySource { config, quant })
    }

    /// A source for any configuration.
    pub fn new(config: ModelConfig) -> anyhow::Result<DummySource> {
        config.validate("dummy model")?;
        Ok(DummySource {
            config,
            quant: None,
        })
    }

    /// The same configuration with its matrices block-quantised as `quant` says.
    pub fn quantized(mut self, quant: DummyQuant) -> DummySource {
        self.quant = Some(quant);
        self
    }

    pub fn quant(&self) -> Option<DummyQuant> {
        self.quant
    }

    /// The blocks of a quantised tensor: a pure function of its seed.
    fn blocks(&self, id: TensorId) -> Option<anyhow::Result<QuantTensor>> {
        let dtype = self.quantized_dtype(id)?;
        let shape = id.shape(&self.config);
        let (rows, cols) = (shape[0], *shape.last()?);
        Some(
            random_blocks(dtype, rows, cols, dummy_seed(id)).map(|data| QuantTensor {
                shape,
                dtype,
                data,
            }),
        )
    }
}

impl WeightSource for DummySource {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has(&self, id: TensorId) -> bool {
        id.exists_in(&self.config)
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        if let Some(q) = self.blocks(id) {
            let q = q?;
            let mut data = vec![0f32; q.shape.iter().product()];
            kiln_formats::dequantize_into(q.dtype, &q.data, &mut data)?;
            return Ok(HostTensor {
                shape: q.shape,
                data,
            });
        }
        if id.role == Role::TokenOrdering && self.has(id) {
            let data = crate::draft_spec::dummy_token_ordering(self.config.vocab_size);
            return Ok(HostTensor {
                shape: vec![data.len()],
                data,
            });
        }
        let fill = self
            .dummy_fill(id)
            .ok_or_else(|| anyhow!("dummy model has no tensor {id}"))?;
        let shape = id.shape(&self.config);
        let n: usize = shape.iter().product();
        let mut data = vec![0f32; n];
        match fill {
            DummyFill::Ones => data.fill(1.0),
            DummyFill::Random { seed } => {
                const CHUNK: usize = 1 << 16;
                data.par_chunks_mut(CHUNK)
                    .enumerate()
                    .for_each(|(c, chunk)| {
                        let base = (c * CHUNK) as u64;
                        for (j, x) in chunk.iter_mut().enumerate() {
                            *x = dummy_value(seed, base + j as u64);
                        }
                    });
            }
        }
        ensure!(data.len() == n, "dummy tensor {id} has the wrong size");
        Ok(HostTensor { shape, data })
    }

    fn load_quantized(&self, id: TensorId) -> anyhow::Result<Option<QuantTensor>> {
        self.blocks(id).transpose()
    }

    fn quantized_dtype(&self, id: TensorId) -> Option<DType> {
        if !self.has(id) {
            return None;
        }
        self.quant?.dtype_for(id, &self.config)
    }

    /// None for quantised tensors: they come from `load_quantized` or `load_f32`; nor for a
    /// token ordering, which must be a permutation (`load_f32` gives it).
    fn dummy_fill(&self, id: TensorId) -> Option<DummyFill> {
        if !self.has(id) || self.quantized_dtype(id).is_some() || id.role == Role::TokenOrdering {
            None
        } else if id.role.is_norm() {
            Some(DummyFill::Ones)
        } else {
            Some(DummyFill::Random {
                seed: dummy_seed(id),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn values_are_pinned() {
        // Pinned so that a device implementation and future host code can be checked against it.
        let s = dummy_seed(TensorId::layer(0, Role::Q));
        assert_eq!(s, splitmix64((1 << 8) | Role::Q as u64));
        assert_eq!(splitmix64(0), 0);
        assert_eq!(splitmix64(1), 0x5692_161D_100B_05E5);
        let first: Vec<f32> = (0..3).map(|i| dummy_value(s, i)).collect();
        let again: Vec<f32> = (0..3).map(|i| dummy_value(s, i)).collect();
        assert_eq!(first, again);
        assert_ne!(
            dummy_value(s, 0),
            dummy_value(dummy_seed(TensorId::layer(1, Role::Q)), 0)
        );
    }

    #[test]
    fn distribution_has_the_documented_spread() {
        let seed = dummy_seed(TensorId::global(Role::TokenEmbd));
        let n = 200_000u64;
        let v: Vec<f64> = (0..n).map(|i| dummy_value(seed, i) as f64).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(mean.abs() < 5e-4, "mean {mean}");
        assert!((std - 0.02).abs() < 2e-4, "std {std}");
        assert!(v.iter().all(|x| x.abs() <= DUMMY_HALF_RANGE as f64));
    }

    #[test]
    fn tensors_are_deterministic_and_shaped() {
        let src = DummySource::preset("tiny").unwrap();
        let q = TensorId::layer(3, Role::Q);
        let a = src.load_f32(q).unwrap();
        let b = src.load_f32(q).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.shape, vec![256, 256]);
        let seed = dummy_seed(q);
        // The parallel fill agrees with the element formula everywhere, chunk seams included.
        for (i, x) in a.data.iter().enumerate() {
            assert_eq!(*x, dummy_value(seed, i as u64));
        }
        let norm = src.load_f32(TensorId::layer(0, Role::AttnNorm)).unwrap();
        assert!(norm.data.iter().all(|x| *x == 1.0));
        assert_eq!(
            src.dummy_fill(TensorId::global(Role::OutputNorm)),
            Some(DummyFill::Ones)
        );
    }

    #[test]
    fn absent_tensors_are_refused() {
        let tiny = DummySource::preset("tiny").unwrap();
        assert!(!tiny.has(TensorId::layer(0, Role::QBias)));
        assert!(!tiny.has(TensorId::layer(4, Role::Q)));
        assert!(tiny.load_f32(TensorId::layer(0, Role::QNorm)).is_err());
        let tied = DummySource::preset("llama3-1b").unwrap();
        assert!(!tied.has(TensorId::global(Role::Output)));
        assert!(DummySource::preset("nope")
            .unwrap_err()
            .to_string()
            .contains("tiny"));
    }

    #[test]
    fn quantised_presets_offer_blocks_that_decode_to_their_f32_values() {
        let src = DummySource::preset("tiny:q4_k_m").unwrap();
        assert_eq!(src.quant(), Some(DummyQuant::Q4KM));
        // tiny has four layers: the last gets more bits.
        let v0 = TensorId::layer(3, Role::V);
        let q = src.load_quantized(v0).unwrap().unwrap();
        assert_eq!(q.dtype, DType::Q6K);
        assert_eq!(src.quantized_dtype(v0), Some(DType::Q6K));
        assert_eq!(src.dummy_fill(v0), None);
        let mut want = vec![0f32; q.shape.iter().product()];
        kiln_formats::dequantize_into(q.dtype, &q.data, &mut want).unwrap();
        assert_eq!(src.load_f32(v0).unwrap().data, want);
        let norm = TensorId::layer(0, Role::AttnNorm);
        assert!(src.load_quantized(norm).unwrap().is_none());
        assert_eq!(src.dummy_fill(norm), Some(DummyFill::Ones));
        let err = DummySource::preset("tiny:q5_k").unwrap_err().to_string();
        assert!(err.contains("q4_k_m"), "{err}");
        assert!(DummySource::preset("nope:q4_k").is_err());
        // Without a quantisation nothing is offered as blocks.
        let plain = DummySource::preset("tiny").unwrap();
        assert!(plain.load_quantized(v0).unwrap().is_none());
        assert_eq!(plain.quantized_dtype(v0), None);
    }
}
