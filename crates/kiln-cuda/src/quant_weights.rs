//! Matrices kept in their GGUF block formats on the device. A fused matrix of the schema
//! (Q/K/V, gate/up) whose parts are all stored in formats the kernels read stays quantised,
//! each run of parts in one format one segment (Q4_K_M files store V in Q6_K on some layers
//! and Q/K in Q4_K); anything else is expanded to bf16 at load as before. Only with
//! `KILN_GPU_QUANT=1` for now (switches.rs); without it everything is expanded. The loader and the memory figure ask the same question
//! ([`kept_formats`]), so the footprint predicted before a load is what the load allocates.

use std::ops::Range;

use anyhow::{bail, ensure, Context, Result};
use kiln_model::schema::{self, Fused, GlobalWeight, LayerWeight};
use kiln_model::{ModelSpec, WeightSource};

use crate::device::{DevBuf, Gpu, PinnedBuf};
use crate::quant_layout::{repack, GpuQuant};
use crate::quant_order::RowOrder;
use crate::switches::Switches;

/// Where a segment's records are: device memory, or pinned host memory that the kernels read
/// over the bus (the embedding, unless `KILN_QUANT_EMBED=device`: a step reads its tokens' rows only).
pub enum SegData {
    Device(DevBuf<u8>),
    Host(PinnedBuf<u8>),
}

impl SegData {
    /// The address kernels read the records at.
    pub fn ptr(&self) -> u64 {
        match self {
            SegData::Device(b) => b.ptr(),
            SegData::Host(b) => b.device_addr(),
        }
    }

    /// Device bytes held (none for host memory).
    pub fn bytes(&self) -> usize {
        match self {
            SegData::Device(b) => b.bytes(),
            SegData::Host(_) => 0,
        }
    }

    /// Host bytes held.
    pub fn host_bytes(&self) -> usize {
        match self {
            SegData::Device(_) => 0,
            SegData::Host(b) => b.as_slice().len(),
        }
    }
}

/// Rows `row0..row0 + rows` of a matrix, in one block format, in device layout, the rows in
/// `order`.
pub struct QuantSegment {
    pub row0: usize,
    pub rows: usize,
    pub format: GpuQuant,
    pub order: RowOrder,
    pub data: SegData,
}

/// A `[rows, cols]` matrix in block-quantised segments.
pub struct QuantMatrix {
    pub rows: usize,
    pub cols: usize,
    pub segments: Vec<QuantSegment>,
}

impl QuantMatrix {
    /// Device bytes.
    pub fn bytes(&self) -> usize {
        self.segments.iter().map(|s| s.data.bytes()).sum()
    }

    /// Pinned host bytes (a host-kept embedding).
    pub fn host_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.data.host_bytes()).sum()
    }

    /// Bytes of a bf16 copy: what the prefill scratch must hold for it.
    pub fn bf16_bytes(&self) -> usize {
        self.rows * self.cols * 2
    }
}

/// The layer matrices that may stay quantised: the four projections.
pub fn quantizable_layer(w: LayerWeight) -> bool {
    matches!(
        w,
        LayerWeight::Qkv | LayerWeight::O | LayerWeight::GateUp | LayerWeight::Down
    )
}

/// Whether a quantised embedding is kept in pinned host memory (the default; `KILN_QUANT_EMBED=device` keeps it on the GPU), as
/// llama.cpp keeps it: only when the LM head is a matrix of its own, since a tied one is read
/// whole every step.
pub fn embedding_on_host(spec: &ModelSpec) -> bool {
    Switches::from_env().quant_embed_host && !spec.tie_embeddings
}

/// The global matrices that may stay quantised: the embedding (gathered row by row) and the
/// LM head.
pub fn quantizable_global(w: GlobalWeight) -> bool {
    matches!(w, GlobalWeight::Embedding | GlobalWeight::LmHead)
}

/// The format of each part of `f` when the GPU keeps it quantised: `on` (the switch), a matrix
/// whose every part the source stores in a format the kernels read, with whole blocks per row.
/// None: the matrix is expanded to bf16. Q4_K and Q6_K are kept in 256-k records unless
/// `KILN_QUANT_Q4K=128` or `KILN_QUANT_Q6K=128` ([`Records256`]).
pub fn kept_formats<W>(f: &Fused<W>, src: &dyn WeightSource, on: bool) -> Option<Vec<GpuQuant>> {
    kept_formats_as(f, src, on, Records256::from_env())
}

/// Which K-quant formats the GPU keeps in records of 256 k, the file's bytes (Q4K2, Q6K2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Records256 {
    pub q4_k: bool,
    pub q6_k: bool,
}

impl Records256 {
    pub fn from_env() -> Records256 {
        let s = Switches::from_env();
        Records256 {
            q4_k: s.quant_q4k256,
            q6_k: s.quant_q6k256,
        }
    }

    /// The format a matrix stored as `q` is kept in.
    fn kept(self, q: GpuQuant) -> GpuQuant {
        match q {
            GpuQuant::Q4K if self.q4_k => GpuQuant::Q4K2,
            GpuQuant::Q6K if self.q6_k => GpuQuant::Q6K2,
            q => q,
        }
    }
}

/// [`kept_formats`] with the 256-k records `wide` names.
fn kept_formats_as<W>(
    f: &Fused<W>,
    src: &dyn WeightSource,
    on: bool,
    wide: Records256,
) -> Option<Vec<GpuQuant>> {
    let cols = f.cols?;
    if !on || f.parts.is_empty() {
        return None;
    }
    f.parts
        .iter()
        .map(|p| {
            if !src.has(p.id) {
                return None;
            }
            let q = wide.kept(GpuQuant::from_dtype(src.quantized_dtype(p.id)?)?);
            q.fits(cols).then_some(q)
        })
        .collect()
}

/// Runs of consecutive parts in one format: (format, part indices).
fn runs(formats: &[GpuQuant]) -> Vec<(GpuQuant, Range<usize>)> {
    let mut out: Vec<(GpuQuant, Range<usize>)> = Vec::new();
    for (i, &q) in formats.iter().enumerate() {
        match out.last_mut() {
            Some((last, r)) if *last == q => r.end = i + 1,
            _ => out.push((q, i..i + 1)),
        }
    }
    out
}

/// Device bytes of `f` kept in `formats`.
pub fn device_bytes<W>(f: &Fused<W>, formats: &[GpuQuant]) -> usize {
    let cols = f.cols.unwrap_or(1);
    runs(formats)
        .into_iter()
        .map(|(q, r)| q.device_bytes(f.parts[r].iter().map(|p| p.rows).sum(), cols))
        .sum()
}

/// Loads `f` in `formats` (from [`kept_formats`]): each run of parts read as blocks, its rows
/// put in `order`, repacked and uploaded as one segment (into pinned host memory with `host`).
/// `tick` is called once per part loaded.
pub fn load_matrix<W>(
    gpu: &Gpu,
    src: &dyn WeightSource,
    f: &Fused<W>,
    formats: &[GpuQuant],
    host: bool,
    order: RowOrder,
    mut tick: impl FnMut(),
) -> Result<QuantMatrix> {
    let cols = f.cols.context("a matrix weight without columns")?;
    let mut segments = Vec::new();
    let mut row0 = 0;
    for (q, range) in runs(formats) {
        let parts = &f.parts[range];
        let rows: usize = parts.iter().map(|p| p.rows).sum();
        let mut blocks = Vec::new();
        for p in parts {
            let t = src
                .load_quantized(p.id)
                .with_context(|| format!("loading {}", p.id))?;
            let Some(t) = t else {
                bail!(
                    "{}: the source said {} blocks but offers none",
                    p.id,
                    q.dtype()
                );
            };
            ensure!(
                t.dtype == q.dtype() && t.shape == [p.rows, cols],
                "{}: the source offers {} {:?}, expected {} [{}, {cols}]",
                p.id,
                t.dtype,
                t.shape,
                q.dtype(),
                p.rows
            );
            blocks.extend_from_slice(&t.data);
            tick();
        }
        let row_bytes = q.dtype().bytes_for(cols).context("a row of whole blocks")?;
        let blocks = order.reorder(rows, row_bytes, &blocks)?;
        let packed = repack(q, rows, cols, &blocks)
            .with_context(|| format!("repacking {} rows of {}", rows, parts[0].id))?;
        let data = if host {
            let mut b = PinnedBuf::<u8>::new(gpu, packed.len())?;
            b.as_mut_slice().copy_from_slice(&packed);
            SegData::Host(b)
        } else {
            let b = gpu.alloc::<u8>(packed.len())?;
            b.upload(0, &packed)?;
            SegData::Device(b)
        };
        segments.push(QuantSegment {
            row0,
            rows,
            format: q,
            order,
            data,
        });
        row0 += rows;
    }
    Ok(QuantMatrix {
        rows: row0,
        cols,
        segments,
    })
}

/// What `load_weights` holds for `spec` from `src` with quantised weights `on`, as
/// (device bytes of the weights apart from the RoPE tables, bytes of the prefill scratch),
/// the fp8 projections (`fp8`) counted as bf16: they are never kept in block formats.
pub fn weight_bytes(
    spec: &ModelSpec,
    src: &dyn WeightSource,
    on: bool,
    fp8: bool,
) -> (usize, usize) {
    weight_bytes_as(
        spec,
        src,
        on,
        fp8,
        Records256::from_env(),
        embedding_on_host(spec),
        crate::switches::Switches::from_env().quant_ahead.is_some(),
    )
}

/// [`weight_bytes`] with the 256-k records `wide` names, the embedding on the host or not.
fn weight_bytes_as(
    spec: &ModelSpec,
    src: &dyn WeightSource,
    on: bool,
    fp8: bool,
    wide: Records256,
    embed_host: bool,
    ahead: bool,
) -> (usize, usize) {
    let mut bytes = 0;
    let mut scratch = 0;
    for f in schema::global_weights(spec) {
        bytes += match kept_formats_as(&f, src, on && quantizable_global(f.weight), wide) {
            Some(_) if f.weight == GlobalWeight::Embedding && embed_host => 0,
            Some(q) => device_bytes(&f, &q),
            None => f.len() * 2,
        };
    }
    for (l, layer) in spec.layers.iter().enumerate() {
        // The layer-ahead buffers (quant_prefill.rs): two of the widest layer's expansions.
        let mut layer_len = 0;
        for f in schema::layer_weights(l, layer, spec.hidden_size) {
            let kept = on && quantizable_layer(f.weight) && !(fp8 && f.weight.fp8_projection());
            bytes += match kept_formats_as(&f, src, kept, wide) {
                Some(q) => {
                    scratch = scratch.max(f.len() * 2);
                    layer_len += crate::quant_prefill::room(f.len());
                    device_bytes(&f, &q)
                }
                None => f.len() * 2,
            };
        }
        if ahead {
            scratch = scratch.max(2 * 2 * layer_len);
        }
    }
    (bytes, scratch)
}

/// The quantised part of the weights for describe(): " (of which Q4_K 3.90 GiB, Q6_K 0.85
/// GiB; prefill scratch 0.81 GiB in the buffers, expanded a layer ahead)", or nothing.
pub fn describe(w: &crate::weights::ModelWeights) -> String {
    let mut per: Vec<(GpuQuant, usize)> = Vec::new();
    let label = |q: GpuQuant| match q {
        GpuQuant::Q4K2 => "Q4_K (256-k records)".to_string(),
        GpuQuant::Q6K2 => "Q6_K (256-k records)".to_string(),
        q => q.dtype().to_string(),
    };
    for s in w.quantized().flat_map(|m| &m.segments) {
        match per.iter_mut().find(|(q, _)| *q == s.format) {
            Some((_, b)) => *b += s.data.bytes(),
            None => per.push((s.format, s.data.bytes())),
        }
    }
    if per.is_empty() {
        return String::new();
    }
    per.sort_by_key(|(q, _)| q.code());
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    let formats: Vec<String> = per
        .iter()
        .map(|(q, b)| format!("{} {:.2} GiB", label(*q), gib(*b)))
        .collect();
    let host: usize = w.quantized().map(QuantMatrix::host_bytes).sum();
    let host = if host > 0 {
        format!(
            "; the embedding in pinned host memory, {:.2} GiB",
            gib(host)
        )
    } else {
        String::new()
    };
    let ahead = if w.ahead.is_some() {
        ", expanded a layer ahead"
    } else {
        ""
    };
    format!(
        " (of which {}; prefill scratch {:.2} GiB in the buffers{ahead}{host})",
        formats.join(", "),
        gib(w.scratch_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_model::dummy::DummySource;

    #[test]
    fn runs_group_consecutive_formats() {
        use GpuQuant::*;
        assert_eq!(runs(&[Q4K, Q4K, Q6K]), vec![(Q4K, 0..2), (Q6K, 2..3)]);
        assert_eq!(runs(&[Q8_0]), vec![(Q8_0, 0..1)]);
        assert_eq!(runs(&[Q4K, Q6K, Q4K]).len(), 3);
    }

    #[test]
    fn formats_follow_the_source_and_the_switch() {
        let src = DummySource::preset("tiny:q4_k_m").unwrap();
        let spec = src.config().spec();
        let layers: Vec<_> = (0..4)
            .map(|l| schema::layer_weights(l, &spec.layers[l], spec.hidden_size))
            .collect();
        let qkv = |l: usize| {
            let f = layers[l]
                .iter()
                .find(|f| f.weight == LayerWeight::Qkv)
                .unwrap();
            kept_formats(f, &src, true)
        };
        // tiny's last layer gets Q6_K for V (llama.cpp's Q4_K_M); both K-quants in the file's
        // 256-k records by default, in 128-k records on request.
        use GpuQuant::*;
        assert_eq!(qkv(0), Some(vec![Q4K2, Q4K2, Q4K2]));
        assert_eq!(qkv(3), Some(vec![Q4K2, Q4K2, Q6K2]));
        let qkv128 = layers[3]
            .iter()
            .find(|f| f.weight == LayerWeight::Qkv)
            .unwrap();
        let k128 = kept_formats_as(qkv128, &src, true, Records256::default());
        assert_eq!(k128, Some(vec![Q4K, Q4K, Q6K]));
        let norm = layers[0]
            .iter()
            .find(|f| f.weight == LayerWeight::AttnNorm)
            .unwrap();
        assert_eq!(kept_formats(norm, &src, true), None);
        let f = layers[0]
            .iter()
            .find(|f| f.weight == LayerWeight::Qkv)
            .unwrap();
        assert_eq!(kept_formats(f, &src, false), None);
        let plain = DummySource::preset("tiny").unwrap();
        assert_eq!(kept_formats(f, &plain, true), None);
        // Quantised bytes are fewer than bf16, and the scratch holds the largest matrix.
        let at = |on, ahead| {
            weight_bytes_as(&spec, &src, on, false, Records256::default(), false, ahead)
        };
        let (q, scratch) = at(true, false);
        let (b, none) = at(false, false);
        assert!(q < b / 3, "{q} vs {b}");
        assert_eq!(none, 0);
        assert_eq!(scratch, 2 * 768 * 256 * 2);
        // The layer-ahead buffers: two bf16 copies of a layer's quantised matrices.
        let layer: usize = layers[0]
            .iter()
            .filter(|f| kept_formats(f, &src, true).is_some())
            .map(|f| f.len().next_multiple_of(128))
            .sum();
        assert_eq!(at(true, true).1, 2 * 2 * layer);
        assert!(at(true, true).1 > scratch);
        assert_eq!(at(false, true).1, 0);
    }

    #[test]
    fn k_quants_in_256_k_records_take_the_files_bytes() {
        // Llama-3-8B in llama.cpp's Q4_K_M mix: each kept Q4_K matrix in Q4K2 takes the file's
        // 144 bytes a 256-value block (4.5 bits a weight) instead of Q4_K records' 152 (4.75),
        // each Q6_K one in Q6K2 the file's 210 instead of 216 (6.5625 bits, not 6.75); nothing
        // else changes, the prefill scratch neither.
        let src = DummySource::preset("llama3-8b:q4_k_m").unwrap();
        let spec = src.config().spec();
        let both = Records256 {
            q4_k: true,
            q6_k: true,
        };
        // 256-value blocks of the parts kept in format `q`.
        let blocks = |q: GpuQuant| {
            fn of<W>(f: &Fused<W>, src: &DummySource, wide: Records256, q: GpuQuant) -> usize {
                let formats = kept_formats_as(f, src, true, wide).unwrap();
                f.parts
                    .iter()
                    .zip(formats)
                    .filter(|(_, k)| *k == q)
                    .map(|(p, _)| p.rows * f.cols.unwrap() / 256)
                    .sum()
            }
            let mut n = 0;
            for f in schema::global_weights(&spec) {
                if quantizable_global(f.weight) {
                    n += of(&f, &src, both, q);
                }
            }
            for (l, layer) in spec.layers.iter().enumerate() {
                for f in schema::layer_weights(l, layer, spec.hidden_size) {
                    if quantizable_layer(f.weight) {
                        n += of(&f, &src, both, q);
                    }
                }
            }
            n
        };
        let (q4k_blocks, q6k_blocks) = (blocks(GpuQuant::Q4K2), blocks(GpuQuant::Q6K2));
        assert!(q4k_blocks > 0 && q6k_blocks > 0);
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        for embed_host in [false, true] {
            let at = |wide| weight_bytes_as(&spec, &src, true, false, wide, embed_host, false);
            let (records, scratch) = at(Records256::default());
            let q4k_only = Records256 {
                q4_k: true,
                q6_k: false,
            };
            let (q4k2, scratch2) = at(q4k_only);
            let (files, scratch3) = at(both);
            assert_eq!((scratch, scratch), (scratch2, scratch3));
            // The embedding (Q4_K) leaves the sum when it is kept on the host.
            let embed = if embed_host {
                spec.vocab_size * spec.hidden_size / 256
            } else {
                0
            };
            assert_eq!(records - q4k2, (q4k_blocks - embed) * (152 - 144));
            assert_eq!(q4k2 - files, q6k_blocks * (216 - 210));
            eprintln!(
                "llama3-8b:q4_k_m weights, embedding on the {}: {:.3} GiB in 128-k records, {:.3} GiB with Q4K2, {:.3} GiB with Q4K2 and Q6K2",
                if embed_host { "host" } else { "device" },
                gib(records),
                gib(q4k2),
                gib(files)
            );
        }
    }
}
