// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer nccl-log`: what an `NCCL_DEBUG=INFO` log says about GPUDirect RDMA, from NCCL's own
//! lines: per NET device whether NCCL enabled GPU Direct RDMA (and why not), per GPU/HCA pair
//! the distance rule, and per channel connection whether the transport was `GDRDMA`.
//!
//! The line formats, from NVIDIA/nccl (INFO() prefixes each with `host:pid:tid [dev] NCCL INFO `):
//! - HCA capability, src/transport/net_ib.cc `ncclIbGetProperties` (2.9 ... 2.18):
//!   `"NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)"`; the DMA-BUF and
//!   peermem variants of net_ib.cc (2.12+, and the nccl-rdma-sharp-plugins / "NCCL RDMA Plugin"):
//!   `"NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA %d '%s"` (sic: no closing quote),
//!   `"NET/IB : GPU Direct RDMA (nvidia-peermem) enabled for HCA %d '%s"`; src/graph/topo.cc
//!   `ncclTopoFillNet`/`ncclTopoGetSystem` (2.19+): `"NET/%s : GPU Direct RDMA %s for HCA %d '%s'"`
//!   with `Enabled`/`Disabled`.
//! - The distance rule, src/graph/paths.cc `ncclTopoCheckGdr`: 2.9 ... 2.11
//!   `"GPU Direct RDMA Disabled for GPU %lx / HCA %d (distance %d > %d)"` and
//!   `"GPU Direct RDMA Enabled for GPU %lx / HCA %d (distance %d <= %d), read %d"`; 2.12 ... 2.18
//!   `"... for GPU %d / HCA %lx (distance %d <= %d), read %d"`; 2.19+ `"..., read %d mode %s"`;
//!   newer releases (the 2026 tree, commit 04cdb808; the first release with it is not pinned
//!   down here) print `"GPU Direct RDMA %s for %s"` with a message made of
//!   `"GPU/%ld-%ld (rank %d) - NET/%ld-%ld ("`, for PXN `" using PXN via GPU/%ld-%ld, "`, and
//!   `"distance %d > %d)"` or `"distance %d <= %d, read %d, mode %s)"`.
//! - Connections, src/transport/net.cc `sendSetup`/`recvSetup`: 2.9 ... 2.11
//!   `"Channel %02d : %d[%lx] -> %d[%lx] [send] via NET/%s/%d%s%s"` (`/GDRDMA`, `/Shared`);
//!   2.12 ... 2.18 `"Channel %02d/%d : %d[%lx] -> %d[%lx] [send] via NET/%s/%d%s%s"`; 2.19+
//!   `"Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"` (`/GDRDMA`, `(PCI)`,
//!   `/Shared`; unchanged in the 2026 tree, commit 022c022a); through a proxy rank (PXN)
//!   `via NET/%s/%d(%d)...`; `[receive]` likewise. P2P and SHM (p2p.cc, shm.cc) print
//!   `"Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s"` etc., without a direction.
//! - init.cc: `"NCCL version %s"` (e.g. `NCCL version 2.21.5+cuda12.4`).
//!
//! Every other line, and any line that does not parse, is ignored.

use std::io::Read;
use std::path::PathBuf;

use serde::Serialize;

/// The schema of `nvpeer nccl-log --json`.
pub const SCHEMA: &str = "nvpeer.nccl-log/1";

#[derive(Debug, thiserror::Error)]
pub enum NcclLogError {
    #[error("cannot read {path}: {source}")]
    Read {
        /// `-` for standard input.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One NET device's GPU Direct RDMA capability as NCCL announced it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Device {
    /// From the line's prefix (`host:pid:tid [dev] NCCL INFO`); `None` without one.
    pub host: Option<String>,
    /// The network: `IB`, `Socket`, a plugin's name.
    pub net: String,
    pub index: u32,
    pub name: String,
    pub gdr: bool,
    /// How, when NCCL says: `DMABUF`, `nvidia-peermem`.
    pub via: Option<String>,
    /// Why not, when NCCL says (`no module`).
    pub reason: Option<String>,
}

/// NCCL's distance rule for one GPU and HCA (`NCCL_NET_GDR_LEVEL`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuPath {
    pub host: Option<String>,
    /// As printed: a bus id in hex (<= 2.11), a rank (2.12 and later), `GPU/<sys>-<local> (rank <r>)` (newer).
    pub gpu: String,
    /// As printed: a device index (<= 2.11), a NET id in hex (2.12 and later), `NET/<sys>-<local>` (newer).
    pub hca: String,
    pub gdr: bool,
    /// NCCL's path type number and the limit it was compared with.
    pub distance: u32,
    pub limit: u32,
    /// PXN (newer form only): the GPU whose distance counted instead (`GPU/<sys>-<local>`).
    pub pxn_via: Option<String>,
    /// `read %d`: GDR also for reads (enabled lines only).
    pub read: Option<bool>,
    /// `mode %s` (2.19+).
    pub mode: Option<String>,
}

/// One channel connection over the network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub host: Option<String>,
    pub channel: u32,
    /// The connection index (2.12+), `None` before.
    pub conn_index: Option<u32>,
    pub from_rank: u32,
    pub to_rank: u32,
    /// `send` or `receive`.
    pub direction: String,
    pub net: String,
    pub dev: u32,
    /// PXN: the rank whose NIC carries the data.
    pub proxy_rank: Option<u32>,
    pub gdr: bool,
    /// `(PCI)`: GDR forced through PCIe on a C2C system.
    pub pci: bool,
    pub shared: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every NET connection is GDRDMA.
    All,
    Some,
    None,
    /// Every network connection is over NET/Socket (TCP): NCCL fell back, RDMA not used.
    Socket,
    /// NCCL lines, but no connection over the network.
    NoNetConnections,
    /// Not an NCCL log (empty, or no line NCCL writes).
    NoNcclLines,
}

impl Verdict {
    pub fn sentence(self) -> &'static str {
        match self {
            Self::All => "GPU Direct RDMA used on all network connections",
            Self::Some => "GPU Direct RDMA used on some network connections only",
            Self::None => "GPU Direct RDMA used on no network connection",
            Self::Socket => {
                "RDMA not used: NCCL fell back to NET/Socket (TCP sockets), so GPU Direct RDMA was used on no network connection"
            }
            Self::NoNetConnections => "no network connection in the log",
            Self::NoNcclLines => "no NCCL lines",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Lines with `NCCL INFO`/`NCCL WARN` or one of the formats above.
    pub nccl_lines: usize,
    pub net_connections: usize,
    pub gdr_connections: usize,
    /// Channel connections over other transports (P2P, SHM, ...).
    pub other_connections: usize,
    pub verdict: Verdict,
}

impl Verdict {
    /// The exit code of `nvpeer nccl-log`: 0 every network connection GDRDMA; 1 not every
    /// one (some, none, NET/Socket); 3 not an NCCL log; 4 an NCCL log without a network
    /// connection (nothing to judge). 2 (the log cannot be read) is the binary's.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::All => 0,
            Self::Some | Self::None | Self::Socket => 1,
            Self::NoNcclLines => 3,
            Self::NoNetConnections => 4,
        }
    }
}

/// `nvpeer nccl-log --json` prints this.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// The file, or `-` for standard input.
    pub source: String,
    pub nccl_versions: Vec<String>,
    pub devices: Vec<Device>,
    pub gpu_paths: Vec<GpuPath>,
    pub connections: Vec<Connection>,
    /// The `NCCL WARN` messages, each once, in order.
    pub warnings: Vec<String>,
    pub summary: Summary,
}

/// Reads `path` (`-`: standard input) and parses it.
pub fn read(path: &str) -> Result<Report, NcclLogError> {
    let mut bytes = Vec::new();
    let result = if path == "-" {
        std::io::stdin().lock().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    result.map_err(|source| NcclLogError::Read {
        path: PathBuf::from(path),
        source,
    })?;
    // Logs interleave binary garbage at times (a crashed rank): never a reason to give up.
    Ok(parse(&String::from_utf8_lossy(&bytes), path))
}

/// Parses the text of a log.
pub fn parse(text: &str, source: &str) -> Report {
    let mut nccl_versions: Vec<String> = Vec::new();
    let mut devices: Vec<Device> = Vec::new();
    let mut gpu_paths: Vec<GpuPath> = Vec::new();
    let mut connections: Vec<Connection> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut nccl_lines = 0;
    let mut other_connections = 0;
    for line in text.lines() {
        let Line { tagged, host, msg } = split_prefix(line);
        let mut known = tagged;
        if line.contains(" NCCL WARN ") {
            let w = match &host {
                Some(h) => format!("{h}: {}", msg.trim()),
                None => msg.trim().to_owned(),
            };
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        if let Some(v) = msg.strip_prefix("NCCL version ") {
            known = true;
            let v = v.split_whitespace().next().unwrap_or("").to_owned();
            if !v.is_empty() && !nccl_versions.contains(&v) {
                nccl_versions.push(v);
            }
        } else if let Some(d) = parse_device(msg, &host) {
            known = true;
            // One device announced on several lines (`NET/IB : Using [0]mlx5_0` and `GPU Direct
            // RDMA Enabled for HCA 0 'mlx5_0' (via DMABUF)`): one entry, what each line adds.
            match devices.iter_mut().find(|e| {
                (&e.host, &e.net, e.index, &e.name) == (&d.host, &d.net, d.index, &d.name)
            }) {
                Some(e) => {
                    e.gdr |= d.gdr;
                    if e.via.is_none() {
                        e.via = d.via;
                    }
                    if e.reason.is_none() && !e.gdr {
                        e.reason = d.reason;
                    }
                }
                None => devices.push(d),
            }
        } else if let Some(p) = parse_gpu_path(msg, &host) {
            known = true;
            if !gpu_paths.contains(&p) {
                gpu_paths.push(p);
            }
        } else if let Some(c) = parse_channel(msg, &host) {
            known = true;
            match c {
                Some(c) => {
                    if !connections.contains(&c) {
                        connections.push(c);
                    }
                }
                None => other_connections += 1,
            }
        }
        nccl_lines += usize::from(known);
    }
    let net_connections = connections.len();
    let gdr_connections = connections.iter().filter(|c| c.gdr).count();
    let verdict = if nccl_lines == 0 {
        Verdict::NoNcclLines
    } else if net_connections == 0 {
        Verdict::NoNetConnections
    } else if gdr_connections == net_connections {
        Verdict::All
    } else if connections.iter().all(|c| c.net == "Socket") {
        Verdict::Socket
    } else if gdr_connections == 0 {
        Verdict::None
    } else {
        Verdict::Some
    };
    Report {
        schema: SCHEMA,
        source: source.to_owned(),
        nccl_versions,
        devices,
        gpu_paths,
        connections,
        warnings,
        summary: Summary {
            nccl_lines,
            net_connections,
            gdr_connections,
            other_connections,
            verdict,
        },
    }
}

/// One line split at NCCL's prefix.
struct Line<'a> {
    /// The line has NCCL's `NCCL INFO`/`NCCL WARN` tag.
    tagged: bool,
    /// `host` of a `host:pid:tid [dev] NCCL INFO` prefix.
    host: Option<String>,
    /// The message after the tag, or the whole line without one.
    msg: &'a str,
}

fn split_prefix(line: &str) -> Line<'_> {
    let line = line.trim_end();
    for tag in [" NCCL INFO ", " NCCL WARN "] {
        if let Some(at) = line.find(tag) {
            let host = line[..at]
                .split_whitespace()
                .next()
                .and_then(|p| p.split(':').next())
                .filter(|h| !h.is_empty())
                .map(str::to_owned);
            return Line {
                tagged: true,
                host,
                msg: line[at + tag.len()..].trim_start(),
            };
        }
    }
    Line {
        tagged: false,
        host: None,
        msg: line.trim_start(),
    }
}

/// `NET/<net> : GPU Direct RDMA <Enabled|Disabled|(<via>) enabled> for HCA <n> '<name>'[ (<why>)]`.
fn parse_device(msg: &str, host: &Option<String>) -> Option<Device> {
    let rest = msg.strip_prefix("NET/")?;
    let (net, rest) = rest.split_once(" : GPU Direct RDMA ")?;
    let (state, rest) = rest.split_once(" for HCA ")?;
    let (gdr, via) = match state {
        "Enabled" | "enabled" => (true, None),
        "Disabled" | "disabled" => (false, None),
        s => {
            let inner = s.strip_prefix('(')?;
            let (how, word) = inner.split_once(") ")?;
            (word.eq_ignore_ascii_case("enabled"), Some(how.to_owned()))
        }
    };
    let (index, rest) = rest.split_once(' ')?;
    let index: u32 = index.parse().ok()?;
    let rest = rest.strip_prefix('\'')?;
    let (name, tail) = rest.split_once('\'').unwrap_or((rest, ""));
    let reason = tail
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .map(str::to_owned);
    Some(Device {
        host: host.clone(),
        net: net.to_owned(),
        index,
        name: name.to_owned(),
        gdr,
        via,
        reason,
    })
}

/// NCCL's distance rule, two shapes:
/// - 2.9 and later: `GPU Direct RDMA <Enabled|Disabled> for GPU <g> / HCA <h> (distance <d> <op> <l>)[, read <r>[ mode <m>]]`
///   (also behind the `NET/<net> : ` prefix of the oldest versions);
/// - newer (2026 tree): `GPU Direct RDMA <Enabled|Disabled> for GPU/<s>-<l> (rank <r>) - NET/<s>-<l> ([ using PXN via GPU/<s>-<l>, ]distance <d> <op> <l>[, read <r>, mode <m>])`.
fn parse_gpu_path(msg: &str, host: &Option<String>) -> Option<GpuPath> {
    let at = msg.find("GPU Direct RDMA ")?;
    let rest = &msg[at + "GPU Direct RDMA ".len()..];
    let (state, rest) = rest.split_once(" for ")?;
    let gdr = match state {
        "Enabled" => true,
        "Disabled" => false,
        _ => return None,
    };
    // `inner`: what the parentheses hold; `tail`: what follows them (older form).
    let (gpu, hca, inner, tail) = if let Some(r) = rest.strip_prefix("GPU/") {
        let (gpu, r) = r.split_once(" - NET/")?;
        let (net, r) = r.split_once(" (")?;
        (
            format!("GPU/{gpu}"),
            format!("NET/{net}"),
            r.strip_suffix(')')?,
            "",
        )
    } else {
        let r = rest.strip_prefix("GPU ")?;
        let (gpu, r) = r.split_once(" / HCA ")?;
        let (hca, r) = r.split_once(" (")?;
        let (inner, tail) = r.split_once(')')?;
        (gpu.trim().to_owned(), hca.trim().to_owned(), inner, tail)
    };
    let mut inner = inner.trim();
    let mut pxn_via = None;
    if let Some(r) = inner.strip_prefix("using PXN via ") {
        let (via, r) = r.split_once(", ")?;
        pxn_via = Some(via.to_owned());
        inner = r.trim();
    }
    let inner = inner.strip_prefix("distance ")?;
    let (cmp, items) = inner.split_once(", ").unwrap_or((inner, ""));
    let mut words = cmp.split_whitespace();
    let distance: u32 = words.next()?.parse().ok()?;
    let _op = words.next()?;
    let limit: u32 = words.next()?.parse().ok()?;
    // `read 1, mode Default` (newer) or `, read 1 mode Default` (2.19 to the older form's end).
    let mut read = None;
    let mut mode = None;
    let mut words = items
        .split(',')
        .chain(tail.split(','))
        .flat_map(str::split_whitespace);
    while let Some(key) = words.next() {
        match (key, words.next()) {
            ("read", Some(v)) => read = v.parse::<u32>().ok().map(|r| r != 0),
            ("mode", Some(v)) => mode = Some(v.to_owned()),
            _ => {}
        }
    }
    Some(GpuPath {
        host: host.clone(),
        gpu,
        hca,
        gdr,
        distance,
        limit,
        pxn_via,
        read,
        mode,
    })
}

/// A channel connection line: `Some(Some(c))` over NET, `Some(None)` over another transport,
/// `None` when the line is not one.
fn parse_channel(msg: &str, host: &Option<String>) -> Option<Option<Connection>> {
    let rest = msg.strip_prefix("Channel ")?;
    let (chan, rest) = rest.split_once(" : ")?;
    let (channel, conn_index) = match chan.split_once('/') {
        Some((c, i)) => (c.trim().parse().ok()?, Some(i.trim().parse().ok()?)),
        None => (chan.trim().parse().ok()?, None),
    };
    let (from, rest) = rest.split_once(" -> ")?;
    let from_rank: u32 = from.trim().split('[').next()?.trim().parse().ok()?;
    // `<rank>[<dev>] [send] via ...` over NET; P2P and SHM (p2p.cc, shm.cc) have no direction:
    // `<rank>[<dev>] via P2P/...`.
    let (to, transport) = rest.split_once(" via ")?;
    let (to, direction) = match to.trim().split_once(" [") {
        Some((t, d)) => (t, Some(d.strip_suffix(']')?)),
        None => (to, None),
    };
    let to_rank: u32 = to.trim().split('[').next()?.trim().parse().ok()?;
    let Some(net) = transport.trim().strip_prefix("NET/") else {
        return Some(None);
    };
    let direction = direction.filter(|d| *d == "send" || *d == "receive")?;
    // From the right: the suffixes, the proxy rank, the device; the rest is the network's
    // name, which may hold spaces and slashes ("NCCL RDMA Plugin v9").
    let mut s = net;
    let shared = strip(&mut s, "/Shared");
    let pci = strip(&mut s, "(PCI)");
    let gdr = strip(&mut s, "/GDRDMA");
    let mut proxy_rank = None;
    if s.ends_with(')') {
        let open = s.rfind('(')?;
        proxy_rank = Some(s[open + 1..s.len() - 1].parse().ok()?);
        s = &s[..open];
    }
    let slash = s.rfind('/')?;
    let dev: u32 = s[slash + 1..].parse().ok()?;
    let name = &s[..slash];
    if name.is_empty() {
        return None;
    }
    Some(Some(Connection {
        host: host.clone(),
        channel,
        conn_index,
        from_rank,
        to_rank,
        direction: direction.to_owned(),
        net: name.to_owned(),
        dev,
        proxy_rank,
        gdr,
        pci,
        shared,
    }))
}

fn strip(s: &mut &str, suffix: &str) -> bool {
    match s.strip_suffix(suffix) {
        Some(rest) => {
            *s = rest;
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_formats_of_each_version() {
        let h = Some("node1".to_owned());
        let c = |m: &str| parse_channel(m, &h).unwrap().unwrap();
        let old = c("Channel 00 : 0[3000] -> 1[3000] [send] via NET/IB/0/GDRDMA");
        assert_eq!(
            (old.channel, old.conn_index, old.gdr, old.dev),
            (0, None, true, 0)
        );
        let mid = c("Channel 01/1 : 2[c1000] -> 3[c1000] [receive] via NET/IB/1/Shared");
        assert_eq!(
            (mid.conn_index, mid.gdr, mid.shared),
            (Some(1), false, true)
        );
        assert_eq!(mid.direction, "receive");
        let new = c(
            "Channel 03/0 : 11[3] -> 3[3] [send] via NET/NCCL RDMA Plugin v9/3/GDRDMA(PCI)/Shared",
        );
        assert_eq!(new.net, "NCCL RDMA Plugin v9");
        assert!(new.gdr && new.pci && new.shared);
        let pxn = c("Channel 02/0 : 4[4] -> 12[4] [send] via NET/IB/2(6)/GDRDMA");
        assert_eq!((pxn.proxy_rank, pxn.dev, pxn.gdr), (Some(6), 2, true));
        assert_eq!(
            parse_channel("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read", &h),
            Some(None)
        );
        assert_eq!(
            parse_channel("Channel 00/0 : 0[0] -> 1[1] via NET/IB/0", &h),
            None
        );
        assert_eq!(
            parse_channel("Channel 00/0 : 0[0] -> 1[1] [send] via P2P/IPC/read", &h),
            Some(None)
        );
        assert_eq!(parse_channel("Channel 00/16 :    0   1", &h), None);
        assert_eq!(
            parse_channel("Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/x", &h),
            None
        );
    }

    #[test]
    fn device_and_distance_formats() {
        let d = parse_device(
            "NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)",
            &None,
        )
        .unwrap();
        assert_eq!((d.index, d.name.as_str(), d.gdr), (1, "mlx5_1", false));
        assert_eq!(d.reason.as_deref(), Some("no module"));
        let d = parse_device(
            "NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0",
            &None,
        )
        .unwrap();
        assert_eq!(
            (d.gdr, d.via.as_deref(), d.name.as_str()),
            (true, Some("DMABUF"), "mlx5_0")
        );
        let d = parse_device(
            "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
            &None,
        )
        .unwrap();
        assert_eq!((d.net.as_str(), d.gdr, d.reason), ("Socket", false, None));
        let p = parse_gpu_path(
            "GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 8 > 5)",
            &None,
        )
        .unwrap();
        assert_eq!((p.gdr, p.distance, p.limit, p.read), (false, 8, 5, None));
        let p = parse_gpu_path(
            "GPU Direct RDMA Enabled for GPU 3 / HCA 1 (distance 4 <= 5), read 1 mode Default",
            &None,
        )
        .unwrap();
        assert_eq!(
            (p.gdr, p.read, p.mode.as_deref()),
            (true, Some(true), Some("Default"))
        );
        assert!(parse_gpu_path(
            "GPU Direct RDMA Enabled for GPU x / HCA 1 (distance a <= 5)",
            &None
        )
        .is_none());
        let p = parse_gpu_path(
            "GPU Direct RDMA Enabled for GPU/0-1 (rank 1) - NET/0-0 (distance 4 <= 5, read 1, mode PCI)",
            &None,
        )
        .unwrap();
        assert_eq!(
            (p.gpu.as_str(), p.hca.as_str()),
            ("GPU/0-1 (rank 1)", "NET/0-0")
        );
        assert_eq!((p.gdr, p.distance, p.limit), (true, 4, 5));
        assert_eq!(
            (p.read, p.mode.as_deref(), p.pxn_via),
            (Some(true), Some("PCI"), None)
        );
        let p = parse_gpu_path(
            "GPU Direct RDMA Disabled for GPU/0-2 (rank 2) - NET/0-1 ( using PXN via GPU/0-3, distance 9 > 7)",
            &None,
        )
        .unwrap();
        assert_eq!((p.gdr, p.distance, p.limit, p.read), (false, 9, 7, None));
        assert_eq!(p.pxn_via.as_deref(), Some("GPU/0-3"));
    }

    #[test]
    fn verdicts() {
        assert_eq!(parse("", "-").summary.verdict, Verdict::NoNcclLines);
        assert_eq!(
            parse("hello\n\u{fffd}\n", "-").summary.verdict,
            Verdict::NoNcclLines
        );
        let v = |t: &str| parse(t, "-").summary.verdict;
        let g = "n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n";
        let p = "n:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0\n";
        assert_eq!(
            v("n:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"),
            Verdict::NoNetConnections
        );
        assert_eq!(v(g), Verdict::All);
        assert_eq!(v(p), Verdict::None);
        assert_eq!(v(&format!("{g}{p}")), Verdict::Some);
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(s in "\\PC{0,200}") {
            let _ = parse(&s, "-");
            let _ = parse(&format!("h:1:1 [0] NCCL INFO Channel {s}"), "-");
            let _ = parse(&format!("NET/{s} : GPU Direct RDMA {s} for HCA {s}"), "-");
        }
    }
}
