//! CUDA device memory through `cudarc`'s driver API with dynamic loading.
//!
//! cudarc panics when libcuda or one of its symbols is missing, so [`Cuda::open`] first loads
//! the library itself and checks every symbol used here; only then is a cudarc function called.

use std::ffi::{c_int, c_void};

use cudarc::driver::sys;
use serde::Serialize;

use super::BenchError;

/// The driver entry points called below (cudarc resolves these exact names).
const SYMBOLS: [&str; 14] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuPointerGetAttribute",
    "cuMemGetHandleForAddressRange",
];

/// Facts about the GPU in use.
#[derive(Clone, Debug, Serialize)]
pub struct GpuInfo {
    pub ordinal: i32,
    pub name: String,
    pub driver_version: i32,
    pub gpudirect_rdma_supported: bool,
    /// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: VMM allocations can be
    /// made GPUDirect RDMA capable.
    pub vmm_gpudirect_rdma_supported: bool,
    pub dmabuf_supported: bool,
}

/// cuDriverGetVersion's 13000 as "13.0".
pub fn version_str(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

pub struct Cuda {
    pub info: GpuInfo,
}

pub(super) fn check(what: &str, r: sys::CUresult) -> Result<(), BenchError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(BenchError::Cuda(format!("{what} failed: {r:?}")))
    }
}

/// Whether libcuda can be loaded with every symbol this module calls; the reason otherwise.
pub fn available() -> Result<(), BenchError> {
    require(&SYMBOLS)
}

/// Whether libcuda can be loaded and has each of `symbols` (cudarc panics on a missing one, so
/// every entry point is checked before its first call).
pub(super) fn require(symbols: &[&str]) -> Result<(), BenchError> {
    // SAFETY: only checks whether a library loads; cudarc's own candidates.
    if !unsafe { sys::is_culib_present() } {
        return Err(BenchError::Cuda(
            "cannot load libcuda.so (no NVIDIA driver installed on this host)".to_owned(),
        ));
    }
    // SAFETY: libcuda's initialisers only set up its own state.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }
        .or_else(|_| {
            // SAFETY: as above.
            unsafe { libloading::Library::new("libcuda.so") }
        })
        .map_err(|e| BenchError::Cuda(format!("cannot load libcuda.so.1: {e}")))?;
    for s in symbols {
        let mut name = s.as_bytes().to_vec();
        name.push(0);
        // SAFETY: only looks the symbol up.
        if unsafe { lib.get::<*const c_void>(&name) }.is_err() {
            return Err(BenchError::Cuda(format!(
                "libcuda lacks {s} (the NVIDIA driver is too old for this: dma-buf export needs R515, VMM R450)"
            )));
        }
    }
    Ok(())
}

impl Cuda {
    /// Initialises the driver and makes GPU `ordinal`'s primary context current.
    pub fn open(ordinal: i32) -> Result<Self, BenchError> {
        available()?;
        // SAFETY (every cudarc call below): the library and symbols were checked above; the
        // out pointers are valid locals.
        unsafe {
            check("cuInit", sys::cuInit(0))?;
            let mut version: c_int = 0;
            check("cuDriverGetVersion", sys::cuDriverGetVersion(&mut version))?;
            let mut count: c_int = 0;
            check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut count))?;
            if ordinal >= count {
                return Err(BenchError::Cuda(format!(
                    "GPU {ordinal} does not exist ({count} visible)"
                )));
            }
            let mut dev: sys::CUdevice = 0;
            check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal))?;
            let mut name = [0 as std::ffi::c_char; 256];
            check(
                "cuDeviceGetName",
                sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev),
            )?;
            let name = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_string_lossy()
                .into_owned();
            let attr = |a: sys::CUdevice_attribute| -> i32 {
                let mut v: c_int = 0;
                if sys::cuDeviceGetAttribute(&mut v, a, dev) == sys::CUresult::CUDA_SUCCESS {
                    v
                } else {
                    0
                }
            };
            let gdr = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
            let dmabuf = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
            let vmm_gdr = attr(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
            );
            let mut ctx: sys::CUcontext = std::ptr::null_mut();
            check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            )?;
            check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
            Ok(Self {
                info: GpuInfo {
                    ordinal,
                    name,
                    driver_version: version,
                    gpudirect_rdma_supported: gdr != 0,
                    vmm_gpudirect_rdma_supported: vmm_gdr != 0,
                    dmabuf_supported: dmabuf != 0,
                },
            })
        }
    }

    pub fn alloc(&self, len: usize) -> Result<u64, BenchError> {
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: context current; checked library.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut p, len) })?;
        Ok(p)
    }

    pub fn free(&self, p: u64) {
        // SAFETY: an allocation of ours, freed once.
        unsafe { sys::cuMemFree_v2(p) };
    }

    pub fn htod(&self, dst: u64, src: &[u8]) -> Result<(), BenchError> {
        // SAFETY: dst has room for src.len() bytes (callers stay in their allocation).
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len())
        })
    }

    pub fn dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), BenchError> {
        // SAFETY: as htod.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())
        })
    }

    /// CU_POINTER_ATTRIBUTE_MEMORY_TYPE of `p` (2 = device).
    pub fn memory_type(&self, p: u64) -> Result<u32, BenchError> {
        let mut t: u32 = 0;
        // SAFETY: the attribute is an unsigned int.
        check("cuPointerGetAttribute(MEMORY_TYPE)", unsafe {
            sys::cuPointerGetAttribute(
                (&mut t as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p,
            )
        })?;
        Ok(t)
    }

    /// Exports `[p, p+len)` as a dma-buf fd (`cuMemGetHandleForAddressRange`).
    pub fn dmabuf_fd(&self, p: u64, len: usize) -> Result<c_int, BenchError> {
        let mut fd: c_int = -1;
        // SAFETY: the handle is an int fd.
        check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut c_int).cast(),
                p,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        Ok(fd)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn driver_version() {
        assert_eq!(super::version_str(13000), "13.0");
        assert_eq!(super::version_str(12040), "12.4");
    }
}
