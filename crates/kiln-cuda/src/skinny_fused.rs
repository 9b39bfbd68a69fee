//! What a decode GEMM does with its sums besides storing them (kernels/skinny_epilogue.cu): the
//! residual add, SwiGLU, or RoPE and the KV write, and the RMSNorm it may take over from the
//! kernel before it. Launched by the 16-warp skinny kernel's fused entries (`skinny_fused*`,
//! here) and by the tensor-core kernel (skinny_tc.rs); either way the bits are those of the
//! plain GEMM followed by the kernels it replaces (contract_decode_fused).

use anyhow::{bail, ensure, Result};

use crate::device::{i32_of, Arg, DevPtr, Gpu};
use crate::kernels::{norm_block, KvView};
use crate::skinny::{fused_entry, SKINNY_MAX_ROWS};

/// What becomes of a decode GEMM's sums (`EPI_*` in kernels/skinny_epilogue.cu).
#[derive(Debug, Clone, Copy)]
pub enum Epilogue {
    /// y[m, n] = sum (f32, rows as long as the weight has rows).
    Store { y: u64 },
    /// y[m, n] = y[m, n] + sum: rmsnorm_residual's add, y being the residual stream.
    Add { y: u64 },
    /// act[m, i] = silu(gate) * up (swiglu's arithmetic, in the storage type), the weight's rows
    /// being `inter` gate rows then `inter` up rows.
    Glu { act: u64, inter: usize },
    /// qkv_prepare's work for a layer with Q, K and V rows and no Q/K/V norms.
    Rope(RopeOut),
}

/// Where the fused RoPE epilogue reads and writes (as `Gpu::qkv_prepare` takes them).
#[derive(Debug, Clone, Copy)]
pub struct RopeOut {
    pub q_out: u64,
    /// The QKV bias, or 0.
    pub bias: u64,
    pub rope: u64,
    pub positions: u64,
    pub slots: u64,
    pub kv: KvView,
    pub n_q: usize,
    pub hd: usize,
    pub neox: bool,
}

/// The RMSNorm a fused skinny launch computes itself: the GEMM's input is rmsnorm(x) * w as
/// rmsnorm_residual writes it, built from the residual stream x (f32). At most 8 rows.
#[derive(Debug, Clone, Copy)]
pub struct NormPrologue {
    pub x: u64,
    pub w: u64,
    pub eps: f32,
}

/// Whether a model's blocks are norm, attention, norm, gated MLP (no post-norms, per-layer
/// inputs or output scales): the layer order the fused launches stand in for.
pub fn fusable_blocks(spec: &kiln_model::ModelSpec) -> bool {
    spec.per_layer_input.is_none()
        && spec
            .layers
            .iter()
            .all(|l| !l.post_norms && l.per_layer_input.is_none() && !l.output_scale)
}

/// Whether a layer's attention can take qkv_prepare into its QKV epilogue: Q, K and V rows,
/// no Q/K/V norms, heads of whole 16-row tiles.
pub fn rope_fusable(at: &kiln_model::AttnSpec) -> bool {
    crate::kernels::QkvKind::of(at) == crate::kernels::QkvKind::Full
        && !at.qk_norm
        && !at.v_norm
        && at.head_dim.is_multiple_of(16)
}

/// Rows a launch with the norm prologue takes at most (one x fragment of 8 rows).
pub const NORM_PROLOGUE_MAX_ROWS: usize = 8;

impl Epilogue {
    fn mode(&self) -> i32 {
        match self {
            Epilogue::Store { .. } => 0,
            Epilogue::Add { .. } => 1,
            Epilogue::Glu { .. } => 2,
            Epilogue::Rope(_) => 3,
        }
    }

    /// The 16-row tiles of a weight of `n` rows this epilogue covers (its rows checked).
    pub fn tiles(&self, n: usize) -> Result<usize> {
        match *self {
            Epilogue::Store { .. } | Epilogue::Add { .. } => Ok(n.div_ceil(16)),
            Epilogue::Glu { inter, .. } => {
                ensure!(
                    n == 2 * inter,
                    "a gate/up weight of {n} rows for {inter} x 2"
                );
                Ok(inter.div_ceil(8))
            }
            Epilogue::Rope(r) => {
                let heads = r.n_q + 2 * r.kv.n_kv;
                ensure!(
                    n == heads * r.hd,
                    "a QKV weight of {n} rows for {heads} heads of {}",
                    r.hd
                );
                ensure!(
                    r.hd.is_multiple_of(16),
                    "fused RoPE needs a head dim multiple of 16, got {}",
                    r.hd
                );
                Ok(heads * r.hd / 16)
            }
        }
    }

    /// The same epilogue seen from row `row` of a launch on: outputs and per-token inputs of
    /// later rows start further on (`n`: the weight's rows).
    pub fn from_row(&self, row: usize, n: usize) -> Epilogue {
        let f32s = |p: u64, w: usize| DevPtr::<f32>::new(p).row(row, w).addr();
        let halves = |p: u64, w: usize| DevPtr::<u16>::new(p).row(row, w).addr();
        let ints = |p: u64| DevPtr::<i32>::new(p).offset(row).addr();
        match *self {
            Epilogue::Store { y } => Epilogue::Store { y: f32s(y, n) },
            Epilogue::Add { y } => Epilogue::Add { y: f32s(y, n) },
            Epilogue::Glu { act, inter } => Epilogue::Glu {
                act: halves(act, inter),
                inter,
            },
            Epilogue::Rope(r) => Epilogue::Rope(RopeOut {
                q_out: halves(r.q_out, r.n_q * r.hd),
                positions: ints(r.positions),
                slots: ints(r.slots),
                ..r
            }),
        }
    }

    /// The kernels' `EPI_PARAMS`, in order, for a weight of `n` rows.
    pub fn args(&self, n: usize) -> Result<Vec<Arg>> {
        let mut a = vec![Arg::I32(self.mode())];
        match *self {
            Epilogue::Store { y } | Epilogue::Add { y } => {
                a.extend([Arg::I32(i32_of(n, "rows")?), Arg::Ptr(y), Arg::Ptr(0)]);
                a.extend([Arg::Ptr(0); 6]);
                a.extend([Arg::I32(0); 5]);
            }
            Epilogue::Glu { act, inter } => {
                a.extend([
                    Arg::I32(i32_of(inter, "inter")?),
                    Arg::Ptr(0),
                    Arg::Ptr(act),
                ]);
                a.extend([Arg::Ptr(0); 6]);
                a.extend([Arg::I32(0); 5]);
            }
            Epilogue::Rope(r) => {
                let heads = r.n_q + 2 * r.kv.n_kv;
                a.extend([
                    Arg::I32(i32_of(heads, "heads")?),
                    Arg::Ptr(0),
                    Arg::Ptr(r.q_out),
                    Arg::Ptr(r.bias),
                    Arg::Ptr(r.rope),
                    Arg::Ptr(r.positions),
                    Arg::Ptr(r.slots),
                    Arg::Ptr(r.kv.k),
                    Arg::Ptr(r.kv.v),
                    Arg::I32(i32_of(r.n_q, "n_q")?),
                    Arg::I32(i32_of(r.kv.n_kv, "n_kv")?),
                    Arg::I32(i32_of(r.hd, "head dim")?),
                    Arg::I32(r.neox as i32),
                    Arg::I32(i32_of(r.kv.block_size, "block size")?),
                ]);
            }
        }
        Ok(a)
    }
}

impl Gpu {
    /// x . w^T for `rows` decode rows through the 16-warp skinny kernel's fused entries, the
    /// sums going where `epi` says; `norm`: x is not read, the GEMM builds its input from the
    /// residual stream (at most [`NORM_PROLOGUE_MAX_ROWS`] rows). In launches of at most 64
    /// rows; every row gets the bits of `skinny_gemm` followed by the kernels `epi` replaces.
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_fused(
        &self,
        epi: &Epilogue,
        norm: Option<NormPrologue>,
        pdl: bool,
        x: u64,
        w: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if !k.is_multiple_of(8) {
            bail!("skinny GEMM needs the inner dimension to be a multiple of 8, got {k}");
        }
        let tiles = epi.tiles(n)?;
        let nb = norm_block(k) as usize;
        if let Some(_p) = norm {
            ensure!(
                rows <= NORM_PROLOGUE_MAX_ROWS,
                "the norm prologue takes at most {NORM_PROLOGUE_MAX_ROWS} rows, given {rows}"
            );
            ensure!(
                nb <= 512,
                "the norm prologue needs a norm block of at most 512 threads, hidden {k} has {nb}"
            );
        }
        let ki = i32_of(k, "k")?;
        let mut done = 0;
        while done < rows {
            let m = (rows - done).min(SKINNY_MAX_ROWS);
            let nt = m.div_ceil(8).next_power_of_two();
            let e = fused_entry(nt, tiles, self.sm_count as usize, norm.is_some());
            let xd = DevPtr::<u16>::new(x).row(done, k).addr();
            let mut args = vec![Arg::Ptr(xd), Arg::Ptr(w), Arg::I32(m as i32), Arg::I32(ki)];
            args.extend(epi.from_row(done, n).args(n)?);
            let p = norm.unwrap_or(NormPrologue {
                x: 0,
                w: 0,
                eps: 0.0,
            });
            let nx = DevPtr::<f32>::new(p.x).row(done, k).addr();
            args.extend([
                Arg::Ptr(nx),
                Arg::Ptr(p.w),
                Arg::F32(p.eps),
                Arg::I32(nb as i32),
            ]);
            let grid = (tiles.div_ceil(e.tiles) as u32, 1, 1);
            self.launch_with(
                &e.name,
                grid,
                32 * e.warps as u32,
                e.smem_bytes() as u32,
                &args,
                pdl,
            )?;
            done += m;
        }
        Ok(())
    }
}
