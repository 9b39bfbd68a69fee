//! fp8 projections on the device (`--quantize fp8`, kiln_formats::fp8): a matrix kept as E4M3
//! bytes with one f32 scale per row, quantised at load from the weight as the backend stores it,
//! and the launchers of kernels/fp8.cu that quantise a step's input rows the same way before
//! each fp8 GEMM (gemm_fp8.rs), alone or in the launch that writes them (the RMSNorm before
//! QKV and gate/up, the gated activation before down: KILN_FP8_FUSE). The host's `quantize_row`
//! is the definition; the kernels' contract tests hold them to it bit for bit.

use anyhow::{ensure, Result};

use kiln_model::Activation;

use crate::device::{i32_of, Arg, DevBuf, Gpu};
use crate::kernels::norm_block;
use crate::store::StoreBuf;

/// Threads of a row's block: 8 values each per pass.
const ROW_THREADS: u32 = 256;

/// A projection `[rows, cols]` in fp8 rows: `q` row-major E4M3, `scale` one f32 per row.
pub struct Fp8Matrix {
    pub q: DevBuf<u8>,
    pub scale: DevBuf<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl Fp8Matrix {
    /// The rows of `w` (`rows x cols` in the storage type) quantised into a new matrix; `w`
    /// is left as it was (the caller frees it).
    pub fn from_store(gpu: &Gpu, w: &StoreBuf, rows: usize, cols: usize) -> Result<Fp8Matrix> {
        ensure!(
            w.len() == rows * cols,
            "an fp8 matrix of {rows}x{cols} from {} values",
            w.len()
        );
        let m = Fp8Matrix {
            q: gpu.alloc(rows * cols)?,
            scale: gpu.alloc(rows)?,
            rows,
            cols,
        };
        gpu.fp8_quantize_rows(w.ptr(), m.q.ptr(), m.scale.ptr(), rows, cols, cols)?;
        Ok(m)
    }

    pub fn bytes(&self) -> usize {
        self.q.bytes() + self.scale.bytes()
    }
}

/// Where a launch quantises rows to: `q` (E4M3 bytes, row-major) and `scale` (one f32 a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8Rows {
    pub q: u64,
    pub scale: u64,
}

impl Gpu {
    /// Quantises `rows` rows of `cols` stored values (row r at element `r * x_stride` of x)
    /// into `q` (`rows x cols` bytes) and `scale` (`rows` f32).
    pub fn fp8_quantize_rows(
        &self,
        x: u64,
        q: u64,
        scale: u64,
        rows: usize,
        cols: usize,
        x_stride: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        ensure!(
            cols.is_multiple_of(8) && x_stride.is_multiple_of(8) && x_stride >= cols,
            "fp8 rows of {cols} values at a stride of {x_stride}: the kernel reads 8 at a time"
        );
        self.launch(
            "fp8_quantize_rows",
            (i32_of(rows, "rows")? as u32, 1, 1),
            ROW_THREADS,
            0,
            &[
                Arg::Ptr(x),
                Arg::Ptr(q),
                Arg::Ptr(scale),
                Arg::I32(i32_of(cols, "cols")?),
                Arg::U64(x_stride as u64),
            ],
        )
    }

    /// `rmsnorm_residual` (x += delta unless delta is 0, out = store(rmsnorm(x) * w)) with each
    /// out row also quantised into `to` as [`Gpu::fp8_quantize_rows`] would: one launch for two.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_residual_fp8(
        &self,
        x: u64,
        delta: u64,
        w: u64,
        out: u64,
        to: Fp8Rows,
        rows: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        ensure!(
            hidden.is_multiple_of(8),
            "fp8 rows of {hidden} values: the kernel reads 8 at a time"
        );
        self.launch(
            "rmsnorm_residual_fp8",
            (i32_of(rows, "rows")? as u32, 1, 1),
            norm_block(hidden),
            0,
            &[
                Arg::Ptr(x),
                Arg::Ptr(delta),
                Arg::Ptr(w),
                Arg::Ptr(out),
                Arg::Ptr(to.q),
                Arg::Ptr(to.scale),
                Arg::I32(i32_of(hidden, "hidden")?),
                Arg::F32(eps),
            ],
        )
    }

    /// The gated activation of `rows` rows of `gu` (`[gate | up]`, 2 x `inter` f32 a row) into
    /// `out` as swiglu or geglu would store it, each row also quantised into `to`: one launch
    /// for two.
    pub fn gated_fp8(
        &self,
        gu: u64,
        out: u64,
        to: Fp8Rows,
        inter: usize,
        rows: usize,
        act: Activation,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        ensure!(
            inter.is_multiple_of(8),
            "fp8 rows of {inter} values: the kernel reads 8 at a time"
        );
        let threads = (inter / 4).next_multiple_of(32).clamp(32, 1024) as u32;
        let act = match act {
            Activation::Silu => 0,
            Activation::GeluTanh => 1,
        };
        self.launch(
            "gated_fp8",
            (i32_of(rows, "rows")? as u32, 1, 1),
            threads,
            0,
            &[
                Arg::Ptr(gu),
                Arg::Ptr(out),
                Arg::Ptr(to.q),
                Arg::Ptr(to.scale),
                Arg::I32(i32_of(inter, "inter")?),
                Arg::I32(act),
            ],
        )
    }

    /// y[r, c] *= a[r] * w[c] over `rows x cols` f32 values: an fp8 product's two scales,
    /// when its GEMM ran with unit ones (`Fp8Scales::Kernel`).
    pub fn fp8_apply_scales(&self, y: u64, a: u64, w: u64, rows: usize, cols: usize) -> Result<()> {
        let n = rows * cols;
        if n == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(256).min(self.sm_count as usize * 16) as u32;
        self.launch(
            "fp8_apply_scales",
            (blocks, 1, 1),
            256,
            0,
            &[
                Arg::Ptr(y),
                Arg::Ptr(a),
                Arg::Ptr(w),
                Arg::I32(i32_of(rows, "rows")?),
                Arg::I32(i32_of(cols, "cols")?),
            ],
        )
    }
}
