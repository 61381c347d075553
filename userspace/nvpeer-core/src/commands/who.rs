// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer who`: the module's registration records grouped by process, cgroup and GPU, and each
//! GPU's pinned bytes next to its BAR1 size (the resource GPUDirect RDMA mappings consume).
//! GPU UUIDs are mapped to PCI functions through `/proc/driver/nvidia/gpus/*/information`, NIC
//! DMA devices to RDMA device names through `/sys/class/infiniband/*/device`; what cannot be
//! mapped is shown as the module wrote it, with a note.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::host::limits::human_bytes;
use crate::host::pci::{self, PciAddress};
use crate::host::peermem::{self, Implementation};
use crate::host::records::{self, GpuTotals, Record, RecordsError};
use crate::host::Host;
use crate::host::{nvidia_proc, rdma};

/// The schema of `nvpeer who --json`.
pub const SCHEMA: &str = "nvpeer.who/1";

/// One process (in one cgroup) on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub tgid: Option<u32>,
    pub comm: String,
    pub cgroup: String,
    /// `GPU-<uuid>`, `None` for registrations not pinned yet.
    pub gpu: Option<String>,
    /// `GPU<n>` in PCI order, when the UUID could be mapped.
    pub gpu_label: Option<String>,
    pub registrations: u64,
    /// Registered bytes, summed.
    pub bytes: u64,
    /// GPU memory its pins hold, each pin once.
    pub pinned_bytes: u64,
    /// The NICs (RDMA device names, else the DMA device as the module named it).
    pub nics: Vec<String>,
    pub oldest_age_ms: u64,
}

/// One GPU's use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuUse {
    pub uuid: String,
    pub label: Option<String>,
    pub address: Option<PciAddress>,
    /// GPU memory pinned now: the module's per-GPU total (sysfs), else summed from the records.
    pub pinned_bytes: u64,
    pub pins: u64,
    pub registrations: u64,
    /// The GPU's BAR1 (its largest prefetchable BAR), which bounds what NICs can map.
    pub bar1_bytes: Option<u64>,
}

/// `nvpeer who --json`.
#[derive(Clone, Debug, Serialize)]
pub struct Who {
    pub schema: &'static str,
    /// Our loaded module; `None` where no peer-memory module is loaded at all (nothing can be
    /// held through one: [`NOTHING_LOADED`] is the note).
    pub module: Option<String>,
    pub registrations: usize,
    pub holders: Vec<Holder>,
    pub gpus: Vec<GpuUse>,
    pub records: Vec<Record>,
    /// What could not be mapped or read, one line each.
    pub notes: Vec<String>,
}

/// What is known of each GPU, by UUID.
#[derive(Clone, Debug, Default)]
pub struct GpuMap {
    gpus: BTreeMap<String, (String, PciAddress, Option<u64>)>,
}

impl GpuMap {
    /// Reads `/proc/driver/nvidia/gpus/*/information` and the PCI functions; problems go to
    /// `notes` (a map that is only partly known still names what it can).
    pub fn read(host: &Host, notes: &mut Vec<String>) -> Self {
        let mut map = Self::default();
        let reading = nvidia_proc::read(host);
        for (part, e) in &reading.errors {
            if *part == nvidia_proc::Part::Gpus {
                notes.push(format!("GPU UUIDs not mapped to PCI functions: {e}"));
            }
        }
        let Some(proc) = reading.proc else {
            return map;
        };
        let gpus = match pci::gpus(host) {
            Ok(g) => g,
            Err(e) => {
                notes.push(format!("GPUs not read: {e}"));
                Vec::new()
            }
        };
        for info in &proc.gpus {
            let (Some(uuid), Some(address)) = (&info.uuid, info.bus_location) else {
                continue;
            };
            let index = gpus.iter().position(|g| g.address == address);
            let label = index.map_or_else(|| address.to_string(), |i| format!("GPU{i}"));
            let bar1 = index.and_then(|i| match pci::bars(host, &gpus[i]) {
                Ok(bars) => bars.as_deref().and_then(pci::bar1).map(|b| b.size),
                Err(e) => {
                    notes.push(format!("BAR1 of {address} not read: {e}"));
                    None
                }
            });
            map.gpus.insert(uuid.clone(), (label, address, bar1));
        }
        map
    }

    /// Label, PCI address and BAR1 size of a GPU.
    pub fn get(&self, uuid: &str) -> Option<(&str, PciAddress, Option<u64>)> {
        self.gpus.get(uuid).map(|(l, a, b)| (l.as_str(), *a, *b))
    }

    #[cfg(test)]
    pub(crate) fn insert(
        &mut self,
        uuid: &str,
        label: &str,
        address: PciAddress,
        bar1: Option<u64>,
    ) {
        self.gpus
            .insert(uuid.to_owned(), (label.to_owned(), address, bar1));
    }
}

/// DMA device name (PCI address) -> RDMA device names.
pub fn nic_names(host: &Host, notes: &mut Vec<String>) -> BTreeMap<String, String> {
    match rdma::devices(host) {
        Ok(devs) => devs
            .into_iter()
            .filter_map(|d| Some((d.pci?.address.to_string(), d.name)))
            .collect(),
        Err(e) => {
            notes.push(format!(
                "RDMA devices not read (NICs shown as DMA devices): {e}"
            ));
            BTreeMap::new()
        }
    }
}

/// Groups `records` by (process, cgroup, GPU), and the GPUs, biggest first.
pub fn build(
    module: &str,
    records: Vec<Record>,
    totals: &[GpuTotals],
    gpus: &GpuMap,
    nics: &BTreeMap<String, String>,
    mut notes: Vec<String>,
) -> Who {
    type Key = (Option<u32>, String, String, Option<String>);
    let mut groups: BTreeMap<Key, (Holder, BTreeSet<u64>)> = BTreeMap::new();
    // Per GPU from the records: registrations, and each pin's bytes once.
    let mut per_gpu: BTreeMap<String, (u64, BTreeMap<u64, u64>)> = BTreeMap::new();
    for r in &records {
        let key = (r.tgid, r.comm.clone(), r.cgroup.clone(), r.gpu.clone());
        let (h, pins) = groups.entry(key).or_insert_with(|| {
            (
                Holder {
                    tgid: r.tgid,
                    comm: r.comm.clone(),
                    cgroup: r.cgroup.clone(),
                    gpu: r.gpu.clone(),
                    gpu_label: r
                        .gpu
                        .as_deref()
                        .and_then(|u| gpus.get(u))
                        .map(|(l, _, _)| l.to_owned()),
                    registrations: 0,
                    bytes: 0,
                    pinned_bytes: 0,
                    nics: Vec::new(),
                    oldest_age_ms: 0,
                },
                BTreeSet::new(),
            )
        });
        h.registrations += 1;
        h.bytes = h.bytes.saturating_add(r.bytes);
        h.oldest_age_ms = h.oldest_age_ms.max(r.age_ms);
        if let (Some(pin), Some(b)) = (r.pin, r.pin_bytes) {
            if pins.insert(pin) {
                h.pinned_bytes = h.pinned_bytes.saturating_add(b);
            }
        }
        if let Some(nic) = &r.nic {
            let name = nics.get(nic).cloned().unwrap_or_else(|| nic.clone());
            if !h.nics.contains(&name) {
                h.nics.push(name);
            }
        }
        if let Some(g) = &r.gpu {
            let (n, pins) = per_gpu.entry(g.clone()).or_default();
            *n += 1;
            if let (Some(pin), Some(b)) = (r.pin, r.pin_bytes) {
                pins.insert(pin, b);
            }
        }
    }
    let mut holders: Vec<Holder> = groups.into_values().map(|(h, _)| h).collect();
    holders.sort_by(|a, b| {
        b.pinned_bytes
            .cmp(&a.pinned_bytes)
            .then(b.bytes.cmp(&a.bytes))
    });

    let mut uuids: BTreeSet<String> = per_gpu.keys().cloned().collect();
    uuids.extend(totals.iter().map(|t| t.uuid.clone()));
    let mut unmapped = Vec::new();
    let mut gpu_uses: Vec<GpuUse> = uuids
        .into_iter()
        .map(|uuid| {
            let from_records = per_gpu.get(&uuid);
            let total = totals.iter().find(|t| t.uuid == uuid);
            let (pinned_bytes, pins, registrations) = match (total, from_records) {
                (Some(t), _) => (t.pinned_bytes, t.pins, t.registrations),
                (None, Some((n, pins))) => (pins.values().sum(), pins.len() as u64, *n),
                (None, None) => (0, 0, 0),
            };
            let known = gpus.get(&uuid);
            if known.is_none() {
                unmapped.push(uuid.clone());
            }
            GpuUse {
                label: known.map(|(l, _, _)| l.to_owned()),
                address: known.map(|(_, a, _)| a),
                bar1_bytes: known.and_then(|(_, _, b)| b),
                uuid,
                pinned_bytes,
                pins,
                registrations,
            }
        })
        .collect();
    gpu_uses.sort_by(|a, b| a.address.cmp(&b.address).then(a.uuid.cmp(&b.uuid)));
    if !unmapped.is_empty() {
        notes.push(format!(
            "not in /proc/driver/nvidia/gpus (no BAR1 size): {}",
            unmapped.join(", ")
        ));
    }
    Who {
        schema: SCHEMA,
        module: Some(module.to_owned()),
        registrations: records.len(),
        holders,
        gpus: gpu_uses,
        records,
        notes,
    }
}

/// Why `who` shows nothing on a host without a peer-memory module (a dma-buf host).
pub const NOTHING_LOADED: &str =
    "nothing held: no peer-memory module loaded (neither nvidia_peermem nor nv_peer_mem)";

/// Reads everything `who` shows for our loaded module. No peer-memory module loaded: nothing is
/// held, an empty `Who` saying why. Another's module loaded: [`RecordsError::NotOurs`] (it may
/// hold pins `who` cannot list).
pub fn gather(host: &Host) -> Result<Who, RecordsError> {
    let loaded = peermem::loaded_modules(host)?;
    let Some(ours) = loaded
        .iter()
        .find(|m| m.implementation == Implementation::Nvpeer)
    else {
        return match loaded.first() {
            None => Ok(Who {
                schema: SCHEMA,
                module: None,
                registrations: 0,
                holders: Vec::new(),
                gpus: Vec::new(),
                records: Vec::new(),
                notes: vec![NOTHING_LOADED.to_owned()],
            }),
            Some(m) => Err(RecordsError::NotOurs {
                name: m.name.clone(),
                what: m.implementation.describe(),
            }),
        };
    };
    let module = ours.name.clone();
    let records = records::read(host, &module)?;
    let (totals, mut notes) = records::gpu_totals(host, &module);
    let gpus = GpuMap::read(host, &mut notes);
    let nics = nic_names(host, &mut notes);
    Ok(build(&module, records, &totals, &gpus, &nics, notes))
}

/// Control characters (the module escapes them; unescaped they could end a log line or move a
/// terminal's cursor) as `?`.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `python3[4242]`, or `python3[exited]`.
pub fn process(tgid: Option<u32>, comm: &str) -> String {
    let comm = printable(comm);
    match tgid {
        Some(t) => format!("{comm}[{t}]"),
        None => format!("{comm}[exited]"),
    }
}

/// One line naming the holders, biggest first, for a drain reason or a log line:
/// `python3[4242] in /slurm/job_1234/step_0: 2 registrations, 4.0 MiB; +1 more`. Holders of
/// several GPUs are named once. `limit` holders at most.
pub fn brief(who: &Who, limit: usize) -> String {
    let mut merged: Vec<(String, String, u64, u64)> = Vec::new();
    for h in &who.holders {
        let p = process(h.tgid, &h.comm);
        match merged
            .iter_mut()
            .find(|m| m.0 == p && m.1 == printable(&h.cgroup))
        {
            Some(m) => {
                m.2 += h.registrations;
                m.3 += h.pinned_bytes;
            }
            None => merged.push((p, printable(&h.cgroup), h.registrations, h.pinned_bytes)),
        }
    }
    if merged.is_empty() {
        return match who.module {
            Some(_) => "no registrations".to_owned(),
            None => "no registrations: no peer-memory module loaded".to_owned(),
        };
    }
    // A holder of several GPUs sums their bytes: sorted again (stable: ties keep who's order).
    merged.sort_by_key(|m| std::cmp::Reverse(m.3));
    let mut parts: Vec<String> = merged
        .iter()
        .take(limit)
        .map(|(p, cg, n, b)| {
            let regs = if *n == 1 {
                "registration"
            } else {
                "registrations"
            };
            format!("{p} in {cg}: {n} {regs}, {}", human_bytes(*b))
        })
        .collect();
    if merged.len() > limit {
        parts.push(format!("+{} more", merged.len() - limit));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const U0: &str = "GPU-00000000-0000-0000-0000-000000000000";
    const U1: &str = "GPU-11111111-1111-1111-1111-111111111111";

    fn rec(
        id: u64,
        tgid: u32,
        comm: &str,
        cg: &str,
        gpu: &str,
        pin: u64,
        pin_bytes: u64,
    ) -> Record {
        Record {
            id,
            tgid: Some(tgid),
            comm: comm.into(),
            cgroup: cg.into(),
            gpu: Some(gpu.into()),
            va: Some(0x7f00_0000_0000 + (pin << 24)),
            bytes: pin_bytes,
            client: "nv_mem".into(),
            nic: Some("0000:04:00.0".into()),
            state: "mapped".into(),
            age_ms: id * 10,
            pin: Some(pin),
            pin_bytes: Some(pin_bytes),
            shares: Some(1),
        }
    }

    #[test]
    fn groups_by_process_cgroup_and_gpu_and_counts_shared_pins_once() {
        let records = vec![
            rec(1, 100, "train", "/job/1", U0, 7, 2 << 20),
            rec(2, 100, "train", "/job/1", U0, 7, 2 << 20), // second NIC on the same pin
            rec(3, 100, "train", "/job/1", U1, 8, 1 << 20),
            rec(4, 200, "serve", "/job/2", U0, 9, 4 << 20),
        ];
        let mut gpus = GpuMap::default();
        gpus.insert(U0, "GPU0", "0000:03:00.0".parse().unwrap(), Some(256 << 20));
        let nics = BTreeMap::from([("0000:04:00.0".to_owned(), "mlx5_0".to_owned())]);
        let who = build("nvidia_peermem", records, &[], &gpus, &nics, vec![]);
        assert_eq!(who.registrations, 4);
        assert_eq!(who.holders.len(), 3);
        let serve = &who.holders[0];
        assert_eq!(
            (serve.comm.as_str(), serve.pinned_bytes),
            ("serve", 4 << 20)
        );
        let train0 = who
            .holders
            .iter()
            .find(|h| h.comm == "train" && h.gpu.as_deref() == Some(U0))
            .unwrap();
        assert_eq!(
            (train0.registrations, train0.bytes, train0.pinned_bytes),
            (2, 4 << 20, 2 << 20)
        );
        assert_eq!(train0.nics, vec!["mlx5_0"]);
        assert_eq!(train0.gpu_label.as_deref(), Some("GPU0"));
        let g0 = who.gpus.iter().find(|g| g.uuid == U0).unwrap();
        assert_eq!(
            (g0.pinned_bytes, g0.pins, g0.registrations),
            (6 << 20, 2, 3)
        );
        assert_eq!(g0.bar1_bytes, Some(256 << 20));
        let g1 = who.gpus.iter().find(|g| g.uuid == U1).unwrap();
        assert_eq!((g1.label.as_deref(), g1.bar1_bytes), (None, None));
        assert!(who.notes.iter().any(|n| n.contains(U1)), "{:?}", who.notes);
        // The module's own per-GPU total wins over the sum of the records.
        let totals = [GpuTotals {
            uuid: U0.into(),
            pinned_bytes: 8 << 20,
            pins: 3,
            registrations: 5,
        }];
        let who = build("nvidia_peermem", vec![], &totals, &gpus, &nics, vec![]);
        assert_eq!(who.gpus[0].pinned_bytes, 8 << 20);
        assert_eq!(brief(&who, 3), "no registrations");
    }

    /// `who` of these records alone (no totals, GPU map or NIC names).
    fn who_of(records: Vec<Record>) -> Who {
        build(
            "m",
            records,
            &[],
            &GpuMap::default(),
            &BTreeMap::new(),
            vec![],
        )
    }

    #[test]
    fn brief_names_the_biggest_holders() {
        let records = vec![
            rec(1, 100, "train", "/job/1", U0, 7, 2 << 20),
            rec(2, 100, "train", "/job/1", U1, 8, 2 << 20),
            rec(3, 200, "serve", "/job/2", U0, 9, 1 << 20),
            rec(4, 300, "x\u{1b}y", "/job/\n3", U0, 10, 1 << 16),
        ];
        let who = who_of(records);
        let line = brief(&who, 2);
        assert!(
            line.starts_with("train[100] in /job/1: 2 registrations, 4 MiB; serve[200] in /job/2: 1 registration"),
            "{line}"
        );
        assert!(line.ends_with("; +1 more"), "{line}");
        assert!(brief(&who, 5).ends_with("x?y[300] in /job/?3: 1 registration, 64 KiB"));
        assert_eq!(process(Some(300), "x\u{1b}y"), "x?y[300]");
        assert_eq!(process(None, "a"), "a[exited]");
    }

    /// Review: a holder of several GPUs, each smaller than another holder's one GPU, is the
    /// biggest once merged, and `--brief` names it first.
    #[test]
    fn brief_sorts_merged_holders_by_their_sum() {
        let records = vec![
            rec(1, 100, "one", "/job/1", U0, 7, 3 << 20),
            rec(2, 200, "two", "/job/2", U0, 8, 2 << 20),
            rec(3, 200, "two", "/job/2", U1, 9, 2 << 20),
        ];
        let who = who_of(records);
        assert_eq!(
            brief(&who, 1),
            "two[200] in /job/2: 2 registrations, 4 MiB; +1 more"
        );
    }
}
