//! Block-quantised weights (GGML Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) kept quantised in panel layout and
//! decoded to f32 a block at a time, inside the matmul, just before use.
//!
//! Each panel of 16 rows is cut into groups of 32 k; a group holds the 16 rows' scales and
//! their 32 x 16 quants, k-major, so that decoding a block of k for a panel reads one
//! contiguous run of bytes. Every decoded value is computed with the same f32 operations, in
//! the same order, as ggml's reference dequantisation (`kiln_formats::dequant`), so a matmul
//! on these panels gives the same bits as one on the weight expanded to f32 at load.
//!
//! Group records (16 rows, `j` the row within the panel):
//!
//! | format | scales | quants | value |
//! |---|---|---|---|
//! | Q8_0 | `d: f16[16]` | `i8[32][16]` | `q * d` |
//! | Q4_0 | `d: f16[16]` | nibbles `[16][16]` | `(q - 8) * d` |
//! | Q4_K | `d1, m1: f32[16]` each | nibbles `[16][16]` | `d1 * q - m1` |
//! | Q5_K | `d1, m1: f32[16]` each | `i8[32][16]` (0..32, the fifth bit in) | `d1 * q - m1` |
//! | Q6_K | `ds: f32[2][16]` (one per 16 k) | `i8[32][16]` (already minus 32) | `ds * q` |
//!
//! Nibbles: byte `(k / 2) * 16 + j` holds k (even) in its low and k + 1 in its high half.
//! The K-quant scales are the reference's `d * scale` and `dmin * min` products, taken once here.

use half::f16;
use kiln_formats::dequant::scale_min_k4;
use kiln_formats::DType;
use rayon::prelude::*;

use super::microkernel::NR;
use super::simd::Isa;

/// k values per group: every supported format's scales change at most every 16 k, and a group
/// of 32 starts a new block in each.
pub(crate) const GROUP: usize = 32;

/// Whether the loader keeps block-quantised weights quantised. `KILN_CPU_QUANT=0` (or
/// `KILN_CPU_WEIGHTS=f32`) expands them at load instead: the same logits, more memory.
pub fn quantized_weights_allowed() -> bool {
    super::panel_store::compact_allowed() && crate::switches::Switches::get().quant_weights
}

/// A block-quantised encoding the matmul can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantFormat {
    Q8_0,
    Q4_0,
    Q4K,
    Q5K,
    Q6K,
}

impl QuantFormat {
    /// The format for a GGML type, or None for types that are not block-quantised (or that
    /// this backend does not read quantised).
    pub fn from_dtype(dtype: DType) -> Option<QuantFormat> {
        Some(match dtype {
            DType::Q8_0 => QuantFormat::Q8_0,
            DType::Q4_0 => QuantFormat::Q4_0,
            DType::Q4K => QuantFormat::Q4K,
            DType::Q5K => QuantFormat::Q5K,
            DType::Q6K => QuantFormat::Q6K,
            _ => return None,
        })
    }

    pub fn dtype(self) -> DType {
        match self {
            QuantFormat::Q8_0 => DType::Q8_0,
            QuantFormat::Q4_0 => DType::Q4_0,
            QuantFormat::Q4K => DType::Q4K,
            QuantFormat::Q5K => DType::Q5K,
            QuantFormat::Q6K => DType::Q6K,
        }
    }

    /// Bytes of scales at the start of a group record.
    fn scale_bytes(self) -> usize {
        match self {
            QuantFormat::Q8_0 | QuantFormat::Q4_0 => 2 * NR,
            QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K => 8 * NR,
        }
    }

    /// Bytes of quants in a group record.
    fn quant_bytes(self) -> usize {
        match self {
            QuantFormat::Q8_0 | QuantFormat::Q5K | QuantFormat::Q6K => GROUP * NR,
            QuantFormat::Q4_0 | QuantFormat::Q4K => GROUP * NR / 2,
        }
    }

    fn group_bytes(self) -> usize {
        self.scale_bytes() + self.quant_bytes()
    }
}

/// One row's group as the file encodes it: scales and integer quants.
#[derive(Clone, Copy, Default)]
struct RowGroup {
    /// Q8_0/Q4_0: the f16 scale's bits in `bits`; K-quants: two f32 scales.
    bits: u16,
    s: [f32; 2],
    q: [i8; GROUP],
}

/// A `[rows, cols]` block-quantised weight in panel layout.
#[derive(Debug, Clone)]
pub(crate) struct QuantPanels {
    format: QuantFormat,
    cols: usize,
    /// `[panel][group][record]`.
    data: Vec<u8>,
}

impl QuantPanels {
    /// Repacks `bytes`, `rows` rows of whole GGML blocks of `format`, into panels.
    pub fn from_blocks(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> anyhow::Result<QuantPanels> {
        let dtype = format.dtype();
        let row_bytes = dtype.bytes_for(cols).ok_or_else(|| {
            anyhow::anyhow!("{cols} columns are not a whole number of {dtype} blocks")
        })?;
        anyhow::ensure!(
            rows.checked_mul(row_bytes) == Some(bytes.len()),
            "{rows} rows of {cols} {dtype} values take {} bytes, got {}",
            rows.saturating_mul(row_bytes),
            bytes.len()
        );
        let groups = cols / GROUP;
        let panel_bytes = groups * format.group_bytes();
        let mut data = vec![0u8; rows.div_ceil(NR) * panel_bytes];
        if panel_bytes > 0 {
            data.par_chunks_mut(panel_bytes)
                .enumerate()
                .for_each(|(p, panel)| {
                    for j in 0..NR.min(rows - p * NR) {
                        let row = &bytes[(p * NR + j) * row_bytes..][..row_bytes];
                        for (g, record) in panel.chunks_exact_mut(format.group_bytes()).enumerate()
                        {
                            let group = read_group(format, row, g);
                            write_lane(format, record, j, &group);
                        }
                    }
                });
        }
        Ok(QuantPanels { format, cols, data })
    }

    pub fn format(&self) -> QuantFormat {
        self.format
    }

    fn record(&self, panel: usize, group: usize) -> &[u8] {
        let gb = self.format.group_bytes();
        &self.data[(panel * (self.cols / GROUP) + group) * gb..][..gb]
    }

    /// Decodes `kc` values of k from `k0` (both multiples of [`GROUP`]) of panel `panel` into
    /// `dst` as `[kc][NR]` f32.
    pub fn decode(&self, isa: Isa, panel: usize, k0: usize, kc: usize, dst: &mut [f32]) {
        debug_assert!(k0.is_multiple_of(GROUP) && kc.is_multiple_of(GROUP));
        debug_assert!(dst.len() >= kc * NR && k0 + kc <= self.cols);
        for (i, out) in dst[..kc * NR].chunks_exact_mut(GROUP * NR).enumerate() {
            let record = self.record(panel, k0 / GROUP + i);
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx2Fma {
                // SAFETY: the CPU has AVX2 and F16C; the record and `out` have the sizes the
                // format implies.
                unsafe { super::quant_decode_avx2::decode_group(self.format, record, out) };
                continue;
            }
            let _ = isa;
            decode_group_portable(self.format, record, out);
        }
    }

    /// Row `r`'s value at column `k`.
    pub fn get(&self, r: usize, k: usize) -> f32 {
        let record = self.record(r / NR, k / GROUP);
        let mut out = [0.0f32; GROUP * NR];
        decode_group_portable(self.format, record, &mut out);
        out[(k % GROUP) * NR + r % NR]
    }
}

fn half_bits(x: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([x[i], x[i + 1]])
}

fn f16_at(x: &[u8], i: usize) -> f32 {
    f16::from_bits(half_bits(x, i)).to_f32()
}

/// Group `g` (values `32 g..32 g + 32`) of one row of GGML blocks.
fn read_group(format: QuantFormat, row: &[u8], g: usize) -> RowGroup {
    let mut out = RowGroup::default();
    match format {
        QuantFormat::Q8_0 => {
            let block = &row[g * 34..][..34];
            out.bits = half_bits(block, 0);
            for (q, &b) in out.q.iter_mut().zip(&block[2..]) {
                *q = b as i8;
            }
        }
        QuantFormat::Q4_0 => {
            let block = &row[g * 18..][..18];
            out.bits = half_bits(block, 0);
            for (l, &b) in block[2..].iter().enumerate() {
                out.q[l] = (b & 0x0F) as i8;
                out.q[l + 16] = (b >> 4) as i8;
            }
        }
        QuantFormat::Q4K => {
            // Sub-block s of a 256-value block: low nibbles of qs[32 (s / 2)..] when s is even,
            // high nibbles when odd; scale and min from the packed 12 bytes.
            let block = &row[g / 8 * 144..][..144];
            let s = g % 8;
            let (sc, m) = scale_min_k4(s, &block[4..16]);
            out.s = [f16_at(block, 0) * sc as f32, f16_at(block, 2) * m as f32];
            let qs = &block[16 + 32 * (s / 2)..][..32];
            for (q, &b) in out.q.iter_mut().zip(qs) {
                *q = if s.is_multiple_of(2) {
                    b & 0x0F
                } else {
                    b >> 4
                } as i8;
            }
        }
        QuantFormat::Q5K => {
            // Q4_K's sub-blocks and scales, each value's fifth bit at bit s of qh[l].
            let block = &row[g / 8 * 176..][..176];
            let s = g % 8;
            let (sc, m) = scale_min_k4(s, &block[4..16]);
            out.s = [f16_at(block, 0) * sc as f32, f16_at(block, 2) * m as f32];
            let qh = &block[16..48];
            let qs = &block[48 + 32 * (s / 2)..][..32];
            for (l, q) in out.q.iter_mut().enumerate() {
                let low = if s.is_multiple_of(2) {
                    qs[l] & 0x0F
                } else {
                    qs[l] >> 4
                };
                *q = (low | (((qh[l] >> s) & 1) << 4)) as i8;
            }
        }
        QuantFormat::Q6K => {
            // Value e of a 256-value block (half n, quarter i, lane l: e = 128 n + 32 i + l)
            // has 4 low bits in ql and 2 high bits in qh, scale sc[e / 16].
            let block = &row[g / 8 * 210..][..210];
            let d = f16_at(block, 208);
            for h in 0..2 {
                out.s[h] = d * (block[192 + 2 * (g % 8) + h] as i8) as f32;
            }
            let e0 = (g % 8) * GROUP;
            let (n, i) = (e0 / 128, (e0 % 128) / 32);
            let ql = &block[64 * n..][..64];
            let qh = &block[128 + 32 * n..][..32];
            for (l, q) in out.q.iter_mut().enumerate() {
                // Quarters 0 and 1 take the low nibbles of ql[l] and ql[l + 32], 2 and 3
                // the high ones; qh holds two bits of each quarter, quarter i at bit 2 i.
                let b = ql[l + 32 * (i % 2)];
                let low = if i < 2 { b & 0x0F } else { b >> 4 };
                let high = (qh[l] >> (2 * i)) & 3;
                *q = ((low | (high << 4)) as i32 - 32) as i8;
            }
        }
    }
    out
}

/// Writes one row's group into lane `j` of a group record.
fn write_lane(format: QuantFormat, record: &mut [u8], j: usize, g: &RowGroup) {
    let (scales, quants) = record.split_at_mut(format.scale_bytes());
    match format {
        QuantFormat::Q8_0 | QuantFormat::Q4_0 => {
            scales[2 * j..][..2].copy_from_slice(&g.bits.to_le_bytes());
        }
        QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K => {
            for (h, s) in g.s.iter().enumerate() {
                scales[4 * (h * NR + j)..][..4].copy_from_slice(&s.to_le_bytes());
            }
        }
    }
    match format {
        QuantFormat::Q8_0 | QuantFormat::Q5K | QuantFormat::Q6K => {
            for (k, &q) in g.q.iter().enumerate() {
                quants[k * NR + j] = q as u8;
            }
        }
        QuantFormat::Q4_0 | QuantFormat::Q4K => {
            for k in (0..GROUP).step_by(2) {
                quants[k / 2 * NR + j] = (g.q[k] as u8) | ((g.q[k + 1] as u8) << 4);
            }
        }
    }
}

/// The f32 scale `s` (0 or 1) of lane `j` of a K-quant record.
fn scale_f32(record: &[u8], s: usize, j: usize) -> f32 {
    f32::from_le_bytes(record[4 * (s * NR + j)..][..4].try_into().expect("4 bytes"))
}

/// The integer quant of lane `j` at k `k` of a group record.
fn quant(format: QuantFormat, quants: &[u8], k: usize, j: usize) -> i32 {
    match format {
        QuantFormat::Q8_0 | QuantFormat::Q5K | QuantFormat::Q6K => quants[k * NR + j] as i8 as i32,
        QuantFormat::Q4_0 | QuantFormat::Q4K => {
            let b = quants[k / 2 * NR + j];
            (if k.is_multiple_of(2) {
                b & 0x0F
            } else {
                b >> 4
            }) as i32
        }
    }
}

/// Decodes one group record into `out` (`[GROUP][NR]`), operation for operation as ggml.
pub(crate) fn decode_group_portable(format: QuantFormat, record: &[u8], out: &mut [f32]) {
    let quants = &record[format.scale_bytes()..];
    for j in 0..NR {
        match format {
            QuantFormat::Q8_0 => {
                let d = f16_at(record, 2 * j);
                for k in 0..GROUP {
                    out[k * NR + j] = quant(format, quants, k, j) as f32 * d;
                }
            }
            QuantFormat::Q4_0 => {
                let d = f16_at(record, 2 * j);
                for k in 0..GROUP {
                    out[k * NR + j] = (quant(format, quants, k, j) - 8) as f32 * d;
                }
            }
            QuantFormat::Q4K | QuantFormat::Q5K => {
                let (d1, m1) = (scale_f32(record, 0, j), scale_f32(record, 1, j));
                for k in 0..GROUP {
                    out[k * NR + j] = d1 * quant(format, quants, k, j) as f32 - m1;
                }
            }
            QuantFormat::Q6K => {
                for k in 0..GROUP {
                    let ds = scale_f32(record, k / 16, j);
                    out[k * NR + j] = ds * quant(format, quants, k, j) as f32;
                }
            }
        }
    }
}

/// Bytes per value of a format, for reports.
pub fn bytes_per_value(format: QuantFormat) -> f64 {
    format.group_bytes() as f64 / (GROUP * NR) as f64
}

/// Record offsets the AVX2 decoder needs.
pub(crate) fn layout(format: QuantFormat) -> (usize, usize) {
    (format.scale_bytes(), format.quant_bytes())
}
