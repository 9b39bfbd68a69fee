//! The device's memory (a child module of device.rs): typed device addresses, device
//! allocations that stay where they were made and are freed on drop, and page-locked host
//! buffers for the per-step copies.

use std::marker::PhantomData;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::{result as drv, CudaContext};

use super::Gpu;

/// A device address of elements of T: offsets and row slices are counted in elements, never
/// in bytes computed by hand. Kernels take the plain address ([`DevPtr::addr`]).
#[derive(Debug)]
pub struct DevPtr<T> {
    addr: u64,
    _t: PhantomData<T>,
}

impl<T> Clone for DevPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DevPtr<T> {}

impl<T> DevPtr<T> {
    /// The address `addr`, holding elements of T.
    pub fn new(addr: u64) -> DevPtr<T> {
        DevPtr {
            addr,
            _t: PhantomData,
        }
    }

    pub fn addr(self) -> u64 {
        self.addr
    }

    /// `elems` elements further on.
    pub fn offset(self, elems: usize) -> DevPtr<T> {
        DevPtr::new(self.addr + (elems * std::mem::size_of::<T>()) as u64)
    }

    /// Row `row` of a row-major matrix `width` elements wide that starts here.
    pub fn row(self, row: usize, width: usize) -> DevPtr<T> {
        self.offset(row * width)
    }
}

/// A device allocation of `len` elements of T at a fixed address, freed on drop.
pub struct DevBuf<T> {
    ptr: u64,
    len: usize,
    ctx: Arc<CudaContext>,
    _t: PhantomData<T>,
}

// SAFETY: a device pointer is a plain number; access is ordered by the owning stream.
unsafe impl<T> Send for DevBuf<T> {}
unsafe impl<T> Sync for DevBuf<T> {}

impl<T: Copy + Default> DevBuf<T> {
    pub(super) fn new(gpu: &Gpu, len: usize) -> Result<DevBuf<T>> {
        let bytes = len.max(1) * std::mem::size_of::<T>();
        gpu.bind()?;
        // SAFETY: plain allocation and memset of the allocation just made.
        let ptr = unsafe { drv::malloc_sync(bytes) }
            .map_err(|e| anyhow!("allocating {bytes} bytes of device memory: {e:?}"))?;
        unsafe { drv::memset_d8_sync(ptr, 0, bytes) }
            .map_err(|e| anyhow!("clearing device memory: {e:?}"))?;
        // The "sync" memset may still run after return, on the legacy stream: wait for it.
        gpu.ctx.synchronize().context("clearing device memory")?;
        Ok(DevBuf {
            ptr,
            len,
            ctx: gpu.ctx.clone(),
            _t: PhantomData,
        })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The buffer's start as a typed pointer.
    pub fn dev_ptr(&self) -> DevPtr<T> {
        DevPtr::new(self.ptr)
    }

    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.dev_ptr().offset(i).addr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Copies `src` to elements `offset..` and waits for the copy (load time and tests).
    pub fn upload(&self, offset: usize, src: &[T]) -> Result<()> {
        if offset + src.len() > self.len {
            bail!(
                "upload of {} elements at {offset} overruns a buffer of {}",
                src.len(),
                self.len
            );
        }
        self.ctx.bind_to_thread()?;
        // Load-time and test copies: after all queued work, and finished on return.
        self.ctx
            .synchronize()
            .context("waiting for the device before a copy")?;
        // SAFETY: the range was checked above.
        unsafe { drv::memcpy_htod_sync(self.at(offset), src) }
            .map_err(|e| anyhow!("host to device copy: {e:?}"))?;
        self.ctx.synchronize().context("host to device copy")
    }

    /// Reads `len` elements from `offset`, after everything queued before (waits for the device).
    pub fn download(&self, gpu: &Gpu, offset: usize, len: usize) -> Result<Vec<T>> {
        if offset + len > self.len {
            bail!(
                "download of {len} elements at {offset} overruns a buffer of {}",
                self.len
            );
        }
        gpu.synchronize()?;
        gpu.ctx.synchronize()?;
        let mut out = vec![T::default(); len];
        // SAFETY: the range was checked above.
        unsafe { drv::memcpy_dtoh_sync(&mut out, self.at(offset)) }
            .map_err(|e| anyhow!("device to host copy: {e:?}"))?;
        Ok(out)
    }

    /// Sets every byte of the buffer to `byte` (tests poison outputs with 0xFF: NaN in f32/bf16).
    pub fn fill_bytes(&self, byte: u8) -> Result<()> {
        self.ctx.bind_to_thread()?;
        self.ctx
            .synchronize()
            .context("waiting for the device before a memset")?;
        // SAFETY: the whole allocation.
        unsafe { drv::memset_d8_sync(self.ptr, byte, self.bytes().max(1)) }
            .map_err(|e| anyhow!("memset: {e:?}"))?;
        self.ctx.synchronize().context("memset")
    }
}

impl<T> Drop for DevBuf<T> {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_sync and freed once.
        let _ = unsafe { drv::free_sync(self.ptr) };
    }
}

/// Page-locked host memory, so per-step copies run asynchronously on the stream.
pub struct PinnedBuf<T> {
    ptr: *mut T,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is owned; access goes through &self / &mut self.
unsafe impl<T> Send for PinnedBuf<T> {}

impl<T: Copy + Default> PinnedBuf<T> {
    pub fn new(gpu: &Gpu, len: usize) -> Result<PinnedBuf<T>> {
        gpu.bind()?;
        let bytes = len.max(1) * std::mem::size_of::<T>();
        // SAFETY: plain pinned allocation, initialised below.
        let ptr = unsafe { drv::malloc_host(bytes, 0) }
            .map_err(|e| anyhow!("allocating {bytes} bytes of pinned memory: {e:?}"))?
            as *mut T;
        let mut buf = PinnedBuf {
            ptr,
            len,
            ctx: gpu.ctx.clone(),
        };
        buf.as_mut_slice().fill(T::default());
        Ok(buf)
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: ptr holds len initialised elements.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: ptr holds len initialised elements, borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The address kernels read this memory at: with unified addressing (every 64-bit device
    /// kiln runs on) pinned host memory is reachable from the device at its host address.
    pub fn device_addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Queues a copy of elements `0..n` to `dst` on the stream.
    pub fn copy_to_device(&self, gpu: &Gpu, dst: u64, n: usize) -> Result<()> {
        self.copy_range_to_device(gpu, 0, dst, n)
    }

    /// Queues a copy of n elements from `src` into elements `0..n`.
    pub fn copy_from_device(&mut self, gpu: &Gpu, src: u64, n: usize) -> Result<()> {
        self.copy_range_from_device(gpu, src, 0, n)
    }

    /// Queues a copy of elements `from..from + n` to `dst` on the stream.
    pub fn copy_range_to_device(&self, gpu: &Gpu, from: usize, dst: u64, n: usize) -> Result<()> {
        let end = from.saturating_add(n).min(self.len);
        if end <= from {
            return Ok(());
        }
        // SAFETY: pinned source of the checked range; dst was sized by the caller.
        unsafe { drv::memcpy_htod_async(dst, &self.as_slice()[from..end], gpu.stream.cu_stream()) }
            .map_err(|e| anyhow!("queueing a host to device copy: {e:?}"))
    }

    /// Queues a copy of n elements from `src` into elements `to..to + n`.
    pub fn copy_range_from_device(
        &mut self,
        gpu: &Gpu,
        src: u64,
        to: usize,
        n: usize,
    ) -> Result<()> {
        let end = to.saturating_add(n).min(self.len);
        if end <= to {
            return Ok(());
        }
        let stream = gpu.stream.cu_stream();
        // SAFETY: pinned destination of the checked range; src holds that many elements.
        unsafe { drv::memcpy_dtoh_async(&mut self.as_mut_slice()[to..end], src, stream) }
            .map_err(|e| anyhow!("queueing a device to host copy: {e:?}"))
    }
}

impl<T> Drop for PinnedBuf<T> {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_host and freed once.
        let _ = unsafe { drv::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}
