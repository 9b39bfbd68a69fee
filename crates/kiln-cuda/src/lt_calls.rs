//! The checked cuBLASLt calls both GEMM families make (gemm_lt.rs: bf16, f16 and f32 inputs;
//! gemm_fp8.rs: fp8): a product's matrix layouts, the heuristic's candidates, whether an
//! algorithm runs a shape, and the matmul. Column-major throughout: A = W as k x n (ld k,
//! transposed by the op), B = X as k x m (ld k), C = D = Y as n x m (ld n, f32).

use std::ffi::c_void;

use anyhow::{anyhow, Result};
use cudarc::cublaslt::sys as lt;

use crate::device::{DevBuf, Gpu};

pub(crate) type Algo = lt::cublasLtMatmulAlgo_t;
pub(crate) type Candidate = lt::cublasLtMatmulHeuristicResult_t;

/// Candidates asked of the heuristic.
const CANDIDATES_ASKED: usize = 16;

pub(crate) fn check(status: lt::cublasStatus_t, what: &str) -> Result<()> {
    if status == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(anyhow!("cuBLASLt {what} failed: {status:?}"))
    }
}

/// A cuBLASLt handle and a matmul descriptor computing in f32 with A = W transposed and B = X
/// not (both read along k), destroyed when dropped.
pub(crate) struct Matmul {
    pub handle: lt::cublasLtHandle_t,
    pub desc: lt::cublasLtMatmulDesc_t,
}

// SAFETY: the handle and descriptor are used from one thread at a time (their owners take
// &mut self for every call that changes them).
unsafe impl Send for Matmul {}

impl Matmul {
    pub fn new() -> Result<Matmul> {
        let mut mm = Matmul {
            handle: std::ptr::null_mut(),
            desc: std::ptr::null_mut(),
        };
        // SAFETY: out-pointers to a handle and a descriptor.
        check(unsafe { lt::cublasLtCreate(&mut mm.handle) }, "create")?;
        check(
            unsafe {
                lt::cublasLtMatmulDescCreate(
                    &mut mm.desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType::CUDA_R_32F,
                )
            },
            "matmul descriptor",
        )?;
        use lt::cublasLtMatmulDescAttributes_t as D;
        mm.set(D::CUBLASLT_MATMUL_DESC_TRANSA, &1i32, "transa")?;
        mm.set(D::CUBLASLT_MATMUL_DESC_TRANSB, &0i32, "transb")?;
        Ok(mm)
    }

    /// Sets one attribute of the descriptor from a value of the attribute's own type.
    pub fn set<T>(
        &self,
        attr: lt::cublasLtMatmulDescAttributes_t,
        v: &T,
        what: &str,
    ) -> Result<()> {
        // SAFETY: v is a live value of the attribute's type, passed with its size.
        check(
            unsafe {
                lt::cublasLtMatmulDescSetAttribute(
                    self.desc,
                    attr,
                    v as *const T as *const c_void,
                    std::mem::size_of::<T>(),
                )
            },
            what,
        )
    }
}

impl Drop for Matmul {
    fn drop(&mut self) {
        // SAFETY: created in new() and destroyed once.
        unsafe {
            if !self.desc.is_null() {
                lt::cublasLtMatmulDescDestroy(self.desc);
            }
            if !self.handle.is_null() {
                lt::cublasLtDestroy(self.handle);
            }
        }
    }
}

/// The three layouts of an m-row product of shape (n, k) with inputs of type `input`,
/// destroyed when dropped.
pub(crate) struct Layouts([lt::cublasLtMatrixLayout_t; 3]);

impl Layouts {
    pub fn new(input: lt::cudaDataType, n: usize, k: usize, m: usize) -> Result<Layouts> {
        let mut out = Layouts([std::ptr::null_mut(); 3]);
        let specs = [
            (input, k, n, k),
            (input, k, m, k),
            (lt::cudaDataType::CUDA_R_32F, n, m, n),
        ];
        for (i, (ty, rows, cols, ld)) in specs.into_iter().enumerate() {
            // SAFETY: out-pointer to a layout.
            check(
                unsafe {
                    lt::cublasLtMatrixLayoutCreate(
                        &mut out.0[i],
                        ty,
                        rows as u64,
                        cols as u64,
                        ld as i64,
                    )
                },
                "matrix layout",
            )?;
        }
        Ok(out)
    }
}

impl Drop for Layouts {
    fn drop(&mut self) {
        for l in self.0.into_iter().filter(|l| !l.is_null()) {
            // SAFETY: created by Layouts::new and destroyed once.
            unsafe { lt::cublasLtMatrixLayoutDestroy(l) };
        }
    }
}

/// cuBLASLt's candidates for the product `ls` describes under `desc`, in its order of
/// preference, each needing at most `workspace` bytes.
pub(crate) fn heuristic(mm: &Matmul, ls: &Layouts, workspace: usize) -> Result<Vec<Candidate>> {
    let ls = &ls.0;
    let ws = workspace as u64;
    let mut pref = std::ptr::null_mut();
    // SAFETY: all-zero bytes are a valid (empty) result.
    let mut results = vec![unsafe { std::mem::zeroed::<Candidate>() }; CANDIDATES_ASKED];
    let mut count = 0i32;
    // SAFETY: valid handle, descriptor and layouts; `results` holds CANDIDATES_ASKED entries.
    unsafe {
        check(lt::cublasLtMatmulPreferenceCreate(&mut pref), "preference")?;
        let set = check(
            lt::cublasLtMatmulPreferenceSetAttribute(
                pref,
                lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            ),
            "workspace preference",
        );
        let st = match set {
            Ok(()) => lt::cublasLtMatmulAlgoGetHeuristic(
                mm.handle,
                mm.desc,
                ls[0],
                ls[1],
                ls[2],
                ls[2],
                pref,
                CANDIDATES_ASKED as i32,
                results.as_mut_ptr(),
                &mut count,
            ),
            Err(e) => {
                lt::cublasLtMatmulPreferenceDestroy(pref);
                return Err(e);
            }
        };
        lt::cublasLtMatmulPreferenceDestroy(pref);
        check(st, "algorithm heuristic")?;
    }
    results.truncate(count.max(0) as usize);
    Ok(results)
}

/// Whether `algo` runs the product `ls` describes within `workspace` bytes.
pub(crate) fn runs(mm: &Matmul, ls: &Layouts, algo: &Algo, workspace: usize) -> bool {
    let ls = &ls.0;
    // SAFETY: all-zero bytes are a valid result to write into.
    let mut res = unsafe { std::mem::zeroed::<Candidate>() };
    // SAFETY: valid handle, descriptor, layouts and algorithm.
    let st = unsafe {
        lt::cublasLtMatmulAlgoCheck(
            mm.handle, mm.desc, ls[0], ls[1], ls[2], ls[2], algo, &mut res,
        )
    };
    st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS && res.workspaceSize <= workspace
}

/// Row counts an algorithm must run before it is pinned for every m: one row, a few, more
/// than a tile, and an odd count past several tiles.
const SMALL_M: [usize; 4] = [1, 7, 64, 333];

/// Whether `algo` runs shape (n, k) with inputs of type `input` at every [`SMALL_M`] row count
/// within `workspace` bytes.
pub(crate) fn runs_at_small_m(
    mm: &Matmul,
    input: lt::cudaDataType,
    n: usize,
    k: usize,
    algo: &Algo,
    workspace: usize,
) -> Result<bool> {
    for m in SMALL_M {
        if !runs(mm, &Layouts::new(input, n, k, m)?, algo, workspace) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `len` values of `a` from `a_at` and of `b` from `b_at` are the same bits (the
/// pinning checks' comparison of one product's rows against another's).
pub(crate) fn same_bits(
    gpu: &Gpu,
    (a, a_at): (&DevBuf<f32>, usize),
    (b, b_at): (&DevBuf<f32>, usize),
    len: usize,
) -> Result<bool> {
    let (a, b) = (a.download(gpu, a_at, len)?, b.download(gpu, b_at, len)?);
    Ok(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()))
}

/// Whether an algorithm's rows do not depend on the rows beside them: `run(y, first, rows)`
/// computes rows `first..first + rows` of a generated product into `y`; rows 1 and 37 from
/// the first and the last `m - tail` from `tail` must each be bit for bit what the whole m-row
/// run gives. A run that fails is a failed check (a candidate that cannot run every step).
pub(crate) fn rows_invariant(
    gpu: &Gpu,
    m: usize,
    n: usize,
    tail: usize,
    run: impl Fn(u64, usize, usize) -> Result<()>,
) -> Result<bool> {
    let full = gpu.alloc::<f32>(m * n)?;
    let part = gpu.alloc::<f32>(37.max(m - tail) * n)?;
    if run(full.ptr(), 0, m).is_err() {
        return Ok(false);
    }
    for (first, rows) in [(0, 1), (0, 37), (tail, m - tail)] {
        if run(part.ptr(), first, rows).is_err()
            || !same_bits(gpu, (&part, 0), (&full, first * n), rows * n)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Y = alpha X . W^T + beta Y, queued on `stream`, with `algo` (None: cuBLASLt's own
/// choice); `workspace` is the device buffer's address and size.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    mm: &Matmul,
    ls: &Layouts,
    (alpha, beta): (f32, f32),
    (w, x, y): (u64, u64, u64),
    algo: Option<&Algo>,
    workspace: (u64, usize),
    stream: lt::cudaStream_t,
) -> lt::cublasStatus_t {
    let ls = &ls.0;
    let algo_ptr = algo.map_or(std::ptr::null(), |a| a as *const _);
    // SAFETY: the caller's device buffers are sized for the shapes the layouts give.
    unsafe {
        lt::cublasLtMatmul(
            mm.handle,
            mm.desc,
            &alpha as *const f32 as *const c_void,
            w as *const c_void,
            ls[0],
            x as *const c_void,
            ls[1],
            &beta as *const f32 as *const c_void,
            y as *const c_void,
            ls[2],
            y as *mut c_void,
            ls[2],
            algo_ptr,
            workspace.0 as *mut c_void,
            workspace.1,
            stream,
        )
    }
}
