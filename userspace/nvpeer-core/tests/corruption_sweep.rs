//! The corruption sweep (issue 46, "unknown, never wrong"): every file and link of a fixture
//! tree, each in turn, made empty, binary junk, a huge number, missing, a dangling link and a
//! looping link. No run may panic, and every verdict must be the fixture's own, or `unknown`
//! naming the file, or (a ready host) still ready with a row `unknown` naming the file (a
//! path it could not judge, e.g. dma-buf without the driver's `version`): a malformed fact
//! that flips "ready" to "not ready" fails here. Nor may a device or a pair be lost, unless the
//! file is what makes it one (its `vendor`, `device` or `class`, or its own entry), and then
//! only with the verdict `unknown` naming the file.
//!
//! One corruption is no corruption: a device's own entry (`bus/pci/devices/<function>`,
//! `class/infiniband/<name>`) missing is how the kernel says the device is gone, and the
//! verdict rightly changes then.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nvpeer_core::check::{self, Inputs, Options};
use nvpeer_core::host::Host;

mod common;
use common::fixtures;
use common::trees::copy_tree;

/// The fixtures swept: every ready host of the acceptance list, and hosts not ready for
/// different reasons (the verdict of those must not change either).
const SWEPT: [&str; 9] = [
    "inbox-dmabuf",
    "doca",
    "gh200",
    "gb300",
    "topo-refused",
    "pix",
    "degraded-link",
    "port-down",
    "degraded-upstream",
];

#[derive(Clone, Copy, Debug)]
enum Corruption {
    Empty,
    BinaryJunk,
    HugeNumber,
    Missing,
    DanglingLink,
    LoopingLink,
}

const ALL: [Corruption; 6] = [
    Corruption::Empty,
    Corruption::BinaryJunk,
    Corruption::HugeNumber,
    Corruption::Missing,
    Corruption::DanglingLink,
    Corruption::LoopingLink,
];

/// Every file and link below `dir` (not the directories themselves), relative to `base`.
fn files(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files(base, &entry.path(), out);
        } else {
            out.push(entry.path().strip_prefix(base).unwrap().to_owned());
        }
    }
}

fn remove(path: &Path) {
    let meta = fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        fs::remove_dir_all(path).unwrap();
    } else {
        fs::remove_file(path).unwrap();
    }
}

/// Puts `c` in place of `path`.
fn corrupt(path: &Path, c: Corruption) {
    remove(path);
    match c {
        Corruption::Empty => fs::write(path, b"").unwrap(),
        Corruption::BinaryJunk => {
            fs::write(path, b"\x00\xff\xfe\x1b[31m\x80\x81junk\x07\n").unwrap()
        }
        Corruption::HugeNumber => fs::write(path, b"99999999999999999999999\n").unwrap(),
        Corruption::Missing => {}
        Corruption::DanglingLink => symlink("no-such-target", path).unwrap(),
        Corruption::LoopingLink => symlink(path.file_name().unwrap(), path).unwrap(),
    }
}

/// The verdict of `check` on the tree at `root` (no live probe, no environment).
fn report(root: &Path) -> check::Report {
    let host = Host::new(root.join("sys"), root.join("proc"));
    check::run(&host, &Inputs::fixture(), &Options::default())
}

/// The file's own name: how a message names it whichever path (a link in `bus/pci/devices`,
/// `class/infiniband/<name>/device` or the device directory) it was read through.
fn short_name(rel: &Path) -> String {
    rel.file_name().unwrap().to_string_lossy().into_owned()
}

/// The GPUs, RDMA devices and pairs `check` found.
fn devices(r: &check::Report) -> (usize, usize, usize) {
    (
        r.facts.gpus.len(),
        r.facts.rdma_devices.len(),
        r.pairs.len(),
    )
}

/// A file that makes its function a GPU or a NIC (or not): losing it may lose the device.
fn is_identity(rel: &Path) -> bool {
    matches!(short_name(rel).as_str(), "vendor" | "device" | "class") || is_device_entry(rel)
}

/// A device's own entry, whose absence is the device gone.
fn is_device_entry(rel: &Path) -> bool {
    let parent = rel.parent().unwrap_or(Path::new(""));
    parent == Path::new("sys/bus/pci/devices") || parent == Path::new("sys/class/infiniband")
}

fn sweep(name: &str) -> Vec<String> {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join(name);
    copy_tree(&fixtures().join(name), &root);
    let first = report(&root);
    let (before, found) = (first.verdict.clone(), devices(&first));
    let mut all = Vec::new();
    files(&root, &root.join("sys"), &mut all);
    files(&root, &root.join("proc"), &mut all);
    let mut wrong = Vec::new();
    for rel in &all {
        let path = root.join(rel);
        let saved = work.path().join("saved");
        // Keep the original (a file or a link) to put it back after each corruption.
        fs::rename(&path, &saved).unwrap();
        for c in ALL {
            if fs::symlink_metadata(&path).is_ok() {
                remove(&path);
            }
            // `corrupt` removes what is there: give it something to remove.
            fs::write(&path, b"").unwrap();
            corrupt(&path, c);
            let r = report(&root);
            let after = &r.verdict;
            let file = short_name(rel);
            let unknown_verdict = after.unknown && after.text.contains(&file);
            let still_ready_said = before.ready
                && after.ready
                && r.checks.iter().any(|row| {
                    row.status == check::Status::Unknown
                        && row.applies
                        && row.detail.contains(&file)
                });
            // A degraded pair stays degraded and named when one of its links' files is lost:
            // the verdict then names the link that is still known.
            let pair_of = |t: &str| t.split(": ").nth(1).map(str::to_owned);
            let same_degraded_pair =
                before.degraded && after.degraded && pair_of(&before.text) == pair_of(&after.text);
            let gone = matches!(c, Corruption::Missing) && is_device_entry(rel);
            let lost = devices(&r) != found && !gone && !(is_identity(rel) && unknown_verdict);
            if lost {
                wrong.push(format!(
                    "{name}: {} {c:?}: GPUs, RDMA devices, pairs {found:?} became {:?}",
                    rel.display(),
                    devices(&r)
                ));
            }
            if after.text != before.text
                && !unknown_verdict
                && !still_ready_said
                && !same_degraded_pair
                && !gone
            {
                wrong.push(format!(
                    "{name}: {} {c:?}: {:?} became {:?}",
                    rel.display(),
                    before.text,
                    after.text
                ));
            }
        }
        if fs::symlink_metadata(&path).is_ok() {
            remove(&path);
        }
        fs::rename(&saved, &path).unwrap();
    }
    wrong
}

#[test]
fn no_corrupted_fact_gives_a_wrong_verdict() {
    let mut wrong = Vec::new();
    for name in SWEPT {
        wrong.extend(sweep(name));
    }
    assert!(
        wrong.is_empty(),
        "{} corruptions gave a wrong verdict:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
