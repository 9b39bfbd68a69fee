//! Q4_K and Q6_K in records of 16 rows x 256 k (GpuQuant::Q4K2, Q6K2): the file's bytes, each
//! 128-k chunk read as one half of a record (quant_layout.rs has the 128-k records and what both
//! share). Repacked from the 128-k records' quants, with the rows' scales as the file has them
//! (Q4K2) or regrouped so that a half's scales and d are contiguous (Q6K2); decoded on the host
//! as the device decodes them, for the tests.

use anyhow::Result;
use rayon::prelude::*;

use crate::quant_layout::{
    bits_at, f16_at, hi_place, lane_of, quant_place, repack, GpuQuant, CHUNK, Q4K2_RECORD,
    Q6K2_RECORD, TILE_ROWS,
};

/// Q4K2 or Q6K2 (`wide`) from the records of its 128-k format: each super-block's two chunks'
/// quants, then what `put_block` writes of each row `r`'s block (its file bytes) into the record.
fn repack_halves(
    wide: GpuQuant,
    rows: usize,
    cols: usize,
    bytes: &[u8],
    put_block: impl Fn(&[u8], usize, &mut [u8]) + Sync,
) -> Result<Vec<u8>> {
    let (q, record_bytes) = match wide {
        GpuQuant::Q4K2 => (GpuQuant::Q4K, Q4K2_RECORD),
        GpuQuant::Q6K2 => (GpuQuant::Q6K, Q6K2_RECORD),
        _ => unreachable!("{wide:?} is kept in 128-k records"),
    };
    let narrow = repack(q, rows, cols, bytes)?;
    let (chunks, rec, half) = (cols.div_ceil(CHUNK), q.record_bytes(), q.quant_bytes());
    let blocks = chunks / 2;
    let block_bytes = q.dtype().block_bytes();
    let mut out = vec![0u8; wide.device_bytes(rows, cols)];
    let row_bytes = q.dtype().bytes_for(cols).expect("checked by repack");
    out.par_chunks_mut(blocks * record_bytes)
        .enumerate()
        .for_each(|(tile, dst)| {
            for (b, record) in dst.chunks_exact_mut(record_bytes).enumerate() {
                for h in 0..2 {
                    let from = &narrow[(tile * chunks + 2 * b + h) * rec..][..half];
                    record[h * half..(h + 1) * half].copy_from_slice(from);
                }
                for r in 0..TILE_ROWS.min(rows - tile * TILE_ROWS) {
                    let at = (tile * TILE_ROWS + r) * row_bytes + b * block_bytes;
                    put_block(&bytes[at..][..block_bytes], r, record);
                }
            }
        });
    Ok(out)
}

/// Q4K2: each row's first 16 bytes of the block as the file has them (d, dmin, the packed
/// scales and minimums) after the quants.
pub(crate) fn repack_q4k2(rows: usize, cols: usize, bytes: &[u8]) -> Result<Vec<u8>> {
    repack_halves(GpuQuant::Q4K2, rows, cols, bytes, |x, r, record| {
        record[2048 + r * 16..][..16].copy_from_slice(&x[..16]);
    })
}

/// Q6K2: the rows' first-half scales (+ 128, as Q6_K's records hold them), their d, their
/// second-half scales after the quants.
pub(crate) fn repack_q6k2(rows: usize, cols: usize, bytes: &[u8]) -> Result<Vec<u8>> {
    repack_halves(GpuQuant::Q6K2, rows, cols, bytes, |x, r, record| {
        for h in 0..2 {
            let at = q6k2_scales_at(h, r);
            for g in 0..8 {
                record[at + g] = x[192 + 8 * h + g] ^ 0x80;
            }
        }
        record[q6k2_d_at(r)..][..2].copy_from_slice(&x[208..210]);
    })
}

/// Where row `r`'s eight scales of half `h` are in a Q6K2 record.
fn q6k2_scales_at(h: usize, r: usize) -> usize {
    3072 + h * (128 + 32) + r * 8
}

/// Where row `r`'s d is in a Q6K2 record.
fn q6k2_d_at(r: usize) -> usize {
    3072 + 128 + r * 2
}

/// Q4K2: the scale and minimum words of half `h` of a row's packed 12 bytes `p` (little-endian
/// words v1, v2, v3), as the device unpacks them: byte j of each is sub-block 4h + j's
/// (kiln_formats' scale_min_k4, four at a time).
fn q4k2_words(p: &[u8], h: usize) -> (u32, u32) {
    let w = |i: usize| u32::from_le_bytes(p[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let (v1, v2, v3) = (w(0), w(1), w(2));
    if h == 0 {
        (v1 & 0x3F3F_3F3F, v2 & 0x3F3F_3F3F)
    } else {
        (
            (v3 & 0x0F0F_0F0F) | ((v1 >> 2) & 0x3030_3030),
            ((v3 >> 4) & 0x0F0F_0F0F) | ((v2 >> 2) & 0x3030_3030),
        )
    }
}

/// Q4K2's `[rows, cols]` values, decoded as the device does: the row's packed scales of the
/// chunk's half unpacked a word at a time, then Q4_K's operations.
pub(crate) fn decode_q4k2(rows: usize, cols: usize, data: &[u8]) -> Vec<f32> {
    let blocks = cols.div_ceil(2 * CHUNK);
    let mut out = vec![0f32; rows * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(n, row)| {
        let (tile, r) = (n / TILE_ROWS, n % TILE_ROWS);
        for (k, v) in row.iter_mut().enumerate() {
            let at = (tile * blocks + k / (2 * CHUNK)) * Q4K2_RECORD;
            let record = &data[at..at + Q4K2_RECORD];
            let (h, kk) = ((k / CHUNK) % 2, k % CHUNK);
            let (t, i) = lane_of(GpuQuant::Q4K, kk);
            let raw = bits_at(&record[h * 1024..], quant_place(GpuQuant::Q4K, r, t, i), 4);
            let s = &record[2048 + r * 16..][..16];
            let (sc, m) = q4k2_words(&s[4..], h);
            let sb = 8 * (kk / 32) as u32;
            let d1 = f16_at(s, 0) * ((sc >> sb) & 0xFF) as f32;
            let m1 = f16_at(s, 2) * ((m >> sb) & 0xFF) as f32;
            *v = d1 * raw as f32 - m1;
        }
    });
    out
}

/// Q6K2's `[rows, cols]` values, decoded as the device does: the half's quants as Q6_K's,
/// its scale and the row's d, then Q6_K's operations.
pub(crate) fn decode_q6k2(rows: usize, cols: usize, data: &[u8]) -> Vec<f32> {
    let blocks = cols.div_ceil(2 * CHUNK);
    let mut out = vec![0f32; rows * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(n, row)| {
        let (tile, r) = (n / TILE_ROWS, n % TILE_ROWS);
        for (k, v) in row.iter_mut().enumerate() {
            let at = (tile * blocks + k / (2 * CHUNK)) * Q6K2_RECORD;
            let record = &data[at..at + Q6K2_RECORD];
            let (h, kk) = ((k / CHUNK) % 2, k % CHUNK);
            let (t, i) = lane_of(GpuQuant::Q6K, kk);
            let quants = &record[h * 1536..];
            let lo = bits_at(quants, quant_place(GpuQuant::Q6K, r, t, i), 4);
            let hi = bits_at(quants, hi_place(r, t, i), 2);
            let sc = (record[q6k2_scales_at(h, r) + kk / 16] ^ 0x80) as i8;
            *v = f16_at(record, q6k2_d_at(r)) * sc as f32 * ((lo | (hi << 4)) as i32 - 32) as f32;
        }
    });
    out
}
