//! The argument lists the paged attention kernels share, in their order, written once: the
//! prefill flash kernels' and the split-KV decode kernels' pointers, the shape every one of
//! them takes after its pointers, and the combine kernels' arguments.

use anyhow::Result;

use crate::device::{i32_of, Arg};
use crate::kernels::{AttnCall, FlashTiles, Partials};

/// A flash kernel's pointers (flash_attn*, flash_attn_wide*, flash_sm90*): Q, K, V, the tiles,
/// the block tables, the output.
pub(crate) fn flash_ptrs(c: &AttnCall, tiles: FlashTiles) -> [Arg; 7] {
    [
        Arg::Ptr(c.q),
        Arg::Ptr(c.kv.k),
        Arg::Ptr(c.kv.v),
        Arg::Ptr(tiles.ptr),
        Arg::Ptr(c.inp.bt_start),
        Arg::Ptr(c.inp.block_tables),
        Arg::Ptr(c.out),
    ]
}

/// A split-KV decode kernel's pointers (decode_attn*, decode_attn_wide*, decode_mma*): Q, K,
/// V, the rows' positions and sequences, the block tables, the partial outputs and their
/// (max, sum) pairs.
pub(crate) fn decode_ptrs(c: &AttnCall, part: Partials) -> [Arg; 9] {
    [
        Arg::Ptr(c.q),
        Arg::Ptr(c.kv.k),
        Arg::Ptr(c.kv.v),
        Arg::Ptr(c.inp.positions),
        Arg::Ptr(c.inp.token_seq),
        Arg::Ptr(c.inp.bt_start),
        Arg::Ptr(c.inp.block_tables),
        Arg::Ptr(part.o),
        Arg::Ptr(part.ml),
    ]
}

/// What every flash and split-KV decode kernel takes after its pointers: query heads, KV
/// heads, the block size, the window and the softmax scale in base 2.
pub(crate) fn attn_shape(c: &AttnCall) -> Result<[Arg; 5]> {
    Ok([
        Arg::I32(c.n_q as i32),
        Arg::I32(c.kv.n_kv as i32),
        Arg::I32(c.kv.block_size as i32),
        Arg::I32(i32_of(c.window, "window")?),
        Arg::F32(c.scale * std::f32::consts::LOG2_E),
    ])
}

/// A combine kernel's arguments (decode_attn_combine, decode_attn_wide_combine,
/// decode_mma_combine before its span rounding): the partials, the rows' positions, the output,
/// the shape and the split rule (`splits`: the most splits a row, the least keys a split).
pub(crate) fn combine_args(
    c: &AttnCall,
    part: Partials,
    (max_splits, min_span): (usize, usize),
) -> Vec<Arg> {
    vec![
        Arg::Ptr(part.o),
        Arg::Ptr(part.ml),
        Arg::Ptr(c.inp.positions),
        Arg::Ptr(c.out),
        Arg::I32(c.n_q as i32),
        Arg::I32(c.hd as i32),
        Arg::I32(max_splits as i32),
        Arg::I32(min_span as i32),
    ]
}
