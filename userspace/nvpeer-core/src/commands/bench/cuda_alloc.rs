// SPDX-License-Identifier: MIT OR Apache-2.0
//! The ways applications get CUDA memory, and which registration path each takes.
//!
//! `ibv_reg_mr` on a CUDA pointer reaches our peer-memory client only when the kernel's own
//! pinning fails (CONTRACT 1.7: MOFED asks peer clients after `pin_user_pages`), that is for
//! device memory: `cuMemAlloc`, or a VMM allocation (`cuMemCreate` + `cuMemMap`, PyTorch's
//! expandable segments, Grace systems) made with `allocFlags.gpuDirectRDMACapable = 1`. Without
//! that flag NVIDIA refuses to pin the VMM range and the registration fails with EFAULT ("Bad
//! address"). Managed (`cuMemAllocManaged`) and host-registered (`cuMemHostRegister`) pointers
//! are host pages: the kernel pins them itself and the NIC reads system memory, which is not
//! GPUDirect RDMA whatever module is loaded.

use std::ffi::c_void;

use cudarc::driver::sys;
use serde::Serialize;

use super::cuda::{check, require, Cuda};
use super::BenchError;

/// How a CUDA buffer is allocated (`--alloc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CudaAlloc {
    /// `cuMemAlloc` (`cudaMalloc`).
    #[default]
    Device,
    /// `cuMemCreate` with `gpuDirectRDMACapable = 1`, reserved and mapped (`cuMemMap`).
    Vmm,
    /// The same without the flag: the allocation users meet as "Bad address".
    VmmNoRdma,
    /// `cuMemAllocManaged` (`cudaMallocManaged`).
    Managed,
    /// Anonymous host memory registered with `cuMemHostRegister` (`cudaHostRegister`).
    HostRegistered,
}

impl CudaAlloc {
    pub fn api(self) -> &'static str {
        match self {
            CudaAlloc::Device => "cuMemAlloc",
            CudaAlloc::Vmm => "cuMemCreate (gpuDirectRDMACapable=1) + cuMemMap",
            CudaAlloc::VmmNoRdma => "cuMemCreate (gpuDirectRDMACapable=0) + cuMemMap",
            CudaAlloc::Managed => "cuMemAllocManaged",
            CudaAlloc::HostRegistered => "mmap + cuMemHostRegister",
        }
    }

    /// The driver entry points this kind needs beyond the ones every CUDA use needs.
    fn symbols(self) -> &'static [&'static str] {
        match self {
            CudaAlloc::Device => &[],
            CudaAlloc::Vmm | CudaAlloc::VmmNoRdma => &[
                "cuMemGetAllocationGranularity",
                "cuMemCreate",
                "cuMemAddressReserve",
                "cuMemMap",
                "cuMemSetAccess",
                "cuMemUnmap",
                "cuMemAddressFree",
                "cuMemRelease",
            ],
            CudaAlloc::Managed => &["cuMemAllocManaged"],
            CudaAlloc::HostRegistered => &["cuMemHostRegister_v2", "cuMemHostUnregister"],
        }
    }
}

/// What was allocated, for its release.
#[derive(Debug)]
pub struct Allocation {
    pub kind: CudaAlloc,
    pub ptr: u64,
    pub len: usize,
    /// VMM: the physical allocation and the reserved (granularity-rounded) size.
    vmm: Option<(sys::CUmemGenericAllocationHandle, usize)>,
}

/// What the driver says about a pointer, and the registration path that follows from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PointerFacts {
    /// CU_POINTER_ATTRIBUTE_MEMORY_TYPE: "host", "device", "array", "unified" or a number.
    pub memory_type: String,
    pub is_managed: bool,
    /// CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE (None: the driver does not answer).
    pub gpudirect_rdma_capable: Option<bool>,
    /// A VMM allocation (cuMemRetainAllocationHandle succeeds): its gpuDirectRDMACapable flag.
    pub vmm_rdma_flag: Option<bool>,
}

/// Which way `ibv_reg_mr` of such a pointer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationPath {
    /// GPU memory through the peer-memory client: GPUDirect RDMA.
    PeerMemory,
    /// VMM memory without the RDMA flag: NVIDIA refuses the pin, EFAULT.
    RefusedVmm,
    /// Other device memory the driver calls not GPUDirect RDMA capable: EFAULT too.
    NotCapable,
    /// Host pages pinned by the kernel itself: the NIC reads system memory.
    HostPages,
}

impl PointerFacts {
    pub fn path(&self) -> RegistrationPath {
        if self.is_managed || self.memory_type == "host" {
            RegistrationPath::HostPages
        } else if self.vmm_rdma_flag == Some(false) {
            RegistrationPath::RefusedVmm
        } else if self.gpudirect_rdma_capable == Some(false) {
            RegistrationPath::NotCapable
        } else {
            RegistrationPath::PeerMemory
        }
    }

    /// One sentence a user can act on.
    pub fn explain(&self) -> String {
        match self.path() {
            RegistrationPath::PeerMemory => format!(
                "GPU memory ({}{}): ibv_reg_mr goes through the peer-memory client (nvidia_peermem): GPUDirect RDMA",
                if self.vmm_rdma_flag.is_some() { "VMM allocation with gpuDirectRDMACapable=1" } else { "device allocation" },
                if self.gpudirect_rdma_capable == Some(true) { ", CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE=1" } else { "" },
            ),
            RegistrationPath::RefusedVmm => "a VMM allocation (cuMemCreate) without CUmemAllocationProp.allocFlags.gpuDirectRDMACapable=1 \
                 (CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE=0): NVIDIA's driver refuses to pin it for peer memory, so ibv_reg_mr fails with \
                 EFAULT (Bad address) whatever module is loaded; allocate with the flag set (check CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED first)"
                .to_owned(),
            RegistrationPath::NotCapable => "device memory the driver calls not GPUDirect RDMA capable \
                 (CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE=0): NVIDIA's driver will not pin it for peer memory and ibv_reg_mr \
                 fails with EFAULT (Bad address); see CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED (vGPU and some MIG \
                 configurations lack it)"
                .to_owned(),
            RegistrationPath::HostPages => format!(
                "{} memory is host pages: ibv_reg_mr pins them through the kernel's own pinning, not GPU memory through the \
                 peer-memory client, so the NIC reads and writes system memory: this is not GPUDirect RDMA",
                if self.is_managed { "managed (cuMemAllocManaged)" } else { "host-registered (cuMemHostRegister)" }
            ),
        }
    }
}

fn memory_type_name(t: u32) -> String {
    match t {
        1 => "host".to_owned(),
        2 => "device".to_owned(),
        3 => "array".to_owned(),
        4 => "unified".to_owned(),
        n => n.to_string(),
    }
}

impl Cuda {
    /// Allocates `len` bytes (rounded up to what the kind needs) the way `kind` says.
    pub fn allocate(&self, kind: CudaAlloc, len: usize) -> Result<Allocation, BenchError> {
        require(kind.symbols())?;
        match kind {
            CudaAlloc::Device => Ok(Allocation {
                kind,
                ptr: self.alloc(len)?,
                len,
                vmm: None,
            }),
            CudaAlloc::Vmm | CudaAlloc::VmmNoRdma => self.allocate_vmm(kind, len),
            CudaAlloc::Managed => {
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: context current; symbol checked; p is a valid out pointer.
                check("cuMemAllocManaged", unsafe {
                    sys::cuMemAllocManaged(
                        &mut p,
                        len,
                        sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
                    )
                })?;
                Ok(Allocation {
                    kind,
                    ptr: p,
                    len,
                    vmm: None,
                })
            }
            CudaAlloc::HostRegistered => {
                let len = len.max(1).div_ceil(4096) * 4096;
                let p = super::mem::mmap_anon(len)? as *mut c_void;
                // SAFETY: [p, p+len) is our mapping; symbol checked.
                let r =
                    unsafe { sys::cuMemHostRegister_v2(p, len, sys::CU_MEMHOSTREGISTER_PORTABLE) };
                if let Err(e) = check("cuMemHostRegister", r) {
                    // SAFETY: the mapping made above.
                    unsafe { super::mem::unmap(p as u64, len) };
                    return Err(e);
                }
                Ok(Allocation {
                    kind,
                    ptr: p as u64,
                    len,
                    vmm: None,
                })
            }
        }
    }

    fn allocate_vmm(&self, kind: CudaAlloc, len: usize) -> Result<Allocation, BenchError> {
        let mut prop: sys::CUmemAllocationProp = zeroed_prop();
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.info.ordinal;
        prop.allocFlags.gpuDirectRDMACapable = u8::from(kind == CudaAlloc::Vmm);
        let mut gran: usize = 0;
        // SAFETY: prop is initialised; gran a valid out pointer; symbols checked.
        check("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut gran,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        })?;
        let size = len.max(1).div_ceil(gran.max(1)) * gran.max(1);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: as above.
        check("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })
        .map_err(|e| {
            if kind == CudaAlloc::Vmm && !self.info.vmm_gpudirect_rdma_supported {
                BenchError::Cuda(format!(
                    "{e} (this GPU reports CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED=0)"
                ))
            } else {
                e
            }
        })?;
        let release = |h| {
            // SAFETY: a handle cuMemCreate gave us, released once.
            unsafe { sys::cuMemRelease(h) };
        };
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: reserves fresh VA space.
        if let Err(e) = check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0)
        }) {
            release(handle);
            return Err(e);
        }
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: [ptr, ptr+size) was reserved above and the handle covers size bytes.
        let mapped = check("cuMemMap", unsafe {
            sys::cuMemMap(ptr, size, 0, handle, 0)
        })
        .and_then(|()| {
            // SAFETY: the range just mapped; one descriptor.
            check("cuMemSetAccess", unsafe {
                sys::cuMemSetAccess(ptr, size, &access, 1)
            })
        });
        if let Err(e) = mapped {
            // SAFETY: undoes the steps above on our own range and handle.
            unsafe {
                sys::cuMemUnmap(ptr, size);
                sys::cuMemAddressFree(ptr, size);
            }
            release(handle);
            return Err(e);
        }
        Ok(Allocation {
            kind,
            ptr,
            len: size,
            vmm: Some((handle, size)),
        })
    }

    /// Frees what [`Cuda::allocate`] gave.
    pub fn release(&self, a: &Allocation) {
        // SAFETY (each arm): an allocation of ours of that kind, released once.
        unsafe {
            match (a.kind, a.vmm) {
                (CudaAlloc::Vmm | CudaAlloc::VmmNoRdma, Some((handle, size))) => {
                    sys::cuMemUnmap(a.ptr, size);
                    sys::cuMemAddressFree(a.ptr, size);
                    sys::cuMemRelease(handle);
                }
                (CudaAlloc::HostRegistered, _) => {
                    sys::cuMemHostUnregister(a.ptr as *mut c_void);
                    super::mem::unmap(a.ptr, a.len);
                }
                _ => self.free(a.ptr),
            }
        }
    }

    /// The pointer and allocation-property queries about `p`.
    pub fn pointer_facts(&self, p: u64) -> Result<PointerFacts, BenchError> {
        let attr = |a: sys::CUpointer_attribute| -> Option<u32> {
            let mut v: u32 = 0;
            // SAFETY: these attributes are 32-bit (unsigned int or bool-as-int, zero-extended).
            let r = unsafe { sys::cuPointerGetAttribute((&mut v as *mut u32).cast(), a, p) };
            (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
        };
        let memory_type = attr(sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            .ok_or_else(|| {
                BenchError::Cuda(format!(
                    "cuPointerGetAttribute(MEMORY_TYPE) of {p:#x} failed: not a CUDA pointer"
                ))
            })?;
        let is_managed =
            attr(sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED).is_some_and(|v| v != 0);
        let gdr = attr(sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE)
            .map(|v| v != 0);
        let vmm_rdma_flag = if require(&[
            "cuMemRetainAllocationHandle",
            "cuMemGetAllocationPropertiesFromHandle",
            "cuMemRelease",
        ])
        .is_ok()
        {
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: symbols checked; p is only looked up (not a VMM range: an error).
            let r = unsafe { sys::cuMemRetainAllocationHandle(&mut handle, p as *mut c_void) };
            if r == sys::CUresult::CUDA_SUCCESS {
                let mut prop = zeroed_prop();
                // SAFETY: a handle just retained; prop a valid out struct.
                let q = unsafe { sys::cuMemGetAllocationPropertiesFromHandle(&mut prop, handle) };
                // SAFETY: drops the reference cuMemRetainAllocationHandle took.
                unsafe { sys::cuMemRelease(handle) };
                (q == sys::CUresult::CUDA_SUCCESS)
                    .then_some(prop.allocFlags.gpuDirectRDMACapable != 0)
            } else {
                None
            }
        } else {
            None
        };
        Ok(PointerFacts {
            memory_type: memory_type_name(memory_type),
            is_managed,
            gpudirect_rdma_capable: gdr,
            vmm_rdma_flag,
        })
    }
}

/// A zeroed `CUmemAllocationProp` (plain C data: integers, enums whose 0 is valid or set next,
/// and a null pointer).
fn zeroed_prop() -> sys::CUmemAllocationProp {
    // SAFETY: every field is an integer, a C enum or a raw pointer, for which all-zero bytes are
    // a valid value here (type_/location.type_ 0 is INVALID, overwritten before use).
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(t: &str, managed: bool, gdr: Option<bool>, vmm: Option<bool>) -> PointerFacts {
        PointerFacts {
            memory_type: t.to_owned(),
            is_managed: managed,
            gpudirect_rdma_capable: gdr,
            vmm_rdma_flag: vmm,
        }
    }

    #[test]
    fn paths_follow_the_facts() {
        assert_eq!(
            facts("device", false, Some(true), None).path(),
            RegistrationPath::PeerMemory
        );
        assert_eq!(
            facts("device", false, None, None).path(),
            RegistrationPath::PeerMemory
        );
        assert_eq!(
            facts("device", false, Some(true), Some(true)).path(),
            RegistrationPath::PeerMemory
        );
        assert_eq!(
            facts("device", false, Some(false), Some(false)).path(),
            RegistrationPath::RefusedVmm
        );
        assert_eq!(
            facts("device", false, None, Some(false)).path(),
            RegistrationPath::RefusedVmm
        );
        assert_eq!(
            facts("device", true, Some(true), None).path(),
            RegistrationPath::HostPages
        );
        assert_eq!(
            facts("host", false, Some(false), None).path(),
            RegistrationPath::HostPages
        );
    }

    #[test]
    fn explanations_name_the_fix() {
        let e = facts("device", false, Some(false), Some(false)).explain();
        assert!(
            e.contains("gpuDirectRDMACapable=1") && e.contains("EFAULT"),
            "{e}"
        );
        let e = facts("device", true, None, None).explain();
        assert!(
            e.contains("not GPUDirect RDMA") && e.contains("managed"),
            "{e}"
        );
        let e = facts("host", false, None, None).explain();
        assert!(e.contains("host-registered"), "{e}");
        let e = facts("device", false, Some(true), Some(true)).explain();
        assert!(e.contains("peer-memory client") && e.contains("VMM"), "{e}");
    }
}
