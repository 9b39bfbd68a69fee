//! Truncated and corrupted GGUF files: each must give an error that names the file and the
//! problem, never a panic, an out-of-bounds read or a huge allocation.

use crate::support;

use kiln_formats::{GgufFile, GgufValue as V};
use support::gguf_writer::GgufWriter;
use support::{err_text, f32_bytes, scratch_dir};

/// A small but complete file: scalar, string and array metadata, three tensors.
fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", &V::String("llama".into()))
        .kv("llama.block_count", &V::U32(2))
        .kv(
            "tokenizer.ggml.tokens",
            &V::Array(vec![V::String("<s>".into()), V::String("a".into())]),
        )
        .kv(
            "tokenizer.ggml.scores",
            &V::Array(vec![V::F32(0.0), V::F32(-1.0)]),
        )
        .tensor("a", &[4], 0, &f32_bytes(&[1., 2., 3., 4.]))
        .tensor("b", &[32], 8, &[7u8; 34])
        .tensor("c", &[2, 2], 0, &f32_bytes(&[5., 6., 7., 8.]));
    w.build()
}

/// The error text for `bytes`, which must name the in-memory file.
fn fails(bytes: Vec<u8>) -> String {
    let e = err_text(GgufFile::from_bytes(bytes));
    assert!(
        e.starts_with("<memory>: "),
        "error does not name the file: {e}"
    );
    e
}

fn assert_fails(bytes: Vec<u8>, expect: &[&str]) {
    let e = fails(bytes);
    for part in expect {
        assert!(e.contains(part), "expected '{part}' in: {e}");
    }
}

fn patch_u64(mut b: Vec<u8>, at: usize, v: u64) -> Vec<u8> {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    b
}

/// A writer holding one valid F32 tensor's worth of data, for tensor-info corruptions.
fn with_data() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.data_raw(&[0u8; 64]);
    w
}

#[test]
fn sample_is_valid() {
    let g = GgufFile::from_bytes(sample()).unwrap();
    assert_eq!(g.tensors.len(), 3);
}

#[test]
fn truncation_at_every_byte_is_an_error() {
    let full = sample();
    for len in 0..full.len() {
        let e = fails(full[..len].to_vec());
        assert!(
            e.contains("truncated") || e.contains("not a GGUF"),
            "at {len}: {e}"
        );
    }
    // The same through the file system: the path is named.
    let path = scratch_dir("gguf_truncated").join("cut.gguf");
    for len in [0, 3, 20, full.len() / 2, full.len() - 1] {
        std::fs::write(&path, &full[..len]).unwrap();
        let e = err_text(GgufFile::open(&path));
        assert!(e.contains("cut.gguf"), "at {len}: {e}");
    }
}

#[test]
fn header_fields() {
    let mut bad_magic = sample();
    bad_magic[0] = b'X';
    assert_fails(bad_magic, &["not a GGUF file"]);
    let mut w = GgufWriter::new();
    w.version = 1;
    assert_fails(w.build(), &["GGUF version 1 is not supported"]);
    w.version = 3u32.swap_bytes();
    assert_fails(w.build(), &["big-endian"]);
    let mut w = GgufWriter::new();
    w.counts(0, u64::MAX);
    assert_fails(
        w.build(),
        &["header claims 18446744073709551615 metadata entries"],
    );
    let mut w = GgufWriter::new();
    w.kv("k", &V::U8(1)).counts(1 << 40, 1);
    assert_fails(w.build(), &["header claims 1099511627776 tensor infos"]);
}

#[test]
fn lying_lengths_in_metadata() {
    // The first key's length field sits right after the 24-byte header.
    assert_fails(
        patch_u64(sample(), 24, 1 << 40),
        &["metadata key #0", "string length 1099511627776 runs past"],
    );

    let mut payload = (1u64 << 50).to_le_bytes().to_vec();
    payload.extend_from_slice(b"abc");
    let mut w = GgufWriter::new();
    w.kv_raw("k.str", 8, &payload);
    assert_fails(w.build(), &["k.str", "string length 1125899906842624"]);

    let mut payload = 4u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let mut w = GgufWriter::new();
    w.kv_raw("k.arr", 9, &payload);
    assert_fails(
        w.build(),
        &["header claims 1099511627776 elements in metadata array 'k.arr'"],
    );
}

#[test]
fn value_count_is_capped() {
    // A u8 array takes one byte per element on disk but a whole value in memory: a count that the
    // file's size allows must still not be decoded past the cap.
    let n = (1u64 << 24) + 1;
    let mut payload = 0u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&n.to_le_bytes());
    payload.resize(payload.len() + n as usize, 0);
    let mut w = GgufWriter::new();
    w.kv_raw("k.big", 9, &payload);
    assert_fails(w.build(), &["'k.big'", "past 16777216 values"]);
}

#[test]
fn bad_metadata_values() {
    let mut w = GgufWriter::new();
    w.kv_raw("k.ty", 13, &[0]);
    assert_fails(w.build(), &["metadata 'k.ty' has unknown value type 13"]);

    let mut payload = 13u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&1u64.to_le_bytes());
    let mut w = GgufWriter::new();
    w.kv_raw("k.elem", 9, &payload);
    assert_fails(w.build(), &["'k.elem': unknown array element type 13"]);

    let mut w = GgufWriter::new();
    w.kv_raw("k.bool", 7, &[2]);
    assert_fails(w.build(), &["'k.bool': bool byte 2"]);

    let mut deep = V::Array(vec![V::U8(1)]);
    for _ in 0..4 {
        deep = V::Array(vec![deep]);
    }
    let mut w = GgufWriter::new();
    w.kv("k.deep", &deep);
    assert_fails(w.build(), &["'k.deep': arrays nested more than 4 deep"]);

    let mut w = GgufWriter::new();
    w.kv("k.dup", &V::U8(1)).kv("k.dup", &V::U8(2));
    assert_fails(w.build(), &["metadata key 'k.dup' appears twice"]);

    for bad in [
        V::U32(0),
        V::U32(48),
        V::String("32".into()),
        V::U64(1 << 40),
    ] {
        let mut w = GgufWriter::new();
        w.kv("general.alignment", &bad);
        assert_fails(w.build(), &["'general.alignment' must be a power of two"]);
    }
}

#[test]
fn bad_tensor_infos() {
    let cases: Vec<(GgufWriter, &[&str])> = vec![
        (
            {
                let mut w = with_data();
                w.tensor_raw("t0", 0, &[], 0, 0);
                w
            },
            &["tensor 't0' has 0 dimensions"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("t5", 5, &[1; 5], 0, 0);
                w
            },
            &["tensor 't5' has 5 dimensions"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("big", 2, &[1 << 40, 1 << 40], 0, 0);
                w
            },
            &["'big' dimensions", "overflow"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("neg", 1, &[u64::MAX], 0, 0);
                w
            },
            &["'neg' dimensions", "overflow"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("zero", 3, &[0, 1 << 62, 4], 0, 0);
                w
            },
            &["'zero' dimensions", "overflow"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("ty", 1, &[4], 99, 0);
                w
            },
            &["tensor 'ty' has type unknown (id 99)"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("iq2", 1, &[256], 16, 0);
                w
            },
            &["tensor 'iq2' has type IQ2_XXS (id 16), which kiln cannot read"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("row", 2, &[16, 2], 2, 0);
                w
            },
            &["tensor 'row' row length 16 is not a multiple of the Q4_0 block of 32"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("far", 1, &[4], 0, 1024);
                w
            },
            &["tensor 'far' (16 bytes at data offset 1024) runs past the end"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("wrap", 1, &[4], 0, u64::MAX - 31);
                w
            },
            &["tensor 'wrap'", "runs past the end"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("mis", 1, &[4], 0, 4);
                w
            },
            &["tensor 'mis' offset 4 is not aligned to 32 bytes"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("d", 1, &[4], 0, 0)
                    .tensor_raw("d", 1, &[4], 0, 32);
                w
            },
            &["tensor 'd' appears twice"],
        ),
        (
            {
                let mut w = with_data();
                w.tensor_raw("x", 1, &[16], 0, 0)
                    .tensor_raw("y", 1, &[4], 0, 32);
                w
            },
            &["tensors 'x'", "and 'y'", "overlap"],
        ),
    ];
    for (w, expect) in cases {
        assert_fails(w.build(), expect);
    }
}

#[test]
fn corrupt_file_on_disk_names_its_path() {
    let mut w = with_data();
    w.tensor_raw("far", 1, &[4], 0, 1024);
    let path = scratch_dir("gguf_corrupt_path").join("broken.gguf");
    std::fs::write(&path, w.build()).unwrap();
    let e = err_text(GgufFile::open(&path));
    assert!(
        e.starts_with(&format!("{}: ", path.display())) && e.contains("'far'"),
        "{e}"
    );
}
