//! Launchers of kernels/quant_gemm.cu (and quant_decode.cu, the same module) and the product of
//! a block-quantised matrix: decode rows through `skinny2_<format>_*` (`KILN_QUANT_DECODE=v1`:
//! the first family, `skinny_<format>_*`; blocks dequantised in registers, one summation order
//! for any row count within a family), and the expansion to bf16 that prefill rows multiply
//! through cuBLASLt (quant_prefill.rs; the values rounded as a bf16 copy made at load would be,
//! so prefill rows match the weights expanded at load bit for bit).

use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};

use crate::device::{i32_of, Arg, DevPtr, Gpu, Lane};
use crate::kernel_entries::EntryPoint;
use crate::kernel_sources::source;
use crate::quant_layout::{GpuQuant, CHUNK, TILE_ROWS};
use crate::quant_order::RowOrder;
use crate::quant_weights::QuantMatrix;
use crate::skinny::SKINNY_MAX_ROWS;
use crate::skinny_fused::Epilogue;
use crate::switches::KernelChoice;

/// A family of decode kernels: each sums in its own order, the same for any row count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeFamily {
    /// `skinny_*` (quant_gemm.cu's `SQ_ENTRY`).
    V1,
    /// `skinny2_*` (quant_decode.cu's `SQ2_ENTRY`): fewer instructions per record.
    V2,
}

impl DecodeFamily {
    pub const ALL: [DecodeFamily; 2] = [DecodeFamily::V1, DecodeFamily::V2];

    /// Whether the family has kernels for `q` (the first reads 128-k records only).
    pub fn reads(self, q: GpuQuant) -> bool {
        self == DecodeFamily::V2 || !q.two_halves()
    }

    /// The family `KILN_QUANT_DECODE` picks.
    pub fn from_env() -> DecodeFamily {
        if KernelChoice::from_env().quant_decode_v2 {
            DecodeFamily::V2
        } else {
            DecodeFamily::V1
        }
    }
}

/// One `SQ_ENTRY` or `SQ2_ENTRY` of the module.
#[derive(Debug)]
struct Entry {
    name: String,
    family: DecodeFamily,
    /// Whether the odd columns (x rows 1, 3, ..) are summed: false only in one-row entries.
    odd: bool,
    format: GpuQuant,
    /// 8-row fragments of x per launch.
    nt: usize,
    stages: usize,
    warps: usize,
    /// 16-row tiles a CTA takes (x read once for them).
    tiles: usize,
}

impl Entry {
    /// The ring (warps x stages x tiles records), or the warp sums after it if larger.
    fn smem_bytes(&self) -> usize {
        let ring = self.warps * self.stages * self.tiles * self.format.record_bytes();
        ring.max(self.warps * self.tiles * self.nt * 128 * 4)
    }

    fn from_source(p: &EntryPoint) -> Result<Entry> {
        let num = |what: &str| p.num(what);
        let format = match p.arg("F").map(str::trim) {
            Some("QF_Q8_0") => GpuQuant::Q8_0,
            Some("QF_Q4_0") => GpuQuant::Q4_0,
            Some("QF_Q4K") => GpuQuant::Q4K,
            Some("QF_Q6K") => GpuQuant::Q6K,
            Some("QF_Q4K2") => GpuQuant::Q4K2,
            Some("QF_Q6K2") => GpuQuant::Q6K2,
            other => bail!("quant entry {}: unknown format {other:?}", p.name),
        };
        let (family, odd) = match p.arg("ODD").map(str::trim) {
            None => (DecodeFamily::V1, true),
            Some("true") => (DecodeFamily::V2, true),
            Some("false") => (DecodeFamily::V2, false),
            Some(other) => bail!("quant entry {}: ODD is {other:?}", p.name),
        };
        Ok(Entry {
            name: p.name.clone(),
            family,
            odd,
            format,
            nt: num("NT")?,
            stages: num("S")?,
            warps: num("W")?,
            tiles: if family == DecodeFamily::V2 {
                num("R")?
            } else {
                1
            },
        })
    }
}

/// The skinny entries of the module (its `SQ_ENTRY` and `SQ2_ENTRY` lines), read once.
fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| read_entries().expect("quant_gemm.cu's entries (unit-tested)"))
}

fn read_entries() -> Result<Vec<Entry>> {
    let src = source("quant_gemm").ok_or_else(|| anyhow!("no quant_gemm.cu module"))?;
    src.entry_points()?
        .iter()
        .filter(|p| p.name.starts_with("skinny_") || p.name.starts_with("skinny2_"))
        .map(Entry::from_source)
        .collect()
}

/// The entry of `family` for `m` rows (at most 64) of format `q`: the fewest fragments that
/// hold them; in the second family the one-row entry for one row, and for 9-32 rows the entry
/// that takes two tiles a CTA (`_t2`: x read once for both; `KILN_QUANT_TILES=1` keeps one).
/// Tiles a CTA never change a row's bits.
fn entry(family: DecodeFamily, q: GpuQuant, m: usize) -> Result<&'static Entry> {
    let nt = m.div_ceil(8).next_power_of_two();
    let v2 = family == DecodeFamily::V2;
    let one = v2 && m == 1;
    let tiles = if v2 && (nt == 2 || nt == 4) && KernelChoice::from_env().quant_tiles2 {
        2
    } else {
        1
    };
    entries()
        .iter()
        .find(|e| {
            e.family == family && e.format == q && e.nt == nt && e.odd != one && e.tiles == tiles
        })
        .ok_or_else(|| anyhow!("no {family:?} skinny entry for {q:?} and {m} rows"))
}

/// The skinny quant entries with the dynamic shared memory each needs.
pub fn smem_needs() -> Vec<(String, usize)> {
    entries()
        .iter()
        .map(|e| (e.name.clone(), e.smem_bytes()))
        .collect()
}

impl Gpu {
    /// y[m * ldy + n] = x[m, :] . W[n, :] for m < rows, n < n_rows, W `[n_rows, k]` in device
    /// layout of `q` at `w`, x bf16 `[rows, k]`, in launches of at most 64 rows. Each row's
    /// result is the same whatever `rows` is.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_quant(
        &self,
        q: GpuQuant,
        y: u64,
        ldy: usize,
        x: u64,
        w: u64,
        rows: usize,
        n_rows: usize,
        k: usize,
    ) -> Result<()> {
        self.skinny_quant_family(DecodeFamily::from_env(), q, y, ldy, x, w, rows, n_rows, k)
    }

    /// [`Gpu::skinny_quant`] through the kernels of `family`.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_quant_family(
        &self,
        family: DecodeFamily,
        q: GpuQuant,
        y: u64,
        ldy: usize,
        x: u64,
        w: u64,
        rows: usize,
        n_rows: usize,
        k: usize,
    ) -> Result<()> {
        let at = SegmentAt::natural(w, n_rows);
        self.skinny_quant_epi(family, q, &Epilogue::Store { y }, &at, ldy, x, rows, k)
    }

    /// [`Gpu::skinny_quant_family`] on the segment `at`, the sums going where `epi` says
    /// (skinny_fused.rs; y of STORE and ADD in rows of `ldy`). Epilogues other than a store of a
    /// segment in its natural order are the second family's only.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_quant_epi(
        &self,
        family: DecodeFamily,
        q: GpuQuant,
        epi: &Epilogue,
        at: &SegmentAt,
        ldy: usize,
        x: u64,
        rows: usize,
        k: usize,
    ) -> Result<()> {
        if !family.reads(q) {
            bail!(
                "{q:?} records are read by the second decode family only (256-k records are \
                 off under KILN_QUANT_DECODE=v1)"
            );
        }
        let pdl = KernelChoice::from_env().pdl;
        let mut done = 0;
        while done < rows {
            let m = (rows - done).min(SKINNY_MAX_ROWS);
            let e = entry(family, q, m)?;
            let xd = DevPtr::<u16>::new(x).row(done, k).addr();
            let epi = epi.from_row(done, ldy);
            self.launch_quant_entry(e, pdl, &epi, at, ldy, xd, m, k)?;
            done += m;
        }
        Ok(())
    }

    /// One launch of the skinny quant entry `name` (for tests that compare a format's
    /// entries).
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_quant_entry(
        &self,
        name: &str,
        y: u64,
        ldy: usize,
        x: u64,
        w: u64,
        rows: usize,
        n_rows: usize,
        k: usize,
    ) -> Result<()> {
        let Some(e) = entries().iter().find(|e| e.name == name) else {
            bail!("no skinny quant entry {name}");
        };
        let cap = if e.odd { 8 * e.nt } else { 1 };
        if rows == 0 || rows > cap {
            bail!("{name} takes 1..={cap} rows, got {rows}");
        }
        let at = SegmentAt::natural(w, n_rows);
        let epi = Epilogue::Store { y };
        self.launch_quant_entry(e, KernelChoice::from_env().pdl, &epi, &at, ldy, x, rows, k)
    }

    /// The names of the skinny entries of `family` for `q` with the rows each takes at most,
    /// fewest rows first.
    pub fn skinny_quant_entries(family: DecodeFamily, q: GpuQuant) -> Vec<(String, usize)> {
        entries()
            .iter()
            .filter(|e| e.family == family && e.format == q)
            .map(|e| (e.name.clone(), if e.odd { 8 * e.nt } else { 1 }))
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_quant_entry(
        &self,
        e: &Entry,
        pdl: bool,
        epi: &Epilogue,
        at: &SegmentAt,
        ldy: usize,
        x: u64,
        rows: usize,
        k: usize,
    ) -> Result<()> {
        let (w, n_rows) = (at.w, at.n_rows);
        check_shape(e.format, n_rows, k)?;
        at.order.check(n_rows)?;
        let dims = [
            Arg::I32(i32_of(rows, "rows")?),
            Arg::I32(i32_of(n_rows, "n")?),
            Arg::I32(i32_of(k, "k")?),
            Arg::I32(i32_of(ldy, "ldy")?),
        ];
        let args: Vec<Arg> = match (e.family, epi) {
            (DecodeFamily::V1, &Epilogue::Store { y }) if at.order == RowOrder::Natural => {
                [Arg::Ptr(y), Arg::Ptr(x), Arg::Ptr(w)]
                    .into_iter()
                    .chain(dims)
                    .collect()
            }
            (DecodeFamily::V1, _) => {
                bail!("the first quantised decode family has no epilogues or row orders")
            }
            (DecodeFamily::V2, _) => {
                let mut a = vec![Arg::Ptr(x), Arg::Ptr(w)];
                a.extend(dims);
                a.extend(at.order.args(n_rows)?);
                a.push(Arg::I32(i32_of(at.tile_base, "first tile")?));
                a.extend(epi.args(n_rows)?);
                a
            }
        };
        if matches!(epi, Epilogue::Store { .. } | Epilogue::Add { .. }) && n_rows > ldy {
            bail!("skinny quant GEMM: {n_rows} outputs per row in rows of {ldy}");
        }
        let grid = (n_rows.div_ceil(TILE_ROWS * e.tiles) as u32, 1, 1);
        let threads = 32 * e.warps as u32;
        self.launch_with(&e.name, grid, threads, e.smem_bytes() as u32, &args, pdl)
    }

    /// out[n * ld + k] = bf16 of W[n, k] (the reference dequantisation's value, rounded to
    /// nearest even) for the `[n_rows, k]` weight `w` in device layout of `q`, `ld` a multiple
    /// of 8, the rows stored in `order` in the weight's order; through the first kernel
    /// (`words`, KILN_QUANT_EXPAND=words) or the second, on `lane`'s stream.
    #[allow(clippy::too_many_arguments)]
    pub fn quant_to_bf16_kernel(
        &self,
        words: bool,
        lane: Lane,
        q: GpuQuant,
        out: u64,
        ld: usize,
        w: u64,
        n_rows: usize,
        k: usize,
        order: RowOrder,
    ) -> Result<()> {
        check_shape(q, n_rows, k)?;
        order.check(n_rows)?;
        if n_rows == 0 {
            return Ok(());
        }
        // Runs of eight values are stored 16 bytes at a time.
        if !ld.is_multiple_of(8) || ld < k {
            bail!(
                "quant_to_bf16: rows of {ld} values for {k} columns (a multiple of 8 at least k)"
            );
        }
        // A thread per 8 values (the first kernel), or 64 threads a record and four records a
        // CTA.
        let units = if words {
            (n_rows * k.div_ceil(CHUNK) * 16).div_ceil(256)
        } else {
            (n_rows.div_ceil(TILE_ROWS) * k.div_ceil(CHUNK)).div_ceil(4)
        };
        let grid = (units.min(self.sm_count as usize * 16) as u32, 1, 1);
        let name = if words {
            format!("quant_to_bf16_words_{}", q.name())
        } else {
            format!("quant_to_bf16_{}", q.name())
        };
        let mut args = vec![
            Arg::Ptr(out),
            Arg::Ptr(w),
            Arg::I32(i32_of(n_rows, "n")?),
            Arg::I32(i32_of(k, "k")?),
            Arg::I32(i32_of(ld, "ld")?),
        ];
        args.extend(order.args(n_rows)?);
        if !words {
            args.push(Arg::I32(
                KernelChoice::from_env().quant_expand_vstore as i32,
            ));
        }
        self.launch_on(lane, &name, grid, 256, 0, &args)
    }

    /// x[i, :] = the f32 values of row ids[i] of the `[_, k]` weight `w` (device layout of
    /// `q`) times `scale`, for i < n_tokens; ids are device i32s, each checked by the step
    /// (kiln_step).
    #[allow(clippy::too_many_arguments)]
    pub fn quant_embed(
        &self,
        q: GpuQuant,
        x: u64,
        w: u64,
        ids: u64,
        n_tokens: usize,
        k: usize,
        scale: f32,
    ) -> Result<()> {
        check_shape(q, 0, k)?;
        if n_tokens == 0 {
            return Ok(());
        }
        let threads = (k.div_ceil(CHUNK) * 16).next_multiple_of(32).clamp(32, 256) as u32;
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(w),
            Arg::Ptr(ids),
            Arg::I32(i32_of(k, "k")?),
            Arg::F32(scale),
        ];
        self.launch(
            &format!("quant_embed_{}", q.name()),
            (n_tokens as u32, 1, 1),
            threads,
            0,
            &args,
        )
    }
}

fn check_shape(q: GpuQuant, n_rows: usize, k: usize) -> Result<()> {
    if !q.fits(k) {
        bail!(
            "a {} weight needs rows of whole {}-value blocks, got {k} columns",
            q.dtype(),
            q.dtype().block_elems()
        );
    }
    i32_of(n_rows, "rows")?;
    Ok(())
}

/// y[r, :] = x[r, :] . W^T for r < rows, every row through the skinny kernels (decode rows,
/// and logits rows at the LM head).
pub fn quant_skinny_all(gpu: &Gpu, w: &QuantMatrix, y: u64, x: u64, rows: usize) -> Result<()> {
    quant_skinny_fused(gpu, w, &Epilogue::Store { y }, x, rows)
}

/// [`quant_skinny_all`] with the sums going where `epi` says (y of STORE and ADD the whole
/// weight's rows; a RoPE or SwiGLU epilogue needs the rows stored in its pairs, quant_order.rs).
pub fn quant_skinny_fused(
    gpu: &Gpu,
    w: &QuantMatrix,
    epi: &Epilogue,
    x: u64,
    rows: usize,
) -> Result<()> {
    let family = DecodeFamily::from_env();
    for s in &w.segments {
        let paired = match epi {
            Epilogue::Store { .. } | Epilogue::Add { .. } => true,
            Epilogue::Rope(r) => {
                s.order
                    == RowOrder::Rope {
                        hd: r.hd,
                        neox: r.neox,
                    }
            }
            Epilogue::Glu { .. } => s.order == RowOrder::Glu && w.segments.len() == 1,
        };
        if !paired || !s.row0.is_multiple_of(TILE_ROWS) {
            bail!(
                "a {:?} epilogue on rows stored {:?} from row {}",
                epi,
                s.order,
                s.row0
            );
        }
        let at = SegmentAt {
            w: s.data.ptr(),
            order: s.order,
            tile_base: s.row0 / TILE_ROWS,
            n_rows: s.rows,
        };
        let epi = match *epi {
            Epilogue::Store { y } => Epilogue::Store {
                y: DevPtr::<f32>::new(y).offset(s.row0).addr(),
            },
            Epilogue::Add { y } => Epilogue::Add {
                y: DevPtr::<f32>::new(y).offset(s.row0).addr(),
            },
            other => other,
        };
        gpu.skinny_quant_epi(family, s.format, &epi, &at, w.rows, x, rows, w.cols)?;
    }
    Ok(())
}

/// A segment of a quantised weight as a decode launch reads it: its records at `w`, `n_rows`
/// rows stored in `order`, its first tile the whole weight's `tile_base`.
#[derive(Debug, Clone, Copy)]
pub struct SegmentAt {
    pub w: u64,
    pub order: RowOrder,
    pub tile_base: usize,
    pub n_rows: usize,
}

impl SegmentAt {
    /// A whole weight of `n_rows` rows at `w`, stored as it is.
    pub fn natural(w: u64, n_rows: usize) -> SegmentAt {
        SegmentAt {
            w,
            order: RowOrder::Natural,
            tile_base: 0,
            n_rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_has_an_entry_for_every_row_count_within_the_smem() {
        for (family, prefix, extra) in [
            (DecodeFamily::V1, "skinny", 0),
            (DecodeFamily::V2, "skinny2", 3),
        ] {
            for q in GpuQuant::ALL.into_iter().filter(|&q| family.reads(q)) {
                let names = Gpu::skinny_quant_entries(family, q);
                assert_eq!(names.len(), 4 + extra, "{family:?} {q:?}");
                let mut warps = None;
                for m in 1..=SKINNY_MAX_ROWS {
                    let e = entry(family, q, m).unwrap();
                    let one = family == DecodeFamily::V2 && m == 1;
                    let cap = if one { 1 } else { 8 * e.nt };
                    assert!(m <= cap && (cap == 1 || m > cap / 2 || cap == 8));
                    let two = family == DecodeFamily::V2 && (9..=32).contains(&m);
                    assert_eq!(e.tiles, if two { 2 } else { 1 }, "{}", e.name);
                    let suffix = if two { "_t2" } else { "" };
                    assert_eq!(e.name, format!("{prefix}_{}_{cap}{suffix}", q.name()));
                    assert!(e.stages >= 3, "{}", e.name);
                    assert!(e.smem_bytes() <= 227 * 1024, "{}", e.name);
                    // One summation order per family and format: the same warp count in
                    // every entry.
                    assert_eq!(*warps.get_or_insert(e.warps), e.warps, "{}", e.name);
                }
            }
        }
        // The first family has no entry for 256-k records.
        for (q2, q) in [
            (GpuQuant::Q4K2, GpuQuant::Q4K),
            (GpuQuant::Q6K2, GpuQuant::Q6K),
        ] {
            assert!(Gpu::skinny_quant_entries(DecodeFamily::V1, q2).is_empty());
            assert!(entry(DecodeFamily::V1, q2, 1).is_err());
            // A warp keeps one half of every record: an even warp count (quant_decode.cu);
            // each entry has the 128-k format's warps, fragments and tiles, so its order of
            // sums and bits.
            for e in entries().iter().filter(|e| e.format == q2) {
                assert_eq!(e.warps % 2, 0, "{}", e.name);
                let twin = e.name.replace(q2.name(), q.name());
                let t = entries().iter().find(|t| t.name == twin).unwrap();
                assert_eq!(
                    (t.format, t.warps, t.nt, t.tiles, t.odd),
                    (q, e.warps, e.nt, e.tiles, e.odd),
                    "{}",
                    e.name
                );
            }
        }
    }
}
