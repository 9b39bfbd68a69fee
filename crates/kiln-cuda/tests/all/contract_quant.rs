//! Kernel contract for block-quantised weights (kernels/quant_gemm.cu) on fresh random blocks
//! of each format (Q8_0, Q4_0, Q4_K, Q6_K, and Q4_K and Q6_K in 256-k records, Q4K2 and Q6K2,
//! which only the second decode family reads, each giving its 128-k format's bits):
//! - `skinny_<format>_*` against a float64 reference of x . W^T with W the reference
//!   dequantisation (kiln-formats, the CPU's values): within 2e-5 of sum |x w| per output, at
//!   odd row counts and weight shapes, outputs poisoned first, a row stride wider than the
//!   weight (columns past it left untouched); every entry of a format gives each row the bits
//!   it has alone. Negative controls: the same check against a reference with one quant or one
//!   scale changed must fail, so the tolerance cannot hide a wrong value.
//! - `planted_bugs_fail`: quant_gemm.cu loaded with one bug planted in its text at a time (an
//!   offset, a sign, a scale group, Q4_K's minimum, Q6_K's high bits, the embedding scale,
//!   Q4K2's unpacked scales and halves, Q6K2's halves and scales) must fail the contract.
//! - `quant_to_bf16_*`: bit for bit the bf16 of the reference value (as a copy expanded at load).
//! - `quant_embed_*`: bit for bit the reference f32 row times the scale.
//! - Bandwidth lines (`BENCH`) on Llama-3-8B shapes, rotating over copies past the L2.

use crate::common;

use common::{from_bf16, gpu_or_skip, timed, to_bf16, Checks, Rng};
use kiln_cuda::device::{DevBuf, Gpu, Lane};
use kiln_cuda::quant_gemm::DecodeFamily;
use kiln_cuda::quant_layout::{decode_rows, repack, GpuQuant};
use kiln_cuda::quant_order::RowOrder;
use kiln_formats::dequantize_into;
use kiln_model::dummy_quant::random_blocks;

mod planted;

struct Weight {
    q: GpuQuant,
    n: usize,
    k: usize,
    blocks: Vec<u8>,
    /// The reference values (kiln-formats).
    values: Vec<f32>,
    dev: DevBuf<u8>,
}

impl Weight {
    fn new(gpu: &Gpu, rng: &mut Rng, q: GpuQuant, n: usize, k: usize) -> Weight {
        let blocks = random_blocks(q.dtype(), n, k, rng.next_u64()).unwrap();
        Weight::of_blocks(gpu, q, n, k, blocks)
    }

    fn of_blocks(gpu: &Gpu, q: GpuQuant, n: usize, k: usize, blocks: Vec<u8>) -> Weight {
        let values = reference_values(q, n, k, &blocks);
        let packed = repack(q, n, k, &blocks).unwrap();
        let dev = gpu.alloc::<u8>(packed.len()).unwrap();
        dev.upload(0, &packed).unwrap();
        Weight {
            q,
            n,
            k,
            blocks,
            values,
            dev,
        }
    }
}

fn reference_values(q: GpuQuant, n: usize, k: usize, blocks: &[u8]) -> Vec<f32> {
    let mut v = vec![0f32; n * k];
    dequantize_into(q.dtype(), blocks, &mut v).unwrap();
    v
}

/// For rows `rows` of x: (x . W^T in float64, sum |x w| per output).
fn reference(x: &[f32], values: &[f32], n: usize, k: usize, rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut dot = Vec::with_capacity(rows * n);
    let mut mag = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        for j in 0..n {
            let wr = &values[j * k..(j + 1) * k];
            let (mut d, mut a) = (0f64, 0f64);
            for (&p, &q) in xr.iter().zip(wr) {
                let t = p as f64 * q as f64;
                d += t;
                a += t.abs();
            }
            dot.push(d);
            mag.push(a);
        }
    }
    (dot, mag)
}

const RTOL: f64 = 2e-5;

/// Outputs outside the tolerance (a non-finite output counts), and the worst relative error.
fn compare(got: &[f32], want: &[f64], mag: &[f64]) -> (usize, f64) {
    let mut bad = 0;
    let mut worst = 0f64;
    for ((&g, &w), &m) in got.iter().zip(want).zip(mag) {
        let err = (g as f64 - w).abs() / m.max(1e-30);
        if !g.is_finite() || err > RTOL {
            bad += 1;
        }
        worst = worst.max(if g.is_finite() { err } else { f64::INFINITY });
    }
    (bad, worst)
}

/// y rows of width `ldy` (columns n..ldy must stay poisoned) for `rows` rows through the
/// format's dispatch in `fam`.
fn run_skinny(
    gpu: &Gpu,
    fam: DecodeFamily,
    w: &Weight,
    x: &DevBuf<u16>,
    rows: usize,
    ldy: usize,
) -> Vec<f32> {
    let y = gpu.alloc::<f32>(rows * ldy).unwrap();
    y.fill_bytes(0xFF).unwrap();
    gpu.skinny_quant_family(fam, w.q, y.ptr(), ldy, x.ptr(), w.dev.ptr(), rows, w.n, w.k)
        .unwrap();
    y.download(gpu, 0, rows * ldy).unwrap()
}

fn shapes(q: GpuQuant) -> Vec<(usize, usize)> {
    let mut s = vec![(37, 256), (16, 512), (250, 1024), (9, 4096)];
    if q.dtype().block_elems() == 32 {
        s.extend([(33, 96), (70, 4128)]);
    }
    s
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn skinny_quant_contract() {
    let Some(gpu) = gpu_or_skip("skinny_quant_contract") else {
        return;
    };
    let mut rng = Rng::new("skinny_quant_contract");
    let mut c = Checks::new("skinny_quant");
    skinny_contract(
        &gpu,
        &mut rng,
        &mut c,
        &shapes,
        &[1, 3, 8, 13, 16, 31, 40, 64, 77],
        true,
    );
    c.finish();
}

/// The skinny kernels of every format on `gpu` at `shapes`, `row_counts`; with `full`, also
/// every entry against the rows alone and the negative controls.
fn skinny_contract(
    gpu: &Gpu,
    rng: &mut Rng,
    c: &mut Checks,
    shapes: &dyn Fn(GpuQuant) -> Vec<(usize, usize)>,
    row_counts: &[usize],
    full: bool,
) {
    for q in GpuQuant::ALL {
        for (n, k) in shapes(q) {
            let w = Weight::new(gpu, rng, q, n, k);
            let max_rows = 77;
            let xf = from_bf16(&to_bf16(&rng.vec(max_rows * k, 1.0)));
            let x = gpu.alloc::<u16>(max_rows * k).unwrap();
            x.upload(0, &to_bf16(&xf)).unwrap();
            let (want, mag) = reference(&xf, &w.values, n, k, max_rows);
            for fam in DecodeFamily::ALL.into_iter().filter(|f| f.reads(q)) {
                for &rows in row_counts {
                    let ldy = n + 5;
                    let t = std::time::Instant::now();
                    let y = run_skinny(gpu, fam, &w, &x, rows, ldy);
                    let secs = t.elapsed().as_secs_f64();
                    let got: Vec<f32> = (0..rows)
                        .flat_map(|r| y[r * ldy..r * ldy + n].iter().copied())
                        .collect();
                    let (bad, worst) = compare(&got, &want[..rows * n], &mag[..rows * n]);
                    c.check(
                        bad == 0,
                        format!("{fam:?} {q:?} m={rows} n={n} k={k}: {bad} outputs beyond {RTOL:.0e} of sum |x w|, worst {worst:.2e}, {:.3}ms", secs * 1e3),
                    );
                    let untouched =
                        (0..rows).all(|r| y[r * ldy + n..(r + 1) * ldy].iter().all(|v| v.is_nan()));
                    c.check(
                        untouched,
                        format!(
                            "{fam:?} {q:?} m={rows} n={n} k={k}: columns past the weight untouched"
                        ),
                    );
                }
                if q.two_halves() {
                    halves_are_the_128_k_format(gpu, c, fam, &w, &x, row_counts);
                }
                if !full {
                    continue;
                }
                every_entry_as_alone(gpu, c, fam, &w, &x);
                // Negative controls: one quant, then one scale, changed in the reference (at
                // short rows, where one value's share of sum |x w| is well above the
                // tolerance).
                if k > 1024 {
                    continue;
                }
                let y = run_skinny(gpu, fam, &w, &x, 4, n);
                for (what, at) in [("a quant", quant_byte(q)), ("a scale", scale_byte(q))] {
                    let mut blocks = w.blocks.clone();
                    let row_bytes = q.dtype().bytes_for(k).unwrap();
                    let at = (n / 2) * row_bytes + at;
                    blocks[at] ^= 0x24;
                    let values = reference_values(q, n, k, &blocks);
                    let (want, mag) = reference(&xf, &values, n, k, 4);
                    let (bad, _) = compare(&y, &want, &mag);
                    c.check(bad > 0, format!("{fam:?} {q:?} n={n} k={k}: a reference with {what} of row {} changed fails ({bad} outputs off)", n / 2));
                }
            }
        }
    }
}

/// Q4K2 and Q6K2 (the file's bytes in 256-k records) give Q4_K's and Q6_K's records' bits:
/// the same values in the same order of sums.
fn halves_are_the_128_k_format(
    gpu: &Gpu,
    c: &mut Checks,
    fam: DecodeFamily,
    w: &Weight,
    x: &DevBuf<u16>,
    row_counts: &[usize],
) {
    let q = if w.q == GpuQuant::Q4K2 {
        GpuQuant::Q4K
    } else {
        GpuQuant::Q6K
    };
    let plain = Weight::of_blocks(gpu, q, w.n, w.k, w.blocks.clone());
    for &rows in row_counts {
        let a = run_skinny(gpu, fam, w, x, rows, w.n);
        let b = run_skinny(gpu, fam, &plain, x, rows, w.n);
        c.check(
            a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
            format!(
                "{fam:?} {:?} m={rows} n={} k={}: {q:?}'s bits",
                w.q, w.n, w.k
            ),
        );
    }
}

/// Every entry of `fam` for the weight's format gives its first and last rows the bits they
/// have alone (x offset to the row).
fn every_entry_as_alone(gpu: &Gpu, c: &mut Checks, fam: DecodeFamily, w: &Weight, x: &DevBuf<u16>) {
    let (q, n, k) = (w.q, w.n, w.k);
    let alone = |r: usize| {
        let y1 = gpu.alloc::<f32>(n).unwrap();
        let xr = x.dev_ptr().row(r, k).addr();
        gpu.skinny_quant_family(fam, q, y1.ptr(), n, xr, w.dev.ptr(), 1, n, k)
            .unwrap();
        y1.download(gpu, 0, n).unwrap()
    };
    for (name, cap) in Gpu::skinny_quant_entries(fam, q) {
        let y = gpu.alloc::<f32>(cap * n).unwrap();
        y.fill_bytes(0xFF).unwrap();
        gpu.skinny_quant_entry(&name, y.ptr(), n, x.ptr(), w.dev.ptr(), cap, n, k)
            .unwrap();
        let batch = y.download(gpu, 0, cap * n).unwrap();
        let same_as = |r: usize| {
            batch[r * n..(r + 1) * n]
                .iter()
                .zip(&alone(r))
                .all(|(a, b)| a.to_bits() == b.to_bits())
        };
        let r = cap - 1;
        c.check(
            same_as(0) && same_as(r),
            format!("{name} n={n} k={k}: rows 0 and {r} of {cap} equal the rows alone bit for bit"),
        );
    }
}

/// A quant byte of the first block of a row.
fn quant_byte(q: GpuQuant) -> usize {
    match q {
        GpuQuant::Q8_0 | GpuQuant::Q4_0 => 5,
        GpuQuant::Q4K | GpuQuant::Q4K2 => 40,
        GpuQuant::Q6K | GpuQuant::Q6K2 => 10,
    }
}

/// A scale byte of the first block of a row (the low byte of an f16 scale, or a sub-block
/// scale).
fn scale_byte(q: GpuQuant) -> usize {
    match q {
        GpuQuant::Q8_0 | GpuQuant::Q4_0 => 0,
        GpuQuant::Q4K | GpuQuant::Q4K2 => 5,
        GpuQuant::Q6K | GpuQuant::Q6K2 => 195,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn dequantised_rows_are_the_reference_values() {
    let Some(gpu) = gpu_or_skip("dequantised_rows_are_the_reference_values") else {
        return;
    };
    let mut rng = Rng::new("dequantised_rows_are_the_reference_values");
    let mut c = Checks::new("quant_rows");
    rows_contract(&gpu, &mut rng, &mut c, &shapes);
    c.finish();
}

/// `quant_to_bf16_*` and `quant_embed_*` of every format on `gpu` at `shapes`, bit for bit.
fn rows_contract(
    gpu: &Gpu,
    rng: &mut Rng,
    c: &mut Checks,
    shapes: &dyn Fn(GpuQuant) -> Vec<(usize, usize)>,
) {
    for q in GpuQuant::ALL {
        for (n, k) in shapes(q) {
            let w = Weight::new(gpu, rng, q, n, k);
            // Expanded to bf16 in rows wider than the weight, as cuBLASLt reads the scratch,
            // by both kernels, and on the side stream as the layer-ahead expansion runs it.
            let ld = k + 8;
            for (words, lane) in [(false, Lane::Main), (true, Lane::Main), (false, Lane::Side)] {
                let out = gpu.alloc::<u16>(n * ld).unwrap();
                out.fill_bytes(0xFF).unwrap();
                gpu.quant_to_bf16_kernel(
                    words,
                    lane,
                    q,
                    out.ptr(),
                    ld,
                    w.dev.ptr(),
                    n,
                    k,
                    RowOrder::Natural,
                )
                .unwrap();
                if lane == Lane::Side {
                    gpu.side_stream().unwrap().synchronize().unwrap();
                }
                let got = out.download(gpu, 0, n * ld).unwrap();
                let mut want: Vec<u16> = to_bf16(&w.values);
                let ok = (0..n).all(|r| got[r * ld..r * ld + k] == want[r * k..(r + 1) * k]);
                let pad =
                    (0..n).all(|r| got[r * ld + k..(r + 1) * ld].iter().all(|&b| b == 0xFFFF));
                let which = match (words, lane) {
                    (true, _) => "quant_to_bf16_words",
                    (false, Lane::Main) => "quant_to_bf16",
                    (false, Lane::Side) => "quant_to_bf16 on the side stream",
                };
                c.check(ok && pad, format!("{q:?} {n}x{k}: {which} is the bf16 of every reference value, padding untouched"));
                // The device decoding is the host's copy of it, too.
                let host = decode_rows(q, n, k, &repack(q, n, k, &w.blocks).unwrap());
                want = to_bf16(&host);
                c.check(
                    (0..n).all(|r| got[r * ld..r * ld + k] == want[r * k..(r + 1) * k]),
                    format!("{q:?} {n}x{k}: {which} equals the host decoding of the layout"),
                );
            }
            // Embedding rows: f32, bit for bit, in any order and repeated.
            let mut ids: Vec<i32> = (0..n as i32).collect();
            rng.shuffle(&mut ids);
            ids.extend([n as i32 - 1, 0, n as i32 - 1]);
            let dids = gpu.alloc::<i32>(ids.len()).unwrap();
            dids.upload(0, &ids).unwrap();
            let x = gpu.alloc::<f32>(ids.len() * k).unwrap();
            x.fill_bytes(0xFF).unwrap();
            // Gemma scales its embeddings by sqrt(hidden); others by 1.
            let scale = if n % 2 == 0 { 1.0 } else { (k as f32).sqrt() };
            gpu.quant_embed(q, x.ptr(), w.dev.ptr(), dids.ptr(), ids.len(), k, scale)
                .unwrap();
            let rows = x.download(gpu, 0, ids.len() * k).unwrap();
            let same = ids.iter().enumerate().all(|(i, &id)| {
                let id = id as usize;
                rows[i * k..(i + 1) * k]
                    .iter()
                    .zip(&w.values[id * k..(id + 1) * k])
                    .all(|(a, b)| a.to_bits() == (b * scale).to_bits())
            });
            c.check(
                same,
                format!(
                    "{q:?} {n}x{k}: quant_embed gives the reference rows bit for bit ({} ids)",
                    ids.len()
                ),
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn skinny_quant_bandwidth() {
    let Some(gpu) = gpu_or_skip("skinny_quant_bandwidth") else {
        return;
    };
    let mut rng = Rng::new("skinny_quant_bandwidth");
    let x = gpu.alloc::<u16>(64 * 14336).unwrap();
    x.upload(0, &to_bf16(&rng.vec(64 * 14336, 1.0))).unwrap();
    // Llama-3-8B: QKV, O, gate/up, down, LM head. Each launch reads one of several copies of
    // the weight, together well past the 50 MB L2, as a decode step does.
    let llama = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)];
    for q in GpuQuant::ALL {
        // The LM head shape for the formats llama.cpp's Q4_K_M and Q8_0 files store it in.
        let head = [(128256, 4096)];
        let shapes = match q {
            GpuQuant::Q6K | GpuQuant::Q6K2 | GpuQuant::Q8_0 => [&llama[..], &head[..]].concat(),
            GpuQuant::Q4K | GpuQuant::Q4K2 => llama.to_vec(),
            GpuQuant::Q4_0 => vec![(28672, 4096)],
        };
        for (n, k) in shapes {
            let blocks = random_blocks(q.dtype(), n, k, rng.next_u64()).unwrap();
            let packed = repack(q, n, k, &blocks).unwrap();
            let copies: Vec<DevBuf<u8>> = (0..(600usize << 20).div_ceil(packed.len()))
                .map(|_| {
                    let w = gpu.alloc::<u8>(packed.len()).unwrap();
                    w.upload(0, &packed).unwrap();
                    w
                })
                .collect();
            let y = gpu.alloc::<f32>(64 * n).unwrap();
            for fam in DecodeFamily::ALL.into_iter().filter(|f| f.reads(q)) {
                for m in [1, 8, 32, 64] {
                    let mut turn = 0;
                    let mut launch = || {
                        turn += 1;
                        let w = copies[turn % copies.len()].ptr();
                        gpu.skinny_quant_family(fam, q, y.ptr(), n, x.ptr(), w, m, n, k)
                    };
                    launch().unwrap();
                    let iters = 30;
                    let secs = timed(&gpu, || {
                        for _ in 0..iters {
                            launch()?;
                        }
                        Ok(())
                    }) / iters as f64;
                    eprintln!(
                        "[skinny_quant] BENCH {fam:?} {q:?} m={m} n={n} k={k}: {:.1} us, weights read at {:.2} TB/s ({:.2} bits per weight)",
                        secs * 1e6,
                        packed.len() as f64 / secs / 1e12,
                        packed.len() as f64 * 8.0 / (n * k) as f64
                    );
                }
            }
            // The prefill path's expansion of the same weight, by both kernels.
            let out = gpu.alloc::<u16>(n * k).unwrap();
            for words in [false, true] {
                let secs = timed(&gpu, || {
                    for i in 0..10 {
                        let w = copies[i % copies.len()].ptr();
                        gpu.quant_to_bf16_kernel(
                            words,
                            Lane::Main,
                            q,
                            out.ptr(),
                            k,
                            w,
                            n,
                            k,
                            RowOrder::Natural,
                        )?;
                    }
                    Ok(())
                }) / 10.0;
                let which = if words {
                    "quant_to_bf16_words"
                } else {
                    "quant_to_bf16"
                };
                eprintln!(
                    "[skinny_quant] BENCH {q:?} {which} n={n} k={k}: {:.1} us ({:.2} TB/s read + written)",
                    secs * 1e6,
                    (packed.len() + n * k * 2) as f64 / secs / 1e12
                );
            }
        }
    }
}
