//! Block-quantised dummy weights (`dummy:PRESET:FORMAT`): the projections, the token embedding
//! and the LM head of a preset as random but valid GGML blocks, so that quantised paths can be
//! run and benchmarked at any shape without a file or a quantiser. Every block is a pure
//! function of the tensor's seed and the block's index, spread so that the decoded values have
//! a standard deviation near 0.02, as the f32 dummy weights do.
//!
//! `q4_k_m` and `q5_k_m` mix formats as llama.cpp's Q4_K_M and Q5_K_M do: Q6_K for the LM head
//! and for V and the down projection of the layers `use_more_bits` picks, Q4_K (Q5_K)
//! everywhere else.

use half::f16;
use kiln_formats::DType;
use rayon::prelude::*;

use crate::dummy::splitmix64;
use crate::{ModelConfig, Role, TensorId};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Which quantisation a dummy model's matrices get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DummyQuant {
    Q8_0,
    Q4_0,
    Q4K,
    Q6K,
    /// Q4_K with Q6_K where llama.cpp's Q4_K_M puts it.
    Q4KM,
    /// Q5_K with Q6_K where llama.cpp's Q5_K_M puts it (no backend keeps Q5_K quantised: both
    /// expand it at load).
    Q5KM,
}

impl DummyQuant {
    pub const ALL: [DummyQuant; 6] = [
        DummyQuant::Q8_0,
        DummyQuant::Q4_0,
        DummyQuant::Q4K,
        DummyQuant::Q6K,
        DummyQuant::Q4KM,
        DummyQuant::Q5KM,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DummyQuant::Q8_0 => "q8_0",
            DummyQuant::Q4_0 => "q4_0",
            DummyQuant::Q4K => "q4_k",
            DummyQuant::Q6K => "q6_k",
            DummyQuant::Q4KM => "q4_k_m",
            DummyQuant::Q5KM => "q5_k_m",
        }
    }

    pub fn parse(name: &str) -> Option<DummyQuant> {
        let lower = name.to_ascii_lowercase();
        DummyQuant::ALL.into_iter().find(|q| q.name() == lower)
    }

    /// The names `parse` takes, for messages.
    pub fn names() -> String {
        DummyQuant::ALL.map(DummyQuant::name).join(", ")
    }

    /// The format of tensor `id`, or None for a tensor kept in f32 (norms, biases, anything
    /// that is not a projection, the embedding or the LM head). A format whose blocks do not
    /// divide the rows falls back to Q8_0, and to f32 when that does not fit either.
    pub fn dtype_for(self, id: TensorId, config: &ModelConfig) -> Option<DType> {
        use Role::*;
        if !matches!(
            id.role,
            Q | K | V | O | Gate | Up | Down | TokenEmbd | Output
        ) {
            return None;
        }
        let wanted = match self {
            DummyQuant::Q8_0 => DType::Q8_0,
            DummyQuant::Q4_0 => DType::Q4_0,
            DummyQuant::Q4K => DType::Q4K,
            DummyQuant::Q6K => DType::Q6K,
            DummyQuant::Q4KM | DummyQuant::Q5KM => {
                let layer = id.layer.unwrap_or(0);
                let more = use_more_bits(layer, config.num_layers);
                match id.role {
                    Output => DType::Q6K,
                    V | Down if more => DType::Q6K,
                    _ if self == DummyQuant::Q5KM => DType::Q5K,
                    _ => DType::Q4K,
                }
            }
        };
        let cols = *id.shape(config).last()?;
        [wanted, DType::Q8_0]
            .into_iter()
            .find(|d| cols.is_multiple_of(d.block_elems()))
    }
}

/// llama.cpp's choice of the layers that get more bits in its `_M` mixes: the first and last
/// eighth, and every third layer between.
pub fn use_more_bits(layer: usize, layers: usize) -> bool {
    let eighth = layers / 8;
    // Past the first eighth, so the subtraction cannot wrap.
    layer < eighth || layer >= 7 * layers / 8 || (layer - eighth) % 3 == 2
}

/// `rows` rows of `cols` values of random blocks of `dtype`, block `b` drawn from
/// `splitmix64(seed + (b + 1) * GOLDEN)` onwards. Fails for a dtype that is not a block format
/// or columns that are not whole blocks.
pub fn random_blocks(dtype: DType, rows: usize, cols: usize, seed: u64) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(
        dtype.is_quantized(),
        "{dtype} is not a block-quantised format"
    );
    let row_bytes = dtype
        .bytes_for(cols)
        .ok_or_else(|| anyhow::anyhow!("{cols} columns are not whole {dtype} blocks"))?;
    let mut out = vec![0u8; rows * row_bytes];
    let bb = dtype.block_bytes();
    out.par_chunks_mut(bb).enumerate().for_each(|(b, block)| {
        let mut rng = BlockRng(seed.wrapping_add((b as u64 + 1).wrapping_mul(GOLDEN)));
        fill_block(dtype, block, &mut rng);
    });
    Ok(out)
}

struct BlockRng(u64);

impl BlockRng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        splitmix64(self.0)
    }

    fn bytes(&mut self, out: &mut [u8]) {
        for piece in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            piece.copy_from_slice(&v[..piece.len()]);
        }
    }

    /// Uniform in [lo, hi].
    fn int(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % (hi - lo + 1) as u64) as u32
    }

    /// Uniform in [0.75, 1.25): per-block spread of the scales.
    fn spread(&mut self) -> f32 {
        0.75 + (self.next() >> 40) as f32 / (1u64 << 25) as f32
    }
}

fn put_f16(block: &mut [u8], at: usize, v: f32) {
    block[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// One block whose values have a standard deviation near 0.02 (the quants are uniform: 8-bit
/// ones have a deviation of 73.9, 4-bit ones 4.6, 6-bit ones 18.5).
fn fill_block(dtype: DType, block: &mut [u8], rng: &mut BlockRng) {
    match dtype {
        DType::Q8_0 => {
            rng.bytes(&mut block[2..34]);
            put_f16(block, 0, 0.02 / 73.9 * rng.spread());
        }
        DType::Q4_0 => {
            rng.bytes(&mut block[2..18]);
            put_f16(block, 0, 0.02 / 4.6 * rng.spread());
        }
        // Value = d * sc * q - dmin * m with q in 0..16 (Q4_K) or 0..32 (Q5_K): m near
        // mid sc d / dmin centres each sub-block; sc in 24..63 averages 43.5.
        DType::Q4K => k_quant_scales(block, rng, 4.6, 7.5),
        DType::Q5K => k_quant_scales(block, rng, 9.2, 15.5),
        DType::Q6K => {
            // Value = d * sc * (q - 32) with q in 0..64; |sc| in 8..16 (random sign) keeps d a
            // normal f16.
            rng.bytes(&mut block[..192]);
            for s in &mut block[192..208] {
                let mag = rng.int(8, 16) as i8;
                *s = if rng.next() & 1 == 1 { -mag } else { mag } as u8;
            }
            put_f16(block, 208, 0.02 / (12.0 * 18.5) * rng.spread());
        }
        _ => unreachable!("random_blocks checked the format"),
    }
}

/// A Q4_K or Q5_K block (their scales lead alike): d, dmin and the packed scales for quants of
/// deviation `q_dev` and middle `mid`, the bytes after them random.
fn k_quant_scales(block: &mut [u8], rng: &mut BlockRng, q_dev: f32, mid: f32) {
    let d = 0.02 / (43.5 * q_dev) * rng.spread();
    let dmin = mid.ceil() * d;
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        sc[j] = rng.int(24, 63) as u8;
        let centre = mid * sc[j] as f32 * d / dmin;
        m[j] = (centre.round() as u32 + rng.int(0, 2))
            .saturating_sub(1)
            .min(63) as u8;
    }
    put_f16(block, 0, d);
    put_f16(block, 2, dmin);
    pack_scale_min_k4(&sc, &m, &mut block[4..16]);
    rng.bytes(&mut block[16..]);
}

/// The inverse of `kiln_formats::dequant::scale_min_k4`: eight 6-bit scales and mins into
/// Q4_K's 12 packed bytes.
pub fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8], q: &mut [u8]) {
    for j in 0..4 {
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_formats::dequant::scale_min_k4;
    use kiln_formats::dequantize_into;

    #[test]
    fn packed_scales_read_back() {
        let sc = [1, 63, 17, 40, 33, 62, 5, 48];
        let m = [0, 12, 63, 9, 31, 58, 2, 60];
        let mut q = [0u8; 12];
        pack_scale_min_k4(&sc, &m, &mut q);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &q), (sc[j], m[j]), "sub-block {j}");
        }
    }

    #[test]
    fn blocks_decode_to_small_centred_values_and_are_deterministic() {
        for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4K, DType::Q5K, DType::Q6K] {
            let (rows, cols) = (64, 512);
            let a = random_blocks(dtype, rows, cols, 7).unwrap();
            assert_eq!(a, random_blocks(dtype, rows, cols, 7).unwrap());
            assert_ne!(a, random_blocks(dtype, rows, cols, 8).unwrap());
            let mut v = vec![0f32; rows * cols];
            dequantize_into(dtype, &a, &mut v).unwrap();
            let n = v.len() as f64;
            let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
            let std = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
            assert!(v.iter().all(|x| x.is_finite()), "{dtype}");
            // Q4_0's quants (-8..7) average -0.5.
            assert!(mean.abs() < 2.5e-3, "{dtype}: mean {mean}");
            assert!((0.012..0.03).contains(&std), "{dtype}: std {std}");
        }
        assert!(random_blocks(DType::F32, 1, 32, 0).is_err());
        assert!(random_blocks(DType::Q4K, 1, 32, 0).is_err());
    }

    #[test]
    fn q4_k_m_follows_llama_cpp() {
        let c = crate::presets::preset("llama3-8b").unwrap();
        let q = DummyQuant::Q4KM;
        let more: Vec<usize> = (0..32).filter(|&l| use_more_bits(l, 32)).collect();
        assert_eq!(
            more,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        let t = |l, r| q.dtype_for(TensorId::layer(l, r), &c);
        assert_eq!(t(0, Role::V), Some(DType::Q6K));
        assert_eq!(t(4, Role::V), Some(DType::Q4K));
        assert_eq!(t(6, Role::Down), Some(DType::Q6K));
        assert_eq!(t(4, Role::Q), Some(DType::Q4K));
        assert_eq!(t(4, Role::AttnNorm), None);
        let g = |r| q.dtype_for(TensorId::global(r), &c);
        assert_eq!(g(Role::Output), Some(DType::Q6K));
        assert_eq!(g(Role::TokenEmbd), Some(DType::Q4K));
        assert_eq!(DummyQuant::parse("Q4_K_M"), Some(DummyQuant::Q4KM));
        assert_eq!(DummyQuant::parse("q5_k"), None);
        let q5 = DummyQuant::Q5KM;
        assert_eq!(
            q5.dtype_for(TensorId::layer(4, Role::Q), &c),
            Some(DType::Q5K)
        );
        assert_eq!(
            q5.dtype_for(TensorId::layer(0, Role::V), &c),
            Some(DType::Q6K)
        );
        assert_eq!(
            q5.dtype_for(TensorId::global(Role::Output), &c),
            Some(DType::Q6K)
        );
        assert_eq!(DummyQuant::parse("Q5_K_M"), Some(DummyQuant::Q5KM));
    }
}
