//! The matmul's input as the tiles read it: one row in place, or rows repacked k-major into
//! tiles of at most `MR_MAX` rows.
//!
//! Rows are spread evenly over the tiles (128 rows: 18 tiles of 6 and 4 of 5, not 21 of 6 and
//! one of 2), because a tile of few rows has too few independent chains to keep the
//! multiply-add units busy. Which tile a row lands in never changes its chains.

use std::cell::RefCell;

use rayon::prelude::*;

use super::microkernel::MR_MAX;

/// The input as the tiles read it.
pub(crate) enum Input<'a> {
    /// One row, read in place.
    Row(&'a [f32]),
    /// Tile `t` holds rows `first_row(t)..first_row(t + 1)` at `[t][k][MR_MAX]`; lanes past
    /// its rows are never read.
    Tiles { data: Vec<f32>, plan: TilePlan },
}

/// How `m` rows are split into `count` tiles: the first `m % count` tiles have one row more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TilePlan {
    pub count: usize,
    m: usize,
    base: usize,
    extra: usize,
}

impl TilePlan {
    pub fn new(m: usize) -> TilePlan {
        let count = m.div_ceil(MR_MAX).max(1);
        TilePlan {
            count,
            m,
            base: m / count,
            extra: m % count,
        }
    }

    pub fn first_row(&self, t: usize) -> usize {
        t * self.base + t.min(self.extra)
    }

    pub fn rows(&self, t: usize) -> usize {
        if self.base == MR_MAX && self.extra == 0 {
            return MR_MAX.min(self.m - t * MR_MAX);
        }
        self.base + usize::from(t < self.extra)
    }
}

impl Input<'_> {
    /// Pointer to tile `t`'s element at `k`, and the row and k strides from there.
    pub fn at(&self, t: usize, k: usize, cols: usize) -> (*const f32, usize, usize) {
        match self {
            Input::Row(x) => (x[k..].as_ptr(), 0, 1),
            Input::Tiles { data, .. } => (data[(t * cols + k) * MR_MAX..].as_ptr(), 1, MR_MAX),
        }
    }

    /// Rows `first_row..first_row + rows` of tile `t`.
    pub fn tile(&self, t: usize) -> (usize, usize) {
        match self {
            Input::Row(_) => (0, 1),
            Input::Tiles { plan, .. } => (plan.first_row(t), plan.rows(t)),
        }
    }

    pub fn tiles(&self) -> usize {
        match self {
            Input::Row(_) => 1,
            Input::Tiles { plan, .. } => plan.count,
        }
    }

    /// Hands a repacked input's buffer back for the next call on this thread.
    pub fn recycle(self) {
        if let Input::Tiles { data, .. } = self {
            SPARE.with(|spare| {
                let mut spare = spare.borrow_mut();
                if data.capacity() > spare.capacity() {
                    *spare = data;
                }
            });
        }
    }
}

thread_local! {
    /// The last repacked input's buffer: large inputs would otherwise be fresh pages, zeroed
    /// by the kernel on first touch, at every call.
    static SPARE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `x` (`m` rows of `k`) as the tiles read it.
pub(crate) fn pack_input(x: &[f32], m: usize, k: usize) -> Input<'_> {
    if m == 1 {
        return Input::Row(x);
    }
    let plan = TilePlan::new(m);
    let mut data = SPARE.with(|spare| std::mem::take(&mut *spare.borrow_mut()));
    data.resize(plan.count * k * MR_MAX, 0.0);
    data.par_chunks_mut(k * MR_MAX)
        .enumerate()
        .for_each(|(t, tile)| {
            let first = plan.first_row(t);
            for i in 0..plan.rows(t) {
                let row = &x[(first + i) * k..][..k];
                for (kk, &v) in row.iter().enumerate() {
                    tile[kk * MR_MAX + i] = v;
                }
            }
        });
    Input::Tiles { data, plan }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_cover_every_row_once_with_balanced_sizes() {
        for m in 2..200 {
            let plan = TilePlan::new(m);
            let mut next = 0;
            for t in 0..plan.count {
                assert_eq!(plan.first_row(t), next, "m={m} t={t}");
                let rows = plan.rows(t);
                assert!((1..=MR_MAX).contains(&rows), "m={m} t={t} rows={rows}");
                next += rows;
            }
            assert_eq!(next, m);
            let sizes: Vec<usize> = (0..plan.count).map(|t| plan.rows(t)).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "m={m}: {sizes:?}");
        }
    }
}
