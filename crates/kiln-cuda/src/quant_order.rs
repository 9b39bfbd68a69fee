//! The order a quantised matrix's rows are stored in, tile by tile. The fused decode epilogues
//! (skinny_epilogue.cu) take the two rows of a pair in one thread: a RoPE pair of a head (QKV)
//! or a gate row and its up row (gate/up). The bf16 decode GEMM reads its 16 rows of a tile from
//! anywhere; a quantised record holds 16 rows together, so the rows are stored pair by pair at
//! load instead (`KILN_QUANT_FUSE`, switches.rs), and every kernel that reads them maps a stored
//! row back to the weight's (`stored_row` in quant_gemm.cu, [`RowOrder::stored_row`] here).
//! Nothing is recomputed: the same blocks, in another order of rows.

use anyhow::{ensure, Result};
use kiln_model::{Activation, LayerWeight, ModelSpec, RopeStyle};

use crate::device::{i32_of, Arg};
use crate::quant_layout::{GpuQuant, TILE_ROWS};
use crate::skinny_fused::{fusable_blocks, rope_fusable};
use crate::switches::Switches;

/// The order layer `layer`'s matrix `w`, kept in `formats` (one per part), is stored in: pairs
/// where a fused decode epilogue takes them (`KILN_QUANT_FUSE`'s rope and glu, with the second
/// decode family, the only one with epilogues), else as it is.
pub fn for_layer_matrix(
    spec: &ModelSpec,
    layer: usize,
    w: LayerWeight,
    formats: &[GpuQuant],
    sw: &Switches,
) -> RowOrder {
    let f = sw.quant_fuse;
    if !sw.kernels.quant_decode_v2 || !fusable_blocks(spec) {
        return RowOrder::Natural;
    }
    let l = &spec.layers[layer];
    match w {
        LayerWeight::Qkv => {
            let at = &l.attn;
            if f.rope && rope_fusable(at) {
                let neox = matches!(spec.rope(layer).style, RopeStyle::Neox);
                return RowOrder::Rope {
                    hd: at.head_dim,
                    neox,
                };
            }
        }
        LayerWeight::GateUp => {
            // Gate and up rows in one segment: one format for both.
            let one = formats.windows(2).all(|p| p[0] == p[1]);
            let ok = f.glu
                && one
                && l.ffn.activation() == Activation::Silu
                && l.ffn.intermediate().is_multiple_of(8);
            if ok {
                return RowOrder::Glu;
            }
        }
        _ => {}
    }
    RowOrder::Natural
}

/// How a segment's rows are laid out in its tiles of 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowOrder {
    /// Tile `t` row `r` is row `16 t + r`.
    #[default]
    Natural,
    /// Heads of `hd` rows (a multiple of 16), each tile holding 8 RoPE pairs: rows r and r + 8
    /// are elements `i` and `i + hd / 2` (`neox`) or `2 i` and `2 i + 1` of one head.
    Rope { hd: usize, neox: bool },
    /// Gate rows then as many up rows: tile `t` holds gate rows `8 t..8 t + 8` then the same
    /// up rows.
    Glu,
}

impl RowOrder {
    /// `EPI_*` of the order (kernels/skinny_epilogue.cu's `tile_row`).
    fn mode(self) -> i32 {
        match self {
            RowOrder::Natural => 0,
            RowOrder::Glu => 2,
            RowOrder::Rope { .. } => 3,
        }
    }

    /// `tile_row`'s `rows` for a segment of `rows` rows: rows, gate rows or heads.
    fn order_rows(self, rows: usize) -> usize {
        match self {
            RowOrder::Natural => rows,
            RowOrder::Glu => rows / 2,
            RowOrder::Rope { hd, .. } => rows / hd,
        }
    }

    /// Whether a segment of `rows` rows can be stored in this order.
    pub fn check(self, rows: usize) -> Result<()> {
        match self {
            RowOrder::Natural => {}
            RowOrder::Glu => ensure!(
                rows.is_multiple_of(16),
                "gate/up rows in pairs need a multiple of 8 gate rows, got {rows} rows"
            ),
            RowOrder::Rope { hd, .. } => ensure!(
                hd.is_multiple_of(16) && rows.is_multiple_of(hd),
                "RoPE pairs need whole heads of a multiple of 16 rows: {rows} rows, head {hd}"
            ),
        }
        Ok(())
    }

    /// The segment row stored as row `r` of tile `tile` (a segment of `rows` rows), or None
    /// past the segment: the host's copy of `tile_row`.
    pub fn stored_row(self, rows: usize, tile: usize, r: usize) -> Option<usize> {
        let n = self.order_rows(rows);
        let row = match self {
            RowOrder::Natural => tile * TILE_ROWS + r,
            RowOrder::Glu => {
                let i = tile * 8 + (r & 7);
                if i >= n {
                    return None;
                }
                if r < 8 {
                    i
                } else {
                    n + i
                }
            }
            RowOrder::Rope { hd, neox } => {
                let tph = hd / 16;
                let head = tile / tph;
                if head >= n {
                    return None;
                }
                let i = (tile - head * tph) * 8 + (r & 7);
                head * hd
                    + if neox {
                        i + if r < 8 { 0 } else { hd / 2 }
                    } else {
                        2 * i + r / 8
                    }
            }
        };
        (row < rows).then_some(row)
    }

    /// The rows of a segment of `rows` rows in stored order: `perm[j]` is the row stored at
    /// position `j` (None: padding past the segment's last tile).
    pub fn permutation(self, rows: usize) -> Vec<Option<usize>> {
        (0..rows.div_ceil(TILE_ROWS) * TILE_ROWS)
            .map(|j| self.stored_row(rows, j / TILE_ROWS, j % TILE_ROWS))
            .collect()
    }

    /// `rows` rows of `row_bytes` bytes each reordered into stored order (natural: as given).
    pub fn reorder(self, rows: usize, row_bytes: usize, bytes: &[u8]) -> Result<Vec<u8>> {
        self.check(rows)?;
        ensure!(
            bytes.len() == rows * row_bytes,
            "{rows} rows of {row_bytes} bytes expected"
        );
        if self == RowOrder::Natural {
            return Ok(bytes.to_vec());
        }
        let mut out = Vec::with_capacity(bytes.len());
        for src in self.permutation(rows).into_iter().take(rows) {
            let src = src.expect("checked: whole tiles of pairs");
            out.extend_from_slice(&bytes[src * row_bytes..(src + 1) * row_bytes]);
        }
        Ok(out)
    }

    /// The kernels' `o_mode, o_rows, o_hd, o_neox` for a segment of `rows` rows.
    pub fn args(self, rows: usize) -> Result<[Arg; 4]> {
        let (hd, neox) = match self {
            RowOrder::Rope { hd, neox } => (hd, neox),
            _ => (0, false),
        };
        Ok([
            Arg::I32(self.mode()),
            Arg::I32(i32_of(self.order_rows(rows), "rows")?),
            Arg::I32(i32_of(hd, "head dim")?),
            Arg::I32(neox as i32),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_permutation(o: RowOrder, rows: usize) {
        let mut seen = vec![false; rows];
        for r in o.permutation(rows).into_iter().flatten() {
            assert!(!seen[r], "{o:?}: row {r} stored twice");
            seen[r] = true;
        }
        assert!(seen.iter().all(|&s| s), "{o:?}: a row of {rows} not stored");
    }

    #[test]
    fn every_order_stores_every_row_once() {
        for rows in [16, 48, 4096] {
            is_permutation(RowOrder::Natural, rows);
        }
        is_permutation(RowOrder::Natural, 20);
        for (hd, heads) in [(16, 3), (64, 5), (128, 48)] {
            for neox in [true, false] {
                is_permutation(RowOrder::Rope { hd, neox }, hd * heads);
            }
        }
        for inter in [8, 24, 14336] {
            is_permutation(RowOrder::Glu, 2 * inter);
        }
    }

    #[test]
    fn a_tile_holds_its_pairs_as_rows_r_and_r_plus_8() {
        let o = RowOrder::Rope {
            hd: 128,
            neox: true,
        };
        // Head 1, tile 2 of its 8: elements 16..24 and 80..88.
        assert_eq!(o.stored_row(256, 10, 0), Some(128 + 16));
        assert_eq!(o.stored_row(256, 10, 8), Some(128 + 16 + 64));
        let adj = RowOrder::Rope {
            hd: 64,
            neox: false,
        };
        assert_eq!(adj.stored_row(64, 1, 3), Some(2 * 11));
        assert_eq!(adj.stored_row(64, 1, 11), Some(2 * 11 + 1));
        assert_eq!(RowOrder::Glu.stored_row(48, 2, 5), Some(21));
        assert_eq!(RowOrder::Glu.stored_row(48, 2, 13), Some(24 + 21));
        assert_eq!(RowOrder::Natural.stored_row(20, 1, 4), None);
    }

    /// Whole heads of whole tiles, whole tiles of gate/up pairs: what the launches and the load
    /// check before they store or read rows in an order.
    #[test]
    fn check_takes_whole_heads_and_whole_pair_tiles_only() {
        let rope = RowOrder::Rope {
            hd: 128,
            neox: true,
        };
        for (order, rows, ok) in [
            (rope, 384, true),
            (rope, 320, false),
            (RowOrder::Rope { hd: 72, neox: true }, 144, false),
            (RowOrder::Glu, 592, true),
            (RowOrder::Glu, 600, false),
        ] {
            assert_eq!(order.check(rows).is_ok(), ok, "{order:?} {rows}");
        }
    }

    #[test]
    fn reorder_moves_whole_rows_and_refuses_partial_pairs() {
        let rows = 32;
        let bytes: Vec<u8> = (0..rows as u8).flat_map(|r| [r, r]).collect();
        let out = RowOrder::Glu.reorder(rows, 2, &bytes).unwrap();
        let order: Vec<u8> = out.chunks(2).map(|c| c[0]).collect();
        let want: Vec<u8> = (0..8).chain(16..24).chain(8..16).chain(24..32).collect();
        assert_eq!(order, want);
        assert!(RowOrder::Rope {
            hd: 128,
            neox: true
        }
        .reorder(64, 2, &[0u8; 128])
        .is_err());
        assert!(RowOrder::Glu.reorder(24, 2, &bytes[..48]).is_err());
    }
}
