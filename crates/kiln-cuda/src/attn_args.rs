//! The argument lists the paged attention kernels share, in their order, written once: the
//! prefill flash kernels' and the split-KV decode kernels' pointers, the shape every one of
//! them takes after its pointers, and the combine kernels' arguments.

use anyhow::Result;

use crate::device::{i32_of, Arg};
use crate::kernels::{AttnInputs, KvView};

/// A flash kernel's pointers (flash_attn*, flash_attn_wide*, flash_sm90*): Q, K, V, the tiles,
/// the block tables, the output.
pub(crate) fn flash_ptrs(q: u64, kv: &KvView, tiles: u64, inp: &AttnInputs, out: u64) -> [Arg; 7] {
    [
        Arg::Ptr(q),
        Arg::Ptr(kv.k),
        Arg::Ptr(kv.v),
        Arg::Ptr(tiles),
        Arg::Ptr(inp.bt_start),
        Arg::Ptr(inp.block_tables),
        Arg::Ptr(out),
    ]
}

/// A split-KV decode kernel's pointers (decode_attn*, decode_attn_wide*, decode_mma*): Q, K,
/// V, the rows' positions and sequences, the block tables, the partial outputs and their
/// (max, sum) pairs.
pub(crate) fn decode_ptrs(
    q: u64,
    kv: &KvView,
    inp: &AttnInputs,
    part_o: u64,
    part_ml: u64,
) -> [Arg; 9] {
    [
        Arg::Ptr(q),
        Arg::Ptr(kv.k),
        Arg::Ptr(kv.v),
        Arg::Ptr(inp.positions),
        Arg::Ptr(inp.token_seq),
        Arg::Ptr(inp.bt_start),
        Arg::Ptr(inp.block_tables),
        Arg::Ptr(part_o),
        Arg::Ptr(part_ml),
    ]
}

/// What every flash and split-KV decode kernel takes after its pointers: query heads, KV
/// heads, the block size, the window and the softmax scale in base 2.
pub(crate) fn attn_shape(n_q: usize, kv: &KvView, window: usize, scale: f32) -> Result<[Arg; 5]> {
    Ok([
        Arg::I32(n_q as i32),
        Arg::I32(kv.n_kv as i32),
        Arg::I32(kv.block_size as i32),
        Arg::I32(i32_of(window, "window")?),
        Arg::F32(scale * std::f32::consts::LOG2_E),
    ])
}

/// A combine kernel's arguments (decode_attn_combine, decode_attn_wide_combine,
/// decode_mma_combine before its span rounding): the partials, the rows' positions, the output,
/// the shape and the split rule (`splits`: the most splits a row, the least keys a split).
pub(crate) fn combine_args(
    (part_o, part_ml): (u64, u64),
    inp: &AttnInputs,
    out: u64,
    n_q: usize,
    hd: usize,
    (max_splits, min_span): (usize, usize),
) -> Vec<Arg> {
    vec![
        Arg::Ptr(part_o),
        Arg::Ptr(part_ml),
        Arg::Ptr(inp.positions),
        Arg::Ptr(out),
        Arg::I32(n_q as i32),
        Arg::I32(hd as i32),
        Arg::I32(max_splits as i32),
        Arg::I32(min_span as i32),
    ]
}
