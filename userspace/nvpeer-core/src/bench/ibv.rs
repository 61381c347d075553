//! The libibverbs entry points the transfer engine needs, loaded at run time.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` in <infiniband/verbs.h>:
//! they call through `context->ops`, so the layouts of `struct ibv_context`'s op table, of the
//! work requests and of the work completion are reproduced here (checked against rdma-core's
//! verbs.h by the size/offset assertions below, which match every rdma-core since v17: these
//! structs are ABI). Every other call is an exported symbol.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use super::BenchError;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
pub struct SendWr {
    pub wr_id: u64,
    pub next: *mut SendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    /// Network byte order.
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub _rest: [u32; 19],
}

#[repr(C)]
pub struct RecvWr {
    pub wr_id: u64,
    pub next: *mut RecvWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub _tail: [u8; 8],
}

#[repr(C)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct QpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: QpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub _pad: u32,
}

/// Messages up to this size are posted inline (the QP is created with this much inline room).
pub const MAX_INLINE: u32 = 64;

/// `struct ibv_qp_attr` (144 bytes) as bytes with the fields the engine sets.
#[repr(C, align(8))]
pub struct QpAttr(pub [u8; 144]);

impl QpAttr {
    pub fn new() -> Self {
        Self([0; 144])
    }
    fn put(&mut self, off: usize, bytes: &[u8]) {
        self.0[off..off + bytes.len()].copy_from_slice(bytes);
    }
    pub fn qp_state(&mut self, v: u32) {
        self.put(0, &v.to_ne_bytes());
    }
    pub fn path_mtu(&mut self, v: u32) {
        self.put(8, &v.to_ne_bytes());
    }
    pub fn rq_psn(&mut self, v: u32) {
        self.put(20, &v.to_ne_bytes());
    }
    pub fn sq_psn(&mut self, v: u32) {
        self.put(24, &v.to_ne_bytes());
    }
    pub fn dest_qp_num(&mut self, v: u32) {
        self.put(28, &v.to_ne_bytes());
    }
    pub fn qp_access_flags(&mut self, v: u32) {
        self.put(32, &v.to_ne_bytes());
    }
    /// ah_attr: grh.dgid, grh.sgid_index, grh.hop_limit, dlid, is_global, port_num.
    pub fn ah(&mut self, dgid: &[u8; 16], sgid_index: u8, dlid: u16, global: bool, port: u8) {
        self.put(56, dgid);
        self.0[76] = sgid_index;
        self.0[77] = 64;
        self.put(80, &dlid.to_ne_bytes());
        self.0[85] = u8::from(global);
        self.0[86] = port;
    }
    pub fn pkey_index(&mut self, v: u16) {
        self.put(120, &v.to_ne_bytes());
    }
    pub fn max_rd_atomic(&mut self, v: u8) {
        self.0[126] = v;
    }
    pub fn max_dest_rd_atomic(&mut self, v: u8) {
        self.0[127] = v;
    }
    pub fn min_rnr_timer(&mut self, v: u8) {
        self.0[128] = v;
    }
    pub fn port_num(&mut self, v: u8) {
        self.0[129] = v;
    }
    pub fn timeout(&mut self, v: u8) {
        self.0[130] = v;
    }
    pub fn retry_cnt(&mut self, v: u8) {
        self.0[131] = v;
    }
    pub fn rnr_retry(&mut self, v: u8) {
        self.0[132] = v;
    }
}

impl Default for QpAttr {
    fn default() -> Self {
        Self::new()
    }
}

const _: () = assert!(std::mem::size_of::<Sge>() == 16);
const _: () = assert!(std::mem::size_of::<SendWr>() == 128);
const _: () = assert!(std::mem::offset_of!(SendWr, imm_data) == 36);
const _: () = assert!(std::mem::offset_of!(SendWr, remote_addr) == 40);
const _: () = assert!(std::mem::offset_of!(SendWr, rkey) == 48);
const _: () = assert!(std::mem::size_of::<RecvWr>() == 32);
const _: () = assert!(std::mem::size_of::<Wc>() == 48);
const _: () = assert!(std::mem::offset_of!(Wc, wc_flags) == 36);
const _: () = assert!(std::mem::size_of::<QpInitAttr>() == 64);
const _: () = assert!(std::mem::offset_of!(QpInitAttr, qp_type) == 52);

/// Offsets in `struct ibv_context` of `ops.poll_cq`, `ops.post_send`, `ops.post_recv`.
const OPS_POLL_CQ: usize = 8 + 88;
const OPS_POST_SEND: usize = 8 + 200;
const OPS_POST_RECV: usize = 8 + 208;
/// `struct ibv_qp`: context at 0, qp_num at 52. `struct ibv_cq`: context at 0.
const QP_NUM_OFFSET: usize = 52;
/// `struct ibv_mr`: lkey at 36, rkey at 40.
const MR_LKEY_OFFSET: usize = 36;
const MR_RKEY_OFFSET: usize = 40;

pub const WR_RDMA_WRITE: u32 = 0;
pub const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const WR_SEND: u32 = 2;
pub const WR_RDMA_READ: u32 = 4;
pub const WC_RECV_RDMA_WITH_IMM: u32 = 129;
pub const SEND_SIGNALED: u32 = 2;
pub const SEND_INLINE: u32 = 8;
pub const ACCESS_LOCAL_WRITE: u32 = 1;
pub const ACCESS_REMOTE_WRITE: u32 = 2;
pub const ACCESS_REMOTE_READ: u32 = 4;
pub const QPT_RC: u32 = 2;
pub const QPS_INIT: u32 = 1;
pub const QPS_RTR: u32 = 2;
pub const QPS_RTS: u32 = 3;
pub const QP_STATE: c_int = 1;
pub const QP_ACCESS_FLAGS: c_int = 8;
pub const QP_PKEY_INDEX: c_int = 16;
pub const QP_PORT: c_int = 32;
pub const QP_AV: c_int = 128;
pub const QP_PATH_MTU: c_int = 256;
pub const QP_TIMEOUT: c_int = 512;
pub const QP_RETRY_CNT: c_int = 1024;
pub const QP_RNR_RETRY: c_int = 2048;
pub const QP_RQ_PSN: c_int = 4096;
pub const QP_MAX_QP_RD_ATOMIC: c_int = 8192;
pub const QP_MIN_RNR_TIMER: c_int = 32768;
pub const QP_SQ_PSN: c_int = 65536;
pub const QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
pub const QP_DEST_QPN: c_int = 1048576;

/// Names of `enum ibv_wc_status` (ibv_wc_status_str), for error messages.
pub fn wc_status_str(status: u32) -> &'static str {
    const NAMES: [&str; 23] = [
        "success",
        "local length error",
        "local QP operation error",
        "local EE context operation error",
        "local protection error",
        "WR flushed",
        "memory window bind error",
        "bad response error",
        "local access error",
        "remote invalid request error",
        "remote access error",
        "remote operation error",
        "transport retry counter exceeded",
        "RNR retry counter exceeded",
        "local RDD violation error",
        "remote invalid RD request",
        "aborted error",
        "invalid EE context number",
        "invalid EE context state",
        "fatal error",
        "response timeout error",
        "general error",
        "TM error",
    ];
    NAMES
        .get(status as usize)
        .copied()
        .unwrap_or("unknown status")
}

pub type PostSend = unsafe extern "C" fn(*mut c_void, *mut SendWr, *mut *mut SendWr) -> c_int;
pub type PostRecv = unsafe extern "C" fn(*mut c_void, *mut RecvWr, *mut *mut RecvWr) -> c_int;
pub type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut Wc) -> c_int;

/// The exported entry points.
pub struct Ibv {
    _lib: libloading::Library,
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void,
    pub free_device_list: unsafe extern "C" fn(*mut *mut c_void),
    pub get_device_name: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut c_void) -> *mut c_void,
    pub close_device: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut c_void) -> *mut c_void,
    pub dealloc_pd: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void,
    pub reg_dmabuf_mr:
        Option<unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void>,
    pub dereg_mr: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub create_cq:
        unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut c_void, c_int) -> *mut c_void,
    pub destroy_cq: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut c_void, *mut QpInitAttr) -> *mut c_void,
    pub destroy_qp: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub modify_qp: unsafe extern "C" fn(*mut c_void, *mut QpAttr, c_int) -> c_int,
    pub query_port: unsafe extern "C" fn(*mut c_void, u8, *mut c_void) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut c_void, u8, c_int, *mut [u8; 16]) -> c_int,
}

// SAFETY: the function pointers and the library handle are immutable after loading;
// libibverbs' entry points are thread-safe.
unsafe impl Send for Ibv {}
// SAFETY: as above.
unsafe impl Sync for Ibv {}

/// The name of the library that is loaded, overridable for tests (`NVPEER_LIBIBVERBS`).
fn lib_name() -> String {
    std::env::var("NVPEER_LIBIBVERBS").unwrap_or_else(|_| "libibverbs.so.1".to_owned())
}

fn load() -> Result<Ibv, String> {
    let name = lib_name();
    // SAFETY: loading libibverbs runs its initialisers, which only set up its own state.
    let lib = unsafe { libloading::Library::new(&name) }
        .map_err(|e| format!("cannot load {name} (rdma-core not installed?): {e}"))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the types are the C prototypes of <infiniband/verbs.h>.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{name} lacks {}: {e}", $name))?
        };
    }
    Ok(Ibv {
        get_device_list: sym!("ibv_get_device_list"),
        free_device_list: sym!("ibv_free_device_list"),
        get_device_name: sym!("ibv_get_device_name"),
        open_device: sym!("ibv_open_device"),
        close_device: sym!("ibv_close_device"),
        alloc_pd: sym!("ibv_alloc_pd"),
        dealloc_pd: sym!("ibv_dealloc_pd"),
        reg_mr: sym!("ibv_reg_mr"),
        // SAFETY: as above; absent before rdma-core 34.
        reg_dmabuf_mr: unsafe { lib.get(b"ibv_reg_dmabuf_mr\0") }.ok().map(|s| *s),
        dereg_mr: sym!("ibv_dereg_mr"),
        create_cq: sym!("ibv_create_cq"),
        destroy_cq: sym!("ibv_destroy_cq"),
        create_qp: sym!("ibv_create_qp"),
        destroy_qp: sym!("ibv_destroy_qp"),
        modify_qp: sym!("ibv_modify_qp"),
        query_port: sym!("ibv_query_port"),
        query_gid: sym!("ibv_query_gid"),
        _lib: lib,
    })
}

/// libibverbs, loaded once.
pub fn ibv() -> Result<&'static Ibv, BenchError> {
    static IBV: OnceLock<Result<Ibv, String>> = OnceLock::new();
    IBV.get_or_init(load)
        .as_ref()
        .map_err(|e| BenchError::NoVerbs(e.clone()))
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The names of the RDMA devices libibverbs sees.
pub fn device_names() -> Result<Vec<String>, BenchError> {
    let ibv = ibv()?;
    let mut n: c_int = 0;
    // SAFETY: n is a valid out pointer; the list is freed below.
    let list = unsafe { (ibv.get_device_list)(&mut n) };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list has n entries.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the live list; its name is NUL-terminated.
        let p = unsafe { (ibv.get_device_name)(dev) };
        if !p.is_null() {
            // SAFETY: non-NULL and NUL-terminated.
            names.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
    // SAFETY: freed once.
    unsafe { (ibv.free_device_list)(list) };
    Ok(names)
}

/// An open device with one protection domain.
pub struct Context {
    pub ibv: &'static Ibv,
    pub name: String,
    pub ctx: *mut c_void,
    pub pd: *mut c_void,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens `name` (or the first device when `None`) and allocates a PD.
    pub fn open(name: Option<&str>) -> Result<Self, BenchError> {
        let ibv = ibv()?;
        let mut n: c_int = 0;
        // SAFETY: n is a valid out pointer.
        let list = unsafe { (ibv.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: freed once.
                unsafe { (ibv.free_device_list)(list) };
            }
            return Err(BenchError::NoDevice(
                "libibverbs lists no RDMA device (no NIC, driver not loaded, or for Soft-RoCE: \
                 `rdma link add rxe0 type rxe netdev ETH`)"
                    .to_owned(),
            ));
        }
        let mut found: Option<(*mut c_void, String)> = None;
        let mut all = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list has n entries.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device of the live list.
            let p = unsafe { (ibv.get_device_name)(dev) };
            let dn = if p.is_null() {
                String::new()
            } else {
                // SAFETY: NUL-terminated.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            };
            if found.is_none() && name.is_none_or(|w| w == dn) {
                found = Some((dev, dn.clone()));
            }
            all.push(dn);
        }
        let Some((dev, dn)) = found else {
            // SAFETY: freed once.
            unsafe { (ibv.free_device_list)(list) };
            return Err(BenchError::NoDevice(format!(
                "{:?} not found; libibverbs lists: {}",
                name.unwrap_or(""),
                all.join(", ")
            )));
        };
        // SAFETY: dev belongs to the live list (an open context keeps its device alive).
        let ctx = unsafe { (ibv.open_device)(dev) };
        let err = errno();
        // SAFETY: freed once; the opened context stays valid.
        unsafe { (ibv.free_device_list)(list) };
        if ctx.is_null() {
            return Err(BenchError::verbs(format!("ibv_open_device({dn})"), err));
        }
        // SAFETY: ctx is open.
        let pd = unsafe { (ibv.alloc_pd)(ctx) };
        if pd.is_null() {
            let err = errno();
            // SAFETY: opened above.
            unsafe { (ibv.close_device)(ctx) };
            return Err(BenchError::verbs(format!("ibv_alloc_pd({dn})"), err));
        }
        Ok(Self {
            ibv,
            name: dn,
            ctx,
            pd,
        })
    }

    /// (state, active_mtu, lid, link_layer) of a port.
    pub fn port(&self, port: u8) -> Result<(u32, u32, u16, u8), BenchError> {
        let mut buf = [0u64; 32];
        // SAFETY: a buffer larger than any struct ibv_port_attr.
        let rc = unsafe { (self.ibv.query_port)(self.ctx, port, buf.as_mut_ptr().cast()) };
        if rc != 0 {
            return Err(BenchError::verbs(
                format!("ibv_query_port({}, {port})", self.name),
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        let b: &[u8; 256] = bytemuck_u8(&buf);
        let state = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        let mtu = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
        let lid = u16::from_ne_bytes([b[34], b[35]]);
        Ok((state, mtu, lid, b[46]))
    }

    pub fn gid(&self, port: u8, index: i32) -> Option<[u8; 16]> {
        let mut gid = [0u8; 16];
        // SAFETY: a 16-byte out buffer.
        let rc = unsafe { (self.ibv.query_gid)(self.ctx, port, index, &mut gid) };
        (rc == 0).then_some(gid)
    }
}

fn bytemuck_u8(buf: &[u64; 32]) -> &[u8; 256] {
    // SAFETY: same size, u8 has no alignment requirement, the borrow is kept.
    unsafe { &*(buf as *const [u64; 32]).cast::<[u8; 256]>() }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every MR, QP and CQ of this context is dropped before it (owners hold it).
        unsafe {
            (self.ibv.dealloc_pd)(self.pd);
            (self.ibv.close_device)(self.ctx);
        }
    }
}

/// A registered memory region.
pub struct Mr {
    pub ibv: &'static Ibv,
    pub mr: *mut c_void,
    pub lkey: u32,
    pub rkey: u32,
}

// SAFETY: see Context.
unsafe impl Send for Mr {}

impl Mr {
    fn from_raw(ibv: &'static Ibv, mr: *mut c_void) -> Self {
        // SAFETY: a live struct ibv_mr.
        let (lkey, rkey) = unsafe {
            (
                *mr.cast::<u8>().add(MR_LKEY_OFFSET).cast::<u32>(),
                *mr.cast::<u8>().add(MR_RKEY_OFFSET).cast::<u32>(),
            )
        };
        Self {
            ibv,
            mr,
            lkey,
            rkey,
        }
    }

    /// `ibv_reg_mr`; the error keeps the errno (EFAULT diagnosis).
    pub fn register(ctx: &Context, addr: u64, len: usize) -> Result<Self, std::io::Error> {
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        // SAFETY: the caller keeps [addr, addr+len) mapped for the life of the MR.
        let mr = unsafe { (ctx.ibv.reg_mr)(ctx.pd, addr as *mut c_void, len, access as c_int) };
        if mr.is_null() {
            return Err(errno());
        }
        Ok(Self::from_raw(ctx.ibv, mr))
    }

    /// `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`.
    pub fn register_dmabuf(
        ctx: &Context,
        fd: c_int,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<Self, std::io::Error> {
        let Some(reg) = ctx.ibv.reg_dmabuf_mr else {
            return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        // SAFETY: fd is a dma-buf the caller owns.
        let mr = unsafe { reg(ctx.pd, offset, len, iova, fd, access as c_int) };
        if mr.is_null() {
            return Err(errno());
        }
        Ok(Self::from_raw(ctx.ibv, mr))
    }
}

/// NCCL's capability probe: `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`; true when the kernel and
/// provider support dma-buf (any errno other than EOPNOTSUPP/EPROTONOSUPPORT).
pub fn dmabuf_capable(ctx: &Context) -> bool {
    let Some(reg) = ctx.ibv.reg_dmabuf_mr else {
        return false;
    };
    // SAFETY: zero length and no fd: nothing can be registered.
    let mr = unsafe { reg(ctx.pd, 0, 0, 0, -1, 0) };
    if !mr.is_null() {
        // SAFETY: just registered.
        unsafe { (ctx.ibv.dereg_mr)(mr) };
        return true;
    }
    let e = errno().raw_os_error().unwrap_or(0);
    e != libc::EOPNOTSUPP && e != libc::EPROTONOSUPPORT
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once.
        unsafe { (self.ibv.dereg_mr)(self.mr) };
    }
}

/// A completion queue.
pub struct Cq {
    pub ibv: &'static Ibv,
    pub cq: *mut c_void,
    poll: PollCq,
}

// SAFETY: see Context.
unsafe impl Send for Cq {}

impl Cq {
    pub fn new(ctx: &Context, depth: i32) -> Result<Self, BenchError> {
        // SAFETY: ctx is open; no channel, vector 0.
        let cq = unsafe {
            (ctx.ibv.create_cq)(
                ctx.ctx,
                depth,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(BenchError::verbs("ibv_create_cq", errno()));
        }
        // SAFETY: ctx->ops.poll_cq of the live context.
        let poll = unsafe { *ctx.ctx.cast::<u8>().add(OPS_POLL_CQ).cast::<PollCq>() };
        Ok(Self {
            ibv: ctx.ibv,
            cq,
            poll,
        })
    }

    /// Polls up to `wc.len()` completions.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize, BenchError> {
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: wc has room for n entries.
        let got = unsafe { (self.poll)(self.cq, n, wc.as_mut_ptr()) };
        if got < 0 {
            return Err(BenchError::verbs(
                "ibv_poll_cq",
                std::io::Error::from_raw_os_error(-got),
            ));
        }
        Ok(usize::try_from(got).unwrap_or(0))
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: its QPs are destroyed first (owners drop QPs before CQs).
        unsafe { (self.ibv.destroy_cq)(self.cq) };
    }
}

/// An RC queue pair.
pub struct Qp {
    pub ibv: &'static Ibv,
    pub qp: *mut c_void,
    pub qpn: u32,
    post_send: PostSend,
    post_recv: PostRecv,
}

// SAFETY: see Context.
unsafe impl Send for Qp {}

impl Qp {
    pub fn new(ctx: &Context, send_cq: &Cq, recv_cq: &Cq, depth: u32) -> Result<Self, BenchError> {
        let mut attr = QpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            srq: std::ptr::null_mut(),
            cap: QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: MAX_INLINE,
            },
            qp_type: QPT_RC,
            sq_sig_all: 0,
            _pad: 0,
        };
        // SAFETY: attr is fully initialised; the CQs are live.
        let qp = unsafe { (ctx.ibv.create_qp)(ctx.pd, &mut attr) };
        if qp.is_null() {
            return Err(BenchError::verbs("ibv_create_qp (RC)", errno()));
        }
        // SAFETY: a live struct ibv_qp and its context's op table.
        let (qpn, post_send, post_recv) = unsafe {
            (
                *qp.cast::<u8>().add(QP_NUM_OFFSET).cast::<u32>(),
                *ctx.ctx.cast::<u8>().add(OPS_POST_SEND).cast::<PostSend>(),
                *ctx.ctx.cast::<u8>().add(OPS_POST_RECV).cast::<PostRecv>(),
            )
        };
        Ok(Self {
            ibv: ctx.ibv,
            qp,
            qpn,
            post_send,
            post_recv,
        })
    }

    pub fn modify(&self, attr: &mut QpAttr, mask: c_int, what: &str) -> Result<(), BenchError> {
        // SAFETY: attr is a full struct ibv_qp_attr.
        let rc = unsafe { (self.ibv.modify_qp)(self.qp, attr, mask) };
        if rc != 0 {
            return Err(BenchError::verbs(
                format!("ibv_modify_qp to {what}"),
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }

    /// Posts one work request with one SGE.
    pub fn post_send(&self, wr: &mut SendWr) -> Result<(), BenchError> {
        let mut bad: *mut SendWr = std::ptr::null_mut();
        // SAFETY: wr and its SGE list are valid for the call (the provider copies them).
        let rc = unsafe { (self.post_send)(self.qp, wr, &mut bad) };
        if rc != 0 {
            return Err(BenchError::verbs(
                "ibv_post_send",
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }

    pub fn post_recv(&self, sge: &mut Sge, wr_id: u64) -> Result<(), BenchError> {
        let mut wr = RecvWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sge,
            num_sge: 1,
            _pad: 0,
        };
        let mut bad: *mut RecvWr = std::ptr::null_mut();
        // SAFETY: as post_send.
        let rc = unsafe { (self.post_recv)(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(BenchError::verbs(
                "ibv_post_recv",
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: destroyed once.
        unsafe { (self.ibv.destroy_qp)(self.qp) };
    }
}

/// A send work request with one SGE.
pub fn send_wr(
    opcode: u32,
    sge: &mut Sge,
    remote_addr: u64,
    rkey: u32,
    imm: u32,
    flags: u32,
) -> SendWr {
    SendWr {
        wr_id: 0,
        next: std::ptr::null_mut(),
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: flags,
        imm_data: imm.to_be(),
        remote_addr,
        rkey,
        _rest: [0; 19],
    }
}
