//! Shape buckets for CUDA graphs, and the padding that makes a packed step fit one. A graph is
//! captured for a step shape (decode rows, prefill rows); every other launch parameter (tile
//! count, logits rows) follows from the shape, so a step of any context length, any block
//! tables and any mix of sequences replays the same graph once its inputs are padded:
//!
//! - decode rows d are padded up to the bucket D, prefill rows p up to the bucket P; the
//!   prefill rows move from d.. to D.., and every padding row is inert: token 0 at position 0,
//!   its K/V written to a scratch slot nobody reads, its attention reading key 0 of sequence 0
//!   (a valid block), its result never copied out;
//! - attention tiles are padded with empty tiles (no rows: the kernel reads and writes nothing);
//! - logits rows are padded with row 0 and ignored on the host.

use anyhow::{bail, Result};

use crate::kernels::FLASH_TILE_ROWS;
use crate::step_plan::{StepLayout, StepPlan};

/// Prefill chunks one prefill graph takes at most (each may add a partial attention tile).
pub const GRAPH_PREFILL_SEQS: usize = 8;
/// Largest prefill bucket by default: past it a step is compute bound, padding costs real
/// work and the launch gaps hide behind long kernels.
pub const DEFAULT_PREFILL_MAX: usize = 128;
/// Smallest prefill bucket.
const PREFILL_MIN: usize = 16;

/// A step shape that owns a graph: padded decode rows and padded prefill rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GraphShape {
    pub decode_rows: usize,
    pub prefill_rows: usize,
}

/// The bucket lists of one backend and the capacities they must fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphBuckets {
    pub decode: Vec<usize>,
    pub prefill: Vec<usize>,
    max_tokens: usize,
    max_seqs: usize,
    max_tiles: usize,
}

impl GraphBuckets {
    /// Decode buckets 1, 2, 4, ... up to `max_seqs` (which is a bucket itself); prefill buckets
    /// 16, 32, ... up to `prefill_max` (0: no prefill graphs). All fit the step buffers.
    pub fn new(l: &StepLayout, prefill_max: usize) -> GraphBuckets {
        let cap = l.max_seqs.min(l.max_tokens);
        let mut decode: Vec<usize> = std::iter::successors(Some(1usize), |b| Some(b * 2))
            .take_while(|&b| b < cap)
            .collect();
        if cap > 0 {
            decode.push(cap);
        }
        let prefill = std::iter::successors(Some(PREFILL_MIN), |b| Some(b * 2))
            .take_while(|&b| b <= prefill_max.min(l.max_tokens))
            .collect();
        GraphBuckets {
            decode,
            prefill,
            max_tokens: l.max_tokens,
            max_seqs: l.max_seqs,
            max_tiles: l.max_tiles,
        }
    }

    /// Attention tiles a shape's graph launches: enough for GRAPH_PREFILL_SEQS chunks.
    pub fn tiles(&self, s: GraphShape) -> usize {
        if s.prefill_rows == 0 {
            return 0;
        }
        (s.prefill_rows.div_ceil(FLASH_TILE_ROWS) + GRAPH_PREFILL_SEQS - 1).min(self.max_tiles)
    }

    /// Logits rows a shape's graph computes: every decode row and up to GRAPH_PREFILL_SEQS
    /// prefill chunks.
    pub fn logits(&self, s: GraphShape) -> usize {
        let prefill = if s.prefill_rows > 0 {
            GRAPH_PREFILL_SEQS
        } else {
            0
        };
        (s.decode_rows + prefill).min(self.max_seqs)
    }

    /// The launch parameters of a shape's graph.
    pub fn plan(&self, s: GraphShape, upload_len: usize) -> StepPlan {
        StepPlan {
            n_tokens: s.decode_rows + s.prefill_rows,
            n_decode: s.decode_rows,
            n_seqs: 0,
            n_tiles: self.tiles(s),
            // Unknown at capture: the captured attention keeps the one-group order (the
            // grids of graph-sized steps take about one wave, where the order matters little).
            prefill_keys: 0,
            n_logits: self.logits(s),
            upload_len,
        }
    }

    /// Shapes captured when the backend starts: decode alone and prefill alone. Mixed steps
    /// get their graph the first time they are seen.
    pub fn startup_shapes(&self) -> Vec<GraphShape> {
        let decode = self.decode.iter().map(|&d| GraphShape {
            decode_rows: d,
            prefill_rows: 0,
        });
        let prefill = self.prefill.iter().map(|&p| GraphShape {
            decode_rows: 0,
            prefill_rows: p,
        });
        decode.chain(prefill).collect()
    }

    /// The graph shape a packed step pads up to, or None when it fits no bucket (it then runs
    /// eagerly).
    pub fn shape_for(&self, plan: &StepPlan) -> Option<GraphShape> {
        let (d, p) = (plan.n_decode, plan.n_tokens - plan.n_decode);
        let bucket = |list: &[usize], n: usize| {
            if n == 0 {
                Some(0)
            } else {
                list.iter().copied().find(|&b| b >= n)
            }
        };
        let s = GraphShape {
            decode_rows: bucket(&self.decode, d)?,
            prefill_rows: bucket(&self.prefill, p)?,
        };
        let fits = s.decode_rows + s.prefill_rows > 0
            && s.decode_rows + s.prefill_rows <= self.max_tokens
            && plan.n_tiles <= self.tiles(s)
            && plan.n_logits <= self.logits(s);
        fits.then_some(s)
    }
}

/// Pads the packed step in `buf` (from `pack_step` with `plan`) to shape `s`, in place, and
/// returns the plan the shape's graph was captured with. `scratch_slot` is a KV slot outside
/// every sequence's blocks.
pub fn pad_step(
    buf: &mut [i32],
    l: &StepLayout,
    plan: &StepPlan,
    b: &GraphBuckets,
    s: GraphShape,
    scratch_slot: i32,
) -> Result<StepPlan> {
    let (d, p) = (plan.n_decode, plan.n_tokens - plan.n_decode);
    let (dp, pp) = (s.decode_rows, s.prefill_rows);
    let (tiles, logits) = (b.tiles(s), b.logits(s));
    if d > dp || p > pp || plan.n_tiles > tiles || plan.n_logits > logits {
        bail!("step of {d} decode and {p} prefill rows does not fit graph shape {s:?}");
    }
    let shift = dp - d;
    // With a ring, the ring layers' slots too (padding rows write the ring's scratch slot).
    let ring = l.ring_scratch_slot().map(|r| (l.ring_slots, r));
    let sections = [
        (l.tokens, 0),
        (l.positions, 0),
        (l.slots, scratch_slot),
        (l.token_seq, 0),
    ];
    for (section, pad) in sections.into_iter().chain(ring) {
        let sec = &mut buf[section..section + dp + pp];
        sec.copy_within(d..d + p, dp);
        sec[d..dp].fill(pad);
        sec[dp + p..].fill(pad);
    }
    for t in 0..plan.n_tiles {
        buf[l.tiles + 4 * t] += shift as i32;
    }
    // Empty tiles: no rows, so the attention kernel neither reads keys nor writes output.
    buf[l.tiles + 4 * plan.n_tiles..l.tiles + 4 * tiles].fill(0);
    for r in &mut buf[l.logits_rows..l.logits_rows + plan.n_logits] {
        if *r as usize >= d {
            *r += shift as i32;
        }
    }
    buf[l.logits_rows + plan.n_logits..l.logits_rows + logits].fill(0);
    Ok(b.plan(s, plan.upload_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_plan::pack_step;
    use kiln_step::ChunkInput;

    fn layout() -> StepLayout {
        StepLayout::new(300, 40, 1024, 16, 64, 1000)
    }

    #[test]
    fn buckets_cover_the_capacities_and_nothing_past_them() {
        let b = GraphBuckets::new(&layout(), 128);
        assert_eq!(b.decode, vec![1, 2, 4, 8, 16, 32, 40]);
        assert_eq!(b.prefill, vec![16, 32, 64, 128]);
        assert_eq!(b.startup_shapes().len(), 11);
        let none = GraphBuckets::new(&layout(), 0);
        assert!(none.prefill.is_empty());
        let small = GraphBuckets::new(&StepLayout::new(20, 4, 1024, 16, 64, 1000), 128);
        assert_eq!(small.decode, vec![1, 2, 4]);
        assert_eq!(small.prefill, vec![16]);
    }

    #[test]
    fn steps_pick_the_smallest_bucket_that_holds_them() {
        let l = layout();
        let b = GraphBuckets::new(&l, 128);
        let plan = |n_tokens, n_decode, n_tiles, n_logits| StepPlan {
            n_tokens,
            n_decode,
            n_seqs: 1,
            n_tiles,
            prefill_keys: 0,
            n_logits,
            upload_len: 0,
        };
        let shape = |d, p| {
            Some(GraphShape {
                decode_rows: d,
                prefill_rows: p,
            })
        };
        assert_eq!(b.shape_for(&plan(3, 3, 0, 3)), shape(4, 0));
        assert_eq!(b.shape_for(&plan(33, 33, 0, 33)), shape(40, 0));
        assert_eq!(b.shape_for(&plan(20, 0, 1, 1)), shape(0, 32));
        assert_eq!(b.shape_for(&plan(5 + 100, 5, 2, 6)), shape(8, 128));
        // Too many prefill rows, tiles or logits rows for any graph: eager.
        assert_eq!(b.shape_for(&plan(129, 0, 3, 1)), None);
        assert_eq!(b.shape_for(&plan(60, 0, 30, 1)), None);
        assert_eq!(b.shape_for(&plan(60, 0, 9, 9)), None);
    }

    #[test]
    fn padding_moves_prefill_rows_and_makes_the_rest_inert() {
        let l = layout();
        let b = GraphBuckets::new(&l, 128);
        let mut buf = vec![-7i32; l.len];
        let prompt: Vec<u32> = (1..=70).collect();
        let chunks = [
            ChunkInput {
                tokens: &prompt,
                start_pos: 0,
                block_table: &[3, 4, 5, 6, 7],
                want_logits: true,
            },
            ChunkInput {
                tokens: &[9],
                start_pos: 20,
                block_table: &[1, 2],
                want_logits: true,
            },
            ChunkInput {
                tokens: &[8],
                start_pos: 40,
                block_table: &[10, 11, 12],
                want_logits: false,
            },
        ];
        let plan = pack_step(&chunks, &l, &mut buf).unwrap();
        let packed = buf.clone();
        let s = b.shape_for(&plan).unwrap();
        assert_eq!(
            s,
            GraphShape {
                decode_rows: 2,
                prefill_rows: 128
            }
        );
        let scratch = 64 * 16;
        let mut shifted = buf.clone();
        let shape_only = GraphShape {
            decode_rows: 4,
            prefill_rows: 128,
        };
        let padded = pad_step(&mut shifted, &l, &plan, &b, shape_only, scratch).unwrap();
        assert_eq!(padded.n_tokens, 132);
        assert_eq!(padded.n_decode, 4);
        assert_eq!(padded.n_tiles, 2 + GRAPH_PREFILL_SEQS - 1);
        assert_eq!(padded.n_logits, 4 + GRAPH_PREFILL_SEQS);
        assert_eq!(padded.upload_len, plan.upload_len);
        // Decode rows stay; padding rows follow them; the prompt moves from row 2 to row 4.
        for sec in [l.tokens, l.positions, l.slots, l.token_seq] {
            assert_eq!(&shifted[sec..sec + 2], &packed[sec..sec + 2]);
            assert_eq!(&shifted[sec + 4..sec + 74], &packed[sec + 2..sec + 72]);
        }
        for r in (2..4).chain(74..132) {
            assert_eq!(shifted[l.tokens + r], 0);
            assert_eq!(shifted[l.positions + r], 0);
            assert_eq!(shifted[l.slots + r], scratch);
            assert_eq!(shifted[l.token_seq + r], 0);
        }
        // Real tiles point at the moved rows; the rest are empty.
        assert_eq!(&shifted[l.tiles..l.tiles + 8], &[4, 64, 2, 0, 68, 6, 2, 64]);
        assert!(shifted[l.tiles + 8..l.tiles + 4 * padded.n_tiles]
            .iter()
            .all(|&v| v == 0));
        // Logits rows in chunk order: the prompt's last row moved, the decode row did not.
        assert_eq!(packed[l.logits_rows..l.logits_rows + 2], [71, 0]);
        assert_eq!(shifted[l.logits_rows..l.logits_rows + 2], [73, 0]);
        assert!(shifted[l.logits_rows + 2..l.logits_rows + padded.n_logits]
            .iter()
            .all(|&v| v == 0));
        // Block tables and their starts are untouched.
        assert_eq!(
            shifted[l.bt_start..l.bt_start + 3],
            packed[l.bt_start..l.bt_start + 3]
        );
        assert_eq!(
            shifted[l.block_tables..plan.upload_len],
            packed[l.block_tables..plan.upload_len]
        );
        // A shape too small for the step is refused.
        let tiny = GraphShape {
            decode_rows: 1,
            prefill_rows: 128,
        };
        assert!(pad_step(&mut buf, &l, &plan, &b, tiny, scratch).is_err());
    }

    #[test]
    fn padding_rows_write_the_rings_scratch_slot() {
        let ring = kiln_step::KvRing {
            blocks: 6,
            capable: 20,
            window: 64,
        };
        let l = StepLayout::with_ring(300, 40, 1024, 16, 64, 1000, Some(ring));
        let b = GraphBuckets::new(&l, 128);
        let mut buf = vec![-7i32; l.len];
        let prompt: Vec<u32> = (1..=20).collect();
        let chunks = [
            ChunkInput {
                tokens: &prompt,
                start_pos: 0,
                block_table: &[3, 4],
                want_logits: true,
            },
            ChunkInput {
                tokens: &[9],
                start_pos: 100,
                block_table: &[10, 11, 12, 13, 14, 15, 40],
                want_logits: true,
            },
        ];
        let plan = pack_step(&chunks, &l, &mut buf).unwrap();
        let packed = buf.clone();
        let s = GraphShape {
            decode_rows: 2,
            prefill_rows: 32,
        };
        let scratch = 64 * 16;
        pad_step(&mut buf, &l, &plan, &b, s, scratch).unwrap();
        let (rs, ring_scratch) = (l.ring_slots, 20 * 16);
        // Position 100 is in block 6, the ring's block 0 (id 10).
        assert_eq!(buf[rs], 10 * 16 + 4);
        assert_eq!(buf[l.slots], 40 * 16 + 4);
        // The prompt's ring slots move with it; padding rows take the ring's scratch slot.
        assert_eq!(&buf[rs + 2..rs + 22], &packed[rs + 1..rs + 21]);
        for r in std::iter::once(1).chain(22..34) {
            assert_eq!(buf[rs + r], ring_scratch);
            assert_eq!(buf[l.slots + r], scratch);
        }
        // The ring tables' starts are untouched.
        assert_eq!(
            buf[l.ring_bt_start..l.ring_bt_start + 2],
            packed[l.ring_bt_start..l.ring_bt_start + 2]
        );
    }
}
