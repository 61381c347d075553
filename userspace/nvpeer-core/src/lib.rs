//! Logic of the `nvpeer` companion CLI: host readiness checks for GPUDirect RDMA through the
//! nvpeer peer-memory module. Everything reads the host through [`host::Host`], whose sysfs and
//! procfs roots are parameters, so tests run against fixture trees.

pub mod check;
pub mod error;
pub mod host;
pub mod peermem;
pub mod stats;

pub use error::{Error, Result};
