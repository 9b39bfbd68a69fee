//! The fp8 GEMM of `--quantize fp8` (kiln_formats::fp8): Y[m, n] (f32) = (Xq[m, k] . Wq[n, k]^T)
//! scaled by x's row scale and w's row scale, Xq and Wq E4M3, through cuBLASLt on the fp8 tensor
//! cores (f32 accumulation, fast accumulation off). The scales are applied by cuBLASLt's
//! outer-vector scaling (KILN_FP8_SCALES=outer, the default on compute capability 9.0, where
//! cuBLASLt documents it) or, with unit scales in the GEMM, by a kernel after it (=kernel, the
//! default elsewhere and the fallback where outer finds no algorithm). As for bf16 (gemm_lt.rs), one algorithm is pinned per shape
//! once a device run shows its rows bit-identical at several m, so a row's result does not
//! depend on the other rows of its step: every row of a step, decode or prompt, takes it (or,
//! in steps of few rows, a faster algorithm seen to give its bits: gemm_fp8_short.rs).

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::cublaslt::sys as lt;

use crate::device::{DevBuf, Gpu};
use crate::fp8_rows::Fp8Matrix;
use crate::gemm_lt::{algo_config, LtGemm};
use crate::lt_calls::{self, Layouts, Matmul};

// KILN_GEMM_SHORT: faster algorithms for steps of few rows, bit-identical to the pinned one.
#[path = "gemm_fp8_short.rs"]
mod short;

pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;

/// X's and W's type.
const E4M3: lt::cudaDataType = lt::cudaDataType::CUDA_R_8F_E4M3;

/// Where an fp8 product's row scales are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Scales {
    /// By cuBLASLt (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B).
    Outer,
    /// By `fp8_apply_scales` after a GEMM with unit scales.
    Kernel,
}

impl Fp8Scales {
    /// KILN_FP8_SCALES: `kernel` or `outer`; None when unset (or anything else): the GPU's
    /// default ([`Fp8Scales::for_arch`]).
    pub fn from_env() -> Option<Fp8Scales> {
        match std::env::var("KILN_FP8_SCALES").as_deref() {
            Ok("kernel") => Some(Fp8Scales::Kernel),
            Ok("outer") => Some(Fp8Scales::Outer),
            _ => None,
        }
    }

    /// The mode for a GPU of compute capability `arch` (e.g. 90), KILN_FP8_SCALES first:
    /// cuBLASLt documents outer-vector scaling for compute capability 9.0, tensor-wide scales
    /// (our unit ones) from 8.9.
    pub fn for_arch(arch: u32) -> Fp8Scales {
        Fp8Scales::from_env().unwrap_or(match arch {
            90 => Fp8Scales::Outer,
            _ => Fp8Scales::Kernel,
        })
    }
}

/// A shape's pinned algorithm.
#[derive(Clone, Copy)]
struct Pinned {
    algo: lt::cublasLtMatmulAlgo_t,
    /// No split-K: each element summed in one pass (the short tiers need it).
    one_pass: bool,
    /// Its rows shown bit-identical across m on the device (a product's rows may then run in
    /// two launches: gemm_tail.rs).
    invariant: bool,
}

pub struct Fp8Gemm {
    mm: Matmul,
    workspace: DevBuf<u8>,
    pinned: HashMap<(usize, usize), Pinned>,
    /// Each shape's algorithm for steps of at most a tier's rows (gemm_fp8_short.rs).
    short: crate::gemm_lt::short::TierChoices<lt::cublasLtMatmulAlgo_t>,
    short_on: bool,
    /// KILN_GEMM_TAIL (gemm_tail.rs).
    tail_on: bool,
    scales: Fp8Scales,
    reference_m: usize,
    /// One line per pinned shape, for the start-up log.
    pub choices: Vec<String>,
}

impl Fp8Gemm {
    pub fn new(gpu: &Gpu, reference_m: usize, scales: Fp8Scales) -> Result<Fp8Gemm> {
        if gpu.arch < 89 {
            bail!(
                "fp8 projections need compute capability 8.9 or later; this GPU is {}.{}",
                gpu.arch / 10,
                gpu.arch % 10
            );
        }
        gpu.bind()?;
        let mm = Matmul::new()?;
        use lt::cublasLtMatmulDescAttributes_t as D;
        if scales == Fp8Scales::Outer {
            let outer =
                lt::cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F as i32;
            let hint = "outer-vector scales (KILN_FP8_SCALES=kernel applies them after the GEMM)";
            mm.set(D::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, "A scale mode")
                .and_then(|_| mm.set(D::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, "B scale mode"))
                .with_context(|| hint)?;
        }
        let sw = crate::switches::Switches::from_env();
        Ok(Fp8Gemm {
            mm,
            workspace: gpu.alloc(WORKSPACE_BYTES)?,
            pinned: HashMap::new(),
            short: HashMap::new(),
            short_on: sw.gemm_short,
            tail_on: sw.gemm_tail,
            scales,
            reference_m: reference_m.max(64),
            choices: Vec::new(),
        })
    }

    /// Whether a prompt product's last rows may run apart (gemm_tail.rs).
    pub fn set_tail(&mut self, on: bool) {
        self.tail_on = on;
    }

    /// The layouts of an m-row fp8 product of shape (n, k) (lt_calls.rs).
    fn layouts(n: usize, k: usize, m: usize) -> Result<Layouts> {
        Layouts::new(E4M3, n, k, m)
    }

    /// cuBLASLt's candidates for shape (n, k) at m rows, in its order of preference.
    fn heuristic(&self, n: usize, k: usize, m: usize) -> Result<Vec<lt_calls::Candidate>> {
        let ls = Self::layouts(n, k, m)?;
        lt_calls::heuristic(&self.mm, &ls, WORKSPACE_BYTES)
    }

    /// Whether `algo` runs shape (n, k) at every m a step may have (a few samples).
    fn works_for_small_m(&self, algo: &lt_calls::Algo, n: usize, k: usize) -> Result<bool> {
        lt_calls::runs_at_small_m(&self.mm, E4M3, n, k, algo, WORKSPACE_BYTES)
    }

    /// Chooses and records the algorithm for shape (n, k) if not done yet: the first candidate
    /// usable at small m whose rows, run on the device, are bit-identical at m = 1, 37, 5 (at an
    /// offset) and the reference m.
    pub fn pin(&mut self, gpu: &Gpu, n: usize, k: usize) -> Result<()> {
        if self.pinned.contains_key(&(n, k)) {
            return Ok(());
        }
        if !n.is_multiple_of(16) || !k.is_multiple_of(16) {
            bail!("the fp8 GEMM needs both sides of a weight to be multiples of 16, not {n}x{k}");
        }
        let m = self.reference_m;
        // The heuristic and the checks see scale pointers set, as every call has them (any
        // device address: neither reads through it).
        self.set_scales(self.workspace.ptr(), self.workspace.ptr())?;
        let mut usable = Vec::new();
        for res in self.heuristic(n, k, m)? {
            if res.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && self.works_for_small_m(&res.algo, n, k)?
            {
                usable.push(res.algo);
            }
        }
        // Those that sum each element in one pass first, in the heuristic's order.
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        let split_k =
            |a: &lt::cublasLtMatmulAlgo_t| algo_config(a, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
        usable.sort_by_key(|a| split_k(a) > 1);
        let Some(&first) = usable.first() else {
            bail!(
                "cuBLASLt offers no fp8 algorithm for a {n}x{k} GEMM usable at every row count \
                 ({:?} scales; KILN_FP8_SCALES=kernel applies them after the GEMM)",
                self.scales
            );
        };
        let mut chosen = None;
        for (rank, algo) in usable.iter().enumerate() {
            if self.invariant_on_device(gpu, algo, n, k)? {
                chosen = Some((
                    *algo,
                    format!("candidate {rank}, rows verified bit-identical across m"),
                ));
                break;
            }
        }
        let invariant = chosen.is_some();
        let (algo, note) = chosen.unwrap_or((
            first,
            "NOT batch invariant: no candidate passed the row check".into(),
        ));
        self.choices.push(format!(
            "gemm fp8 n={n} k={k} ({:?} scales, chosen at m={m}; {note})",
            self.scales
        ));
        let one_pass = split_k(&algo) == 1;
        self.pinned.insert(
            (n, k),
            Pinned {
                algo,
                one_pass,
                invariant,
            },
        );
        self.pin_short(gpu, n, k)
    }

    /// Runs `algo` on generated rows at the reference m and at a few small m (one at a row
    /// offset, a multiple of 4 rows so that its scales start 16-byte aligned, as a step's do)
    /// and compares the overlapping rows bit for bit (lt_calls::rows_invariant).
    fn invariant_on_device(
        &self,
        gpu: &Gpu,
        algo: &lt::cublasLtMatmulAlgo_t,
        n: usize,
        k: usize,
    ) -> Result<bool> {
        let m = self.reference_m;
        let (xs, ws) = (gpu.alloc_store(m * k)?, gpu.alloc_store(n * k)?);
        gpu.dummy_fill(xs.ptr(), m * k, 0x5eed)?;
        gpu.dummy_fill(ws.ptr(), n * k, 0xfeed)?;
        let x = Fp8Matrix::from_store(gpu, &xs, m, k)?;
        let w = Fp8Matrix::from_store(gpu, &ws, n, k)?;
        // The last rows from a multiple of 4, so that their scales start 16-byte aligned.
        lt_calls::rows_invariant(gpu, m, n, (m - 5) & !3, |y, first, rows| {
            let (xq, xs) = (x.q.at(first * k), x.scale.at(first));
            self.run(gpu, Some(algo), y, xq, xs, &w, rows)
        })
    }

    /// y[m, n] = (xq . w.q^T) * x_scale[row] * w.scale[col], queued on the stream, with the
    /// shape's pinned algorithm (pinned now if it was not).
    pub fn matmul(
        &mut self,
        gpu: &Gpu,
        y: u64,
        xq: u64,
        x_scale: u64,
        w: &Fp8Matrix,
        m: usize,
    ) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        let (n, k) = (w.rows, w.cols);
        self.pin(gpu, n, k)?;
        // The last rows apart where they would take a round of tiles of their own: only with
        // an algorithm whose rows are the same at any m (gemm_tail.rs).
        let invariant = self.pinned.get(&(n, k)).is_some_and(|p| p.invariant);
        let split = self.tail_on && invariant;
        for (first, rows) in crate::gemm_tail::launches(m, n, gpu.sm_count as usize, split) {
            let algo = self.algo_for(n, k, rows);
            let f = first as u64;
            let (y, xq, xs) = (y + f * (n * 4) as u64, xq + f * k as u64, x_scale + f * 4);
            self.run(gpu, algo.as_ref(), y, xq, xs, w, rows)?;
        }
        Ok(())
    }

    /// Points the descriptor at the row scales of W (A: its outer dimension is n, w's rows) and
    /// of X (B: m, x's rows), when cuBLASLt applies them.
    fn set_scales(&self, w_scale: u64, x_scale: u64) -> Result<()> {
        if self.scales == Fp8Scales::Outer {
            use lt::cublasLtMatmulDescAttributes_t as D;
            self.mm
                .set(D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, "A scale")?;
            self.mm
                .set(D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, "B scale")?;
        }
        Ok(())
    }

    /// One cuBLASLt call, then the scales if the GEMM did not apply them.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        gpu: &Gpu,
        algo: Option<&lt::cublasLtMatmulAlgo_t>,
        y: u64,
        xq: u64,
        x_scale: u64,
        w: &Fp8Matrix,
        m: usize,
    ) -> Result<()> {
        let (n, k) = (w.rows, w.cols);
        self.set_scales(w.scale.ptr(), x_scale)?;
        let ls = Self::layouts(n, k, m)?;
        let st = lt_calls::matmul(
            &self.mm,
            &ls,
            (1.0, 0.0),
            (w.q.ptr(), xq, y),
            algo,
            (self.workspace.ptr(), WORKSPACE_BYTES),
            gpu.stream.cu_stream() as lt::cudaStream_t,
        );
        if st != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            bail!("cuBLASLt fp8 matmul m={m} n={n} k={k} failed: {st:?}");
        }
        if self.scales == Fp8Scales::Kernel {
            gpu.fp8_apply_scales(y, x_scale, w.scale.ptr(), m, n)?;
        }
        Ok(())
    }
}

impl LtGemm {
    /// Starts the fp8 GEMMs (once; chosen for the same reference m as the bf16 ones).
    pub fn enable_fp8(&mut self, gpu: &Gpu, scales: Fp8Scales) -> Result<()> {
        if self.fp8.is_none() {
            self.fp8 = Some(Fp8Gemm::new(gpu, self.reference_m(), scales)?);
        }
        Ok(())
    }

    /// Starts the fp8 GEMMs for the GPU and pins every shape of `shapes` ((n, k) of each fp8
    /// weight). Where the GPU's default is outer-vector scales and cuBLASLt offers no algorithm
    /// for a shape with them, every shape is pinned again with the scales applied by the kernel
    /// (said in the choices); KILN_FP8_SCALES set asks for one mode and gets it or the error.
    pub fn enable_fp8_for(&mut self, gpu: &Gpu, shapes: &[(usize, usize)]) -> Result<()> {
        let scales = Fp8Scales::for_arch(gpu.arch);
        // A cuBLASLt that refuses the outer-vector scale mode itself fails here, before any pin.
        let first = match self.enable_fp8(gpu, scales) {
            Ok(()) => self.pin_fp8(gpu, shapes),
            Err(e) => Err(e),
        };
        match first {
            Err(e) if scales == Fp8Scales::Outer && Fp8Scales::from_env().is_none() => {
                tracing::warn!("fp8 GEMMs with the kernel applying the scales: {e:#}");
                self.fp8 = None;
                self.enable_fp8(gpu, Fp8Scales::Kernel)?;
                self.fp8()?.choices.push(format!(
                    "fp8 scales applied by the kernel: outer-vector scaling failed ({e:#})"
                ));
                self.pin_fp8(gpu, shapes)
            }
            other => other,
        }
    }

    /// Pins the fp8 GEMM of every shape of `shapes`.
    fn pin_fp8(&mut self, gpu: &Gpu, shapes: &[(usize, usize)]) -> Result<()> {
        let fp8 = self.fp8()?;
        shapes.iter().try_for_each(|&(n, k)| {
            fp8.pin(gpu, n, k)
                .with_context(|| format!("choosing the fp8 GEMM for {n}x{k}"))
        })
    }

    /// The fp8 GEMMs, once enabled.
    pub fn fp8(&mut self) -> Result<&mut Fp8Gemm> {
        self.fp8
            .as_mut()
            .ok_or_else(|| anyhow!("an fp8 GEMM before the fp8 GEMMs were enabled"))
    }
}
