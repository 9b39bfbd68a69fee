//! Compiling the kernels with NVRTC, straight to a cubin for the device's architecture and a
//! storage type, with a disk cache keyed by source hash, options (the storage type's define
//! among them), architecture and NVRTC version (~/.cache/kiln/kernels, or $KILN_KERNEL_CACHE;
//! `KILN_KERNEL_CACHE=off` disables it).

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::nvrtc::{result as nv, sys};

use crate::kernel_sources::KernelSource;
use crate::store::StoreType;
use crate::switches::{kernel_cache, KernelCache};

/// Whether libnvrtc can be loaded. Never panics.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library by its usual names.
    unsafe { sys::is_culib_present() }
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    if !nvrtc_present() {
        bail!("libnvrtc not found (set LD_LIBRARY_PATH to a CUDA 13 lib folder)");
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; the pointers are valid for the call.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| anyhow!("nvrtcVersion failed: {e:?}"))?;
    Ok((major, minor))
}

/// The options `src` is compiled with for compute capability `arch` (`sm_90a` for the modules
/// that need it) and a backend storing `store`. Part of the cache key.
fn options(src: &KernelSource, arch: u32, store: StoreType) -> Result<Vec<String>> {
    let Some(target) = src.target(arch) else {
        bail!("{}.cu is not built for sm_{arch}", src.name);
    };
    let mut opts = vec![
        format!("--gpu-architecture={target}"),
        "-std=c++17".into(),
        "-lineinfo".into(),
    ];
    opts.extend(src.build_store(store).nvrtc_define().map(String::from));
    // The block boundaries that keep ptxas's order where the source has it, each with its off
    // switch (a build without it, for A/B runs).
    let sw = || crate::switches::Switches::from_env();
    let off = match src.name {
        "flash_sm90" => (!sw().flash_fence).then_some("-DKILN_FLASH_NO_SCHED_FENCE"),
        "quant_gemm" => sw().quant_fence.then_some("-DKILN_QUANT_HOIST_FENCE"),
        _ => None,
    };
    opts.extend(off.map(String::from));
    Ok(opts)
}

/// 64-bit FNV-1a: stable across Rust versions, unlike the std hasher.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(crate) fn cache_dir() -> Option<PathBuf> {
    match kernel_cache() {
        KernelCache::Off => None,
        KernelCache::Dir(d) => Some(d.clone()),
        KernelCache::Home => {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kiln/kernels"))
        }
    }
}

/// Compiles one module to a cubin for `sm_{arch}` (e.g. 90) and storage type `store`, without
/// the cache.
pub fn compile_cubin(src: &KernelSource, arch: u32, store: StoreType) -> Result<Vec<u8>> {
    compile_cubin_with_log(src, arch, store, &[]).map(|(cubin, _)| cubin)
}

/// Like [`compile_cubin`], with extra NVRTC options (e.g. `--ptxas-options=-v`), returning
/// the compiler's log as well.
pub fn compile_cubin_with_log(
    src: &KernelSource,
    arch: u32,
    store: StoreType,
    extra: &[&str],
) -> Result<(Vec<u8>, String)> {
    if !nvrtc_present() {
        bail!("libnvrtc not found (set LD_LIBRARY_PATH to a CUDA 13 lib folder)");
    }
    let text = CString::new(src.full_text()).context("kernel source contains a NUL byte")?;
    let name = CString::new(format!("{}.cu", src.name))?;
    let prog =
        nv::create_program(&text, Some(&name)).map_err(|e| anyhow!("nvrtcCreateProgram: {e:?}"))?;
    let mut opts = options(src, arch, store)?;
    opts.extend(extra.iter().map(|s| s.to_string()));
    let what = format!("{}.cu ({})", src.name, src.build_store(store));
    let result = compile_and_fetch(prog, &what, arch, &opts);
    // SAFETY: prog came from create_program and is destroyed once.
    let _ = unsafe { nv::destroy_program(prog) };
    result
}

fn compile_and_fetch(
    prog: sys::nvrtcProgram,
    name: &str,
    arch: u32,
    opts: &[String],
) -> Result<(Vec<u8>, String)> {
    // SAFETY: prog is a live program; options are valid C strings built by compile_program.
    let compiled = unsafe { nv::compile_program(prog, opts) };
    let log = program_log(prog);
    if let Err(e) = compiled {
        bail!("NVRTC failed to compile {name} for sm_{arch} ({e:?}):\n{log}");
    }
    let mut size = 0usize;
    // SAFETY: prog compiled successfully; the buffer is sized by nvrtcGetCUBINSize.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| anyhow!("nvrtcGetCUBINSize for {name}: {e:?}"))?;
    if size == 0 {
        bail!("NVRTC produced no cubin for {name} (arch sm_{arch} must be a real architecture)");
    }
    let mut cubin = vec![0u8; size];
    unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| anyhow!("nvrtcGetCUBIN for {name}: {e:?}"))?;
    Ok((cubin, log))
}

fn program_log(prog: sys::nvrtcProgram) -> String {
    // SAFETY: prog is a live program.
    match unsafe { nv::get_program_log(prog) } {
        Ok(raw) if !raw.is_empty() => {
            // SAFETY: NVRTC returns a NUL-terminated log.
            unsafe { CStr::from_ptr(raw.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        }
        _ => String::new(),
    }
}

/// A compiled module and whether it came from the disk cache.
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub from_cache: bool,
}

/// Compiles one module for a backend storing `store`, reusing a cached cubin when source,
/// options, arch and NVRTC match.
pub fn compile_cached(src: &KernelSource, arch: u32, store: StoreType) -> Result<Compiled> {
    let (major, minor) = nvrtc_version()?;
    let text = src.full_text();
    let opts = options(src, arch, store)?.join(" ");
    let version = format!("{major}.{minor}");
    let key = fnv1a(&[text.as_bytes(), opts.as_bytes(), version.as_bytes()]);
    let path = cache_dir().map(|d| {
        let store = src.build_store(store);
        d.join(format!("{}-{store}-sm{arch}-{key:016x}.cubin", src.name))
    });
    if let Some(p) = &path {
        if let Ok(cubin) = std::fs::read(p) {
            if !cubin.is_empty() {
                return Ok(Compiled {
                    cubin,
                    from_cache: true,
                });
            }
        }
    }
    let cubin = compile_cubin(src, arch, store)?;
    if let Some(p) = &path {
        // The cache is an optimisation: a read-only home must not stop the backend.
        let _ = write_atomic(p, &cubin);
    }
    Ok(Compiled {
        cubin,
        from_cache: false,
    })
}

fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn cache_key_changes_with_every_part() {
        let base = fnv1a(&[b"src", b"opts", b"13.0"]);
        assert_ne!(base, fnv1a(&[b"src2", b"opts", b"13.0"]));
        assert_ne!(base, fnv1a(&[b"src", b"opts2", b"13.0"]));
        assert_ne!(base, fnv1a(&[b"src", b"opts", b"13.1"]));
        // Part boundaries count: ("ab", "c") differs from ("a", "bc").
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }
}
