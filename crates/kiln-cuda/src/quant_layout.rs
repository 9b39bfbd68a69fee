//! GGML blocks (Q8_0, Q4_0, Q4_K, Q6_K) as the GPU keeps them: repacked once at load into
//! records of 16 weight rows x 128 k, each record the bytes one warp of the decode kernel
//! (kernels/quant_gemm.cu) copies into shared memory in one go, quants first, then scales.
//! The stored integers and scales are the file's own; nothing is re-quantised, so a value
//! decoded from a record is the reference dequantisation's value bit for bit (`decode_rows`
//! here is the host's copy of the device decoding, checked against kiln-formats).
//!
//! Within a record, row `r` (0..16) is read by four lanes `t` (0..4), lane `t` holding 32 of
//! the chunk's 128 k: with `G` the k per scale (16 for Q6_K, 32 otherwise) and `P = G / 4`,
//! lane value `i` is at k = (i / P) * G + t * P + i % P, so one tensor-core step (16 k) never
//! mixes two scales. Lane values come in words of 8; value `e` of a word is in pair `e / 2`,
//! half `e % 2` (the pairs become bf16x2 fragments).
//!
//! | format | quants per record | scales per row (`SCALE_ROW` bytes) |
//! |---|---|---|
//! | Q8_0 | i8: half `i / 16` at `half * 1024 + (r * 4 + t) * 16 + i % 16` | 4 x f16 d |
//! | Q4_0 | nibble: u32 word `i / 8` at `(r * 4 + t) * 16 + word * 4`, bit `4 pair + 16 half` | 4 x f16 d |
//! | Q4_K | as Q4_0 | f16 d, f16 dmin, u8 scale[4], u8 min[4] (of the chunk's sub-blocks) |
//! | Q6_K | six-bit fields in the lane's 16 bytes at `(r * 4 + t) * 16` and 8 bytes at `1024 + (r * 4 + t) * 8`, placed so that most pairs are one mask away from their bf16 operands (`q6_places`) | u8 scale + 128 [8], f16 d, 2 bytes padding |
//!
//! Rows past the weight's last (up to the tile) and k past its last (up to the chunk, Q8_0
//! and Q4_0 only: K-quant rows are whole 256-value blocks) are zero bytes: zero scales, so
//! they add nothing. Q4K2 and Q6K2, the file's bytes in records of 256 k, are in quant_halves.rs.

use anyhow::{ensure, Result};
use half::f16;
use kiln_formats::dequant::scale_min_k4;
use kiln_formats::DType;
use rayon::prelude::*;

use crate::quant_halves;

/// Weight rows per record (one tensor-core tile).
pub const TILE_ROWS: usize = 16;
/// k per record.
pub const CHUNK: usize = 128;

/// A block format the GPU computes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuQuant {
    Q8_0,
    Q4_0,
    Q4K,
    Q6K,
    /// Q4_K in records of 16 rows x 256 k that keep the file's packed scales (4.5 bits a weight
    /// instead of 4.75): a super-block's two halves of quants as Q4_K lays out a chunk's, then
    /// each row's 16 bytes of the block (d, dmin, 12 bytes of six-bit scales and minimums).
    /// The default (`KILN_QUANT_Q4K=128`: [`GpuQuant::Q4K`]); the second decode family, the
    /// expansion and the embedding read it.
    Q4K2,
    /// Q6_K in records of 16 rows x 256 k at the file's 6.5625 bits a weight (Q6_K's 6.75): a
    /// super-block's two halves of quants as Q6_K lays out a chunk's, then the rows' eight
    /// scales (+ 128) of the first half, their f16 d, the eight of the second half, so that a
    /// half's scales and d are 160 contiguous bytes ([`Q6K2_RECORD`]). The default
    /// (`KILN_QUANT_Q6K=128`: [`GpuQuant::Q6K`]); read where Q4K2 is.
    Q6K2,
}

impl GpuQuant {
    pub const ALL: [GpuQuant; 6] = [
        GpuQuant::Q8_0,
        GpuQuant::Q4_0,
        GpuQuant::Q4K,
        GpuQuant::Q6K,
        GpuQuant::Q4K2,
        GpuQuant::Q6K2,
    ];

    pub fn from_dtype(dtype: DType) -> Option<GpuQuant> {
        Some(match dtype {
            DType::Q8_0 => GpuQuant::Q8_0,
            DType::Q4_0 => GpuQuant::Q4_0,
            DType::Q4K => GpuQuant::Q4K,
            DType::Q6K => GpuQuant::Q6K,
            _ => return None,
        })
    }

    pub fn dtype(self) -> DType {
        match self {
            GpuQuant::Q8_0 => DType::Q8_0,
            GpuQuant::Q4_0 => DType::Q4_0,
            GpuQuant::Q4K | GpuQuant::Q4K2 => DType::Q4K,
            GpuQuant::Q6K | GpuQuant::Q6K2 => DType::Q6K,
        }
    }

    /// The name in kernel entries (`skinny_q4_k_8`) and the `F` argument of their macro.
    pub fn name(self) -> &'static str {
        match self {
            GpuQuant::Q8_0 => "q8_0",
            GpuQuant::Q4_0 => "q4_0",
            GpuQuant::Q4K => "q4_k",
            GpuQuant::Q6K => "q6_k",
            GpuQuant::Q4K2 => "q4_k2",
            GpuQuant::Q6K2 => "q6_k2",
        }
    }

    /// The format's number in kernels/quant_gemm.cu (`QF_*`).
    pub fn code(self) -> i32 {
        match self {
            GpuQuant::Q8_0 => 0,
            GpuQuant::Q4_0 => 1,
            GpuQuant::Q4K => 2,
            GpuQuant::Q6K => 3,
            GpuQuant::Q4K2 => 4,
            GpuQuant::Q6K2 => 5,
        }
    }

    /// k per scale: a tensor-core step never crosses one.
    pub fn group(self) -> usize {
        match self {
            GpuQuant::Q6K | GpuQuant::Q6K2 => 16,
            _ => 32,
        }
    }

    pub(crate) fn quant_bytes(self) -> usize {
        match self {
            GpuQuant::Q8_0 => TILE_ROWS * CHUNK,
            GpuQuant::Q4_0 | GpuQuant::Q4K | GpuQuant::Q4K2 => TILE_ROWS * CHUNK / 2,
            GpuQuant::Q6K | GpuQuant::Q6K2 => TILE_ROWS * CHUNK * 3 / 4,
        }
    }

    /// Bytes of one row's scales in a record (Q4K2, Q6K2: in a chunk's stage in shared memory).
    pub fn scale_row_bytes(self) -> usize {
        match self {
            GpuQuant::Q8_0 | GpuQuant::Q4_0 => 8,
            GpuQuant::Q4K | GpuQuant::Q6K => 12,
            GpuQuant::Q4K2 => 16,
            GpuQuant::Q6K2 => 10,
        }
    }

    /// Whether a record holds 256 k, each 128-k chunk one half of it (Q4K2, Q6K2).
    pub fn two_halves(self) -> bool {
        matches!(self, GpuQuant::Q4K2 | GpuQuant::Q6K2)
    }

    /// Bytes of one record (16 rows x 128 k), a multiple of 16: what a warp holds of a chunk
    /// in shared memory (Q4K2's and Q6K2's records in memory are [`Q4K2_RECORD`] and
    /// [`Q6K2_RECORD`] bytes for 256 k).
    pub fn record_bytes(self) -> usize {
        self.quant_bytes() + TILE_ROWS * self.scale_row_bytes()
    }

    /// Device bytes of a `[rows, cols]` weight.
    pub fn device_bytes(self, rows: usize, cols: usize) -> usize {
        match self {
            GpuQuant::Q4K2 => {
                return rows.div_ceil(TILE_ROWS) * cols.div_ceil(2 * CHUNK) * Q4K2_RECORD
            }
            GpuQuant::Q6K2 => {
                return rows.div_ceil(TILE_ROWS) * cols.div_ceil(2 * CHUNK) * Q6K2_RECORD
            }
            _ => {}
        }
        rows.div_ceil(TILE_ROWS) * cols.div_ceil(CHUNK) * self.record_bytes()
    }

    /// Whether `cols` is a whole number of this format's blocks.
    pub fn fits(self, cols: usize) -> bool {
        cols > 0 && cols.is_multiple_of(self.dtype().block_elems())
    }
}

/// Bytes of a Q4K2 record: 16 rows x 256 k.
pub const Q4K2_RECORD: usize = 2 * 1024 + TILE_ROWS * 16;
/// Bytes of a Q6K2 record: 16 rows x 256 k, the file's 210 bytes a row's block.
pub const Q6K2_RECORD: usize = 2 * 1536 + TILE_ROWS * (8 + 2 + 8);

/// `(t, i)` of chunk-relative k: the inverse of `lane_k`.
pub(crate) fn lane_of(q: GpuQuant, kk: usize) -> (usize, usize) {
    let (g, p) = (q.group(), q.group() / 4);
    let (grp, within) = (kk / g, kk % g);
    (within / p, grp * p + within % p)
}

/// Where a quant's bits go: `(byte offset of its u32 word, bit)`; Q6_K's high bits are
/// [`hi_place`].
pub(crate) fn quant_place(q: GpuQuant, r: usize, t: usize, i: usize) -> (usize, u32) {
    let (word, e) = (i / 8, i % 8);
    match q {
        GpuQuant::Q8_0 => {
            let at = (i / 16) * 1024 + (r * 4 + t) * 16 + i % 16;
            (at & !3, 8 * (at as u32 & 3))
        }
        GpuQuant::Q6K | GpuQuant::Q6K2 => q6_places(r, t, i).0,
        _ => (
            (r * 4 + t) * 16 + word * 4,
            4 * (e as u32 / 2) + 16 * (e as u32 % 2),
        ),
    }
}

pub(crate) fn hi_place(r: usize, t: usize, i: usize) -> (usize, u32) {
    q6_places(r, t, i).1
}

/// Q6_K's low nibble and high two bits of lane value `i` (pair `i / 2`, half `i % 2`). Pairs
/// 8g..8g + 8 live in three words: a0 and a1 (the lane's 16-byte quants, words 2g and 2g + 1)
/// and a2 (its 8 bytes at 1024, word g). Pairs 0-5 of the eight are whole six-bit fields, two a
/// word (bits 0 and 6 of each half), so that one mask makes a pair's bf16 operands; pair 6 has
/// its low nibbles at bit 12 of a0's halves and its high bits at bit 12 of a2's, pair 7 at bit
/// 12 of a1's and bit 14 of a2's.
fn q6_places(r: usize, t: usize, i: usize) -> ((usize, u32), (usize, u32)) {
    let (pair, half) = (i / 2, 16 * (i as u32 % 2));
    let (g, pp) = (pair / 8, pair % 8);
    let a0 = (r * 4 + t) * 16 + 8 * g;
    let words = [a0, a0 + 4, 1024 + (r * 4 + t) * 8 + 4 * g];
    match pp {
        6 => ((words[0], 12 + half), (words[2], 12 + half)),
        7 => ((words[1], 12 + half), (words[2], 14 + half)),
        _ => {
            let bit = 6 * (pp as u32 % 2) + half;
            ((words[pp / 2], bit), (words[pp / 2], bit + 4))
        }
    }
}

/// The stored integers of values `c * 128..` of a row of GGML blocks (as many as the row has,
/// up to 128) into `raw`: Q8_0 as its byte, Q6_K's six bits 0..64 before the offset of 32.
fn raw_chunk(q: GpuQuant, row: &[u8], c: usize, raw: &mut [u8; CHUNK]) {
    let v0 = c * CHUNK;
    match q {
        GpuQuant::Q8_0 | GpuQuant::Q4_0 => {
            let bb = q.dtype().block_bytes();
            for (j, out) in raw.chunks_exact_mut(32).enumerate() {
                let Some(x) = row.get((v0 / 32 + j) * bb..(v0 / 32 + j + 1) * bb) else {
                    break;
                };
                if q == GpuQuant::Q8_0 {
                    out.copy_from_slice(&x[2..34]);
                } else {
                    for l in 0..16 {
                        out[l] = x[2 + l] & 0xF;
                        out[l + 16] = x[2 + l] >> 4;
                    }
                }
            }
        }
        GpuQuant::Q4K | GpuQuant::Q4K2 => {
            // Half `c % 2` of super-block `c / 2`: two 32-byte runs of nibbles, low then high.
            let x = &row[(c / 2) * 144..][..144];
            for (a, out) in raw.chunks_exact_mut(64).enumerate() {
                let qs = &x[16 + 32 * (2 * (c % 2) + a)..][..32];
                for l in 0..32 {
                    out[l] = qs[l] & 0xF;
                    out[l + 32] = qs[l] >> 4;
                }
            }
        }
        GpuQuant::Q6K | GpuQuant::Q6K2 => {
            let x = &row[(c / 2) * 210..][..210];
            let n = c % 2;
            let (ql, qh) = (&x[64 * n..64 * n + 64], &x[128 + 32 * n..128 + 32 * n + 32]);
            for l in 0..32 {
                raw[l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
                raw[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                raw[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                raw[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            }
        }
    }
}

/// Writes row `r`'s scales for chunk `c` into `dst` (`scale_row_bytes` long).
fn put_scales(q: GpuQuant, row: &[u8], cols: usize, c: usize, dst: &mut [u8]) {
    match q {
        GpuQuant::Q8_0 | GpuQuant::Q4_0 => {
            let bb = q.dtype().block_bytes();
            for j in 0..4 {
                let b = c * 4 + j;
                if b * 32 < cols {
                    dst[2 * j..2 * j + 2].copy_from_slice(&row[b * bb..b * bb + 2]);
                }
            }
        }
        GpuQuant::Q4K | GpuQuant::Q4K2 => {
            let x = &row[(c / 2) * 144..][..144];
            dst[..4].copy_from_slice(&x[..4]);
            for sb in 0..4 {
                let (sc, m) = scale_min_k4(4 * (c % 2) + sb, &x[4..16]);
                dst[4 + sb] = sc;
                dst[8 + sb] = m;
            }
        }
        GpuQuant::Q6K | GpuQuant::Q6K2 => {
            let x = &row[(c / 2) * 210..][..210];
            for g in 0..8 {
                dst[g] = x[192 + 8 * (c % 2) + g] ^ 0x80;
            }
            dst[8..10].copy_from_slice(&x[208..210]);
        }
    }
}

/// Where each chunk-relative k of row `r` goes: the u32 word and bit of its quant (of its low
/// nibble for Q6_K) and, for Q6_K, of its high two bits.
struct Places {
    lo: Vec<(usize, u32)>,
    hi: Vec<(usize, u32)>,
}

impl Places {
    fn new(q: GpuQuant) -> Places {
        let (mut lo, mut hi) = (Vec::new(), Vec::new());
        for r in 0..TILE_ROWS {
            for kk in 0..CHUNK {
                let (t, i) = lane_of(q, kk);
                let (at, bit) = quant_place(q, r, t, i);
                lo.push((at / 4, bit));
                let (at, bit) = hi_place(r, t, i);
                hi.push((at / 4, bit));
            }
        }
        Places { lo, hi }
    }
}

/// Repacks `rows` rows of `cols` values of GGML blocks of `q` into the device layout
/// (`[tile][chunk][record]`; Q4K2 `[tile][super-block][record]`).
pub fn repack(q: GpuQuant, rows: usize, cols: usize, bytes: &[u8]) -> Result<Vec<u8>> {
    match q {
        GpuQuant::Q4K2 => return quant_halves::repack_q4k2(rows, cols, bytes),
        GpuQuant::Q6K2 => return quant_halves::repack_q6k2(rows, cols, bytes),
        _ => {}
    }
    let dtype = q.dtype();
    ensure!(
        q.fits(cols),
        "{cols} columns are not a whole number of {dtype} blocks"
    );
    let row_bytes = dtype.bytes_for(cols).expect("checked above");
    ensure!(
        rows.checked_mul(row_bytes) == Some(bytes.len()),
        "{rows} rows of {cols} {dtype} values take {} bytes, got {}",
        rows.saturating_mul(row_bytes),
        bytes.len()
    );
    let chunks = cols.div_ceil(CHUNK);
    let rec = q.record_bytes();
    let mut out = vec![0u8; q.device_bytes(rows, cols)];
    if out.is_empty() {
        return Ok(out);
    }
    let places = Places::new(q);
    out.par_chunks_mut(chunks * rec)
        .enumerate()
        .for_each(|(tile, dst)| {
            let mut words = vec![0u32; q.quant_bytes() / 4];
            let mut raw = [0u8; CHUNK];
            let tile_rows = TILE_ROWS.min(rows - tile * TILE_ROWS);
            for (c, record) in dst.chunks_exact_mut(rec).enumerate() {
                words.fill(0);
                for r in 0..tile_rows {
                    let row = &bytes[(tile * TILE_ROWS + r) * row_bytes..][..row_bytes];
                    raw.fill(0);
                    raw_chunk(q, row, c, &mut raw);
                    let lo = &places.lo[r * CHUNK..][..CHUNK];
                    if q.dtype() == DType::Q6K {
                        let hi = &places.hi[r * CHUNK..][..CHUNK];
                        for kk in 0..CHUNK {
                            words[lo[kk].0] |= ((raw[kk] & 0xF) as u32) << lo[kk].1;
                            words[hi[kk].0] |= ((raw[kk] >> 4) as u32) << hi[kk].1;
                        }
                    } else {
                        for kk in 0..CHUNK {
                            words[lo[kk].0] |= (raw[kk] as u32) << lo[kk].1;
                        }
                    }
                    let at = q.quant_bytes() + r * q.scale_row_bytes();
                    put_scales(q, row, cols, c, &mut record[at..at + q.scale_row_bytes()]);
                }
                for (dst, w) in record.chunks_exact_mut(4).zip(&words) {
                    dst.copy_from_slice(&w.to_le_bytes());
                }
            }
        });
    Ok(out)
}

pub(crate) fn f16_at(x: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([x[at], x[at + 1]])).to_f32()
}

pub(crate) fn bits_at(rec: &[u8], (at, bit): (usize, u32), width: u32) -> u8 {
    let w = u32::from_le_bytes(rec[at..at + 4].try_into().expect("4 bytes"));
    ((w >> bit) & ((1 << width) - 1)) as u8
}

/// Row `r`'s value at chunk-relative k `kk` of a record, with the operations of the reference
/// dequantisation (kiln_formats::dequant) in their order; the device does the same. Q4K2's
/// records hold 256 k and are decoded by `decode_q4k2`.
fn record_value(q: GpuQuant, rec: &[u8], r: usize, kk: usize) -> f32 {
    let (t, i) = lane_of(q, kk);
    let s = &rec[q.quant_bytes() + r * q.scale_row_bytes()..][..q.scale_row_bytes()];
    match q {
        GpuQuant::Q8_0 => {
            let raw = bits_at(rec, quant_place(q, r, t, i), 8);
            (raw as i8) as f32 * f16_at(s, 2 * (kk / 32))
        }
        GpuQuant::Q4_0 => {
            let raw = bits_at(rec, quant_place(q, r, t, i), 4);
            (raw as i32 - 8) as f32 * f16_at(s, 2 * (kk / 32))
        }
        GpuQuant::Q4K => {
            let raw = bits_at(rec, quant_place(q, r, t, i), 4);
            let sb = kk / 32;
            let d1 = f16_at(s, 0) * s[4 + sb] as f32;
            let m1 = f16_at(s, 2) * s[8 + sb] as f32;
            d1 * raw as f32 - m1
        }
        GpuQuant::Q4K2 => unreachable!("decode_rows passes Q4K2 to decode_q4k2"),
        GpuQuant::Q6K2 => unreachable!("decode_rows passes Q6K2 to decode_q6k2"),
        GpuQuant::Q6K => {
            let lo = bits_at(rec, quant_place(q, r, t, i), 4);
            let hi = bits_at(rec, hi_place(r, t, i), 2);
            let sc = (s[kk / 16] ^ 0x80) as i8;
            f16_at(s, 8) * sc as f32 * ((lo | (hi << 4)) as i32 - 32) as f32
        }
    }
}

/// The `[rows, cols]` values of a weight in device layout, decoded as the device does.
pub fn decode_rows(q: GpuQuant, rows: usize, cols: usize, data: &[u8]) -> Vec<f32> {
    match q {
        GpuQuant::Q4K2 => return quant_halves::decode_q4k2(rows, cols, data),
        GpuQuant::Q6K2 => return quant_halves::decode_q6k2(rows, cols, data),
        _ => {}
    }
    let chunks = cols.div_ceil(CHUNK);
    let rec = q.record_bytes();
    let mut out = vec![0f32; rows * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(n, row)| {
        let (tile, r) = (n / TILE_ROWS, n % TILE_ROWS);
        for (k, v) in row.iter_mut().enumerate() {
            let at = (tile * chunks + k / CHUNK) * rec;
            *v = record_value(q, &data[at..at + rec], r, k % CHUNK);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where lane value `i` of lane `t` lies in its chunk.
    fn lane_k(q: GpuQuant, t: usize, i: usize) -> usize {
        let (g, p) = (q.group(), q.group() / 4);
        (i / p) * g + t * p + i % p
    }

    #[test]
    fn lane_positions_are_a_permutation_of_the_chunk() {
        for q in GpuQuant::ALL {
            let mut seen = [false; CHUNK];
            for t in 0..4 {
                for i in 0..32 {
                    let kk = lane_k(q, t, i);
                    assert_eq!(lane_of(q, kk), (t, i));
                    assert!(!seen[kk]);
                    seen[kk] = true;
                    // A tensor-core step (four values of a lane, i / 4) stays in one scale group.
                    assert_eq!(kk / q.group(), lane_k(q, t, i - i % 4) / q.group());
                }
            }
            assert!(seen.iter().all(|&s| s), "{q:?}");
            assert_eq!(q.record_bytes() % 16, 0, "{q:?}");
        }
    }

    #[test]
    fn every_quant_bit_has_its_own_place() {
        for q in GpuQuant::ALL {
            let mut used = vec![0u8; q.quant_bytes()];
            let width = if q == GpuQuant::Q8_0 { 8 } else { 4 };
            for r in 0..TILE_ROWS {
                for t in 0..4 {
                    for i in 0..32 {
                        let mut mark = |(at, bit): (usize, u32), w: u32| {
                            for b in bit..bit + w {
                                let (byte, m) = (at + b as usize / 8, 1u8 << (b % 8));
                                assert_eq!(used[byte] & m, 0, "{q:?} r{r} t{t} i{i}");
                                used[byte] |= m;
                            }
                        };
                        mark(quant_place(q, r, t, i), width);
                        if q.dtype() == DType::Q6K {
                            mark(hi_place(r, t, i), 2);
                        }
                    }
                }
            }
            assert!(used.iter().all(|&b| b == 0xFF), "{q:?}: unused bits");
        }
    }
}
