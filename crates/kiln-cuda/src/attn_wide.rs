//! Launchers of kernels/flash_wide.cu, decode_wide.cu and decode_mma_wide.cu: attention for
//! heads too wide for the register tiles of flash_attn.cu, decode_attn.cu and decode_mma.cu
//! (Gemma 4's 512-wide full-attention heads). `Gpu::flash_attn` and `Gpu::decode_attn` send
//! those head dims here, so callers name no kernel; `Gpu::decode_mma` launches
//! decode_mma_wide.cu's entry itself with the shared memory sized here.

use anyhow::{bail, Result};

use crate::attn_args::{attn_shape, flash_ptrs};
use crate::device::{i32_of, Arg, Gpu};
use crate::kernels::{AttnCall, FlashTiles, FLASH_TILE_ROWS};
use crate::kernels_attn::SimtDecode;
use crate::switches::Switches;

/// Head dims of the wide kernels.
pub const WIDE_HEAD_DIMS: [usize; 1] = [512];
/// Output columns one flash CTA accumulates (its share of the head), and keys per K/V tile.
const FLASH_WIDE_COLS: usize = 256;
const FLASH_WIDE_BN: usize = 32;
/// decode_wide.cu's family: [`Gpu::decode_attn_simt`] for a wide head, the same splits, then
/// their merge (a CTA serves DW_GROUP = 2 query heads).
pub(crate) const DECODE_WIDE: SimtDecode = SimtDecode {
    kernel: "decode_attn_wide",
    combine: "decode_attn_wide_combine",
    group: 2,
    combine_threads: 1024,
};
/// decode_mma_wide.cu: keys per K/V tile, ring stages, warps (each a quarter of the head).
const DECODE_MMA_WIDE_TILE: usize = 32;
const DECODE_MMA_WIDE_STAGES: usize = 3;
const DECODE_MMA_WIDE_WARPS: usize = 4;

/// Dynamic shared memory of the wide flash kernel: the Q tile, two stages of whole-head K and
/// of the CTA's columns of V, rows padded by 8.
pub fn flash_wide_smem_bytes(hd: usize) -> usize {
    let (ldk, ldv) = (hd + 8, FLASH_WIDE_COLS + 8);
    (FLASH_TILE_ROWS * ldk + 2 * FLASH_WIDE_BN * ldk + 2 * FLASH_WIDE_BN * ldv) * 2
}

/// Dynamic shared memory of the split wide flash kernel: the Q tile, two stages of whole-head
/// K and V, rows padded by 8, and each of the 8 warps' partial scores (16 rows x 33 floats).
pub fn flash_wide_split_smem_bytes(hd: usize) -> usize {
    let ld = hd + 8;
    (FLASH_TILE_ROWS + 4 * FLASH_WIDE_BN) * ld * 2 + 8 * 16 * 33 * 4
}

/// Dynamic shared memory of decode_mma_hd{hd} (wide): 16 query slots, the K/V ring, and each
/// warp's partial scores (16 slots x 33 floats), rows of K, V and Q padded by 8.
pub fn decode_mma_wide_smem_bytes(hd: usize) -> usize {
    let ld = hd + 8;
    (16 + 2 * DECODE_MMA_WIDE_STAGES * DECODE_MMA_WIDE_TILE) * ld * 2
        + DECODE_MMA_WIDE_WARPS * 16 * 33 * 4
}

/// Dynamic shared memory of flash_sm90_hd512 (flash_sm90_wide.cu, FwSmem): Q, one stage each
/// of K and V (64 keys x the whole head), the two warpgroups' partial scores (64 x 64 floats
/// each), four barriers, and 1 KB to align the base for the swizzle.
pub fn flash_sm90_wide_smem_bytes(hd: usize) -> usize {
    3 * 64 * hd * 2 + 2 * 64 * FLASH_SM90_WIDE_BN * 4 + 32 + 1024
}
/// Keys per K/V tile of flash_sm90_hd512.
const FLASH_SM90_WIDE_BN: usize = 64;

/// The wide kernels with the dynamic shared memory each needs.
pub fn smem_needs() -> Vec<(String, usize)> {
    WIDE_HEAD_DIMS
        .iter()
        .flat_map(|&hd| {
            [
                (format!("flash_attn_wide_hd{hd}"), flash_wide_smem_bytes(hd)),
                (
                    format!("flash_attn_wide_split_hd{hd}"),
                    flash_wide_split_smem_bytes(hd),
                ),
                (format!("decode_mma_hd{hd}"), decode_mma_wide_smem_bytes(hd)),
                (format!("flash_sm90_hd{hd}"), flash_sm90_wide_smem_bytes(hd)),
            ]
        })
        .collect()
}

impl Gpu {
    /// [`Gpu::flash_attn`] for a wide head, in the variant KILN_FLASH_WIDE selects.
    pub(crate) fn flash_attn_wide(&self, c: AttnCall, tiles: FlashTiles) -> Result<()> {
        let split = Switches::from_env().flash_wide_split;
        self.flash_attn_wide_with(split, c, tiles)
    }

    /// Prefill attention of a wide head: with `split`, 8 warps per CTA over 64 rows and the
    /// whole head, the two halves' partial scores summed in shared memory; else 4 warps per
    /// CTA over 64 rows and 256 of the output columns, the scores recomputed in each half.
    pub fn flash_attn_wide_with(&self, split: bool, c: AttnCall, tiles: FlashTiles) -> Result<()> {
        let hd = c.hd;
        if !WIDE_HEAD_DIMS.contains(&hd) {
            bail!("wide flash attention supports head dims {WIDE_HEAD_DIMS:?}, not {hd}");
        }
        if tiles.n == 0 {
            return Ok(());
        }
        let mut args = flash_ptrs(&c, tiles).to_vec();
        args.extend(attn_shape(&c)?);
        if split {
            let grid = (tiles.n as u32, c.n_q as u32, 1);
            let smem = flash_wide_split_smem_bytes(hd) as u32;
            return self.launch(
                &format!("flash_attn_wide_split_hd{hd}"),
                grid,
                256,
                smem,
                &args,
            );
        }
        let grid = (tiles.n as u32, c.n_q as u32, (hd / FLASH_WIDE_COLS) as u32);
        self.launch(
            &format!("flash_attn_wide_hd{hd}"),
            grid,
            128,
            flash_wide_smem_bytes(hd) as u32,
            &args,
        )
    }

    /// Prefill attention of a wide head with wgmma (flash_sm90_wide.cu): one query head per
    /// CTA, 384 threads, the grid in groups of `kv_group` KV heads' query heads as
    /// flash_sm90's (0: one group). The overlapped and turn-taking variants of the narrower
    /// heads have no wide form: every [`crate::attn_launch::FlashKernel::Sm90`] runs this
    /// ([`Gpu::flash_attn_kernel`] has returned on empty launches).
    pub(crate) fn flash_sm90_wide(
        &self,
        c: AttnCall,
        tiles: FlashTiles,
        kv_group: usize,
    ) -> Result<()> {
        let (n_q, hd, n_kv) = (c.n_q, c.hd, c.kv.n_kv);
        if n_kv == 0 || !n_q.is_multiple_of(n_kv) {
            bail!("flash_sm90_hd{hd} needs whole GQA groups, not {n_q} query heads over {n_kv} KV heads");
        }
        let group = crate::attn_launch::flash_sm90_group(n_q, n_kv, kv_group)?;
        let mut args = flash_ptrs(&c, tiles).to_vec();
        args.extend(attn_shape(&c)?);
        args.push(Arg::I32(i32_of(group, "flash_sm90 group")?));
        self.launch(
            &format!("flash_sm90_hd{hd}"),
            (tiles.n as u32, n_q as u32, 1),
            384,
            flash_sm90_wide_smem_bytes(hd) as u32,
            &args,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_flash_kernel_fits_the_shared_memory_of_an_sm() {
        for hd in WIDE_HEAD_DIMS {
            assert!(hd.is_multiple_of(FLASH_WIDE_COLS) && hd.is_multiple_of(32));
            assert!(flash_wide_smem_bytes(hd) <= 227 * 1024, "hd {hd}");
        }
        assert_eq!(flash_wide_smem_bytes(512), 166_912);
        // One CTA per SM: the most an sm_90 CTA may take is 227 KB.
        assert!(decode_mma_wide_smem_bytes(512) <= 227 * 1024);
        assert!(flash_wide_split_smem_bytes(512) <= 227 * 1024);
        assert!(flash_sm90_wide_smem_bytes(512) <= 227 * 1024);
        assert_eq!(flash_sm90_wide_smem_bytes(512), 230_432);
    }
}
