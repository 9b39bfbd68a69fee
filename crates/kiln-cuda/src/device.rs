//! The device: availability checks that never panic, the context and its one stream, the
//! compiled kernel modules, raw launches, and plain device buffers that stay where they were
//! allocated (device_buffers.rs). Knows no launcher: `Gpu::new` (kernels.rs) opens a device
//! with their needs.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{result as drv, CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;

use crate::kernel_sources::{KernelSource, SOURCES};
use crate::nvrtc_build::compile_cached;
use crate::store::StoreType;

// Typed device addresses, device buffers and pinned host buffers.
#[path = "device_buffers.rs"]
mod buffers;
pub use buffers::{DevBuf, DevPtr, PinnedBuf};

/// Whether a CUDA device can be used: libcuda loads, the driver initialises and reports at least
/// one device. Never panics, also on machines without any CUDA library.
pub fn cuda_available() -> bool {
    std::panic::catch_unwind(|| {
        // SAFETY: only tries to dlopen libcuda by its usual names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return false;
        }
        drv::init().is_ok() && drv::device::get_count().map(|n| n > 0).unwrap_or(false)
    })
    .unwrap_or(false)
}

/// Why the GPU cannot be used, for skip messages and errors; None when it can.
pub fn unavailable_reason() -> Option<String> {
    if !cuda_available() {
        return Some(
            "no CUDA device (libcuda missing, driver failed to initialise, or no device)".into(),
        );
    }
    if !crate::nvrtc_build::nvrtc_present() {
        return Some("libnvrtc not found (export LD_LIBRARY_PATH=/usr/local/cuda/lib64)".into());
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        return Some("libcublasLt not found (export LD_LIBRARY_PATH=/usr/local/cuda/lib64)".into());
    }
    None
}

/// (free, total) memory of device `ordinal` in bytes, asked before a backend exists (its own
/// context then counts as used, as the backend's will). Errors when no device can be used.
pub fn memory_info(ordinal: usize) -> Result<(usize, usize)> {
    if let Some(why) = unavailable_reason() {
        bail!("{why}");
    }
    let ctx =
        CudaContext::new(ordinal).map_err(|e| anyhow!("opening CUDA device {ordinal}: {e:?}"))?;
    ctx.mem_get_info()
        .map_err(|e| anyhow!("asking CUDA device {ordinal} for its free memory: {e:?}"))
}

/// A kernel argument: device pointers travel as u64.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    Ptr(u64),
    I32(i32),
    F32(f32),
    U64(u64),
}

/// `v` as a 32-bit kernel argument, or an error naming it.
pub(crate) fn i32_of(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| anyhow!("{what} = {v} does not fit a 32-bit kernel argument"))
}

/// Which of the device's streams a launch goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The stream every step runs on.
    Main,
    /// The side stream (lowest priority), for work beside the main stream's.
    Side,
}

/// One device with its context, stream and loaded kernels.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Compute capability as major * 10 + minor (90 on H100/H200).
    pub arch: u32,
    pub sm_count: u32,
    /// Bytes of L2 cache.
    pub l2_bytes: usize,
    pub name: String,
    /// The storage type the loaded kernels were built for (kernel_sources.rs).
    pub store: StoreType,
    /// Whether [`Gpu::launch`] starts kernels as programmatic dependent launches.
    pdl: bool,
    funcs: HashMap<String, CudaFunction>,
    _modules: Vec<Arc<CudaModule>>,
    /// The chain partials of the split tensor-core decode GEMM (skinny_tc.rs), when reserved.
    pub(crate) tc_part: std::sync::OnceLock<DevBuf<f32>>,
    /// The wgmma decode GEMM's rewritten x (skinny_wg.rs), when reserved.
    pub(crate) wg_x: std::sync::OnceLock<DevBuf<u16>>,
    /// The wgmma row order's split launches' workspace (wg_rows.rs), when reserved.
    pub(crate) wg_rows_space: std::sync::OnceLock<crate::wg_rows::SplitSpace>,
    /// A second stream, of the lowest priority, for work that overlaps the main stream's
    /// (quant_prefill.rs); made on first use.
    side: std::sync::OnceLock<Arc<CudaStream>>,
}

impl Gpu {
    /// Opens device `ordinal` and loads every kernel module built for `store`, compiled (or
    /// cached) for its architecture; `pdl`: how [`Gpu::launch`] starts kernels. Kernels keep the
    /// default shared-memory limit until [`Gpu::allow_smem`] raises it.
    pub fn open(ordinal: usize, pdl: bool, store: StoreType) -> Result<Gpu> {
        Gpu::open_sources(ordinal, pdl, store, SOURCES)
    }

    /// [`Gpu::open`] with these modules in place of the built-in ones (a test that plants a
    /// bug in one kernel to see its contract fail loads the changed text this way).
    pub fn open_sources(
        ordinal: usize,
        pdl: bool,
        store: StoreType,
        sources: &[KernelSource],
    ) -> Result<Gpu> {
        if let Some(why) = unavailable_reason() {
            bail!("CUDA backend unavailable: {why}");
        }
        let ctx =
            CudaContext::new(ordinal).with_context(|| format!("opening CUDA device {ordinal}"))?;
        // One stream, ordered by construction: cudarc's per-buffer events would only add cost.
        // SAFETY: every buffer is used on `stream` only, but for the layer buffers of
        // quant_prefill.rs, which the side stream writes, ordered by that file's own events.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own (not the legacy default one), so steps can later be captured; of
        // the highest priority, so that its CTAs go first where a side stream's wait too.
        let (_, highest) = cudarc::driver::result::stream::get_priority_range()?;
        let stream = ctx
            .new_stream_with_priority(highest)
            .context("creating the CUDA stream")?;
        let (major, minor) = ctx.compute_capability()?;
        if major < 8 {
            bail!("CUDA device {ordinal} has compute capability {major}.{minor}; kiln needs 8.0 or newer (bf16 tensor cores)");
        }
        let arch = (major * 10 + minor) as u32;
        let sm_count = ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = ctx
            .attribute(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?
            .max(0) as usize;
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        let mut funcs = HashMap::new();
        let mut modules = Vec::new();
        // Modules built for one architecture only (sm_90a) are absent on the others.
        let built = |s: &&KernelSource| s.builds_for(store) && s.target(arch).is_some();
        for src in sources.iter().filter(built) {
            let compiled = compile_cached(src, arch, store)?;
            let module = ctx
                .load_module(Ptx::from_binary(compiled.cubin))
                .with_context(|| format!("loading kernel module {}.cu", src.name))?;
            for entry in src.entries()? {
                let f = module
                    .load_function(&entry)
                    .with_context(|| format!("kernel {entry} in {}.cu", src.name))?;
                funcs.insert(entry, f);
            }
            modules.push(module);
        }
        Ok(Gpu {
            ctx,
            stream,
            arch,
            sm_count,
            l2_bytes,
            name,
            store,
            pdl,
            funcs,
            _modules: modules,
            tc_part: std::sync::OnceLock::new(),
            wg_x: std::sync::OnceLock::new(),
            wg_rows_space: std::sync::OnceLock::new(),
            side: std::sync::OnceLock::new(),
        })
    }

    /// Lets kernel `name` use up to `bytes` of dynamic shared memory.
    pub fn allow_smem(&self, name: &str, bytes: usize) -> Result<()> {
        use cudarc::driver::sys::CUfunction_attribute as FA;
        self.func(name)?
            .set_attribute(
                FA::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .with_context(|| format!("raising shared memory of {name} to {bytes} bytes"))
    }

    /// Asks the driver for the largest shared-memory carveout for every loaded kernel
    /// (KILN_CARVEOUT=max): one L1 / shared split for all of them.
    pub fn prefer_max_shared(&self) -> Result<()> {
        use cudarc::driver::sys::CUfunction_attribute as FA;
        for (name, f) in &self.funcs {
            f.set_attribute(FA::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)
                .with_context(|| format!("the shared-memory carveout of {name}"))?;
        }
        Ok(())
    }

    pub fn func(&self, name: &str) -> Result<&CudaFunction> {
        self.funcs.get(name).ok_or_else(|| {
            anyhow!(
                "kernel {name} not loaded (a {} backend loads the modules built for {})",
                self.store,
                self.store
            )
        })
    }

    /// Whether kernel `name` is loaded (a bf16-only kernel is not, on other formats).
    pub fn has_func(&self, name: &str) -> bool {
        self.funcs.contains_key(name)
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .context("binding the CUDA context")
    }

    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<()> {
        self.launch_with(name, grid, block, smem, args, self.pdl)
    }

    /// The side stream (lowest priority), made on first use.
    pub fn side_stream(&self) -> Result<&Arc<CudaStream>> {
        if let Some(s) = self.side.get() {
            return Ok(s);
        }
        self.bind()?;
        let (lowest, _) = cudarc::driver::result::stream::get_priority_range()?;
        let s = self
            .ctx
            .new_stream_with_priority(lowest)
            .context("creating the side stream")?;
        Ok(self.side.get_or_init(|| s))
    }

    /// Whether the main stream is being captured into a graph (graphs.rs).
    pub fn capturing(&self) -> Result<bool> {
        use cudarc::driver::sys::CUstreamCaptureStatus as St;
        // SAFETY: our own stream; the call only reads its state.
        let st = unsafe { drv::stream::is_capturing(self.stream.cu_stream()) }
            .context("querying the stream's capture state")?;
        Ok(st != St::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Launches `name` on `lane`'s stream: on the main one as [`Gpu::launch`] does, on the
    /// side one as a plain launch (it follows the side stream's work and the events it waits
    /// for).
    pub fn launch_on(
        &self,
        lane: Lane,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<()> {
        match lane {
            Lane::Main => self.launch(name, grid, block, smem, args),
            Lane::Side => {
                let side = self.side_stream()?.cu_stream();
                self.launch_in(side, name, grid, block, smem, args, false)
            }
        }
    }

    /// Launches `name`; `dependent`: as a programmatic dependent launch, which may start while
    /// the previous kernel on the stream still runs (once all of that one's CTAs are resident
    /// or past `pdl_trigger()`). Every kernel calls `pdl_wait()` (common.cuh) before it touches
    /// memory a previous kernel may use, so the results are those of plain order.
    pub fn launch_with(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
        dependent: bool,
    ) -> Result<()> {
        self.launch_in(
            self.stream.cu_stream(),
            name,
            grid,
            block,
            smem,
            args,
            dependent,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_in(
        &self,
        stream: cudarc::driver::sys::CUstream,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
        dependent: bool,
    ) -> Result<()> {
        use cudarc::driver::sys;
        let f = self.func(name)?;
        // Every argument in an 8-byte slot; the driver reads each one's own size from its start
        // (the low bytes, on this little-endian target).
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(p) | Arg::U64(p) => p,
                Arg::I32(v) => v as u32 as u64,
                Arg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        let mut params: Vec<*mut std::ffi::c_void> = slots
            .iter_mut()
            .map(|s| s as *mut u64 as *mut std::ffi::c_void)
            .collect();
        // SAFETY: a plain C struct; zero is a valid pattern before the fields are set.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: dependent as u32,
        };
        // SAFETY: argument lists match the kernel signatures in kernels/*.cu (see kernels.rs);
        // `slots`, `params` and `attr` outlive the call, which copies them.
        unsafe {
            sys::cuLaunchKernelEx(
                &cfg,
                f.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .with_context(|| format!("launching {name}"))
    }

    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .context("CUDA stream synchronisation (an earlier kernel may have failed)")
    }

    /// A zeroed buffer of `len` elements.
    pub fn alloc<T: Copy + Default>(&self, len: usize) -> Result<DevBuf<T>> {
        DevBuf::new(self, len)
    }

    /// (free, total) device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        Ok(self.ctx.mem_get_info()?)
    }
}
