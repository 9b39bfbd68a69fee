//! Typed launchers for the first attention kernels: prefill attention with mma.sync
//! (kernels/flash_attn.cu), decode attention on CUDA cores (kernels/decode_attn.cu) and the
//! reference attention (kernels/ref_attn.cu). The variants beside them and the choice of family
//! are in attn_launch.rs. Pointers are device addresses; argument lists match the .cu signatures.

use anyhow::{bail, Result};

use crate::attn_args::{attn_shape, combine_args, decode_ptrs, flash_ptrs};
use crate::device::{i32_of, Arg, Gpu};
use crate::kernels::{
    flash_smem_bytes, AttnCall, FlashTiles, Partials, ATTN_HEAD_DIMS, DECODE_MAX_SPLITS,
    DECODE_MIN_SPAN, FLASH_HEAD_DIMS,
};

/// Query heads one decode CTA serves (more GQA heads take more CTAs).
const DECODE_MAX_GROUP: usize = 4;

/// A CUDA-core split-KV decode family: its kernel (named before its head dim), its combine
/// kernel, the query heads of a GQA group a CTA serves and the most threads of a combine block.
pub(crate) struct SimtDecode {
    pub kernel: &'static str,
    pub combine: &'static str,
    pub group: usize,
    pub combine_threads: usize,
}

/// decode_attn.cu's family, for the flash head dims.
const DECODE_SIMT: SimtDecode = SimtDecode {
    kernel: "decode_attn",
    combine: "decode_attn_combine",
    group: DECODE_MAX_GROUP,
    combine_threads: 256,
};
/// decode_attn_combine stages at most this many splits in shared memory.
const DECODE_COMBINE_MAX_SPLITS: usize = 128;
const _: () = assert!(DECODE_MAX_SPLITS <= DECODE_COMBINE_MAX_SPLITS);

/// Query heads one flash-attention CTA serves: 2 for even GQA groups when allowed, else 1.
fn flash_heads_per_cta(pairs: bool, n_q: usize, n_kv: usize) -> usize {
    if pairs && n_kv > 0 && (n_q / n_kv).is_multiple_of(2) {
        2
    } else {
        1
    }
}

impl Gpu {
    /// Prefill attention with mma.sync (flash_attn*) over `tiles`: `pairs` lets two heads of
    /// a GQA group share a CTA (where the group is even). Both variants give the same bits.
    /// [`Gpu::flash_attn`] picks the family.
    pub fn flash_attn_with(&self, pairs: bool, c: AttnCall, tiles: FlashTiles) -> Result<()> {
        if tiles.n == 0 {
            return Ok(());
        }
        let hd = c.hd;
        if crate::attn_wide::WIDE_HEAD_DIMS.contains(&hd) {
            return self.flash_attn_wide(c, tiles);
        }
        if !FLASH_HEAD_DIMS.contains(&hd) {
            bail!("flash attention supports head dims {ATTN_HEAD_DIMS:?}, not {hd}");
        }
        let mut args = flash_ptrs(&c, tiles).to_vec();
        args.extend(attn_shape(&c)?);
        let heads = flash_heads_per_cta(pairs, c.n_q, c.kv.n_kv);
        let name = if heads == 2 {
            format!("flash_attn2_hd{hd}")
        } else {
            format!("flash_attn_hd{hd}")
        };
        self.launch(
            &name,
            (tiles.n as u32, (c.n_q / heads) as u32, 1),
            128 * heads as u32,
            flash_smem_bytes(hd, heads) as u32,
            &args,
        )
    }

    /// Decode attention on CUDA cores (decode_attn_hd*) for `rows` rows (flat tokens 0..rows:
    /// decode rows, or any rows whose keys are in the cache, as a backend without flash
    /// attention runs its prefill rows), split over the KV length into `part`, then merged.
    /// [`Gpu::decode_attn`] picks the family.
    pub(crate) fn decode_attn_simt(&self, c: AttnCall, part: Partials, rows: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let hd = c.hd;
        let family = if crate::attn_wide::WIDE_HEAD_DIMS.contains(&hd) {
            crate::attn_wide::DECODE_WIDE
        } else if FLASH_HEAD_DIMS.contains(&hd) {
            DECODE_SIMT
        } else {
            bail!("decode attention supports head dims {ATTN_HEAD_DIMS:?}, not {hd}");
        };
        let n_kv = c.kv.n_kv;
        let groups_per_kv = (c.n_q / n_kv).div_ceil(family.group);
        let mut args = decode_ptrs(&c, part).to_vec();
        args.extend(attn_shape(&c)?);
        args.extend([
            Arg::I32(DECODE_MAX_SPLITS as i32),
            Arg::I32(DECODE_MIN_SPAN as i32),
        ]);
        // Fewer CTAs than split slots once the rows are many (a prefill chunk here can be
        // thousands of rows): decode_mma's rule, same bits.
        let sx = self.split_ctas(DECODE_MAX_SPLITS, n_kv * groups_per_kv, rows);
        let grid = (sx as u32, (n_kv * groups_per_kv) as u32, rows as u32);
        self.launch(&format!("{}_hd{hd}", family.kernel), grid, 128, 0, &args)?;
        let args = combine_args(&c, part, (DECODE_MAX_SPLITS, DECODE_MIN_SPAN));
        self.launch(
            family.combine,
            (c.n_q as u32, rows as u32, 1),
            hd.clamp(32, family.combine_threads) as u32,
            0,
            &args,
        )
    }

    /// The reference attention for flat tokens 0..n_tokens.
    pub fn ref_attn(&self, c: AttnCall, n_tokens: usize) -> Result<()> {
        if n_tokens == 0 {
            return Ok(());
        }
        let hd = c.hd;
        if hd == 0 || hd > 512 || (hd > 32 && !hd.is_multiple_of(32)) {
            bail!("reference attention supports head dims up to 32, or multiples of 32 up to 512, not {hd}");
        }
        let (kv, inp) = (c.kv, c.inp);
        let args = [
            Arg::Ptr(c.q),
            Arg::Ptr(kv.k),
            Arg::Ptr(kv.v),
            Arg::Ptr(inp.positions),
            Arg::Ptr(inp.token_seq),
            Arg::Ptr(inp.bt_start),
            Arg::Ptr(inp.block_tables),
            Arg::Ptr(c.out),
            Arg::I32(n_tokens as i32),
            Arg::I32(c.n_q as i32),
            Arg::I32(kv.n_kv as i32),
            Arg::I32(hd as i32),
            Arg::I32(kv.block_size as i32),
            Arg::I32(i32_of(c.window, "window")?),
            Arg::F32(c.scale * std::f32::consts::LOG2_E),
        ];
        let warps = n_tokens * c.n_q;
        self.launch(
            "ref_attn",
            ((warps.div_ceil(4)) as u32, 1, 1),
            128,
            0,
            &args,
        )
    }
}
