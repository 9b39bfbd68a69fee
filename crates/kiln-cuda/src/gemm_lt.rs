//! Prefill-shaped GEMMs through cuBLASLt (every GEMM, when the storage type is not bf16):
//! Y[m, n] (f32) = X[m, k] . W[n, k]^T with X and W in the storage type, fp32 accumulate
//! (CUBLAS_COMPUTE_32F: f32 inputs are multiplied in full f32, never through TF32). One algorithm
//! is pinned per weight shape (n, k), chosen once for a prefill-chunk-sized m (those without
//! split-K first) and used for every m, once a run on the device shows its rows bit-identical at
//! several m: each output element is then reduced in the same order whatever the row count, so a
//! row's result does not depend on the other rows of the step.
//! KILN_GEMM_PIN=0 lets cuBLASLt pick per call instead. [`GemmOut::Add`] adds the product to
//! what Y holds (beta 1): one rounding of the f32 sum, the bits of writing it and adding after.

use std::collections::HashMap;
use std::ffi::c_void;

use anyhow::{bail, Result};
use cudarc::cublaslt::sys as lt;

use crate::device::{DevBuf, Gpu};
use crate::lt_calls::{self, Layouts, Matmul};
use crate::store::StoreType;
use crate::switches::Switches;

// KILN_GEMM_TUNE: candidates timed, the choice kept beside the compiled kernels.
#[path = "gemm_tune.rs"]
pub(crate) mod tune;
// KILN_GEMM_SHORT: a second algorithm for steps of a few hundred rows, bit-identical.
#[path = "gemm_chain_rows.rs"]
mod chain_rows;
#[path = "gemm_short.rs"]
pub(crate) mod short;

pub(crate) const WORKSPACE_BYTES: usize = 64 << 20;

/// What a GEMM does with Y's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmOut {
    /// Y = X . W^T.
    Store,
    /// Y += X . W^T in the epilogue (Y in f32, read and written once).
    Add,
}

/// The pinned choice for one weight shape.
#[derive(Clone, Copy)]
struct Pinned {
    algo: lt::cublasLtMatmulAlgo_t,
    /// Its split-K factor: over 1, partial sums are reduced after the main loop, and where beta's
    /// term joins them is cuBLASLt's to choose, so [`GemmOut::Add`] is not used.
    split_k: i64,
    /// Its rows shown bit-identical across m on the device (a product's rows may then run in
    /// two launches: gemm_tail.rs).
    invariant: bool,
}

/// Describes an algorithm (id, tile, split-K, reduction scheme, stages) for diagnostics.
pub(crate) fn algo_config(
    algo: &lt::cublasLtMatmulAlgo_t,
    attr: lt::cublasLtMatmulAlgoConfigAttributes_t,
) -> i64 {
    // cuBLASLt answers only when the size given is the attribute's own (4 bytes for most,
    // 2 for the shape ids), so each size is tried in turn.
    let mut v: u64 = 0;
    let mut written = 0usize;
    let read = [4usize, 2, 8, 1].into_iter().any(|size| {
        v = 0;
        // SAFETY: v holds 8 bytes, at least `size`.
        let st = unsafe {
            lt::cublasLtMatmulAlgoConfigGetAttribute(
                algo,
                attr,
                &mut v as *mut u64 as *mut c_void,
                size,
                &mut written,
            )
        };
        st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
    });
    if !read {
        return -1;
    }
    match written {
        1 => (v & 0xff) as i64,
        2 => (v & 0xffff) as i64,
        4 => (v & 0xffff_ffff) as u32 as i32 as i64,
        _ => v as i64,
    }
}

pub struct LtGemm {
    mm: Matmul,
    workspace: DevBuf<u8>,
    pinned: HashMap<(usize, usize), Pinned>,
    /// Each pinned shape's algorithm for steps of at most a tier's rows, when one is faster
    /// and bit-identical (gemm_short.rs); KILN_GEMM_SHORT=0: none.
    short: short::TierChoices<Pinned>,
    short_on: bool,
    /// KILN_GEMM_TAIL: a prompt product's last rows in a launch of their own where that saves
    /// a round of tiles (gemm_tail.rs).
    tail_on: bool,
    /// With KILN_CHAIN_GEMM, the most rows of a decode-only step of each shape that take the
    /// chain kernel (gemm_chain_rows.rs); `chain_fixed`: KILN_CHAIN_ROWS=N for every shape.
    chain_rows: HashMap<(usize, usize), usize>,
    chain_fixed: Option<usize>,
    /// The type of X and W.
    store: StoreType,
    /// m used to choose each shape's algorithm (the prefill chunk).
    reference_m: usize,
    pin: bool,
    /// KILN_GEMM_TUNE: order the split-K-free candidates by their time at `reference_m`.
    tune: bool,
    /// The multiprocessors the GEMMs are told to use (all of them unless `leave_sms`).
    sm_target: u32,
    /// One line per pinned shape, for the start-up log and gpu-check reports.
    pub choices: Vec<String>,
    /// The fp8 GEMMs of `--quantize fp8` (gemm_fp8.rs), once enabled.
    pub(crate) fp8: Option<crate::gemm_fp8::Fp8Gemm>,
}

impl LtGemm {
    pub fn new(gpu: &Gpu, reference_m: usize) -> Result<LtGemm> {
        gpu.bind()?;
        let mm = Matmul::new()?;
        let sw = Switches::from_env();
        let (pin, reference_m) = (sw.gemm_pin, sw.gemm_pin_m.unwrap_or(reference_m));
        Ok(LtGemm {
            mm,
            workspace: gpu.alloc(WORKSPACE_BYTES)?,
            pinned: HashMap::new(),
            short: HashMap::new(),
            short_on: sw.gemm_short,
            tail_on: sw.gemm_tail,
            chain_rows: HashMap::new(),
            chain_fixed: sw.chain_rows,
            store: gpu.store,
            reference_m: reference_m.max(1),
            pin,
            tune: sw.gemm_tune,
            sm_target: gpu.sm_count,
            choices: Vec::new(),
            fp8: None,
        })
    }

    /// Whether a prompt product's last rows may run apart (KILN_GEMM_TAIL at start; tests
    /// compare both ways).
    pub fn set_tail(&mut self, on: bool) {
        self.tail_on = on;
        if let Some(f) = self.fp8.as_mut() {
            f.set_tail(on);
        }
    }

    /// The row count each shape's algorithm is chosen at.
    pub(crate) fn reference_m(&self) -> usize {
        self.reference_m
    }

    /// X's and W's type: the storage type.
    fn input_type(&self) -> lt::cudaDataType {
        match self.store {
            StoreType::Bf16 => lt::cudaDataType::CUDA_R_16BF,
            StoreType::F16 => lt::cudaDataType::CUDA_R_16F,
            StoreType::F32 => lt::cudaDataType::CUDA_R_32F,
        }
    }

    /// The layouts of an m-row product of shape (n, k) in the storage type (lt_calls.rs).
    fn layouts(&self, n: usize, k: usize, m: usize) -> Result<Layouts> {
        Layouts::new(self.input_type(), n, k, m)
    }

    /// Runs every GEMM on `sm_count - n` multiprocessors, leaving `n` to work on another
    /// stream (quant_prefill.rs); before any shape is pinned, so the choices account for it.
    pub fn leave_sms(&mut self, gpu: &Gpu, n: u32) -> Result<()> {
        if !self.pinned.is_empty() {
            bail!("leave_sms after GEMM shapes were pinned");
        }
        let target = gpu.sm_count.saturating_sub(n).max(1) as i32;
        self.sm_target = target as u32;
        self.mm.set(
            lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
            &target,
            "SM count target",
        )?;
        self.choices
            .push(format!("GEMMs on {target} of {} SMs", gpu.sm_count));
        Ok(())
    }

    /// Chooses and records the algorithm for shape (n, k) if not done yet: the first heuristic
    /// candidate that runs at small m and that, tried on the device, gives rows bit-identical at
    /// m = 1, 37, 5 (at an offset) and the reference m; those without split-K are tried first
    /// (some small f32 shapes have none).
    pub fn pin_shape(&mut self, gpu: &Gpu, n: usize, k: usize) -> Result<()> {
        if self.pinned.contains_key(&(n, k)) {
            return Ok(());
        }
        let m = self.reference_m;
        let results = self.heuristic(n, k, m)?;
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        let split_k =
            |a: &lt::cublasLtMatmulAlgo_t| algo_config(a, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
        let mut usable = Vec::new();
        for res in &results {
            if res.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && self.works_for_small_m(&res.algo, n, k)?
            {
                usable.push(*res);
            }
        }
        // Stable: the heuristic's order within each kind.
        usable.sort_by_key(|r| split_k(&r.algo) > 1);
        let file = self.tune.then(|| self.tune_file(gpu, n, k)).flatten();
        let timed = match &file {
            Some((path, _)) => {
                let one_pass = usable.iter().filter(|r| split_k(&r.algo) <= 1).count();
                self.tuned_order(gpu, path, &mut usable, one_pass, n, k)?
            }
            None => String::new(),
        };
        let mut chosen = None;
        for (rank, res) in usable.iter().enumerate() {
            if self.invariant_on_device(gpu, &res.algo, n, k)? {
                chosen = Some((
                    *res,
                    format!("candidate {rank}{timed}, rows verified bit-identical across m"),
                ));
                break;
            }
        }
        let verified = chosen.is_some();
        // No verified candidate: keep the best usable one and say so (the tests will show it).
        let (mut res, mut note) = match (chosen, usable.first()) {
            (Some(c), _) => c,
            (None, Some(first)) => (
                *first,
                "NOT batch invariant: no candidate passed the row check".to_string(),
            ),
            (None, None) => bail!(
                "cuBLASLt offers no algorithm for a {n}x{k} {} GEMM usable at every row count",
                self.store
            ),
        };
        if let (Some((path, key)), true) = (&file, verified) {
            // The first run to keep a choice gives it to every later one.
            if let Some(other) = self.settle(gpu, path, key, &res.algo, n, k)? {
                res.algo = other;
                note = "taken from the run that timed it first".into();
            }
        }
        let a = &res.algo;
        self.choices.push(format!(
            "gemm {} n={n} k={k}: algo {} tile {} stages {} splitk {} reduction {} swizzle {} custom {} (chosen at m={m}; {note})",
            self.store,
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_ID),
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_TILE_ID),
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_STAGES_ID),
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
            algo_config(a, C::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
        ));
        let split_k = split_k(a);
        self.pinned.insert(
            (n, k),
            Pinned {
                algo: res.algo,
                split_k,
                invariant: verified,
            },
        );
        self.pin_short(gpu, n, k)
    }

    /// cuBLASLt's candidates for shape (n, k) at m rows, in its order of preference.
    fn heuristic(
        &self,
        n: usize,
        k: usize,
        m: usize,
    ) -> Result<Vec<lt::cublasLtMatmulHeuristicResult_t>> {
        let ls = self.layouts(n, k, m)?;
        lt_calls::heuristic(&self.mm, &ls, WORKSPACE_BYTES)
    }

    /// Whether [`GemmOut::Add`] on shape (n, k) gives the bits of storing then adding: the
    /// shape's pinned algorithm (pinned now if it was not) reduces each element in one pass.
    pub fn adds_exactly(&mut self, gpu: &Gpu, n: usize, k: usize) -> Result<bool> {
        if !self.pin {
            return Ok(false);
        }
        self.pin_shape(gpu, n, k)?;
        // 1: no split-K; -1 (not read) counts as unknown.
        Ok(self.pinned.get(&(n, k)).is_some_and(|p| p.split_k == 1))
    }

    fn works_for_small_m(
        &self,
        algo: &lt::cublasLtMatmulAlgo_t,
        n: usize,
        k: usize,
    ) -> Result<bool> {
        lt_calls::runs_at_small_m(&self.mm, self.input_type(), n, k, algo, WORKSPACE_BYTES)
    }

    /// Runs `algo` on generated data at the reference m and at a few small m (one at a row
    /// offset) and compares the overlapping rows bit for bit (lt_calls::rows_invariant).
    fn invariant_on_device(
        &self,
        gpu: &Gpu,
        algo: &lt::cublasLtMatmulAlgo_t,
        n: usize,
        k: usize,
    ) -> Result<bool> {
        let m = self.reference_m.max(64);
        let x = gpu.alloc_store(m * k)?;
        let w = gpu.alloc_store(n * k)?;
        gpu.dummy_fill(x.ptr(), m * k, 0x5eed)?;
        gpu.dummy_fill(w.ptr(), n * k, 0xfeed)?;
        lt_calls::rows_invariant(gpu, m, n, m - 5, |y, first, rows| {
            let x = x.at(first * k);
            self.run(gpu, Some(algo), GemmOut::Store, y, x, w.ptr(), rows, n, k)
        })
    }

    /// y[m, n] = x[m, k] . w[n, k]^T, queued on the stream.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &mut self,
        gpu: &Gpu,
        y: u64,
        x: u64,
        w: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        self.matmul_to(gpu, GemmOut::Store, y, x, w, m, n, k)
    }

    /// y[m, n] = x . w^T, or with [`GemmOut::Add`] y[m, n] += x . w^T, queued on the stream.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_to(
        &mut self,
        gpu: &Gpu,
        out: GemmOut,
        y: u64,
        x: u64,
        w: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        if self.pin {
            self.pin_shape(gpu, n, k)?;
        }
        // The last rows apart where they would take a round of tiles of their own: only with
        // an algorithm whose rows are the same at any m.
        let invariant = self.pin && self.pinned.get(&(n, k)).is_some_and(|p| p.invariant);
        let split = self.tail_on && invariant;
        let (x_row, y_row) = ((k * self.store.bytes()) as u64, (n * 4) as u64);
        for (first, rows) in crate::gemm_tail::launches(m, n, self.sm_target as usize, split) {
            let pinned = if self.pin {
                self.algo_for(n, k, rows)
            } else {
                None
            };
            if out == GemmOut::Add && pinned.is_none_or(|p| p.split_k != 1) {
                bail!(
                    "an add in the epilogue of a {n}x{k} GEMM without a pinned one-pass algorithm"
                );
            }
            let algo = pinned.as_ref().map(|p| &p.algo);
            let (x, y) = (x + first as u64 * x_row, y + first as u64 * y_row);
            self.run(gpu, algo, out, y, x, w, rows, n, k)?;
        }
        Ok(())
    }

    /// One cuBLASLt call with the given algorithm (None: cuBLASLt's own choice). C is D, so
    /// beta 1 adds what Y held: alpha 1 and beta 1 multiply exactly, and the sum rounds once.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        gpu: &Gpu,
        algo: Option<&lt::cublasLtMatmulAlgo_t>,
        out: GemmOut,
        y: u64,
        x: u64,
        w: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let ls = self.layouts(n, k, m)?;
        let beta = match out {
            GemmOut::Store => 0.0f32,
            GemmOut::Add => 1.0,
        };
        let st = lt_calls::matmul(
            &self.mm,
            &ls,
            (1.0, beta),
            (w, x, y),
            algo,
            (self.workspace.ptr(), WORKSPACE_BYTES),
            gpu.stream.cu_stream() as lt::cudaStream_t,
        );
        if st != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            bail!("cuBLASLt matmul m={m} n={n} k={k} failed: {st:?}");
        }
        Ok(())
    }
}
