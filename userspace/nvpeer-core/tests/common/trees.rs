// SPDX-License-Identifier: MIT OR Apache-2.0
//! The fixture trees as hosts, and copies of them to change (integration tests of nvpeer-core).

use std::fs;
use std::path::{Path, PathBuf};

use nvpeer_core::check::{self, Inputs};
use nvpeer_core::host::topo;
use nvpeer_core::host::Host;

use super::fixtures;

pub fn host(name: &str) -> Host {
    let dir = fixtures().join(name);
    Host::new(dir.join("sys"), dir.join("proc"))
}

/// The first GPU's `/proc/driver/nvidia/gpus/*/information` under procfs root `proc`.
pub fn first_information(proc: &Path) -> PathBuf {
    fs::read_dir(proc.join("driver/nvidia/gpus"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("information")
}

/// `host` is "ready (dma-buf)", with what the verdict assumed starting with `assumed`. With
/// `NCCL_NET_GDR_LEVEL=PHB`, so that NCCL's distance rule uses a pair through the CPU too.
pub fn ready_assuming(host: &Host, assumed: &str) {
    let mut inputs = Inputs::fixture();
    inputs.env.insert("NCCL_NET_GDR_LEVEL".into(), "PHB".into());
    let report = check::run(host, &inputs, &check::Options::default());
    assert_eq!(report.verdict.text, "ready (dma-buf)");
    assert!(
        report
            .verdict
            .not_probed
            .iter()
            .any(|n| n.starts_with(assumed)),
        "{assumed}: {:?}",
        report.verdict.not_probed
    );
}

/// A copy of a fixture (symlinks as symlinks) in a temporary directory, to be changed.
pub fn fixture_copy(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
    copy_tree(&fixtures().join(name).join("sys"), &sys);
    copy_tree(&fixtures().join(name).join("proc"), &proc);
    (dir, sys, proc)
}

/// Copies a fixture's sys tree (symlinks as symlinks) into `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path()).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `GPU NIC CLASS` lines of a fixture's expected-matrix.
fn expected_matrix(name: &str) -> Vec<(String, String, String)> {
    let text = fs::read_to_string(fixtures().join(name).join("expected-matrix")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect()
}

/// `topo` of fixture `name` gives exactly its expected-matrix; returns the topology.
pub fn assert_matrix(name: &str) -> topo::Topology {
    let t = topo::discover(&host(name)).unwrap();
    let expected = expected_matrix(name);
    assert!(!expected.is_empty(), "{name} has no expected matrix");
    assert_eq!(t.links.len(), expected.len(), "{name}: {:?}", t.links);
    for (gpu, nic, class) in expected {
        let got = t
            .class(&gpu, &nic)
            .unwrap_or_else(|| panic!("{name}: no link {gpu}-{nic}"));
        assert_eq!(got.label(), class, "{name}: {gpu}-{nic}");
    }
    t
}
