//! Connection establishment through librdmacm (`--rdma-cm`), loaded at run time like
//! libibverbs: the binary runs without librdmacm, and only `--rdma-cm` needs it.
//!
//! The queue pair stays ours (created on our own device context and PD, where the buffer is
//! registered): the CM ids carry its number in `rdma_conn_param.qp_num` and
//! `rdma_init_qp_attr` supplies the attributes of each state transition (addresses, path,
//! PSNs), as for any user-managed QP. The buffer's address, rkey and half size travel in the
//! connection's private data (REQ from the client, REP from the server).
//!
//! The types are bindgen's declarations from <rdma/rdma_cma.h> ([`ibv::sys`]); only
//! `rdma_conn_param` is built here, `rdma_cm_event` and `rdma_event_channel` are read.

use std::ffi::{c_int, c_void};
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::BorrowedFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{SockaddrLike, SockaddrStorage};

use super::ibv::{self, sys, Qp, QpAttr};
use super::BenchError;

type ConnParam = sys::rdma_conn_param;
type CmEvent = sys::rdma_cm_event;

const PS_TCP: sys::rdma_port_space = sys::RDMA_PS_TCP;
const EV_ADDR_RESOLVED: u32 = sys::RDMA_CM_EVENT_ADDR_RESOLVED;
const EV_ROUTE_RESOLVED: u32 = sys::RDMA_CM_EVENT_ROUTE_RESOLVED;
const EV_CONNECT_REQUEST: u32 = sys::RDMA_CM_EVENT_CONNECT_REQUEST;
const EV_CONNECT_RESPONSE: u32 = sys::RDMA_CM_EVENT_CONNECT_RESPONSE;
const EV_ESTABLISHED: u32 = sys::RDMA_CM_EVENT_ESTABLISHED;

/// How long one CM step (address, route, request, answer) may take.
const CM_TIMEOUT: Duration = Duration::from_secs(15);

type Chan = *mut sys::rdma_event_channel;
type Id = *mut sys::rdma_cm_id;

/// `struct sockaddr` of the librdmacm prototypes. libc stays for this FFI type (nix has no
/// wrapper of its own): the one nix re-exports, so it is the type `SockaddrLike::as_ptr`
/// returns.
type Sockaddr = nix::libc::sockaddr;

struct Cma {
    _lib: libloading::Library,
    create_event_channel: unsafe extern "C" fn() -> Chan,
    destroy_event_channel: unsafe extern "C" fn(Chan),
    create_id: unsafe extern "C" fn(Chan, *mut Id, *mut c_void, sys::rdma_port_space) -> c_int,
    destroy_id: unsafe extern "C" fn(Id) -> c_int,
    bind_addr: unsafe extern "C" fn(Id, *const Sockaddr) -> c_int,
    resolve_addr: unsafe extern "C" fn(Id, *const Sockaddr, *const Sockaddr, c_int) -> c_int,
    resolve_route: unsafe extern "C" fn(Id, c_int) -> c_int,
    connect: unsafe extern "C" fn(Id, *mut ConnParam) -> c_int,
    listen: unsafe extern "C" fn(Id, c_int) -> c_int,
    accept: unsafe extern "C" fn(Id, *mut ConnParam) -> c_int,
    establish: unsafe extern "C" fn(Id) -> c_int,
    disconnect: unsafe extern "C" fn(Id) -> c_int,
    get_cm_event: unsafe extern "C" fn(Chan, *mut *mut CmEvent) -> c_int,
    ack_cm_event: unsafe extern "C" fn(*mut CmEvent) -> c_int,
    init_qp_attr: unsafe extern "C" fn(Id, *mut sys::ibv_qp_attr, *mut c_int) -> c_int,
    /// The port in network order (`__be16`).
    get_src_port: unsafe extern "C" fn(Id) -> u16,
    event_str: unsafe extern "C" fn(sys::rdma_cm_event_type) -> *const std::ffi::c_char,
}

// SAFETY: function pointers and the library handle, immutable after loading; librdmacm's entry
// points are thread-safe.
unsafe impl Send for Cma {}
// SAFETY: as above.
unsafe impl Sync for Cma {}

fn lib_name() -> String {
    std::env::var("NVPEER_LIBRDMACM").unwrap_or_else(|_| "librdmacm.so.1".to_owned())
}

fn load() -> Result<Cma, String> {
    let name = lib_name();
    // SAFETY: loading librdmacm runs its initialisers, which only set up its own state.
    let lib = unsafe { libloading::Library::new(&name) }
        .map_err(|e| format!("cannot load {name} (librdmacm1 not installed?): {e}"))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the types are the C prototypes of <rdma/rdma_cma.h>.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{name} lacks {}: {e}", $name))?
        };
    }
    Ok(Cma {
        create_event_channel: sym!("rdma_create_event_channel"),
        destroy_event_channel: sym!("rdma_destroy_event_channel"),
        create_id: sym!("rdma_create_id"),
        destroy_id: sym!("rdma_destroy_id"),
        bind_addr: sym!("rdma_bind_addr"),
        resolve_addr: sym!("rdma_resolve_addr"),
        resolve_route: sym!("rdma_resolve_route"),
        connect: sym!("rdma_connect"),
        listen: sym!("rdma_listen"),
        accept: sym!("rdma_accept"),
        establish: sym!("rdma_establish"),
        disconnect: sym!("rdma_disconnect"),
        get_cm_event: sym!("rdma_get_cm_event"),
        ack_cm_event: sym!("rdma_ack_cm_event"),
        init_qp_attr: sym!("rdma_init_qp_attr"),
        get_src_port: sym!("rdma_get_src_port"),
        event_str: sym!("rdma_event_str"),
        _lib: lib,
    })
}

fn cma() -> Result<&'static Cma, BenchError> {
    static CMA: OnceLock<Result<Cma, String>> = OnceLock::new();
    CMA.get_or_init(load)
        .as_ref()
        .map_err(|e| BenchError::NoRdmaCm(e.clone()))
}

/// Loads librdmacm now (a clear error before any device work).
pub fn check() -> Result<(), BenchError> {
    cma().map(|_| ())
}

fn err(what: &str) -> BenchError {
    BenchError::verbs(what, std::io::Error::last_os_error())
}

/// What one side tells the other in the private data: buffer address, rkey, half size.
pub type Remote = (u64, u32, u64);

fn encode(r: Remote) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&r.0.to_be_bytes());
    b[8..12].copy_from_slice(&r.1.to_be_bytes());
    b[12..].copy_from_slice(&r.2.to_be_bytes());
    b
}

fn decode(p: *const c_void, len: u8) -> Result<Remote, BenchError> {
    if p.is_null() || len < 20 {
        return Err(BenchError::Peer(format!(
            "the CM peer sent {len} bytes of private data, not the 20 of its buffer"
        )));
    }
    let mut b = [0u8; 20];
    // SAFETY: the event's private data holds at least `len` >= 20 bytes until it is acked.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), b.as_mut_ptr(), 20) };
    let u64_at = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_be_bytes(x)
    };
    Ok((
        u64_at(0),
        u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        u64_at(12),
    ))
}

/// `a` as a `struct sockaddr_storage` (zero past the `sockaddr_in`/`sockaddr_in6`, flow
/// information 0); librdmacm reads the length of its family.
fn sockaddr(a: &SocketAddr) -> SockaddrStorage {
    match a {
        SocketAddr::V4(v) => SockaddrStorage::from(*v),
        SocketAddr::V6(v) => {
            SockaddrStorage::from(SocketAddrV6::new(*v.ip(), v.port(), 0, v.scope_id()))
        }
    }
}

/// An event channel and its ids (destroyed in reverse order).
pub struct Cm {
    cma: &'static Cma,
    chan: Chan,
    ids: Vec<Id>,
    connected: Option<Id>,
}

// SAFETY: the CM objects are used by one thread at a time (the owner's).
unsafe impl Send for Cm {}

impl Drop for Cm {
    fn drop(&mut self) {
        // SAFETY: every id was created on this channel and is destroyed once, the channel last.
        unsafe {
            if let Some(id) = self.connected {
                (self.cma.disconnect)(id);
            }
            for &id in self.ids.iter().rev() {
                (self.cma.destroy_id)(id);
            }
            (self.cma.destroy_event_channel)(self.chan);
        }
    }
}

impl Cm {
    fn new() -> Result<Self, BenchError> {
        let cma = cma()?;
        // SAFETY: no arguments.
        let chan = unsafe { (cma.create_event_channel)() };
        if chan.is_null() {
            return Err(err("rdma_create_event_channel"));
        }
        Ok(Self {
            cma,
            chan,
            ids: Vec::new(),
            connected: None,
        })
    }

    fn create_id(&mut self) -> Result<Id, BenchError> {
        let mut id: Id = std::ptr::null_mut();
        // SAFETY: a live channel and an out pointer.
        if unsafe { (self.cma.create_id)(self.chan, &mut id, std::ptr::null_mut(), PS_TCP) } != 0 {
            return Err(err("rdma_create_id"));
        }
        self.ids.push(id);
        Ok(id)
    }

    /// Waits for the next event, which must be `want`; returns (id, peer's private data).
    fn expect(&self, want: u32, step: &str) -> Result<(Id, Option<Remote>), BenchError> {
        let t = Instant::now();
        // SAFETY: a live event channel.
        let fd = unsafe { (*self.chan).fd };
        loop {
            let left = CM_TIMEOUT.saturating_sub(t.elapsed());
            if left.is_zero() {
                return Err(BenchError::Peer(format!(
                    "rdma_cm: no answer to {step} for {} s",
                    CM_TIMEOUT.as_secs()
                )));
            }
            // SAFETY: the channel's fd stays open while the channel (self) lives.
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            let ms = PollTimeout::from(left.as_millis().min(1000) as u16);
            if matches!(poll(&mut [PollFd::new(bfd, PollFlags::POLLIN)], ms), Ok(n) if n > 0) {
                break;
            }
        }
        let mut ev: *mut CmEvent = std::ptr::null_mut();
        // SAFETY: a live channel with an event pending; ev is an out pointer.
        if unsafe { (self.cma.get_cm_event)(self.chan, &mut ev) } != 0 {
            return Err(err("rdma_get_cm_event"));
        }
        // SAFETY: a valid event until acked below.
        let (kind, status, id, data) = unsafe {
            let e = &*ev;
            let data = if matches!(e.event, EV_CONNECT_REQUEST | EV_CONNECT_RESPONSE) {
                // The connection parameters: the union member of connect events.
                let conn = e.param.conn;
                Some(decode(conn.private_data, conn.private_data_len))
            } else {
                None
            };
            (e.event, e.status, e.id, data)
        };
        // SAFETY: acked once.
        unsafe { (self.cma.ack_cm_event)(ev) };
        if kind != want || status != 0 {
            // SAFETY: returns a static string for any value.
            let name = |k: u32| unsafe {
                std::ffi::CStr::from_ptr((self.cma.event_str)(k))
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(BenchError::Peer(format!(
                "rdma_cm {step}: got {} (status {status}), expected {}",
                name(kind),
                name(want)
            )));
        }
        Ok((id, data.transpose()?))
    }

    /// Moves our QP to `state` with the attributes the CM gives for `id`.
    fn transition(&self, id: Id, qp: &Qp, state: u32, what: &str) -> Result<(), BenchError> {
        let mut a = QpAttr::new();
        a.qp_state(state);
        let mut mask: c_int = 0;
        // SAFETY: a full struct ibv_qp_attr and an out mask.
        if unsafe { (self.cma.init_qp_attr)(id, &mut a.0, &mut mask) } != 0 {
            return Err(err(&format!("rdma_init_qp_attr({what})")));
        }
        if state == ibv::QPS_INIT {
            a.qp_access_flags(
                ibv::ACCESS_LOCAL_WRITE | ibv::ACCESS_REMOTE_WRITE | ibv::ACCESS_REMOTE_READ,
            );
            mask |= ibv::QP_ACCESS_FLAGS;
        }
        qp.modify(&mut a, mask, what)
    }

    fn param(qp: &Qp, data: &[u8; 20]) -> ConnParam {
        ConnParam {
            private_data: data.as_ptr().cast(),
            private_data_len: 20,
            responder_resources: 16,
            initiator_depth: 16,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: qp.qpn,
        }
    }
}

/// A listening CM id (the server's, or the loopback server thread's).
pub struct Listener {
    cm: Cm,
    /// Where it listens (the port read back when 0 was asked).
    pub addr: SocketAddr,
}

/// Binds and listens on `addr` (port 0: any free port, read back).
pub fn listen(addr: SocketAddr) -> Result<Listener, BenchError> {
    let mut cm = Cm::new()?;
    let id = cm.create_id()?;
    let sa = sockaddr(&addr);
    // SAFETY: a live id and a sockaddr of the right family.
    if unsafe { (cm.cma.bind_addr)(id, sa.as_ptr()) } != 0 {
        return Err(err(&format!("rdma_bind_addr({addr})")));
    }
    // SAFETY: a bound id.
    if unsafe { (cm.cma.listen)(id, 4) } != 0 {
        return Err(err(&format!("rdma_listen({addr})")));
    }
    // SAFETY: a bound id; the port comes in network order.
    let port = u16::from_be(unsafe { (cm.cma.get_src_port)(id) });
    let mut addr = addr;
    addr.set_port(port);
    Ok(Listener { cm, addr })
}

impl Listener {
    /// Takes one connection request for `qp`: INIT, RTR, RTS from the CM's attributes, accept
    /// with our buffer in the private data, wait until established. Returns the peer's buffer.
    pub fn accept(&mut self, qp: &Qp, local: Remote) -> Result<Remote, BenchError> {
        let (child, remote) = self.cm.expect(EV_CONNECT_REQUEST, "listen")?;
        self.cm.ids.push(child);
        let remote =
            remote.ok_or_else(|| BenchError::Peer("connect request without data".to_owned()))?;
        self.cm
            .transition(child, qp, ibv::QPS_INIT, "INIT (rdma_cm)")?;
        self.cm
            .transition(child, qp, ibv::QPS_RTR, "RTR (rdma_cm)")?;
        self.cm
            .transition(child, qp, ibv::QPS_RTS, "RTS (rdma_cm)")?;
        let data = encode(local);
        let mut p = Cm::param(qp, &data);
        // SAFETY: a connect-request id; p and its private data live through the call.
        if unsafe { (self.cm.cma.accept)(child, &mut p) } != 0 {
            return Err(err("rdma_accept"));
        }
        self.cm.expect(EV_ESTABLISHED, "accept")?;
        self.cm.connected = Some(child);
        Ok(remote)
    }
}

/// The client: resolves `dst`, connects `qp` with our buffer in the private data, completes the
/// QP's transitions from the CM's attributes. Returns the CM (keep it while the QP is used) and
/// the server's buffer.
pub fn connect(dst: SocketAddr, qp: &Qp, local: Remote) -> Result<(Cm, Remote), BenchError> {
    let mut cm = Cm::new()?;
    let id = cm.create_id()?;
    let sa = sockaddr(&dst);
    let ms = CM_TIMEOUT.as_millis() as c_int;
    // SAFETY: a live id; the destination sockaddr lives through the call.
    if unsafe { (cm.cma.resolve_addr)(id, std::ptr::null(), sa.as_ptr(), ms) } != 0 {
        return Err(err(&format!("rdma_resolve_addr({dst})")));
    }
    cm.expect(EV_ADDR_RESOLVED, "address resolution")?;
    // SAFETY: an id with a resolved address.
    if unsafe { (cm.cma.resolve_route)(id, ms) } != 0 {
        return Err(err("rdma_resolve_route"));
    }
    cm.expect(EV_ROUTE_RESOLVED, "route resolution")?;
    cm.transition(id, qp, ibv::QPS_INIT, "INIT (rdma_cm)")?;
    let data = encode(local);
    let mut p = Cm::param(qp, &data);
    // SAFETY: a routed id; p and its private data live through the call.
    if unsafe { (cm.cma.connect)(id, &mut p) } != 0 {
        return Err(err(&format!("rdma_connect({dst})")));
    }
    let (_, remote) = cm.expect(EV_CONNECT_RESPONSE, "connect")?;
    let remote = remote.ok_or_else(|| BenchError::Peer("connect reply without data".to_owned()))?;
    cm.transition(id, qp, ibv::QPS_RTR, "RTR (rdma_cm)")?;
    cm.transition(id, qp, ibv::QPS_RTS, "RTS (rdma_cm)")?;
    // SAFETY: an id whose connect response was received.
    if unsafe { (cm.cma.establish)(id) } != 0 {
        return Err(err("rdma_establish"));
    }
    cm.connected = Some(id);
    Ok((cm, remote))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_round_trip() {
        let r = (0x1122_3344_5566_7788, 0xdead_beef, 1 << 23);
        let b = encode(r);
        assert_eq!(decode(b.as_ptr().cast(), 20).ok(), Some(r));
        assert!(decode(b.as_ptr().cast(), 19).is_err());
    }

    #[test]
    fn socket_addresses_in_their_family_layout() {
        let v4 = sockaddr(&"10.1.2.3:18515".parse().expect("v4"));
        let sin = v4.as_sockaddr_in().expect("sockaddr_in");
        assert_eq!(v4.family(), Some(nix::sys::socket::AddressFamily::Inet));
        assert_eq!((sin.ip(), sin.port()), ([10, 1, 2, 3].into(), 18515));
        // The bytes librdmacm reads: family, port in network order, address, zeros.
        // SAFETY: sockaddr_storage is 128 plain bytes.
        let raw: [u8; 16] = unsafe { std::ptr::read(v4.as_ptr().cast()) };
        let mut want = [0u8; 16];
        want[..2].copy_from_slice(&(nix::sys::socket::AddressFamily::Inet as u16).to_ne_bytes());
        want[2..8].copy_from_slice(&[0x48, 0x53, 10, 1, 2, 3]);
        assert_eq!(raw, want);
        let scoped = SocketAddrV6::new("fe80::1".parse().expect("v6"), 7, 99, 3);
        let v6 = sockaddr(&scoped.into());
        let sin6 = v6.as_sockaddr_in6().expect("sockaddr_in6");
        assert_eq!(v6.family(), Some(nix::sys::socket::AddressFamily::Inet6));
        assert_eq!(
            (sin6.ip(), sin6.port(), sin6.flowinfo(), sin6.scope_id()),
            (*scoped.ip(), 7, 0, 3)
        );
    }
}
