//! Decode rows of an fp8 product through kernels/fp8.cu's skinny kernels (KILN_FP8_SKINNY):
//! the weight's E4M3 rows streamed once per launch of up to 64 rows into fp8 tensor-core MMAs,
//! as the bf16 skinny kernels do for bf16 weights, instead of cuBLASLt's fp8 tiles, which leave
//! most multiprocessors idle at one row without a split of k (and a split would change a row's
//! bits with the row count). A row's result does not depend on the other rows of the launch or
//! on their count; it is the same product as the fp8 GEMM's (the E4M3 products summed in f32,
//! then both scales applied), summed in another order. On sm_90 the E4M3 MMA of mma.sync runs as
//! f16 MMAs after an exact unpacking of each E4M3 pair (F2FP.F16.E4M3 in the SASS; Hopper's fp8
//! tensor cores are wgmma's), a few instructions a 16-byte load, under the bandwidth's budget.

use anyhow::{ensure, Result};

use crate::device::{i32_of, Arg, Gpu};
use crate::fp8_rows::{Fp8Matrix, Fp8Rows};

/// Rows of one launch: the widest entry's.
pub const FP8_SKINNY_MAX_ROWS: usize = 64;

/// The entry for a launch of `rows` rows (1..=64): the fewest 8-row groups that hold them.
fn entry(rows: usize) -> &'static str {
    match rows {
        0..=8 => "skinny_fp8_8",
        9..=16 => "skinny_fp8_16",
        17..=32 => "skinny_fp8_32",
        _ => "skinny_fp8_64",
    }
}

impl Gpu {
    /// y[r, :] = (x_r . w^T) * (x's scale r * w's row scales) for rows 0..rows of `x` (fp8 rows
    /// of w.cols bytes and their scales), into y (`rows x w.rows` f32), in launches of up to
    /// [`FP8_SKINNY_MAX_ROWS`] rows.
    pub fn fp8_skinny(&self, y: u64, x: Fp8Rows, w: &Fp8Matrix, rows: usize) -> Result<()> {
        let (n, k) = (w.rows, w.cols);
        ensure!(
            k.is_multiple_of(16),
            "fp8 rows of {k} bytes: the skinny kernel reads 16 at a time"
        );
        for r0 in (0..rows).step_by(FP8_SKINNY_MAX_ROWS) {
            let m = (rows - r0).min(FP8_SKINNY_MAX_ROWS);
            self.launch(
                entry(m),
                (n.div_ceil(16) as u32, 1, 1),
                256,
                0,
                &[
                    Arg::Ptr(y + (r0 * n * 4) as u64),
                    Arg::Ptr(x.q + (r0 * k) as u64),
                    Arg::Ptr(x.scale + (r0 * 4) as u64),
                    Arg::Ptr(w.q.ptr()),
                    Arg::Ptr(w.scale.ptr()),
                    Arg::I32(m as i32),
                    Arg::I32(i32_of(n, "rows of the weight")?),
                    Arg::I32(i32_of(k, "columns of the weight")?),
                ],
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::entry;

    #[test]
    fn a_launch_takes_the_fewest_row_groups_that_hold_its_rows() {
        assert_eq!(entry(1), "skinny_fp8_8");
        assert_eq!(entry(8), "skinny_fp8_8");
        assert_eq!(entry(9), "skinny_fp8_16");
        assert_eq!(entry(32), "skinny_fp8_32");
        assert_eq!(entry(33), "skinny_fp8_64");
        assert_eq!(entry(64), "skinny_fp8_64");
    }
}
