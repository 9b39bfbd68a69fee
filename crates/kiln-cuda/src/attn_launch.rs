//! Launchers of the attention variants that sit beside the first ones: decode attention on the
//! tensor cores (kernels/decode_mma.cu), prefill attention with wgmma for sm_90
//! (kernels/flash_sm90.cu), and the choice of family for each. Each family is batch- and
//! chunk-invariant on its own; families differ from one another in the last bits, so one
//! process uses one of each throughout (KernelChoice, from the environment).

use anyhow::{bail, Result};

use crate::attn_args::{attn_shape, combine_args, decode_ptrs, flash_ptrs};
use crate::device::{i32_of, Arg, Gpu};
use crate::kernels::{
    AttnCall, FlashTiles, Partials, DECODE_MAX_SPLITS, DECODE_MIN_SPAN, DECODE_MMA_MAX_SPLITS,
};
use crate::switches::{DecodeFold, KernelChoice, SplitCtas, Switches};

/// Head dims of decode_mma_hd*.
pub const DECODE_MMA_HEAD_DIMS: [usize; 5] = [16, 32, 64, 128, 256];
/// Head dims of decode_mmat_hd* (the transposed step: KILN_DECODE_TRANSPOSE).
pub const DECODE_MMAT_HEAD_DIMS: [usize; 3] = [64, 128, 256];
/// Head dims of decode_mma_deep_hd* and decode_mmat_deep_hd* (deep rings: KILN_DECODE_DEEP).
pub const DECODE_MMA_DEEP_HEAD_DIMS: [usize; 2] = [64, 128];
/// Head dims of decode_mma_la_hd* (the scores one step ahead: KILN_DECODE_LOOKAHEAD).
pub const DECODE_MMA_LA_HEAD_DIMS: [usize; 4] = [16, 32, 64, 128];
// decode_mma_combine stages a row's split maxima and sums in shared memory for 256 splits.
const _: () = assert!(DECODE_MAX_SPLITS <= 256 && DECODE_MMA_MAX_SPLITS <= 256);

/// Keys per step of decode_mma's warps.
const DECODE_MMA_STEP: usize = 16;
/// Warps of a decode_mma CTA, each serving whole splits (and, folding, one chain of them).
const DECODE_MMA_WARPS: usize = 4;

/// Head dims of flash_sm90_hd* (two query heads of an even GQA group per CTA).
pub const FLASH_SM90_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The prefill attention kernel family a launch uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashKernel {
    /// flash_attn*: mma.sync, K/V tiles of 64 (32 at head dim 256); `pairs`: two heads of an
    /// even group per CTA (same bits as one).
    Sm80 { pairs: bool },
    /// flash_sm90*: wgmma, K/V tiles of 128 (64 at head dim 256), two heads per CTA;
    /// `overlap`: the softmax of one tile beside the P V product of the one before;
    /// `pingpong` (with overlap): the two heads' warpgroups take turns issuing their products.
    /// `kv_group`: the grid starts the CTAs of this many KV heads' pairs tile by tile before
    /// the next group's (0: one group of every head). All give the same bits.
    Sm90 {
        overlap: bool,
        pingpong: bool,
        kv_group: usize,
    },
}

/// KV heads per group of flash_sm90's grid order for a launch whose tiles span `keys` keys
/// (summed over their sequences): the most, a divisor of `n_kv`, whose K and V take at most
/// half of the L2 cache, so the CTAs running at once read what L2 holds; 0 (one group) when
/// every head's fit or `keys` is 0.
pub fn flash_sm90_kv_group(n_kv: usize, hd: usize, keys: usize, l2_bytes: usize) -> usize {
    let per_head = keys.saturating_mul(hd * 4);
    if per_head == 0 || n_kv == 0 {
        return 0;
    }
    let fit = (l2_bytes / 2 / per_head).max(1);
    if fit >= n_kv {
        return 0;
    }
    (1..=fit)
        .rev()
        .find(|&d| n_kv.is_multiple_of(d))
        .unwrap_or(1)
}

/// The grid's units (head pairs, or heads at head dim 512) per group of flash_sm90's order for
/// `kv_group` KV heads a group (0: one group of all `units`): whole KV heads' units.
pub(crate) fn flash_sm90_group(units: usize, n_kv: usize, kv_group: usize) -> Result<usize> {
    match kv_group {
        0 => Ok(units),
        g if g <= n_kv && n_kv.is_multiple_of(g) => Ok(g * (units / n_kv)),
        g => bail!("flash_sm90 groups of {g} KV heads do not divide {n_kv}"),
    }
}

/// Keys per K/V tile of flash_sm90_hd{hd}.
fn flash_sm90_block_n(hd: usize) -> usize {
    if hd >= 256 {
        64
    } else {
        128
    }
}

/// K/V stages of flash_sm90_hd{hd} (FS_ENTRY in flash_sm90.cu): as many as fit in 227 KB.
fn flash_sm90_stages(hd: usize) -> usize {
    match hd {
        0..=64 => 4,
        65..=128 => 3,
        _ => 2,
    }
}

/// Dynamic shared memory of flash_sm90_hd{hd}: two heads' Q, the K and V stages, four
/// barriers per stage, and 1 KB to align the base for the swizzle.
pub fn flash_sm90_smem_bytes(hd: usize) -> usize {
    let stages = flash_sm90_stages(hd);
    (2 * 64 * hd + 2 * stages * flash_sm90_block_n(hd) * hd) * 2 + 32 * stages + 1024
}

/// The decode attention kernel family a launch uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeKernel {
    /// decode_attn_hd*: CUDA cores, split count and bounds from the row's length.
    Simt,
    /// decode_mma_hd*: tensor cores, power-of-two splits at absolute positions, the rows of
    /// one sequence sharing each K/V step; `fold`: whether a CTA folds a row's splits itself
    /// (KILN_DECODE_FOLD; the same bits either way; 512-wide heads never fold); `early`:
    /// whether the first K/V steps of keys written before the step go out before the kernel
    /// ahead ends, where the inputs allow it, and decode_mma_combine loads its first partials
    /// before its fold factors (KILN_ATTN_EARLY; the same bits either way);
    /// `ahead`: each step's scores computed one step ahead, beside the previous step's softmax,
    /// where the head dim has such an entry (KILN_DECODE_LOOKAHEAD; the same bits either way);
    /// `cols`: the combine gives a thread each (column, chain) (decode_mma_combine_cols,
    /// KILN_COMBINE_COLS) or a thread each column (decode_mma_combine); the same bits either way.
    /// `tr`: the transposed step (decode_mmat_*, KILN_DECODE_TRANSPOSE) where the head dim has
    /// it: other bits than the first form, the same among its own variants; no scores ahead.
    /// `deep`: deep rings (KILN_DECODE_DEEP, on) for launches of one wave that do not fold,
    /// where the head dim has them: more K/V steps in flight a warp, and more of them issued
    /// before the wait on the kernel ahead; the same bits either way.
    Mma {
        fold: DecodeFold,
        early: bool,
        ahead: bool,
        cols: bool,
        tr: bool,
        deep: bool,
    },
}

/// CTAs decode_mma gives each (row run, head group) along its split slots: the largest power of
/// two that keeps the grid within 4 CTAs a multiprocessor (every slot its own CTA at batch 1,
/// one CTA walking all of a row's slots from 64 rows of Llama-3-8B on an H200), at least one.
/// A CTA finding no key in a slot still costs its launch and ramp, and decode rows are short
/// as often as long, so a grid of many idle CTAs lost to a small one at every row count from 8
/// (H200, 2026-12-02: 32 CTAs a multiprocessor gave 4,469 tok/s at 32 rows, one CTA a row 4,846).
/// A power of two spreads the power-of-two split count evenly over the CTAs. Depends on the
/// row count only (a CUDA graph's grid is fixed at capture) and changes no bit.
/// KILN_DECODE_SPLIT_CTAS=all keeps one CTA per slot, `N` takes N, at any row count.
pub fn decode_split_ctas(
    max_splits: usize,
    groups: usize,
    rows: usize,
    sms: usize,
    how: SplitCtas,
) -> usize {
    let n = match how {
        SplitCtas::All => max_splits,
        SplitCtas::Fixed(n) => n,
        SplitCtas::Auto => {
            let fit = (4 * sms / (groups * rows).max(1)).max(1);
            1 << fit.ilog2()
        }
    };
    n.clamp(1, max_splits.max(1))
}

impl Gpu {
    /// [`decode_split_ctas`] on this device, as KILN_DECODE_SPLIT_CTAS asks: the grid's first
    /// dimension for every decode attention kernel with split slots.
    pub(crate) fn split_ctas(&self, max_splits: usize, groups: usize, rows: usize) -> usize {
        let how = Switches::from_env().decode_split_ctas;
        decode_split_ctas(max_splits, groups, rows, self.sm_count as usize, how)
    }
}

/// Stages of each decode_mma warp's K/V ring for head dim `hd` (DM_ENTRY in decode_mma.cu): one
/// more in the entries with the scores one step ahead (`ahead`).
fn decode_mma_stages(hd: usize, ahead: bool) -> usize {
    let plain = match hd {
        0..=16 => 6,
        17..=32 => 4,
        33..=128 => 3,
        _ => 2,
    };
    plain + ahead as usize
}

/// Stages of the deep rings (DM_ENTRY `decode_mma_deep_*`, `decode_mmat_deep_*`).
fn decode_mma_deep_stages(hd: usize) -> usize {
    if hd <= 64 {
        7
    } else {
        4
    }
}

/// The deep rings' entry and stages at head dim `hd`: `decode_mma_deep_hd*` (or `mmat`), or with
/// KILN_DECODE_DEEP_STAGES=6 at head dim 128 the first form's deeper rings.
fn decode_mma_deep_entry(hd: usize, tr: bool, stages: Option<usize>) -> (String, usize) {
    match (stages, hd, tr) {
        (Some(6), 128, false) => ("decode_mma_deep6_hd128".to_string(), 6),
        _ => (
            format!("decode_mma{}_deep_hd{hd}", if tr { "t" } else { "" }),
            decode_mma_deep_stages(hd),
        ),
    }
}

/// Dynamic shared memory of decode_mma_hd{hd} (`ahead`: decode_mma_la_hd{hd}): 16 query slots
/// and each warp's K/V ring, rows padded by 8 elements, and beyond head dim 128 the folding
/// chains' O (floats) before them.
pub fn decode_mma_smem_bytes(hd: usize, ahead: bool) -> usize {
    decode_mma_ring_smem_bytes(hd, decode_mma_stages(hd, ahead))
}

/// [`decode_mma_smem_bytes`] for rings of `stages` stages a warp.
fn decode_mma_ring_smem_bytes(hd: usize, stages: usize) -> usize {
    let ld = hd + 8;
    let chains_o = if hd > 128 {
        DECODE_MMA_WARPS * 16 * ld * 4
    } else {
        0
    };
    chains_o + (16 * ld + DECODE_MMA_WARPS * stages * 2 * DECODE_MMA_STEP * ld) * 2
}

/// The kernels of this file with the dynamic shared memory each needs.
pub fn smem_needs() -> Vec<(String, usize)> {
    let decode = DECODE_MMA_HEAD_DIMS
        .iter()
        .map(|&hd| {
            (
                format!("decode_mma_hd{hd}"),
                decode_mma_smem_bytes(hd, false),
            )
        })
        .chain(DECODE_MMA_LA_HEAD_DIMS.iter().map(|&hd| {
            (
                format!("decode_mma_la_hd{hd}"),
                decode_mma_smem_bytes(hd, true),
            )
        }))
        // The transposed step: the first form's rings and slots.
        .chain(DECODE_MMAT_HEAD_DIMS.iter().map(|&hd| {
            (
                format!("decode_mmat_hd{hd}"),
                decode_mma_smem_bytes(hd, false),
            )
        }))
        .chain(DECODE_MMA_DEEP_HEAD_DIMS.iter().flat_map(|&hd| {
            let b = decode_mma_ring_smem_bytes(hd, decode_mma_deep_stages(hd));
            [
                (format!("decode_mma_deep_hd{hd}"), b),
                (format!("decode_mmat_deep_hd{hd}"), b),
            ]
        }))
        .chain([(
            "decode_mma_deep6_hd128".to_string(),
            decode_mma_ring_smem_bytes(128, 6),
        )]);
    let flash = FLASH_SM90_HEAD_DIMS.iter().flat_map(|&hd| {
        let b = flash_sm90_smem_bytes(hd);
        ["flash_sm90_hd", "flash_sm90o_hd", "flash_sm90p_hd"].map(|p| (format!("{p}{hd}"), b))
    });
    decode.chain(flash).collect()
}

impl Gpu {
    /// The prefill kernel family for a layer's shape: the one the environment asks for where
    /// it has the head dim and the grouping (and, for sm90, the device), else mma.sync. `keys`:
    /// the keys the launch's tiles span, summed over their sequences (0: unknown), for the
    /// sm90 kernel's order.
    pub fn flash_kernel_for(&self, n_q: usize, n_kv: usize, hd: usize, keys: usize) -> FlashKernel {
        let k = KernelChoice::from_env();
        let even = n_kv > 0 && n_q.is_multiple_of(n_kv) && (n_q / n_kv).is_multiple_of(2);
        // A 512-wide head's sm90 kernel takes one query head a CTA: any whole grouping, unless
        // KILN_FLASH_WIDE keeps those heads on mma.sync.
        let sm90_shape = match crate::attn_wide::WIDE_HEAD_DIMS.contains(&hd) {
            true => Switches::from_env().flash_wide_sm90 && n_kv > 0 && n_q.is_multiple_of(n_kv),
            false => even,
        };
        if k.flash_sm90 && sm90_shape && self.has_func(&format!("flash_sm90_hd{hd}")) {
            // Unset, turns where they measured faster, and never when KILN_FLASH_OVERLAP=0.
            let pingpong = k.flash_pingpong.unwrap_or(hd <= 256 && k.flash_overlap);
            FlashKernel::Sm90 {
                overlap: k.flash_overlap || pingpong,
                pingpong,
                kv_group: if k.flash_l2 {
                    flash_sm90_kv_group(n_kv, hd, keys, self.l2_bytes)
                } else {
                    0
                },
            }
        } else {
            FlashKernel::Sm80 {
                pairs: k.flash_pairs,
            }
        }
    }

    /// Prefill attention over `tiles`, with the family [`Gpu::flash_kernel_for`] picks;
    /// `keys` as it takes them.
    pub fn flash_attn(&self, c: AttnCall, tiles: FlashTiles, keys: usize) -> Result<()> {
        // A windowed layer's rows read at most `window` keys each: small spans, one group.
        let keys = if c.window > 0 { 0 } else { keys };
        let kind = self.flash_kernel_for(c.n_q, c.kv.n_kv, c.hd, keys);
        self.flash_attn_kernel(kind, c, tiles)
    }

    /// [`Gpu::flash_attn`] with the family given.
    pub fn flash_attn_kernel(
        &self,
        kind: FlashKernel,
        c: AttnCall,
        tiles: FlashTiles,
    ) -> Result<()> {
        let (overlap, pingpong, kv_group) = match kind {
            FlashKernel::Sm80 { pairs } => return self.flash_attn_with(pairs, c, tiles),
            FlashKernel::Sm90 {
                overlap,
                pingpong,
                kv_group,
            } => (overlap, pingpong, kv_group),
        };
        if tiles.n == 0 {
            return Ok(());
        }
        let (n_q, hd, kv) = (c.n_q, c.hd, c.kv);
        if crate::attn_wide::WIDE_HEAD_DIMS.contains(&hd) {
            return self.flash_sm90_wide(c, tiles, kv_group);
        }
        if !FLASH_SM90_HEAD_DIMS.contains(&hd) {
            bail!("flash_sm90 supports head dims {FLASH_SM90_HEAD_DIMS:?}, not {hd}");
        }
        if kv.n_kv == 0 || !n_q.is_multiple_of(2 * kv.n_kv) {
            bail!(
                "flash_sm90 needs an even GQA group, not {n_q} query heads over {} KV heads",
                kv.n_kv
            );
        }
        // Head pairs per group of the grid's order: whole KV heads' pairs.
        let group = flash_sm90_group(n_q / 2, kv.n_kv, kv_group)?;
        let mut args = flash_ptrs(&c, tiles).to_vec();
        args.extend(attn_shape(&c)?);
        args.push(Arg::I32(i32_of(group, "flash_sm90 group")?));
        let name = if pingpong {
            format!("flash_sm90p_hd{hd}")
        } else if overlap {
            format!("flash_sm90o_hd{hd}")
        } else {
            format!("flash_sm90_hd{hd}")
        };
        self.launch(
            &name,
            (tiles.n as u32, (n_q / 2) as u32, 1),
            384,
            flash_sm90_smem_bytes(hd) as u32,
            &args,
        )
    }
}

impl Gpu {
    /// Decode attention for `rows` single-token rows (flat tokens 0..rows), split over the KV
    /// length into `part` (room for rows x n_q x DECODE_MAX_SPLITS partials), then merged; the
    /// kernel family the environment chooses.
    pub fn decode_attn(&self, c: AttnCall, part: Partials, rows: usize) -> Result<()> {
        // bf16 backends only load decode_mma; the others keep the typed kernel. 512-wide
        // heads take it only with KILN_DECODE_WIDE=mma (opt-in until measured).
        let sw = Switches::from_env();
        let hd = c.hd;
        let wide = crate::attn_wide::WIDE_HEAD_DIMS.contains(&hd);
        let kind = if sw.kernels.decode_mma
            && (!wide || sw.decode_wide_mma)
            && self.has_func(&format!("decode_mma_hd{hd}"))
        {
            DecodeKernel::Mma {
                fold: sw.decode_fold,
                early: sw.attn_early,
                ahead: sw.decode_lookahead,
                cols: sw.combine_cols,
                tr: sw.decode_transpose,
                deep: sw.decode_deep,
            }
        } else {
            DecodeKernel::Simt
        };
        self.decode_attn_with(kind, c, part, rows)
    }

    /// [`Gpu::decode_attn`] with the kernel family given.
    pub fn decode_attn_with(
        &self,
        kind: DecodeKernel,
        c: AttnCall,
        part: Partials,
        rows: usize,
    ) -> Result<()> {
        match kind {
            DecodeKernel::Simt => self.decode_attn_simt(c, part, rows),
            DecodeKernel::Mma {
                fold,
                early,
                ahead,
                cols,
                tr,
                deep,
            } => {
                let early = early && c.inp.old_keys_ready;
                self.decode_mma(c, part, rows, fold, early, (ahead, tr, deep), cols)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn decode_mma(
        &self,
        c: AttnCall,
        part: Partials,
        rows: usize,
        fold: DecodeFold,
        early: bool,
        (ahead, tr, deep): (bool, bool, bool),
        cols: bool,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let (n_q, hd, kv) = (c.n_q, c.hd, c.kv);
        // A 512-wide head takes decode_mma_wide.cu's entry: the same arguments, splits and
        // combine, its own shared memory, and always the full split count.
        let wide = crate::attn_wide::WIDE_HEAD_DIMS.contains(&hd);
        if !wide && !DECODE_MMA_HEAD_DIMS.contains(&hd) {
            bail!("decode_mma supports head dims {DECODE_MMA_HEAD_DIMS:?}, not {hd}");
        }
        if kv.n_kv == 0 || !n_q.is_multiple_of(kv.n_kv) {
            bail!(
                "decode_mma: {n_q} query heads do not group over {} KV heads",
                kv.n_kv
            );
        }
        // At most this many splits per row (the partials have room for decode_part_splits(),
        // which follows the same switch), each of at least min_span keys; the 512-wide entry
        // always takes the defaults.
        let sw = Switches::from_env();
        let (max_splits, min_span, long_from) = match wide {
            true => (DECODE_MAX_SPLITS, DECODE_MIN_SPAN, 0),
            false => {
                let (n, long_from) = crate::kernels::decode_mma_splits(&sw);
                (n, sw.decode_min_span.unwrap_or(DECODE_MIN_SPAN), long_from)
            }
        };
        // Spans rounded to multiples of 32 keys (of min_span under 32), or powers of two
        // (KILN_DECODE_SPAN=pow2), and in the high bits the long rows' length / 1024
        // (KILN_DECODE_LONG): decode_split.cuh's dm_span `rule`.
        let span_round = match sw.decode_span_pow2 {
            true => 0,
            false => min_span.min(32) as i32,
        } | ((long_from >> 10) << 16) as i32;
        // One CTA serves up to 16 query heads of a group (and 16 / heads rows of a sequence),
        // the transposed step 8 (dm_run's SLOTS).
        let tr = tr && DECODE_MMAT_HEAD_DIMS.contains(&hd);
        let slots = if tr { 8 } else { 16 };
        let group = n_q / kv.n_kv;
        let chunks = group.div_ceil(group.min(slots));
        // One CTA a row run and head group folds the row's splits itself (no combine) where
        // that fills the GPU; the same bits as the combine's fold.
        let groups = kv.n_kv * chunks;
        let fold = !wide
            && match fold {
                DecodeFold::Always => true,
                DecodeFold::Never => false,
                DecodeFold::Auto => rows * groups >= self.sm_count as usize,
            };
        // The scores one step ahead where the head dim has that entry, and only for launches
        // of few rows (no fold): its extra ring stage halves the CTAs a multiprocessor holds
        // at head dim 128 (144 KB of shared memory against 109), which only few rows can spare.
        // The same bits either way.
        let ahead = ahead && !wide && !fold && !tr && DECODE_MMA_LA_HEAD_DIMS.contains(&hd);
        // Every row is launched (rows whose run another CTA serves exit at once), each with
        // `sx` CTAs over its split slots (the 512-wide entry: one per slot; decode_mma: a
        // warp a slot, one CTA when folding), so the grid depends on the row count only.
        let sx = match (wide, fold) {
            (true, _) => max_splits,
            (false, true) => 1,
            (false, false) => self.split_ctas(max_splits.div_ceil(DECODE_MMA_WARPS), groups, rows),
        };
        // Deep rings hold a multiprocessor with one CTA: only for grids of one wave (batch 1;
        // H100 2026-12-06: at 4-8 streams and depth 512 they lost 1.4-2.5%). A function of the
        // row count, as the grid is.
        let deep = deep
            && !wide
            && !fold
            && !ahead
            && DECODE_MMA_DEEP_HEAD_DIMS.contains(&hd)
            && sx * groups * rows <= self.sm_count as usize;
        let deep = deep.then(|| decode_mma_deep_entry(hd, tr, sw.decode_deep_stages));
        let smem = match (wide, &deep) {
            (true, _) => crate::attn_wide::decode_mma_wide_smem_bytes(hd),
            (false, Some((_, stages))) => decode_mma_ring_smem_bytes(hd, *stages),
            (false, None) => decode_mma_smem_bytes(hd, ahead),
        };
        let mut args = decode_ptrs(&c, part).to_vec();
        if !wide {
            args.push(Arg::Ptr(c.out));
        }
        args.extend(attn_shape(&c)?);
        args.extend([
            Arg::I32(max_splits as i32),
            Arg::I32(min_span as i32),
            Arg::I32(span_round),
        ]);
        if !wide {
            args.extend([
                Arg::I32(fold as i32),
                Arg::I32(early as i32),
                // decode_mma.cu's DM_LAZY and DM_LEAN.
                Arg::I32(sw.decode_lazy as i32 | (sw.decode_lean as i32) << 1),
            ]);
        }
        let grid = (sx as u32, groups as u32, rows as u32);
        let name = match (ahead, tr, deep) {
            (true, _, _) => format!("decode_mma_la_hd{hd}"),
            (false, _, Some((name, _))) => name,
            (false, true, None) => format!("decode_mmat_hd{hd}"),
            (false, false, None) => format!("decode_mma_hd{hd}"),
        };
        self.launch(&name, grid, 128, smem as u32, &args)?;
        if fold {
            return Ok(());
        }
        // `early` (unless KILN_COMBINE_EARLY=0): the combine reads the rows' lengths before its
        // wait and loads its first partials before the fold factors (the same bits either way).
        // KILN_COMBINE_COLS: a CTA for each 32 columns of a head (decode_combine.cu).
        let mut args = combine_args(&c, part, (max_splits, min_span));
        let combine_early = early && sw.combine_early;
        args.extend([Arg::I32(span_round), Arg::I32(combine_early as i32)]);
        let (name, cols, threads) = match cols {
            true => ("decode_mma_combine_cols", hd.div_ceil(32), 128),
            false => ("decode_mma_combine", 1, hd.clamp(32, 256)),
        };
        let grid = (n_q as u32, rows as u32, cols as u32);
        self.launch(name, grid, threads as u32, 0, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_split_ctas, flash_sm90_kv_group, SplitCtas};

    #[test]
    fn flash_groups_keep_a_few_heads_kv_in_l2() {
        // Llama-3-8B (8 KV heads, hd 128) on an H200's 50 MiB of L2: 32k keys are 16 MiB of K
        // and V a head, one head a group; 8k keys 4 MiB, six fit, so four (a divisor of 8);
        // up to 6k keys every head fits: one group.
        let l2 = 50 << 20;
        assert_eq!(flash_sm90_kv_group(8, 128, 32_768, l2), 1);
        assert_eq!(flash_sm90_kv_group(8, 128, 8192, l2), 4);
        assert_eq!(flash_sm90_kv_group(8, 128, 6144, l2), 0);
        assert_eq!(flash_sm90_kv_group(8, 128, 2048, l2), 0);
        // Never less than one head, whatever the span (or with no L2); no keys: one group.
        assert_eq!(flash_sm90_kv_group(8, 128, 1 << 30, l2), 1);
        assert_eq!(flash_sm90_kv_group(8, 128, 0, l2), 0);
        assert_eq!(flash_sm90_kv_group(8, 128, 8192, 0), 1);
        // Six KV heads: 3 fit, 3 divides 6.
        assert_eq!(flash_sm90_kv_group(6, 128, 8192, 30 << 20), 3);
    }

    #[test]
    fn split_ctas_shrink_with_the_rows_only() {
        // Llama-3-8B's 8 KV heads on 132 multiprocessors: every slot its own CTA at batch 1,
        // halving as the rows double, one CTA a row and KV head from 64 rows, never none.
        let n = |rows| decode_split_ctas(64, 8, rows, 132, SplitCtas::Auto);
        let want = [
            (1, 64),
            (2, 32),
            (4, 16),
            (8, 8),
            (16, 4),
            (32, 2),
            (64, 1),
            (128, 1),
        ];
        for (rows, ctas) in want {
            assert_eq!(n(rows), ctas, "{rows} rows");
        }
        assert_eq!(n(100_000), 1);
        // Powers of two, and the grid within 4 CTAs a multiprocessor once it is not one a row.
        for rows in 1..300 {
            assert!(n(rows).is_power_of_two(), "{rows}");
            assert!(n(rows) == 1 || n(rows) * 8 * rows <= 4 * 132, "{rows}");
        }
        // The switch, and fewer slots than the rule would give.
        assert_eq!(decode_split_ctas(64, 8, 128, 132, SplitCtas::All), 64);
        assert_eq!(decode_split_ctas(64, 8, 1, 132, SplitCtas::Fixed(16)), 16);
        assert_eq!(decode_split_ctas(64, 8, 1, 132, SplitCtas::Fixed(100)), 64);
        assert_eq!(decode_split_ctas(4, 8, 1, 132, SplitCtas::Auto), 4);
    }
}
