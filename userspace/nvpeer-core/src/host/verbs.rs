//! The libibverbs part of `nvpeer check`: the devices libibverbs sees and NCCL's DMA-BUF probe
//! (`ncclIbDmaBufSupport`: `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)` fails with EOPNOTSUPP or
//! EPROTONOSUPPORT when the kernel or provider lacks DMA-BUF support, and with something else,
//! typically EBADF, when it has it).
//!
//! libibverbs is loaded at run time (`dlopen("libibverbs.so.1")`), so `nvpeer` runs on hosts
//! without rdma-core and says so. Only stable exported entry points are used; every object is
//! opaque.

use std::ffi::{c_char, c_int, c_void, CStr};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// What `ibv_reg_dmabuf_mr` said on one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum DmabufProbe {
    /// Failed with another errno than EOPNOTSUPP/EPROTONOSUPPORT: NCCL calls that supported.
    Supported {
        errno: i32,
    },
    Unsupported {
        errno: i32,
    },
    /// The probe could not run (open or PD allocation failed, or the symbol is missing).
    NotRun {
        reason: String,
    },
}

/// One device as libibverbs sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerbsDevice {
    pub name: String,
    pub dmabuf: DmabufProbe,
}

/// The outcome of the libibverbs probe.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Verbs {
    /// Not attempted (e.g. `--sysfs-root` points at another tree).
    Skipped { reason: String },
    /// libibverbs could not be loaded.
    Unavailable { reason: String },
    Probed {
        devices: Vec<VerbsDevice>,
        /// libibverbs exports `ibv_reg_dmabuf_mr` (rdma-core >= 34); `None` in facts from a
        /// release that did not record it.
        #[serde(default)]
        reg_dmabuf_mr: Option<bool>,
        /// `ibv_reg_dmabuf_mr` is exported at symbol version `IBVERBS_1.12`
        /// ([`REG_DMABUF_MR_VERSION`]), the version NCCL loads it by; `None` in facts from a
        /// release that did not record it, and where the symbol is absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reg_dmabuf_mr_versioned: Option<bool>,
    },
}

/// The symbol version rdma-core's `libibverbs.map.in` gives `ibv_reg_dmabuf_mr` (rdma-core 34,
/// `IBVERBS_1.12`; `objdump -T libibverbs.so.1` shows `IBVERBS_1.12 ibv_reg_dmabuf_mr`). NCCL
/// loads the verb by it: `LOAD_SYM_VERSION(ibvhandle, "ibv_reg_dmabuf_mr", ...,
/// "IBVERBS_1.12")` (`src/misc/ibvsymbols.cc`, "Cherry-pick the ibv_reg_dmabuf_mr API from
/// IBVERBS 1.12"), so a libibverbs that exports it at no or another version gives NCCL no
/// dma-buf registration.
pub const REG_DMABUF_MR_VERSION: &str = "IBVERBS_1.12";

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type DeallocPd = unsafe extern "C" fn(*mut c_void) -> c_int;
type RegDmabufMr = unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void;
type DeregMr = unsafe extern "C" fn(*mut c_void) -> c_int;

/// NCCL's reading of the errno of `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`: EOPNOTSUPP and
/// EPROTONOSUPPORT are "no DMA-BUF support", anything else is support.
pub fn classify_dmabuf_errno(errno: i32) -> DmabufProbe {
    if matches!(
        Errno::from_raw(errno),
        Errno::EOPNOTSUPP | Errno::EPROTONOSUPPORT
    ) {
        DmabufProbe::Unsupported { errno }
    } else {
        DmabufProbe::Supported { errno }
    }
}

/// Loads libibverbs, lists its devices and runs the DMA-BUF probe on each.
pub fn probe() -> Verbs {
    // SAFETY: loading libibverbs runs its initialisers, which only set up its own state.
    let lib = match unsafe { libloading::Library::new("libibverbs.so.1") } {
        Ok(lib) => lib,
        Err(e) => {
            return Verbs::Unavailable {
                reason: format!("cannot load libibverbs.so.1 (rdma-core not installed?): {e}"),
            }
        }
    };
    match probe_with(&lib) {
        Ok((devices, reg_dmabuf_mr)) => Verbs::Probed {
            devices,
            reg_dmabuf_mr: Some(reg_dmabuf_mr),
            reg_dmabuf_mr_versioned: reg_dmabuf_mr
                .then(|| has_versioned(c"ibv_reg_dmabuf_mr", REG_DMABUF_MR_VERSION)),
        },
        Err(e) => Verbs::Unavailable {
            reason: format!("libibverbs.so.1 lacks an entry point: {e}"),
        },
    }
}

#[cfg_attr(target_env = "gnu", link(name = "dl"))]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
    fn dlclose(handle: *mut c_void) -> c_int;
}

/// libibverbs (already loaded) exports `symbol` at `version`, as `dlvsym` finds it.
fn has_versioned(symbol: &CStr, version: &str) -> bool {
    const RTLD_NOW: c_int = 2;
    const RTLD_NOLOAD: c_int = 4;
    let Ok(version) = std::ffi::CString::new(version) else {
        return false;
    };
    // SAFETY: RTLD_NOLOAD only takes another reference on the library `probe` loaded; the
    // handle is closed below.
    let handle = unsafe { dlopen(c"libibverbs.so.1".as_ptr(), RTLD_NOW | RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: a live handle and NUL-terminated strings; the address is only compared.
    let found = unsafe { !dlvsym(handle, symbol.as_ptr(), version.as_ptr()).is_null() };
    // SAFETY: the reference taken above.
    unsafe { dlclose(handle) };
    found
}

/// The devices with their probe, and whether libibverbs has `ibv_reg_dmabuf_mr`.
fn probe_with(lib: &libloading::Library) -> Result<(Vec<VerbsDevice>, bool), libloading::Error> {
    // SAFETY (all `get`s): the types are the C prototypes of <infiniband/verbs.h>.
    let (get_list, free_list, get_name, open, close, alloc_pd, dealloc_pd) = unsafe {
        (
            lib.get::<GetDeviceList>(b"ibv_get_device_list\0")?,
            lib.get::<FreeDeviceList>(b"ibv_free_device_list\0")?,
            lib.get::<GetDeviceName>(b"ibv_get_device_name\0")?,
            lib.get::<OpenDevice>(b"ibv_open_device\0")?,
            lib.get::<CloseDevice>(b"ibv_close_device\0")?,
            lib.get::<AllocPd>(b"ibv_alloc_pd\0")?,
            lib.get::<DeallocPd>(b"ibv_dealloc_pd\0")?,
        )
    };
    // rdma-core < 34 has no ibv_reg_dmabuf_mr: the probe then reports it per device.
    // SAFETY: as above.
    let reg_dmabuf = unsafe { lib.get::<RegDmabufMr>(b"ibv_reg_dmabuf_mr\0") }.ok();
    // SAFETY: as above.
    let dereg = unsafe { lib.get::<DeregMr>(b"ibv_dereg_mr\0") }.ok();

    let mut count: c_int = 0;
    // SAFETY: count is a valid out pointer; the list is freed below.
    let list = unsafe { get_list(&mut count) };
    if list.is_null() {
        return Ok((Vec::new(), reg_dmabuf.is_some()));
    }
    let mut devices = Vec::new();
    for i in 0..usize::try_from(count).unwrap_or(0) {
        // SAFETY: the list has `count` valid entries.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: a device of the list; the name is a NUL-terminated string it owns.
        let name_ptr = unsafe { get_name(dev) };
        let name = if name_ptr.is_null() {
            format!("device {i}")
        } else {
            // SAFETY: non-NULL and NUL-terminated.
            unsafe { CStr::from_ptr(name_ptr) }
                .to_string_lossy()
                .into_owned()
        };
        let dmabuf = match &reg_dmabuf {
            None => DmabufProbe::NotRun {
                reason: "libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34)".to_owned(),
            },
            // SAFETY: dev comes from the list, which is still alive.
            Some(reg) => unsafe {
                dmabuf_probe(
                    dev,
                    &open,
                    &close,
                    &alloc_pd,
                    &dealloc_pd,
                    reg,
                    dereg.as_deref(),
                )
            },
        };
        devices.push(VerbsDevice { name, dmabuf });
    }
    // SAFETY: the list from ibv_get_device_list, freed once.
    unsafe { free_list(list) };
    Ok((devices, reg_dmabuf.is_some()))
}

/// # Safety
/// `dev` must be a device of a live `ibv_get_device_list` list and the functions the verbs
/// entry points they are named after.
unsafe fn dmabuf_probe(
    dev: *mut c_void,
    open: &OpenDevice,
    close: &CloseDevice,
    alloc_pd: &AllocPd,
    dealloc_pd: &DeallocPd,
    reg: &RegDmabufMr,
    dereg: Option<&DeregMr>,
) -> DmabufProbe {
    // SAFETY: per the function contract.
    let ctx = unsafe { open(dev) };
    if ctx.is_null() {
        return DmabufProbe::NotRun {
            reason: format!(
                "ibv_open_device failed: {}",
                std::io::Error::last_os_error()
            ),
        };
    }
    // SAFETY: ctx is an open context.
    let pd = unsafe { alloc_pd(ctx) };
    let result = if pd.is_null() {
        DmabufProbe::NotRun {
            reason: format!("ibv_alloc_pd failed: {}", std::io::Error::last_os_error()),
        }
    } else {
        // SAFETY: NCCL's probe: zero length, no fd; nothing is registered on failure.
        let mr = unsafe { reg(pd, 0, 0, 0, -1, 0) };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if mr.is_null() {
            classify_dmabuf_errno(errno)
        } else {
            if let Some(dereg) = dereg {
                // SAFETY: the MR just registered.
                unsafe { dereg(mr) };
            }
            DmabufProbe::Supported { errno: 0 }
        }
    };
    if !pd.is_null() {
        // SAFETY: the PD allocated above, nothing registered on it any more.
        unsafe { dealloc_pd(pd) };
    }
    // SAFETY: the context opened above.
    unsafe { close(ctx) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_errno_rule() {
        for (errno, unsupported) in [
            (Errno::EOPNOTSUPP, true),
            (Errno::ENOTSUP, true),
            (Errno::EPROTONOSUPPORT, true),
            (Errno::EBADF, false),
        ] {
            let errno = errno as i32;
            let want = if unsupported {
                DmabufProbe::Unsupported { errno }
            } else {
                DmabufProbe::Supported { errno }
            };
            assert_eq!(classify_dmabuf_errno(errno), want);
        }
        // Linux's numbers, which saved reports carry.
        assert_eq!(
            (
                Errno::EOPNOTSUPP as i32,
                Errno::EPROTONOSUPPORT as i32,
                Errno::EBADF as i32
            ),
            (95, 93, 9)
        );
    }

    #[test]
    fn probing_this_host_does_not_panic() {
        // Where libibverbs has the verb, rdma-core's map puts it at IBVERBS_1.12.
        if let Verbs::Probed {
            reg_dmabuf_mr: Some(true),
            reg_dmabuf_mr_versioned,
            ..
        } = probe()
        {
            assert_eq!(reg_dmabuf_mr_versioned, Some(true));
            assert!(!has_versioned(c"ibv_reg_dmabuf_mr", "IBVERBS_9.99"));
        }
    }

    #[test]
    fn facts_without_the_symbol_version_still_load() {
        let v: Verbs =
            serde_json::from_str(r#"{"state":"probed","devices":[],"reg_dmabuf_mr":true}"#)
                .unwrap();
        assert!(matches!(
            v,
            Verbs::Probed {
                reg_dmabuf_mr: Some(true),
                reg_dmabuf_mr_versioned: None,
                ..
            }
        ));
    }
}
