//! A file written by llama.cpp's own Python writer (tests/data/make_gguf_sample.py) reads back:
//! every metadata value, tensor shapes in kiln's row-major order, and dequantised values equal
//! to gguf-py's bit for bit.

use kiln_formats::{to_f32, DType, GgufFile, GgufValue as V};

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn metadata_written_by_gguf_py() {
    let g = GgufFile::open(data("gguf_py_sample.gguf")).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture().unwrap(), "llama");
    let want = [
        ("sample.u8", V::U8(250)),
        ("sample.i8", V::I8(-7)),
        ("sample.u16", V::U16(60000)),
        ("sample.i16", V::I16(-30000)),
        ("sample.u32", V::U32(3_000_000_000)),
        ("sample.i32", V::I32(-2_000_000_000)),
        ("sample.f32", V::F32(0.125)),
        ("sample.bool", V::Bool(true)),
        ("sample.string", V::String("héllo ▁wörld".into())),
        ("sample.u64", V::U64((1 << 63) + 5)),
        ("sample.i64", V::I64(-(1 << 62))),
        ("sample.f64", V::F64(-2.5e-300)),
        (
            "sample.u32s",
            V::Array(vec![V::U32(1), V::U32(2), V::U32(3)]),
        ),
        ("sample.floats", V::Array(vec![V::F32(0.5), V::F32(-1.5)])),
        (
            "sample.nested",
            V::Array(vec![
                V::Array(vec![V::I32(1), V::I32(2)]),
                V::Array(vec![V::I32(3)]),
            ]),
        ),
    ];
    for (k, v) in want {
        assert_eq!(g.get(k), Some(&v), "{k}");
    }
    assert_eq!(
        g.get_str_array("sample.strings").unwrap(),
        Some(vec!["<s>", "</s>", "▁a"])
    );
}

#[test]
fn tensors_written_by_gguf_py_dequantise_exactly() {
    let g = GgufFile::open(data("gguf_py_sample.gguf")).unwrap();
    let shapes = [
        ("t.f32", DType::F32, [2, 5]),
        ("t.f16", DType::F16, [2, 8]),
        ("t.bf16", DType::BF16, [2, 8]),
        ("t.f64", DType::F64, [2, 3]),
        ("t.q8_0", DType::Q8_0, [2, 64]),
        ("t.q4_0", DType::Q4_0, [2, 32]),
        ("t.q4_k", DType::Q4K, [2, 256]),
        ("t.q6_k", DType::Q6K, [2, 256]),
    ];
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, shapes.map(|s| s.0));

    let mut got = Vec::new();
    for (name, dtype, shape) in shapes {
        let t = g.tensor(name).unwrap();
        assert_eq!((t.dtype, t.shape.as_slice()), (dtype, &shape[..]), "{name}");
        got.extend(to_f32(&t).unwrap());
    }
    let want: Vec<f32> = std::fs::read(data("gguf_py_sample.f32"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "value {i}: {g} vs {w}");
    }
}
