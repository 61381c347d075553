//! Logic of the `nvpeer` companion CLI: host readiness checks for GPUDirect RDMA through the
//! nvpeer peer-memory module, the GPU-NIC topology, and the module's statistics. Everything
//! reads the host through [`host::Host`], whose sysfs and procfs roots are parameters, so tests
//! run against fixture trees; the binary only parses arguments and prints.

pub mod attach;
pub mod bench;
pub mod check;
pub mod clock;
pub mod detach;
pub mod error;
pub mod hexid;
pub mod host;
pub mod kernel;
pub mod limits;
pub mod metrics;
pub mod modprobe;
pub mod modtools;
pub mod nccl;
pub mod nccl_log;
pub mod nvidia_proc;
pub mod pci;
pub mod peermem;
pub mod provenance;
pub mod providers;
pub mod rdma;
pub mod records;
pub mod render;
pub mod selftest;
pub mod stats;
pub mod topo;
pub mod verbs;
pub mod who;

pub use error::{Error, Result};
