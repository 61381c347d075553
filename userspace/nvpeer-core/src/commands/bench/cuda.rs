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

    /// Exports `[p, p+len)` as a dma-buf fd (`cuMemGetHandleForAddressRange`) with the mapping
    /// type `mapping` asks for. A PCIe mapping the driver does not offer is
    /// [`BenchError::PcieMapping`], one line saying why.
    pub fn dmabuf_fd(
        &self,
        p: u64,
        len: usize,
        mapping: DmabufMapping,
    ) -> Result<c_int, BenchError> {
        if mapping == DmabufMapping::Pcie && self.info.driver_version < PCIE_MAPPING_SINCE {
            return Err(BenchError::PcieMapping(format!(
                "the driver's CUDA API is {}, and the PCIe mapping type \
                 (CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE) needs {} (driver R570 or later); \
                 without --dmabuf-mapping the driver picks the mapping",
                version_str(self.info.driver_version),
                version_str(PCIE_MAPPING_SINCE)
            )));
        }
        let mut fd: c_int = -1;
        // SAFETY: the handle is an int fd; the flags are 0 or a CUmemRangeFlags value.
        let r = unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut c_int).cast(),
                p,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                mapping.flags(),
            )
        };
        match (mapping, r) {
            (_, sys::CUresult::CUDA_SUCCESS) => Ok(fd),
            (DmabufMapping::Pcie, r) => Err(BenchError::PcieMapping(format!(
                "cuMemGetHandleForAddressRange refused CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE \
                 with {r:?} (driver {} of GPU {}: this platform or driver does not offer it); \
                 without --dmabuf-mapping the driver picks the mapping",
                version_str(self.info.driver_version),
                self.info.ordinal
            ))),
            (DmabufMapping::Default, r) => Err(BenchError::Cuda(format!(
                "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: {r:?}"
            ))),
        }
    }
}

/// The first CUDA driver API with `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (12.8).
pub const PCIE_MAPPING_SINCE: i32 = 12080;

/// The mapping type a dma-buf export asks for (`--dmabuf-mapping`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DmabufMapping {
    /// Flags 0: the driver's choice (on a coherent platform such as Grace, a mapping the NIC
    /// may reach over C2C).
    #[default]
    Default,
    /// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (CUDA 12.8): the NIC reaches GPU memory
    /// through the GPU's BAR over PCIe, the Data Direct path of Grace-Blackwell.
    Pcie,
}

impl DmabufMapping {
    /// `default` or `pcie`, as `--dmabuf-mapping` takes it.
    pub fn name(self) -> &'static str {
        match self {
            DmabufMapping::Default => "default",
            DmabufMapping::Pcie => "pcie",
        }
    }

    /// The `flags` argument of `cuMemGetHandleForAddressRange`.
    pub fn flags(self) -> u64 {
        match self {
            DmabufMapping::Default => 0,
            DmabufMapping::Pcie => {
                sys::CUmemRangeFlags::CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pcie_mapping_flag_is_cudas() {
        use super::DmabufMapping;
        assert_eq!(DmabufMapping::Default.flags(), 0);
        // CUDA 12.8's cuda.h: CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE = 0x1.
        assert_eq!(DmabufMapping::Pcie.flags(), 1);
        assert_eq!(super::version_str(super::PCIE_MAPPING_SINCE), "12.8");
    }

    #[test]
    fn driver_version() {
        assert_eq!(super::version_str(13000), "13.0");
        assert_eq!(super::version_str(12040), "12.4");
    }
}
