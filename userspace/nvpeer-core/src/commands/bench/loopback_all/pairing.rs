// SPDX-License-Identifier: MIT OR Apache-2.0
//! Which GPU goes with which RDMA device: each GPU with its nearest NIC (spread over equally
//! near ones), or every RDMA device once with host memory; and CUDA's ordinal of a GPU.

use serde::Serialize;

use crate::commands::bench::mem::MemKind;
use crate::commands::bench::BenchError;
use crate::host::pci::PciAddress;
use crate::host::rdma::RdmaDevice;
use crate::host::topo::{self, PathClass, Topology};
use crate::host::Host;

/// The GPU of a pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PairGpu {
    /// Position in PCI address order (`GPU0` is 0): nvidia-smi's index.
    pub index: usize,
    pub label: String,
    pub pci_bus_id: PciAddress,
}

/// One GPU (or host memory) with one RDMA device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// `None`: host (or sim) memory.
    pub gpu: Option<PairGpu>,
    /// `None`: a GPU without any RDMA device that has a PCI function (nothing to pair with).
    pub nic: Option<String>,
    /// The GPU-NIC path class (`nvidia-smi topo -m`); `None` for host memory.
    pub class: Option<PathClass>,
}

impl Pair {
    /// `GPU 0 (0000:17:00.0) - mlx5_0`, `host memory - rxe0`.
    pub fn name(&self, mem: MemKind) -> String {
        let left = match &self.gpu {
            Some(g) => format!("GPU {} ({})", g.index, g.pci_bus_id),
            None if mem == MemKind::Sim => "sim memory".to_owned(),
            None => "host memory".to_owned(),
        };
        format!("{left} - {}", self.nic.as_deref().unwrap_or("(no NIC)"))
    }
}

/// Each GPU with its nearest NIC. Where several NICs are equally near, the one given to the
/// fewest GPUs so far is taken (the first in name order on a tie), so that GPUs sharing a
/// switch with two NICs are spread over both, as NCCL's rings are. A GPU with no NIC that has
/// a PCI function gets a pair without a NIC (it cannot be measured).
pub fn gpu_pairs(t: &Topology) -> Vec<Pair> {
    let mut used: Vec<(String, usize)> = Vec::new();
    let mut pairs = Vec::new();
    for (index, gpu) in t.gpus.iter().enumerate() {
        let nearest = t.nearest.iter().find(|n| n.gpu == gpu.label);
        let choice = nearest.and_then(|n| {
            n.nics
                .iter()
                .min_by_key(|nic| {
                    used.iter()
                        .find(|(name, _)| name == *nic)
                        .map_or(0, |(_, c)| *c)
                })
                .map(|nic| (nic.clone(), n.class))
        });
        if let Some((nic, _)) = &choice {
            match used.iter_mut().find(|(name, _)| name == nic) {
                Some((_, c)) => *c += 1,
                None => used.push((nic.clone(), 1)),
            }
        }
        pairs.push(Pair {
            gpu: Some(PairGpu {
                index,
                label: gpu.label.clone(),
                pci_bus_id: gpu.pci.address,
            }),
            class: choice.as_ref().map(|(_, c)| *c),
            nic: choice.map(|(n, _)| n),
        });
    }
    pairs
}

/// Every RDMA device once, with host memory.
pub fn device_pairs(devices: &[RdmaDevice]) -> Vec<Pair> {
    devices
        .iter()
        .map(|d| Pair {
            gpu: None,
            nic: Some(d.name.clone()),
            class: None,
        })
        .collect()
}

/// The CUDA ordinal of the GPU at `addr`, from CUDA's (ordinal, domain, bus, device) list
/// (CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and
/// CUDA_VISIBLE_DEVICES renumbers them: the PCI address is what identifies a GPU).
pub fn match_ordinal(addr: PciAddress, cuda: &[(i32, u32, u8, u8)]) -> Option<i32> {
    cuda.iter()
        .find(|(_, d, b, dev)| *d == addr.domain && *b == addr.bus && *dev == addr.device)
        .map(|(o, ..)| *o)
}

/// The pairs to measure for `mem`: GPUs with their nearest NICs (CUDA memory) or every RDMA
/// device with host memory. Errors when there is nothing to pair.
pub fn plan(host: &Host, mem: MemKind) -> Result<Vec<Pair>, BenchError> {
    let sysfs = |e: crate::Error| BenchError::NoDevice(format!("cannot read sysfs: {e}"));
    if mem == MemKind::Cuda {
        let t = topo::discover(host).map_err(sysfs)?;
        if t.gpus.is_empty() {
            return Err(BenchError::Usage(format!(
                "--loopback-all: no NVIDIA GPU in {} (--mem host or --mem sim pairs every RDMA \
                 device with host memory instead)",
                host.sys_path("bus/pci/devices").display()
            )));
        }
        if t.nics.is_empty() {
            return Err(BenchError::NoDevice(format!(
                "no RDMA device in {}",
                host.sys_path("class/infiniband").display()
            )));
        }
        Ok(gpu_pairs(&t))
    } else {
        let devices = crate::host::rdma::devices(host).map_err(sysfs)?;
        if devices.is_empty() {
            return Err(BenchError::NoDevice(format!(
                "no RDMA device in {}",
                host.sys_path("class/infiniband").display()
            )));
        }
        Ok(device_pairs(&devices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::pci::{PciDevice, PciPath};
    use std::path::Path;

    fn dev(path: &str, numa: i32) -> PciDevice {
        let p = PciPath::parse(Path::new(path)).unwrap();
        PciDevice {
            address: p.address(),
            vendor: 0x10de,
            device: 0x2330,
            class: 0x030200,
            root_complex: p.root_complex.clone(),
            path: p,
            numa_node: Some(numa),
            local_cpulist: None,
            link: None,
            unreadable: Vec::new(),
            unreadable_ids: Vec::new(),
            link_error: None,
        }
    }

    fn nic(name: &str, path: Option<&str>) -> RdmaDevice {
        RdmaDevice {
            name: name.to_owned(),
            driver: None,
            pci: path.map(|p| dev(p, 0)),
            ports: Vec::new(),
            unreadable: Vec::new(),
            unreadable_details: Vec::new(),
        }
    }

    const SW: &str = "devices/pci0000:00/0000:00:01.0/0000:01:00.0";

    #[test]
    fn gpus_sharing_two_equally_near_nics_are_spread() {
        // Four GPUs and two NICs below one switch: every pair is PIX.
        let gpus = (0..4)
            .map(|i| dev(&format!("{SW}/0000:02:0{i}.0/0000:1{i}:00.0"), 0))
            .collect();
        let nics = [
            nic("mlx5_0", Some(&format!("{SW}/0000:02:08.0/0000:20:00.0"))),
            nic("mlx5_1", Some(&format!("{SW}/0000:02:09.0/0000:21:00.0"))),
        ];
        let t = Topology::build(gpus, &nics);
        let got: Vec<_> = gpu_pairs(&t)
            .iter()
            .map(|p| p.nic.clone().unwrap())
            .collect();
        assert_eq!(got, ["mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1"]);
    }

    #[test]
    fn a_gpu_without_a_pci_nic_has_an_empty_pair() {
        let t = Topology::build(
            vec![dev(&format!("{SW}/0000:02:00.0/0000:10:00.0"), 0)],
            &[nic("rxe0", None)],
        );
        let p = gpu_pairs(&t);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].nic, None);
        assert_eq!(p[0].name(MemKind::Cuda), "GPU 0 (0000:10:00.0) - (no NIC)");
    }

    #[test]
    fn host_memory_pairs_every_device_once() {
        let p = device_pairs(&[nic("mlx5_0", Some(SW)), nic("rxe0", None)]);
        let names: Vec<_> = p.iter().map(|x| x.name(MemKind::Host)).collect();
        assert_eq!(names, ["host memory - mlx5_0", "host memory - rxe0"]);
        assert_eq!(p[1].name(MemKind::Sim), "sim memory - rxe0");
        assert!(p.iter().all(|x| x.gpu.is_none() && x.class.is_none()));
    }

    #[test]
    fn ordinals_follow_the_pci_address_not_cuda_order() {
        let addr: PciAddress = "0000:17:00.0".parse().unwrap();
        let cuda = [(0, 0, 0xca, 0), (1, 0, 0x17, 0)];
        assert_eq!(match_ordinal(addr, &cuda), Some(1));
        assert_eq!(match_ordinal("0001:17:00.0".parse().unwrap(), &cuda), None);
    }
}
