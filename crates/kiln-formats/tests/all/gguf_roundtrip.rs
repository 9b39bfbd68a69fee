//! GGUF files written by the test writer read back exactly: every metadata value type, nested
//! and empty arrays, both versions, custom alignment, tensor shapes and zero-copy data.

use crate::support;

use kiln_formats::{DType, GgufFile, GgufValue as V};
use support::gguf_writer::GgufWriter;
use support::{err_text, f32_bytes, scratch_dir};

fn every_type() -> Vec<(&'static str, V)> {
    vec![
        ("t.u8", V::U8(200)),
        ("t.i8", V::I8(-100)),
        ("t.u16", V::U16(65000)),
        ("t.i16", V::I16(-32000)),
        ("t.u32", V::U32(4_000_000_000)),
        ("t.i32", V::I32(-2_000_000_000)),
        ("t.f32", V::F32(-1.5e-7)),
        ("t.bool_true", V::Bool(true)),
        ("t.bool_false", V::Bool(false)),
        ("t.string", V::String("héllo ▁world\n".into())),
        ("t.empty_string", V::String(String::new())),
        ("t.u64", V::U64(u64::MAX)),
        ("t.i64", V::I64(i64::MIN)),
        ("t.f64", V::F64(std::f64::consts::PI)),
        (
            "t.array_i32",
            V::Array(vec![V::I32(1), V::I32(-2), V::I32(3)]),
        ),
        (
            "t.array_str",
            V::Array(vec![V::String("a".into()), V::String(String::new())]),
        ),
        (
            "t.array_f32",
            V::Array(vec![V::F32(0.5), V::F32(f32::INFINITY)]),
        ),
        (
            "t.array_bool",
            V::Array(vec![V::Bool(true), V::Bool(false)]),
        ),
        (
            "t.nested",
            V::Array(vec![
                V::Array(vec![V::U8(1), V::U8(2)]),
                V::Array(vec![]),
                V::Array(vec![V::Array(vec![V::F64(-0.0)])]),
            ]),
        ),
        ("t.empty_array", V::Array(vec![])),
    ]
}

#[test]
fn every_metadata_type_round_trips() {
    for version in [2, 3] {
        let mut w = GgufWriter::new();
        w.version = version;
        for (k, v) in every_type() {
            w.kv(k, &v);
        }
        // Empty arrays of other element types, including an empty array of strings.
        w.kv_array("t.empty_strings", 8, &[]);
        w.kv_array("t.empty_arrays", 9, &[]);
        let g = GgufFile::from_bytes(w.build()).unwrap();
        assert_eq!(g.version, version);
        let mut want = every_type();
        want.push(("t.empty_strings", V::Array(vec![])));
        want.push(("t.empty_arrays", V::Array(vec![])));
        assert_eq!(g.metadata.len(), want.len());
        for ((k, v), (gk, gv)) in want.iter().zip(&g.metadata) {
            assert_eq!((k, v), (&gk.as_str(), gv), "metadata in file order");
            assert_eq!(g.get(k), Some(v));
        }
        assert!(g.tensors.is_empty());
    }
}

#[test]
fn typed_getters_convert_and_report_wrong_types() {
    let mut w = GgufWriter::new();
    for (k, v) in every_type() {
        w.kv(k, &v);
    }
    w.kv("general.architecture", &V::String("llama".into()));
    let g = GgufFile::from_bytes(w.build()).unwrap();
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_u64("t.u8").unwrap(), Some(200));
    assert!(
        err_text(g.get_u64("t.i8")).contains("'t.i8' should be a non-negative integer, found i8")
    );
    assert_eq!(g.get_i64("t.i64").unwrap(), Some(i64::MIN));
    assert_eq!(g.get_f64("t.u32").unwrap(), Some(4e9));
    assert_eq!(g.get_bool("t.bool_true").unwrap(), Some(true));
    assert_eq!(g.get_str("t.missing").unwrap(), None);
    assert_eq!(g.get_str_array("t.array_str").unwrap(), Some(vec!["a", ""]));
    assert_eq!(
        g.get_i64_array("t.array_i32").unwrap(),
        Some(vec![1, -2, 3])
    );
    assert_eq!(
        g.get_f32_array("t.array_f32").unwrap(),
        Some(vec![0.5, f32::INFINITY])
    );
    let e = g.get_str("t.u32").unwrap_err().to_string();
    assert!(
        e.contains("<memory>") && e.contains("'t.u32' should be a string, found u32"),
        "{e}"
    );
    let e = g.get_str_array("t.array_i32").unwrap_err().to_string();
    assert!(
        e.contains("'t.array_i32'[0] should be one of strings, found i32"),
        "{e}"
    );
    let missing = GgufFile::from_bytes(GgufWriter::new().build()).unwrap();
    assert!(err_text(missing.architecture()).contains("'general.architecture' is missing"));
}

/// A file with three tensors of different types; returns it and the data of each tensor.
fn with_tensors(w: &mut GgufWriter) -> Vec<(&'static str, Vec<u8>)> {
    let f32_data = f32_bytes(&[1., 2., 3., 4., 5., 6., 7., 8.]);
    let q8_data: Vec<u8> = (0..68u8).collect();
    let f16_data = vec![0x00, 0x3c, 0x00, 0xc0, 0x00, 0x00];
    w.kv("general.architecture", &V::String("llama".into()));
    w.tensor("w.f32", &[2, 4], 0, &f32_data);
    w.tensor("w.q8", &[32, 2], 8, &q8_data);
    w.tensor("w.f16", &[3], 1, &f16_data);
    vec![("w.f32", f32_data), ("w.q8", q8_data), ("w.f16", f16_data)]
}

#[test]
fn tensors_have_reversed_shapes_and_zero_copy_data() {
    let mut w = GgufWriter::new();
    let want = with_tensors(&mut w);
    let g = GgufFile::from_bytes(w.build()).unwrap();
    assert_eq!(g.alignment, 32);
    assert_eq!(g.data_offset % 32, 0);
    let f = g.tensor("w.f32").unwrap();
    assert_eq!((f.dtype, f.shape.clone()), (DType::F32, vec![4, 2]));
    let q = g.tensor("w.q8").unwrap();
    assert_eq!(
        (q.dtype, q.shape.clone(), q.n_elements()),
        (DType::Q8_0, vec![2, 32], 64)
    );
    for (name, data) in want {
        assert_eq!(g.tensor(name).unwrap().data, data.as_slice(), "{name}");
        assert_eq!(g.tensor_info(name).unwrap().offset % 32, 0);
    }
    assert!(err_text(g.tensor("nope")).contains("tensor 'nope' is missing"));
}

#[test]
fn custom_alignment_places_data() {
    for align in [1u32, 8, 64, 4096] {
        let mut w = GgufWriter::new();
        w.with_alignment(align);
        let want = with_tensors(&mut w);
        let g = GgufFile::from_bytes(w.build()).unwrap();
        assert_eq!(g.alignment, align as u64);
        assert_eq!(g.data_offset % align as usize, 0);
        for (name, data) in want {
            assert_eq!(
                g.tensor(name).unwrap().data,
                data.as_slice(),
                "{name} at alignment {align}"
            );
        }
    }
}

#[test]
fn open_maps_the_same_file_as_from_bytes() {
    let mut w = GgufWriter::new();
    let want = with_tensors(&mut w);
    let path = scratch_dir("gguf_open").join("m.gguf");
    std::fs::write(&path, w.build()).unwrap();
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(g.path(), path);
    assert_eq!(g.file_size(), w.build().len());
    for (name, data) in want {
        assert_eq!(g.tensor(name).unwrap().data, data.as_slice());
    }
    let e = err_text(GgufFile::open(path.with_file_name("absent.gguf")));
    assert!(e.contains("absent.gguf"), "{e}");
}
