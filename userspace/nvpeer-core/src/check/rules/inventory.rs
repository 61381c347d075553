// SPDX-License-Identifier: MIT OR Apache-2.0
//! The expected inventory (`check --expect-gpus N --expect-nics N --expect-rate GBPS`), as NHC
//! checks a node: a node that lost a GPU, a NIC, or a NIC's lanes fails.

use crate::host::rdma::RdmaDevice;

use super::super::{Check, Expect};
use super::Ctx;

/// The Gb/s of a port's `rate` (`400 Gb/sec (4X NDR)`); `None` for another text.
fn gbps(rate: &str) -> Option<f64> {
    let (number, unit) = rate.trim().split_once(' ')?;
    unit.starts_with("Gb/sec")
        .then(|| number.parse::<f64>().ok())
        .flatten()
}

/// `1 GPU missing`, `2 GPUs missing`.
fn missing(n: usize, what: &str) -> String {
    format!("{n} {what}{} missing", if n == 1 { "" } else { "s" })
}

/// The RDMA devices with a PCI function (software devices, rxe and siw, are no NIC).
fn nics(devices: &[RdmaDevice]) -> Vec<&RdmaDevice> {
    devices.iter().filter(|d| d.pci.is_some()).collect()
}

/// The `inventory` row, only when an expectation was given.
pub(super) fn row(ctx: &Ctx) -> Option<Check> {
    let Expect {
        gpus,
        nics: want_nics,
        rate_gbps,
    } = ctx.options.expect;
    if gpus.is_none() && want_nics.is_none() && rate_gbps.is_none() {
        return None;
    }
    let f = ctx.f;
    let mut found = Vec::new();
    let mut short = Vec::new();
    if let Some(want) = gpus {
        let have = f.gpus.len();
        found.push(format!("{have} GPUs of {want} expected"));
        if have < want {
            short.push(missing(want - have, "GPU"));
        }
    }
    let have_nics = nics(&f.rdma_devices);
    if let Some(want) = want_nics {
        found.push(format!("{} NICs of {want} expected", have_nics.len()));
        if have_nics.len() < want {
            short.push(missing(want - have_nics.len(), "NIC"));
        }
    }
    if let Some(want) = rate_gbps {
        for d in &have_nics {
            for p in &d.ports {
                match p.rate.as_deref().and_then(gbps) {
                    Some(r) if r + 0.5 < f64::from(want) => {
                        short.push(format!("{}/{} at {r} Gb/s, below {want}", d.name, p.number))
                    }
                    Some(_) => {}
                    None => short.push(format!("{}/{}: rate unknown", d.name, p.number)),
                }
            }
        }
        found.push(format!("port rates at least {want} Gb/s expected"));
    }
    let detail = found.join(", ");
    if short.is_empty() {
        return Some(Check::ok("inventory", detail));
    }
    Some(Check::fail(
        "inventory",
        format!("{}; {detail}", short.join("; ")),
        "a GPU or NIC that left the bus, or a link that trained down: check `lspci`, `ibstat` and the cables, and reseat or replace the part before this node takes jobs",
    ))
}

#[cfg(test)]
mod tests {
    use super::gbps;

    #[test]
    fn port_rates() {
        assert_eq!(gbps("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(gbps("unknown"), None);
        assert_eq!(gbps("10 Mb/sec"), None);
    }
}
