//! Tensor bytes to f32: the float types and the GGML block formats Q8_0, Q4_0, Q4_1, Q5_0,
//! Q5_1, Q4_K, Q5_K and Q6_K.
//!
//! Each block decoder follows ggml's `dequantize_row_*` reference (ggml-quants.c) operation by
//! operation, in the same order and without fused multiply-adds, so results are bit-identical.

use half::{bf16, f16};
use rayon::prelude::*;

use crate::{DType, FormatError, Result, TensorView};

/// Tensors with at least this many values are decoded in parallel, in chunks of this size
/// (a multiple of every block size, so chunks split on block boundaries).
const PAR_CHUNK: usize = 1 << 16;

/// Decodes a whole tensor into f32, row-major as stored.
pub fn to_f32(t: &TensorView) -> Result<Vec<f32>> {
    let mut out = vec![0f32; t.n_elements()];
    dequantize_into(t.dtype, t.data, &mut out)
        .map_err(|e| FormatError::Dequant(format!("tensor '{}': {e}", t.name)))?;
    Ok(out)
}

/// Decodes `bytes` of type `dtype` into `out`, which must hold exactly the values those bytes
/// encode (a whole number of blocks for the quantised types; one row or many).
pub fn dequantize_into(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let decode = block_decoder(dtype)?;
    let expected = dtype.bytes_for(out.len()).ok_or_else(|| {
        FormatError::Dequant(format!(
            "{} values are not a whole number of {dtype} blocks of {}",
            out.len(),
            dtype.block_elems()
        ))
    })?;
    if bytes.len() != expected {
        return Err(FormatError::Dequant(format!(
            "{} bytes given for {} {dtype} values, which take {expected} bytes",
            bytes.len(),
            out.len()
        )));
    }
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    let run = |dst: &mut [f32], src: &[u8]| {
        for (y, x) in dst.chunks_exact_mut(be).zip(src.chunks_exact(bb)) {
            decode(x, y);
        }
    };
    if out.len() < PAR_CHUNK {
        run(out, bytes);
    } else {
        let chunk_bytes = PAR_CHUNK / be * bb;
        out.par_chunks_mut(PAR_CHUNK)
            .zip(bytes.par_chunks(chunk_bytes))
            .for_each(|(dst, src)| run(dst, src));
    }
    Ok(())
}

/// Decodes one block: `x` holds `block_bytes`, `y` receives `block_elems` values.
type BlockDecoder = fn(&[u8], &mut [f32]);

fn block_decoder(dtype: DType) -> Result<BlockDecoder> {
    Ok(match dtype {
        DType::F32 => |x, y| y[0] = f32::from_le_bytes([x[0], x[1], x[2], x[3]]),
        DType::F16 => |x, y| y[0] = f16::from_le_bytes([x[0], x[1]]).to_f32(),
        DType::BF16 => |x, y| y[0] = bf16::from_le_bytes([x[0], x[1]]).to_f32(),
        DType::F64 => |x, y| y[0] = f64::from_le_bytes(x[..8].try_into().expect("8 bytes")) as f32,
        DType::Q8_0 => q8_0,
        DType::Q4_0 => q4_0,
        DType::Q4_1 => q4_1,
        DType::Q5_0 => q5_0,
        DType::Q5_1 => q5_1,
        DType::Q4K => q4_k,
        DType::Q5K => q5_k,
        DType::Q6K => q6_k,
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
            return Err(FormatError::Dequant(format!(
                "type {dtype} holds integers, not weights to convert to f32"
            )))
        }
    })
}

fn half_at(x: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([x[i], x[i + 1]]).to_f32()
}

/// `{ f16 d; i8 qs[32]; }`: y = q * d.
fn q8_0(x: &[u8], y: &mut [f32]) {
    let d = half_at(x, 0);
    for (v, &q) in y.iter_mut().zip(&x[2..34]) {
        *v = (q as i8) as f32 * d;
    }
}

/// `{ f16 d; u8 qs[16]; }`: low nibbles are values 0..16, high nibbles 16..32, offset by 8.
fn q4_0(x: &[u8], y: &mut [f32]) {
    let d = half_at(x, 0);
    let (lo, hi) = y.split_at_mut(16);
    for (j, &q) in x[2..18].iter().enumerate() {
        lo[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `{ f16 d; f16 m; u8 qs[16]; }`: nibbles as Q4_0's, y = q * d + m.
fn q4_1(x: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(x, 0), half_at(x, 2));
    let (lo, hi) = y.split_at_mut(16);
    for (j, &q) in x[4..20].iter().enumerate() {
        lo[j] = (q & 0x0F) as f32 * d + m;
        hi[j] = (q >> 4) as f32 * d + m;
    }
}

/// Value j (0..32) of a 5-bit block: nibble j % 16 of `qs` (low nibbles first) with bit j of
/// the little-endian `qh` as its fifth bit.
fn five_bits(qs: &[u8], qh: u32, j: usize) -> u8 {
    let nibble = if j < 16 {
        qs[j] & 0x0F
    } else {
        qs[j - 16] >> 4
    };
    nibble | ((((qh >> j) & 1) as u8) << 4)
}

/// `{ f16 d; u8 qh[4]; u8 qs[16]; }`: 5-bit values offset by 16, y = q * d.
fn q5_0(x: &[u8], y: &mut [f32]) {
    let d = half_at(x, 0);
    let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
    for (j, v) in y.iter_mut().enumerate() {
        *v = (five_bits(&x[6..22], qh, j) as i32 - 16) as f32 * d;
    }
}

/// `{ f16 d; f16 m; u8 qh[4]; u8 qs[16]; }`: 5-bit values, y = q * d + m.
fn q5_1(x: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(x, 0), half_at(x, 2));
    let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
    for (j, v) in y.iter_mut().enumerate() {
        *v = five_bits(&x[8..24], qh, j) as f32 * d + m;
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) from Q4_K's packed 12 bytes.
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }`: eight 32-value sub-blocks, each
/// y = d * scale * q - dmin * min.
fn q4_k(x: &[u8], y: &mut [f32]) {
    k_quant_4_5(x, None, &x[16..144], y);
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }`: Q4_K's sub-blocks and scales
/// with a fifth bit per value: sub-block 2c + h takes bit 2c + h of qh[l] for its value l.
fn q5_k(x: &[u8], y: &mut [f32]) {
    k_quant_4_5(x, Some(&x[16..48]), &x[48..176], y);
}

/// Q4_K and Q5_K: d and dmin at the block's start, the packed scales after them, nibbles `qs`
/// and (Q5_K) the fifth bits `qh`.
fn k_quant_4_5(x: &[u8], qh: Option<&[u8]>, qs: &[u8], y: &mut [f32]) {
    let d = half_at(x, 0);
    let min = half_at(x, 2);
    let scales = &x[4..16];
    for (chunk, (q, out)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        // The fifth bit of sub-block s (16 when set), s = 2 chunk + half.
        let high = |l: usize, s: usize| qh.map_or(0, |h| ((h[l] >> s) & 1) << 4);
        let (lo, hi) = out.split_at_mut(32);
        for l in 0..32 {
            lo[l] = d1 * ((q[l] & 0xF) | high(l, 2 * chunk)) as f32 - m1;
            hi[l] = d2 * ((q[l] >> 4) | high(l, 2 * chunk + 1)) as f32 - m2;
        }
    }
}

/// `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }`: 6-bit values (4 low bits in ql, 2 high
/// bits in qh) offset by 32, sixteen 16-value sub-blocks, y = d * scale * q.
fn q6_k(x: &[u8], y: &mut [f32]) {
    let d = half_at(x, 208);
    for n in 0..2 {
        let ql = &x[64 * n..64 * n + 64];
        let qh = &x[128 + 32 * n..128 + 32 * n + 32];
        let sc = &x[192 + 8 * n..192 + 8 * n + 8];
        let out = &mut y[128 * n..128 * n + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            out[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            out[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            out[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            out[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}
