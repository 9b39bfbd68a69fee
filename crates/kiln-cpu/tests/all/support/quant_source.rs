//! A model whose projections are stored block-quantised (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), as a GGUF
//! would give them: random but valid blocks, offered quantised (`load_quantized`) or only as
//! their dequantised f32 values, so that the two CPU load paths can be compared.

use kiln_formats::{dequantize_into, DType};
use kiln_model::{HostTensor, ModelConfig, QuantTensor, Role, TensorId, WeightSource};

use super::random_source::RandomSource;
use super::rng::Rng;

pub const FORMATS: [DType; 5] = [DType::Q8_0, DType::Q4_0, DType::Q4K, DType::Q5K, DType::Q6K];

/// Random blocks of `dtype` for `rows` rows of `cols` values. Quants are random bytes; the
/// f16 scales are small and finite, so that activations stay near unit scale (times `gain`).
pub fn random_blocks(dtype: DType, rows: usize, cols: usize, gain: f32, rng: &mut Rng) -> Vec<u8> {
    let row_bytes = dtype.bytes_for(cols).expect("whole blocks");
    let mut bytes: Vec<u8> = (0..rows * row_bytes)
        .map(|_| rng.next_u64() as u8)
        .collect();
    // Offsets of the f16 scales in one block, and the range of each.
    let (scales, range): (&[usize], f32) = match dtype {
        DType::Q8_0 => (&[0], 0.4 / (cols as f32).sqrt() / 64.0),
        DType::Q4_0 => (&[0], 0.4 / (cols as f32).sqrt() / 4.0),
        // d scales 6-bit sub-scales (up to 63) times 4-bit quants; dmin the offsets.
        DType::Q4K => (&[0, 2], 0.2 / (cols as f32).sqrt() / 63.0 / 8.0),
        // The same with 5-bit quants (up to 31).
        DType::Q5K => (&[0, 2], 0.2 / (cols as f32).sqrt() / 63.0 / 16.0),
        // d scales i8 sub-scales (up to 127) times 6-bit quants (up to 32).
        DType::Q6K => (&[208], 0.4 / (cols as f32).sqrt() / 127.0 / 16.0),
        _ => panic!("{dtype} is not a block format"),
    };
    for block in bytes.chunks_exact_mut(dtype.block_bytes()) {
        for &at in scales {
            let v = half::f16::from_f32(gain * range * (0.25 + rng.uniform(0.5).abs() * 1.5));
            block[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    bytes
}

/// Random weights whose projections (Q, K, V, O, gate, up, down) and token embedding and LM
/// head are block-quantised, each tensor in one of `formats` (in turn).
pub struct QuantSource {
    inner: RandomSource,
    formats: Vec<DType>,
    seed: u64,
    /// Whether `load_quantized` offers the blocks (else a loader sees only f32 values).
    pub offer_blocks: bool,
}

impl QuantSource {
    pub fn new(config: ModelConfig, formats: &[DType], seed: u64) -> QuantSource {
        QuantSource {
            inner: RandomSource::new(config, seed),
            formats: formats.to_vec(),
            seed,
            offer_blocks: true,
        }
    }

    fn blocks(&self, id: TensorId) -> Option<QuantTensor> {
        let roles = [
            Role::Q,
            Role::K,
            Role::V,
            Role::O,
            Role::Gate,
            Role::Up,
            Role::Down,
            Role::TokenEmbd,
            Role::Output,
        ];
        let r = roles.iter().position(|&r| r == id.role)?;
        let layer = id.layer.unwrap_or(0);
        let dtype = self.formats[(layer * roles.len() + r) % self.formats.len()];
        let shape = id.shape(self.config());
        let mut rng = Rng::new(self.seed ^ ((layer as u64 + 1) << 32) ^ ((r as u64 + 1) << 8));
        // The LM head spreads the logits well beyond float noise.
        let gain = if id.role == Role::Output { 8.0 } else { 1.0 };
        let data = random_blocks(dtype, shape[0], shape[1], gain, &mut rng);
        Some(QuantTensor { shape, dtype, data })
    }
}

impl WeightSource for QuantSource {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn has(&self, id: TensorId) -> bool {
        self.inner.has(id)
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        match self.blocks(id) {
            Some(q) => {
                let mut data = vec![0f32; q.shape.iter().product()];
                dequantize_into(q.dtype, &q.data, &mut data)?;
                Ok(HostTensor {
                    shape: q.shape,
                    data,
                })
            }
            None => self.inner.load_f32(id),
        }
    }

    fn load_quantized(&self, id: TensorId) -> anyhow::Result<Option<QuantTensor>> {
        Ok(if self.offer_blocks {
            self.blocks(id)
        } else {
            None
        })
    }
}
