//! The device layout of block-quantised weights (quant_layout.rs), on the host, no GPU needed:
//! every value decoded from the repacked records, as the kernels decode it, equals
//! kiln-formats' reference dequantisation (the values kiln-cpu computes with) bit for bit, for
//! each format, on generated blocks and on blocks of random bytes (any scale a file may hold),
//! at shapes with partial tiles and, for Q8_0 and Q4_0, partial chunks; and the padding is
//! zero. Q4K2 (Q4_K in 256-k records, the default) decodes to Q4_K's values and
//! holds the file's bytes: its scales are each block's first 16 bytes as the file has them.
//! Q6K2 (the default for Q6_K) likewise decodes to Q6_K's values in the file's 210 bytes a block.

use kiln_cuda::quant_layout::{
    decode_rows, repack, GpuQuant, CHUNK, Q4K2_RECORD, Q6K2_RECORD, TILE_ROWS,
};
use kiln_formats::dequantize_into;
use kiln_model::dummy_quant::random_blocks;

fn reference(q: GpuQuant, rows: usize, cols: usize, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; rows * cols];
    dequantize_into(q.dtype(), bytes, &mut out).unwrap();
    out
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn shapes(q: GpuQuant) -> Vec<(usize, usize)> {
    let mut s = vec![(1, 256), (16, 256), (17, 512), (40, 768), (3, 1280)];
    if q.dtype().block_elems() == 32 {
        s.extend([(5, 32), (9, 96), (20, 160), (2, 4128)]);
    }
    s
}

fn check(q: GpuQuant, rows: usize, cols: usize, bytes: &[u8], what: &str) {
    let packed = repack(q, rows, cols, bytes).unwrap();
    assert_eq!(packed.len(), q.device_bytes(rows, cols));
    let got = decode_rows(q, rows, cols, &packed);
    let want = reference(q, rows, cols, bytes);
    if let Some(i) = (0..want.len()).find(|&i| !same(got[i], want[i])) {
        panic!(
            "{q:?} {rows}x{cols} {what}: value ({}, {}) decodes to {} ({:#x}), the reference is {} ({:#x})",
            i / cols,
            i % cols,
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

#[test]
fn repacked_values_are_the_reference_values_bit_for_bit() {
    for q in GpuQuant::ALL {
        for (i, (rows, cols)) in shapes(q).into_iter().enumerate() {
            let bytes = random_blocks(q.dtype(), rows, cols, 1000 + i as u64).unwrap();
            check(q, rows, cols, &bytes, "generated blocks");
        }
    }
}

#[test]
fn any_bytes_decode_as_the_reference_does() {
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state = kiln_model::dummy::splitmix64(state);
        state
    };
    for q in GpuQuant::ALL {
        for (rows, cols) in shapes(q) {
            let n = rows * q.dtype().bytes_for(cols).unwrap();
            let bytes: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            check(q, rows, cols, &bytes, "random bytes");
        }
    }
}

#[test]
fn padding_rows_and_columns_are_zero() {
    for q in GpuQuant::ALL {
        let (rows, cols) = if q.dtype().block_elems() == 32 {
            (19, 160)
        } else {
            (19, 256)
        };
        let bytes = random_blocks(q.dtype(), rows, cols, 5).unwrap();
        let packed = repack(q, rows, cols, &bytes).unwrap();
        let chunks = cols.div_ceil(CHUNK);
        // Decoding the whole last tile: rows past the weight are zeros.
        let tile_rows = rows.div_ceil(TILE_ROWS) * TILE_ROWS;
        let all = decode_rows(q, tile_rows, cols, &packed);
        assert!(all[rows * cols..].iter().all(|&v| v == 0.0), "{q:?}");
        // The last tile's records hold the last rows (Q4K2's records are 256 k).
        let last = &packed[q.device_bytes(rows / TILE_ROWS * TILE_ROWS, cols)..];
        assert!(last.iter().any(|&b| b != 0), "{q:?}");
        if cols % CHUNK != 0 {
            // k past the weight decodes to zero too (the kernels also read no x there).
            let cols_padded = chunks * CHUNK;
            let wide = decode_rows(q, rows, cols_padded, &packed);
            for r in 0..rows {
                let row = &wide[r * cols_padded..(r + 1) * cols_padded];
                assert!(row[cols..].iter().all(|&v| v == 0.0), "{q:?} row {r}");
            }
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    let bytes = random_blocks(GpuQuant::Q4K.dtype(), 2, 256, 1).unwrap();
    assert!(repack(GpuQuant::Q4K, 2, 128, &bytes[..144]).is_err());
    assert!(repack(GpuQuant::Q4K, 3, 256, &bytes).is_err());
    assert!(repack(GpuQuant::Q4K, 2, 256, &bytes).is_ok());
    assert!(!GpuQuant::Q6K.fits(128) && GpuQuant::Q8_0.fits(96) && !GpuQuant::Q8_0.fits(0));
}

#[test]
fn q4k2_keeps_the_files_scale_bytes_and_size() {
    let (rows, cols) = (40, 768);
    let bytes = random_blocks(GpuQuant::Q4K.dtype(), rows, cols, 9).unwrap();
    let packed = repack(GpuQuant::Q4K2, rows, cols, &bytes).unwrap();
    let row_bytes = GpuQuant::Q4K.dtype().bytes_for(cols).unwrap();
    let blocks = cols / 256;
    // Whole tiles: exactly the file's bytes (144 a block, 4.5 bits a weight).
    assert_eq!(
        GpuQuant::Q4K2.device_bytes(32, cols),
        32 * row_bytes,
        "Q4K2 of whole tiles is the file's size"
    );
    assert_eq!(
        packed.len(),
        rows.div_ceil(TILE_ROWS) * blocks * Q4K2_RECORD
    );
    for n in 0..rows {
        for b in 0..blocks {
            let record = &packed[((n / TILE_ROWS) * blocks + b) * Q4K2_RECORD..][..Q4K2_RECORD];
            let file = &bytes[n * row_bytes + b * 144..][..16];
            assert_eq!(
                &record[2048 + (n % TILE_ROWS) * 16..][..16],
                file,
                "row {n} block {b}"
            );
        }
    }
    // The same values as Q4_K's records.
    let q4k = repack(GpuQuant::Q4K, rows, cols, &bytes).unwrap();
    let a = decode_rows(GpuQuant::Q4K, rows, cols, &q4k);
    let b = decode_rows(GpuQuant::Q4K2, rows, cols, &packed);
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn q6k2_keeps_the_files_scale_bytes_and_size() {
    let (rows, cols) = (40, 768);
    let bytes = random_blocks(GpuQuant::Q6K.dtype(), rows, cols, 11).unwrap();
    let packed = repack(GpuQuant::Q6K2, rows, cols, &bytes).unwrap();
    let row_bytes = GpuQuant::Q6K.dtype().bytes_for(cols).unwrap();
    let blocks = cols / 256;
    // Whole tiles: exactly the file's bytes (210 a block, 6.5625 bits a weight).
    assert_eq!(GpuQuant::Q6K2.device_bytes(32, cols), 32 * row_bytes);
    assert_eq!(
        packed.len(),
        rows.div_ceil(TILE_ROWS) * blocks * Q6K2_RECORD
    );
    for n in 0..rows {
        let r = n % TILE_ROWS;
        for b in 0..blocks {
            let record = &packed[((n / TILE_ROWS) * blocks + b) * Q6K2_RECORD..][..Q6K2_RECORD];
            let file = &bytes[n * row_bytes + b * 210..][..210];
            // The half's eight scales (+ 128) and d in the 160 bytes after the quants that the
            // kernels read for it: scales then d in the first half, d then scales in the second.
            for h in 0..2 {
                let scales: Vec<u8> = file[192 + 8 * h..][..8].iter().map(|s| s ^ 0x80).collect();
                assert_eq!(
                    &record[3072 + 160 * h + r * 8..][..8],
                    &scales[..],
                    "row {n} block {b}"
                );
            }
            assert_eq!(
                &record[3072 + 128 + r * 2..][..2],
                &file[208..210],
                "row {n} block {b}"
            );
        }
    }
    // The same values as Q6_K's records.
    let q6k = repack(GpuQuant::Q6K, rows, cols, &bytes).unwrap();
    let a = decode_rows(GpuQuant::Q6K, rows, cols, &q6k);
    let b = decode_rows(GpuQuant::Q6K2, rows, cols, &packed);
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}
