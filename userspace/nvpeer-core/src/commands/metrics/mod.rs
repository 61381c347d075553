// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer stats --format prometheus` and `nvpeer stats --textfile DIR`: the module's counters,
//! MOFED's `memory_peers` counters and the verdict of every `nvpeer check` check in the
//! Prometheus text exposition format (version 0.0.4), for node_exporter's textfile collector.
//!
//! Conventions: one `nvpeer_` prefix, base units (bytes), `_total` on every counter, one
//! `# HELP` and one `# TYPE` line per family, no timestamps, and the label names of the
//! exporters the series are joined with: DCGM's `gpu` (the NVML index, which is PCI order like
//! our `GPU<n>`) and `pci_bus_id` (NVML's `00000000:3B:00.0`), node_exporter's `device` (and
//! `port`) for RDMA devices, as its infiniband collector has them.
//!
//! [`exposition`] is the text format (families, escaping), [`series`] builds every series
//! from a check report and the counters, [`textfile`] writes the result for node_exporter.

pub mod exposition;
pub mod series;
pub mod textfile;

pub use exposition::{escape_label_value, sanitize_name, Exposition, Family, Kind};
pub use series::{collect, nvml_bus_id};
pub use textfile::{write_textfile, TextfileError, TEXTFILE_NAME};

use crate::check::Report;
use crate::commands::stats::Stats;
use crate::error::Error;

/// `collect(...).render()`.
pub fn render(stats: &std::result::Result<Stats, Error>, report: &Report) -> String {
    collect(stats, report).render()
}
