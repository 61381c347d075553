// SPDX-License-Identifier: MIT OR Apache-2.0
//! Test fixture for the provenance facts and what acts on them (`check`, `attach`, `detach`):
//! fake kmod tools and a host tree whose module and exporters match.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

use crate::host::modtools::{ModuleTools, ToolError, UnloadError};
use crate::host::Host;

/// Fake kmod tools: modinfo and exports per file name (the path's last component).
#[derive(Default)]
pub(crate) struct FakeTools {
    pub modinfo: BTreeMap<String, Vec<(String, String)>>,
    pub exports: BTreeMap<String, BTreeMap<String, u32>>,
    pub loaded: RefCell<Vec<String>>,
    pub unloaded: RefCell<Vec<String>>,
    pub busy: RefCell<bool>,
}

fn key(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

impl ModuleTools for FakeTools {
    fn modinfo(&self, file: &Path) -> std::result::Result<Vec<(String, String)>, ToolError> {
        self.modinfo
            .get(&key(file))
            .cloned()
            .ok_or(ToolError::Failed {
                command: format!("modinfo -0 {}", file.display()),
                code: 1,
                message: "modinfo: ERROR: could not get modinfo: Exec format error".into(),
            })
    }
    fn exports(&self, file: &Path) -> std::result::Result<BTreeMap<String, u32>, ToolError> {
        self.exports
            .get(&key(file))
            .cloned()
            .ok_or(ToolError::Failed {
                command: format!("modprobe --show-exports {}", file.display()),
                code: 1,
                message: "modprobe: FATAL: could not get symbols".into(),
            })
    }
    fn load(&self, name: &str) -> std::result::Result<(), ToolError> {
        self.loaded.borrow_mut().push(name.to_owned());
        Ok(())
    }
    fn unload(&self, name: &str) -> std::result::Result<(), UnloadError> {
        if *self.busy.borrow() {
            return Err(UnloadError::Busy { name: name.into() });
        }
        self.unloaded.borrow_mut().push(name.to_owned());
        Ok(())
    }
}

pub(crate) const REG: &str = "ib_register_peer_memory_client";
pub(crate) const UNREG: &str = "ib_unregister_peer_memory_client";
pub(crate) const GET: &str = "nvidia_p2p_get_pages";

/// A host: release 7.2.0-test, our module in updates/, ib_uverbs and nvidia installed and
/// loaded with matching srcversions; the tools report CRCs `core_crc` for the core.
pub(crate) struct Tree {
    pub dir: tempfile::TempDir,
    pub tools: FakeTools,
}

impl Tree {
    pub fn host(&self) -> Host {
        Host::new(self.dir.path().join("sys"), self.dir.path().join("proc"))
    }
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    pub fn remove(&self, rel: &str) {
        let p = self.dir.path().join(rel);
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
}

pub(crate) fn ours_modinfo(core_crc: &str) -> Vec<(String, String)> {
    [
        (
            "description",
            "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)",
        ),
        ("vermagic", "7.2.0-test SMP mod_unload modversions"),
        ("nvpeer_import", &format!("{REG} {core_crc} ib_uverbs")),
        ("nvpeer_import", &format!("{UNREG} 0x00000022 ib_uverbs")),
        ("nvpeer_import", &format!("{GET} 0x00000033 nvidia")),
        ("nvpeer_provider", "ib_uverbs 24.10-1.1.4"),
        ("nvpeer_provider", "nvidia 580.159.04"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub(crate) fn tree(core_crc: u32) -> Tree {
    let t = Tree {
        dir: tempfile::tempdir().unwrap(),
        tools: FakeTools::default(),
    };
    t.write("proc/sys/kernel/osrelease", "7.2.0-test\n");
    t.write(
        "lib/modules/7.2.0-test/modules.dep",
        "updates/nvidia_peermem.ko: kernel/ib_uverbs.ko.xz\n\
         kernel/ib_uverbs.ko.xz: kernel/ib_core.ko.xz\nkernel/ib_core.ko.xz:\n\
         updates/dkms/nvidia.ko.zst:\n",
    );
    t.write(
        "proc/kallsyms",
        &format!("0 T {REG}\t[ib_uverbs]\n0 T {UNREG}\t[ib_uverbs]\n0 T {GET}\t[nvidia]\n"),
    );
    for (m, v, s) in [
        ("ib_uverbs", "24.10-1.1.4", "AAA"),
        ("nvidia", "580.159.04", "NNN"),
    ] {
        t.write(&format!("sys/module/{m}/version"), &format!("{v}\n"));
        t.write(&format!("sys/module/{m}/srcversion"), &format!("{s}\n"));
    }
    let mut tools = FakeTools::default();
    tools
        .modinfo
        .insert("nvidia_peermem.ko".into(), ours_modinfo("0x00000011"));
    tools.modinfo.insert(
        "ib_uverbs.ko.xz".into(),
        vec![("srcversion".into(), "AAA".into())],
    );
    tools.modinfo.insert(
        "nvidia.ko.zst".into(),
        vec![("srcversion".into(), "NNN".into())],
    );
    tools.exports.insert(
        "ib_uverbs.ko.xz".into(),
        BTreeMap::from([
            (REG.into(), core_crc),
            (UNREG.into(), 0x22),
            ("other".into(), 1),
        ]),
    );
    tools
        .exports
        .insert("nvidia.ko.zst".into(), BTreeMap::from([(GET.into(), 0x33)]));
    Tree { tools, ..t }
}
