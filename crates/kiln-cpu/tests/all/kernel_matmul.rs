//! The matmul against a float64 reference, and its batch invariance, for every instruction
//! set this CPU runs.

use crate::support;

use kiln_cpu::kernels::{matmul_with, Isa, PackedMatrix, WeightFormat};
use support::{same_bits, Rng};

/// `(rows, out features, in features)`: tile edges, partial panels, grouped panels of a single
/// row, several k blocks, several blocks of rows.
const SHAPES: [(usize, usize, usize); 9] = [
    (1, 100, 300),
    (200, 20, 300),
    (1, 1, 1),
    (1, 17, 33),
    (5, 16, 256),
    (7, 31, 257),
    (13, 50, 600),
    (6, 48, 1000),
    (33, 9, 7),
];

fn poisoned(n: usize) -> Vec<f32> {
    vec![f32::NAN; n]
}

#[test]
fn matmul_matches_f64_reference() {
    for isa in Isa::available() {
        for (seed, &(m, n, k)) in SHAPES.iter().enumerate() {
            let mut rng = Rng::new(seed as u64);
            let x = rng.vec(m * k, 1.0);
            let w = rng.vec(n * k, 1.0);
            let packed = PackedMatrix::pack(n, k, &w).unwrap();
            let mut out = poisoned(m * n);
            matmul_with(isa, &x, &packed, &mut out);
            for i in 0..m {
                for j in 0..n {
                    let (xr, wr) = (&x[i * k..][..k], &w[j * k..][..k]);
                    let exact: f64 = xr.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let magnitude: f64 = xr
                        .iter()
                        .zip(wr)
                        .map(|(a, b)| (*a as f64 * *b as f64).abs())
                        .sum();
                    // Twice the worst-case bound of a sequential f32 sum of k products.
                    let tol = k as f64 * f32::EPSILON as f64 * magnitude;
                    let got = out[i * n + j] as f64;
                    assert!(
                        (got - exact).abs() <= tol,
                        "{isa:?} {m}x{n}x{k} [{i},{j}]: {got} vs {exact}"
                    );
                }
            }
        }
    }
}

#[test]
fn each_row_is_the_same_bits_alone_and_in_any_batch() {
    let (n, k) = (101, 300);
    let mut rng = Rng::new(99);
    let packed = PackedMatrix::pack(n, k, &rng.vec(n * k, 1.0)).unwrap();
    for isa in Isa::available() {
        for m in [2, 3, 5, 6, 7, 13, 32, 64, 200] {
            let x = rng.vec(m * k, 2.0);
            let mut batched = poisoned(m * n);
            matmul_with(isa, &x, &packed, &mut batched);
            for r in 0..m {
                let mut alone = poisoned(n);
                matmul_with(isa, &x[r * k..][..k], &packed, &mut alone);
                assert!(
                    same_bits(&alone, &batched[r * n..][..n]),
                    "{isa:?}: row {r} of {m} differs"
                );
            }
        }
    }
}

#[test]
fn packed_rows_read_back_and_bad_shapes_are_errors() {
    let (n, k) = (19, 5);
    let w = Rng::new(4).vec(n * k, 1.0);
    let packed = PackedMatrix::pack(n, k, &w).unwrap();
    assert_eq!((packed.rows(), packed.cols()), (n, k));
    for r in 0..n {
        let mut row = poisoned(k);
        packed.copy_row(r, &mut row);
        assert_eq!(row, &w[r * k..][..k]);
    }
    let err = PackedMatrix::pack(n, k, &w[1..]).unwrap_err();
    assert!(err.to_string().contains("needs 95 values"), "{err}");
}

/// Values exact in a 16-bit format: random f32 rounded through it.
fn exact_in(format: WeightFormat, values: &[f32]) -> Vec<f32> {
    values
        .iter()
        .map(|&v| match format {
            WeightFormat::Bf16 => f32::from_bits(v.to_bits() & 0xFFFF_0000),
            WeightFormat::F16 => half::f16::from_f32(v).to_f32(),
            WeightFormat::F32 | WeightFormat::Quant(_) => v,
        })
        .collect()
}

#[test]
fn compact_storage_gives_the_same_bits_as_f32() {
    let (n, k) = (90, 520);
    let mut rng = Rng::new(12);
    for format in [WeightFormat::Bf16, WeightFormat::F16] {
        let w = exact_in(format, &rng.vec(n * k, 0.5));
        let compact = PackedMatrix::pack(n, k, &w).unwrap();
        assert_eq!(compact.format(), format);
        let wide = PackedMatrix::pack_as(n, k, &w, WeightFormat::F32).unwrap();
        for isa in Isa::available() {
            for m in [1, 7, 40] {
                let x = rng.vec(m * k, 1.0);
                let (mut a, mut b) = (poisoned(m * n), poisoned(m * n));
                matmul_with(isa, &x, &compact, &mut a);
                matmul_with(isa, &x, &wide, &mut b);
                assert!(same_bits(&a, &b), "{format:?} {isa:?} m={m}");
            }
        }
        let mut row = poisoned(k);
        compact.copy_row(89, &mut row);
        assert_eq!(row, &w[89 * k..][..k]);
    }
    // Full-precision values stay f32, and cannot be forced into a 16-bit format.
    let w = rng.vec(n * k, 0.5);
    assert_eq!(
        PackedMatrix::pack(n, k, &w).unwrap().format(),
        WeightFormat::F32
    );
    let err = PackedMatrix::pack_as(n, k, &w, WeightFormat::Bf16).unwrap_err();
    assert!(
        err.to_string().contains("cannot represent exactly"),
        "{err}"
    );
}
