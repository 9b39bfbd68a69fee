//! Dequantisation against vectors made by gguf-py (tests/data/make_dequant_vectors.py):
//! every value must match bit for bit, whole tensors, single rows, and the parallel path.

use kiln_formats::{dequantize_into, to_f32, DType, TensorView};

const ROWS: usize = 4;
const COLS: usize = 256;

const CASES: [(&str, DType); 11] = [
    ("q8_0", DType::Q8_0),
    ("q4_0", DType::Q4_0),
    ("q4_1", DType::Q4_1),
    ("q5_0", DType::Q5_0),
    ("q5_1", DType::Q5_1),
    ("q4_k", DType::Q4K),
    ("q5_k", DType::Q5K),
    ("q6_k", DType::Q6K),
    ("f16", DType::F16),
    ("bf16", DType::BF16),
    ("f64", DType::F64),
];

/// The encoded bytes and expected values of one vector file pair.
fn vector(name: &str) -> (Vec<u8>, Vec<f32>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dequant");
    let bytes = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
    let expected = std::fs::read(dir.join(format!("{name}.f32")))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (bytes, expected)
}

fn assert_bits_eq(name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{name}[{i}]: got {g:e}, want {w:e}"
        );
    }
}

#[test]
fn whole_tensors_match_gguf_py_bit_for_bit() {
    for (name, dtype) in CASES {
        let (bytes, want) = vector(name);
        let view = TensorView {
            name,
            dtype,
            shape: vec![ROWS, COLS],
            data: &bytes,
        };
        assert_bits_eq(name, &to_f32(&view).unwrap(), &want);
    }
}

#[test]
fn single_rows_decode_alone() {
    for (name, dtype) in CASES {
        let (bytes, want) = vector(name);
        let row_bytes = dtype.bytes_for(COLS).unwrap();
        for r in 0..ROWS {
            let mut out = vec![f32::NAN; COLS];
            dequantize_into(dtype, &bytes[r * row_bytes..][..row_bytes], &mut out).unwrap();
            assert_bits_eq(name, &out, &want[r * COLS..][..COLS]);
        }
    }
}

#[test]
fn large_tensors_take_the_parallel_path_and_agree() {
    // 81 copies: 82,944 values, more than one parallel chunk and not a whole number of them.
    const COPIES: usize = 81;
    for (name, dtype) in CASES {
        let (bytes, want) = vector(name);
        let big_bytes = bytes.repeat(COPIES);
        let big_want = want.repeat(COPIES);
        let mut out = vec![f32::NAN; big_want.len()];
        dequantize_into(dtype, &big_bytes, &mut out).unwrap();
        assert_bits_eq(name, &out, &big_want);
    }
}

#[test]
fn f32_is_copied_exactly() {
    let vals = [
        1.5f32,
        -0.0,
        f32::INFINITY,
        f32::MIN_POSITIVE / 4.0,
        f32::from_bits(0x7fc0_1234),
    ];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = vec![0f32; vals.len()];
    dequantize_into(DType::F32, &bytes, &mut out).unwrap();
    assert_bits_eq("f32", &out, &vals);
}

#[test]
fn mismatched_sizes_and_integer_types_are_errors() {
    let mut out = vec![0f32; 32];
    let e = dequantize_into(DType::Q8_0, &[0u8; 33], &mut out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("33 bytes") && e.contains("34 bytes"), "{e}");

    let mut odd = vec![0f32; 40];
    let e = dequantize_into(DType::Q4_0, &[0u8; 18], &mut odd)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a whole number of Q4_0 blocks of 32"), "{e}");

    let e = dequantize_into(DType::I32, &[0u8; 128], &mut out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("I32") && e.contains("integers"), "{e}");

    let short = [0u8; 100];
    let view = TensorView {
        name: "blk.0.w",
        dtype: DType::Q6K,
        shape: vec![256],
        data: &short,
    };
    let e = to_f32(&view).unwrap_err().to_string();
    assert!(
        e.contains("tensor 'blk.0.w'") && e.contains("210 bytes"),
        "{e}"
    );
}
