//! Launchers of kernels/flash_wide.cu and decode_wide.cu: attention for heads too wide for the
//! register tiles of flash_attn.cu and decode_attn.cu (Gemma 4's 512-wide full-attention
//! heads). `Gpu::flash_attn` and `Gpu::decode_attn` send those head dims here, so callers name
//! no kernel.

use anyhow::{bail, Result};

use crate::device::{i32_of, Arg, Gpu};
use crate::kernels::{AttnInputs, KvView, DECODE_MAX_SPLITS, DECODE_MIN_SPAN, FLASH_TILE_ROWS};

/// Head dims of the wide kernels.
pub const WIDE_HEAD_DIMS: [usize; 1] = [512];
/// Output columns one flash CTA accumulates (its share of the head), and keys per K/V tile.
const FLASH_WIDE_COLS: usize = 256;
const FLASH_WIDE_BN: usize = 32;
/// Query heads one decode CTA serves (decode_wide.cu's DW_GROUP).
const DECODE_WIDE_GROUP: usize = 2;

/// Dynamic shared memory of the wide flash kernel: the Q tile, two stages of whole-head K and
/// of the CTA's columns of V, rows padded by 8.
pub fn flash_wide_smem_bytes(hd: usize) -> usize {
    let (ldk, ldv) = (hd + 8, FLASH_WIDE_COLS + 8);
    (FLASH_TILE_ROWS * ldk + 2 * FLASH_WIDE_BN * ldk + 2 * FLASH_WIDE_BN * ldv) * 2
}

/// The wide kernels that need more than the default 48 KB of dynamic shared memory.
pub fn large_smem_kernels() -> Vec<(String, usize)> {
    WIDE_HEAD_DIMS
        .iter()
        .map(|&hd| (format!("flash_attn_wide_hd{hd}"), flash_wide_smem_bytes(hd)))
        .collect()
}

impl Gpu {
    /// [`Gpu::flash_attn`] for a wide head: each CTA computes the scores of 64 rows over the
    /// whole head and accumulates 256 of its output columns.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn flash_attn_wide(
        &self,
        q: u64,
        kv: KvView,
        tiles: u64,
        n_tiles: usize,
        inp: &AttnInputs,
        out: u64,
        n_q: usize,
        hd: usize,
        window: usize,
        scale: f32,
    ) -> Result<()> {
        if !WIDE_HEAD_DIMS.contains(&hd) {
            bail!("wide flash attention supports head dims {WIDE_HEAD_DIMS:?}, not {hd}");
        }
        let args = [
            Arg::Ptr(q),
            Arg::Ptr(kv.k),
            Arg::Ptr(kv.v),
            Arg::Ptr(tiles),
            Arg::Ptr(inp.bt_start),
            Arg::Ptr(inp.block_tables),
            Arg::Ptr(out),
            Arg::I32(n_q as i32),
            Arg::I32(kv.n_kv as i32),
            Arg::I32(kv.block_size as i32),
            Arg::I32(i32_of(window, "window")?),
            Arg::F32(scale * std::f32::consts::LOG2_E),
        ];
        let grid = (n_tiles as u32, n_q as u32, (hd / FLASH_WIDE_COLS) as u32);
        self.launch(
            &format!("flash_attn_wide_hd{hd}"),
            grid,
            128,
            flash_wide_smem_bytes(hd) as u32,
            &args,
        )
    }

    /// [`Gpu::decode_attn`] for a wide head: the same splits, then their merge.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_attn_wide(
        &self,
        q: u64,
        kv: KvView,
        inp: &AttnInputs,
        part_o: u64,
        part_ml: u64,
        out: u64,
        rows: usize,
        n_q: usize,
        hd: usize,
        window: usize,
        scale: f32,
    ) -> Result<()> {
        if !WIDE_HEAD_DIMS.contains(&hd) {
            bail!("wide decode attention supports head dims {WIDE_HEAD_DIMS:?}, not {hd}");
        }
        let groups_per_kv = (n_q / kv.n_kv).div_ceil(DECODE_WIDE_GROUP);
        let args = [
            Arg::Ptr(q),
            Arg::Ptr(kv.k),
            Arg::Ptr(kv.v),
            Arg::Ptr(inp.positions),
            Arg::Ptr(inp.token_seq),
            Arg::Ptr(inp.bt_start),
            Arg::Ptr(inp.block_tables),
            Arg::Ptr(part_o),
            Arg::Ptr(part_ml),
            Arg::I32(n_q as i32),
            Arg::I32(kv.n_kv as i32),
            Arg::I32(kv.block_size as i32),
            Arg::I32(i32_of(window, "window")?),
            Arg::F32(scale * std::f32::consts::LOG2_E),
            Arg::I32(DECODE_MAX_SPLITS as i32),
            Arg::I32(DECODE_MIN_SPAN as i32),
        ];
        let grid = (
            DECODE_MAX_SPLITS as u32,
            (kv.n_kv * groups_per_kv) as u32,
            rows as u32,
        );
        self.launch(&format!("decode_attn_wide_hd{hd}"), grid, 128, 0, &args)?;
        let args = [
            Arg::Ptr(part_o),
            Arg::Ptr(part_ml),
            Arg::Ptr(inp.positions),
            Arg::Ptr(out),
            Arg::I32(n_q as i32),
            Arg::I32(hd as i32),
            Arg::I32(DECODE_MAX_SPLITS as i32),
            Arg::I32(DECODE_MIN_SPAN as i32),
        ];
        self.launch(
            "decode_attn_wide_combine",
            (n_q as u32, rows as u32, 1),
            hd.clamp(32, 1024) as u32,
            0,
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
    }
}
