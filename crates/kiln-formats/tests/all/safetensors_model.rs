//! SafetensorsModel: single files, Hugging Face folders, sharded indexes, and the errors a
//! broken or hostile file must produce (naming the file and the problem, never panicking).

use crate::support;

use kiln_formats::{DType, SafetensorsModel};
use support::{err_text, f32_bytes, safetensors_bytes, safetensors_file, scratch_dir, StTensor};

fn two_tensors() -> Vec<u8> {
    safetensors_file(&[
        StTensor {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: f32_bytes(&[1., 2., 3., 4., 5., 6.]),
        },
        StTensor {
            name: "b",
            dtype: "BF16",
            shape: &[2],
            data: vec![0x80, 0x3f, 0x00, 0xc0],
        },
    ])
}

#[test]
fn single_file_gives_zero_copy_views() {
    let dir = scratch_dir("st_single");
    let file = dir.join("weights.safetensors");
    std::fs::write(&file, two_tensors()).unwrap();
    let m = SafetensorsModel::open(&file).unwrap();
    assert_eq!(m.names(), vec!["b", "w"]);
    assert!(m.has("w") && !m.has("x"));
    let w = m.tensor("w").unwrap();
    assert_eq!(
        (w.name, w.dtype, w.shape.clone()),
        ("w", DType::F32, vec![2, 3])
    );
    assert_eq!(w.data, f32_bytes(&[1., 2., 3., 4., 5., 6.]).as_slice());
    let b = m.tensor("b").unwrap();
    assert_eq!(
        (b.dtype, b.data),
        (DType::BF16, &[0x80, 0x3f, 0x00, 0xc0][..])
    );
    assert!(err_text(m.tensor("x")).contains("tensor 'x' is missing"));
}

#[test]
fn folder_with_model_safetensors() {
    let dir = scratch_dir("st_folder");
    std::fs::write(dir.join("model.safetensors"), two_tensors()).unwrap();
    let m = SafetensorsModel::open(&dir).unwrap();
    assert_eq!(m.names().len(), 2);
    assert_eq!(
        m.files().collect::<Vec<_>>(),
        vec![dir.join("model.safetensors")]
    );
}

fn write_sharded(dir: &std::path::Path, index: &str) {
    let a = safetensors_file(&[StTensor {
        name: "a",
        dtype: "F32",
        shape: &[1],
        data: f32_bytes(&[7.0]),
    }]);
    let b = safetensors_file(&[
        StTensor {
            name: "b",
            dtype: "F16",
            shape: &[1],
            data: vec![0x00, 0x3c],
        },
        StTensor {
            name: "unlisted",
            dtype: "F32",
            shape: &[1],
            data: f32_bytes(&[0.0]),
        },
    ]);
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), a).unwrap();
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), b).unwrap();
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
}

const GOOD_INDEX: &str = r#"{"metadata": {"total_size": 6}, "weight_map": {
    "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#;

#[test]
fn sharded_folder_follows_the_index() {
    let dir = scratch_dir("st_sharded");
    write_sharded(&dir, GOOD_INDEX);
    let m = SafetensorsModel::open(&dir).unwrap();
    // The index is authoritative: a tensor present in a shard but not listed is not exposed.
    assert_eq!(m.names(), vec!["a", "b"]);
    assert_eq!(m.tensor("a").unwrap().data, f32_bytes(&[7.0]).as_slice());
    assert_eq!(m.tensor("b").unwrap().dtype, DType::F16);
    assert_eq!(m.files().count(), 2);
}

#[test]
fn missing_shard_names_index_and_shard() {
    let dir = scratch_dir("st_missing_shard");
    write_sharded(&dir, GOOD_INDEX);
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    let e = err_text(SafetensorsModel::open(&dir));
    assert!(e.contains("model.safetensors.index.json"), "{e}");
    assert!(
        e.contains("shard 'model-00002-of-00002.safetensors'") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn tensor_listed_but_absent_from_its_shard() {
    let dir = scratch_dir("st_absent");
    write_sharded(
        &dir,
        r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "ghost": "model-00001-of-00002.safetensors"}}"#,
    );
    let e = err_text(SafetensorsModel::open(&dir));
    assert!(e.contains("model-00001-of-00002.safetensors"), "{e}");
    assert!(
        e.contains("tensor 'ghost' is listed") && e.contains("absent"),
        "{e}"
    );
}

#[test]
fn bad_index_files() {
    for (index, expect) in [
        ("{not json", "not a valid shard index"),
        (r#"{"metadata": {}}"#, "not a valid shard index"),
        (r#"{"weight_map": {}}"#, "lists no tensors"),
        (
            r#"{"weight_map": {"a": "../outside.safetensors"}}"#,
            "not a file name inside",
        ),
        (
            r#"{"weight_map": {"a": "/etc/passwd"}}"#,
            "not a file name inside",
        ),
    ] {
        let dir = scratch_dir("st_bad_index");
        std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
        let e = err_text(SafetensorsModel::open(&dir));
        assert!(
            e.contains("model.safetensors.index.json") && e.contains(expect),
            "{index}: {e}"
        );
    }
}

#[test]
fn empty_folder_and_missing_path() {
    let dir = scratch_dir("st_empty");
    assert!(err_text(SafetensorsModel::open(&dir)).contains("neither model.safetensors nor"));
    let e = err_text(SafetensorsModel::open(dir.join("nope.safetensors")));
    assert!(e.contains("nope.safetensors"), "{e}");
}

#[test]
fn unsupported_dtype_is_reported_when_read() {
    let dir = scratch_dir("st_dtype");
    let file = dir.join("m.safetensors");
    let bytes = safetensors_file(&[
        StTensor {
            name: "fp8",
            dtype: "F8_E4M3",
            shape: &[4],
            data: vec![1, 2, 3, 4],
        },
        StTensor {
            name: "ok",
            dtype: "F32",
            shape: &[1],
            data: f32_bytes(&[1.0]),
        },
    ]);
    std::fs::write(&file, bytes).unwrap();
    let m = SafetensorsModel::open(&file).unwrap();
    assert!(m.tensor("ok").is_ok());
    let e = err_text(m.tensor("fp8"));
    assert!(
        e.contains("m.safetensors") && e.contains("'fp8'") && e.contains("F8_E4M3"),
        "{e}"
    );
}

/// Writes `bytes` and returns the open error's text.
fn open_err(name: &str, bytes: &[u8]) -> String {
    let dir = scratch_dir(name);
    let file = dir.join("bad.safetensors");
    std::fs::write(&file, bytes).unwrap();
    let e = err_text(SafetensorsModel::open(&file));
    assert!(
        e.contains("bad.safetensors"),
        "error does not name the file: {e}"
    );
    e
}

#[test]
fn truncation_at_every_byte_is_an_error() {
    let full = two_tensors();
    let dir = scratch_dir("st_truncated");
    let file = dir.join("t.safetensors");
    for len in 0..full.len() {
        std::fs::write(&file, &full[..len]).unwrap();
        let e = err_text(SafetensorsModel::open(&file));
        assert!(e.contains("t.safetensors"), "at {len}: {e}");
    }
    let e = open_err("st_trunc_msg", &full[..full.len() - 1]);
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn corrupted_headers_name_the_problem() {
    let data = f32_bytes(&[1.0, 2.0]);
    let e = open_err("st_json", &safetensors_bytes("{\"w\": [1, 2", &data));
    assert!(e.contains("not valid safetensors JSON"), "{e}");

    let mut bad_utf8 = 8u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(b"{\"\xff\":1} ");
    let e = open_err("st_utf8", &bad_utf8);
    assert!(e.contains("not valid UTF-8"), "{e}");

    let mut past = 1000u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}      ");
    let e = open_err("st_len_past", &past);
    assert!(e.contains("header length 1000 runs past the end"), "{e}");

    let e = open_err("st_len_huge", &u64::MAX.to_le_bytes());
    assert!(e.contains("larger than safetensors allows"), "{e}");

    let h = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}"#;
    let e = open_err("st_offset_range", &safetensors_bytes(h, &data));
    assert!(e.contains("tensor 'w'") && e.contains("[0, 16]"), "{e}");

    let h = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let e = open_err("st_offset_gap", &safetensors_bytes(h, &[0; 12]));
    assert!(e.contains("tensor 'w'") && e.contains("gaps"), "{e}");

    let h = r#"{"w":{"dtype":"F32","shape":[4611686018427387904, 8],"data_offsets":[0,8]}}"#;
    let e = open_err("st_shape_overflow", &safetensors_bytes(h, &data));
    assert!(e.contains("tensor 'w'") && e.contains("overflows"), "{e}");

    let h = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut long = data.clone();
    long.extend_from_slice(&[0; 4]);
    let e = open_err("st_trailing", &safetensors_bytes(h, &long));
    assert!(e.contains("trailing"), "{e}");

    let h = r#"{"w":{"dtype":"NOPE","shape":[2],"data_offsets":[0,8]}}"#;
    let e = open_err("st_unknown_dtype", &safetensors_bytes(h, &data));
    assert!(e.contains("NOPE"), "{e}");
}
