// SPDX-License-Identifier: MIT OR Apache-2.0
//! `bench --loopback-all` on the fixture topologies of tests/fixtures: which GPU is paired
//! with which NIC, which CPUs each pair is pinned to, and the rows and failure lines of a run
//! (the transfers cannot succeed on a fixture: every pair must be named as failed).

use std::fs;
use std::path::{Path, PathBuf};

use nvpeer_core::commands::bench::loopback_all::{self, PairStatus};
use nvpeer_core::commands::bench::mem::MemKind;
use nvpeer_core::commands::bench::{BenchError, BenchOpts, Op};
use nvpeer_core::host::topo::{self, PathClass};
use nvpeer_core::host::Host;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn host(name: &str) -> Host {
    let dir = fixtures().join(name);
    Host::new(dir.join("sys"), dir.join("proc"))
}

/// (GPU label, NIC, class) of each pair of a fixture.
fn pairs(name: &str) -> Vec<(String, String, PathClass)> {
    let t = topo::discover(&host(name)).unwrap();
    loopback_all::gpu_pairs(&t)
        .into_iter()
        .map(|p| {
            (
                p.gpu.unwrap().label,
                p.nic.unwrap_or_default(),
                p.class.unwrap(),
            )
        })
        .collect()
}

fn owned(v: &[(&str, &str, PathClass)]) -> Vec<(String, String, PathClass)> {
    v.iter()
        .map(|(g, n, c)| ((*g).to_owned(), (*n).to_owned(), *c))
        .collect()
}

#[test]
fn each_gpu_gets_its_nearest_nic() {
    assert_eq!(pairs("pix"), owned(&[("GPU0", "mlx5_0", PathClass::Pix)]));
    // Both GPUs beside mlx5_1 on the second switch level; mlx5_0 is PXB away.
    assert_eq!(
        pairs("pxb"),
        owned(&[
            ("GPU0", "mlx5_1", PathClass::Pix),
            ("GPU1", "mlx5_1", PathClass::Pix)
        ])
    );
    assert_eq!(pairs("phb"), owned(&[("GPU0", "mlx5_0", PathClass::Phb)]));
    assert_eq!(pairs("node"), owned(&[("GPU0", "mlx5_0", PathClass::Node)]));
    // Two sockets: each GPU with the NIC of its own socket, never across (SYS).
    assert_eq!(
        pairs("sys"),
        owned(&[
            ("GPU0", "mlx5_0", PathClass::Pix),
            ("GPU1", "mlx5_1", PathClass::Pix)
        ])
    );
    // The flat VM: the passed-through NIC, not the Soft-RoCE device (no PCI function).
    assert_eq!(pairs("vm"), owned(&[("GPU0", "mlx5_0", PathClass::Phb)]));
    assert_eq!(pairs("doca"), owned(&[("GPU0", "mlx5_0", PathClass::Pix)]));
}

#[test]
fn pair_names_carry_the_gpu_index_and_address() {
    let t = topo::discover(&host("sys")).unwrap();
    let names: Vec<String> = loopback_all::gpu_pairs(&t)
        .iter()
        .map(|p| p.name(MemKind::Cuda))
        .collect();
    assert_eq!(names.len(), 2);
    for (i, n) in names.iter().enumerate() {
        let addr = t.gpus[i].pci.address.to_string();
        assert_eq!(n, &format!("GPU {i} ({addr}) - mlx5_{i}"));
    }
}

#[test]
fn host_memory_pairs_every_rdma_device() {
    let p = loopback_all::plan(&host("vm"), MemKind::Host).unwrap();
    let names: Vec<String> = p.iter().map(|x| x.name(MemKind::Host)).collect();
    assert_eq!(names, ["host memory - mlx5_0", "host memory - rxe0"]);
    let p = loopback_all::plan(&host("sys"), MemKind::Sim).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[1].name(MemKind::Sim), "sim memory - mlx5_1");
}

#[test]
fn nothing_to_pair_is_one_clear_error() {
    let empty = tempfile::tempdir().unwrap();
    let h = Host::new(empty.path().join("sys"), empty.path().join("proc"));
    fs::create_dir_all(empty.path().join("sys")).unwrap();
    match loopback_all::plan(&h, MemKind::Cuda) {
        Err(BenchError::Usage(m)) => {
            assert!(
                m.contains("no NVIDIA GPU") && m.contains("--mem host"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    match loopback_all::plan(&h, MemKind::Host) {
        Err(e @ BenchError::NoDevice(_)) => assert!(e.to_string().contains("no RDMA device")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn pinned_to_the_nics_numa_node() {
    let p = loopback_all::pinning(&host("sys"), "mlx5_1").unwrap();
    assert_eq!(p.numa_node, Some(1));
    // No devices/system/node in the fixture: the NIC's local_cpulist.
    assert_eq!(p.cpulist.as_deref(), Some("32-63"));
    assert_eq!(p.cpus, (32..=63).collect::<Vec<_>>());
    assert_eq!(p.note, None);
    // numa_node -1 and a device without a PCI function: not pinned, and said why.
    let vm = host("vm");
    let p = loopback_all::pinning(&vm, "mlx5_0").unwrap();
    assert_eq!((p.numa_node, p.cpulist.as_deref()), (Some(-1), None));
    assert!(p.note.unwrap().contains("NUMA node -1"));
    let p = loopback_all::pinning(&vm, "rxe0").unwrap();
    assert_eq!((p.numa_node, p.cpulist.as_deref()), (None, None));
    assert!(p.note.unwrap().contains("software device"));
}

#[test]
fn the_nodes_cpulist_wins_over_the_devices() {
    let d = tempfile::tempdir().unwrap();
    let sys = d.path().join("sys");
    let dev = sys.join("class/infiniband/mlx5_0/device");
    fs::create_dir_all(&dev).unwrap();
    fs::write(dev.join("numa_node"), "1\n").unwrap();
    fs::write(dev.join("local_cpulist"), "0-63\n").unwrap();
    let node = sys.join("devices/system/node/node1");
    fs::create_dir_all(&node).unwrap();
    fs::write(node.join("cpulist"), "16-31,48-63\n").unwrap();
    let h = Host::new(&sys, d.path().join("proc"));
    let p = loopback_all::pinning(&h, "mlx5_0").unwrap();
    assert_eq!(p.cpulist.as_deref(), Some("16-31,48-63"));
    assert_eq!(p.cpus.len(), 32);
    // A node without CPUs (memory only, CXL): not pinned.
    fs::write(node.join("cpulist"), "\n").unwrap();
    let p = loopback_all::pinning(&h, "mlx5_0").unwrap();
    assert!(p.cpulist.is_none() && p.note.unwrap().contains("lists no CPUs"));
}

fn opts(mem: MemKind) -> BenchOpts {
    use nvpeer_core::commands::bench::cuda_alloc::CudaAlloc;
    use nvpeer_core::commands::bench::engine::SideOpts;
    use nvpeer_core::commands::bench::mem::RegPath;
    use nvpeer_core::commands::bench::Mode;
    BenchOpts {
        mode: Mode::Loopback,
        op: Op::Write,
        sizes: vec![4096],
        iters: 2,
        latency: false,
        validate: false,
        verify_first: 0,
        mem,
        alloc: CudaAlloc::Device,
        reg: RegPath::RegMr,
        gpu: 0,
        side: SideOpts {
            device: None,
            port: 1,
            gid_index: None,
            depth: 16,
            mtu: None,
            qps: 1,
        },
        compare_staged: false,
        duration: None,
        max_size: 8 << 20,
        bidirectional: false,
        rdma_cm: false,
    }
}

#[test]
fn a_run_on_a_fixture_names_every_pair_that_failed() {
    // The fixture's devices are not this machine's: every transfer fails (or, should a device
    // of that name exist, is far below 1e9 Gb/s), so every pair has a row and a failure line.
    let seen = std::cell::RefCell::new(Vec::new());
    let r = loopback_all::run(
        &host("vm"),
        &opts(MemKind::Host),
        &[Op::Write, Op::Read],
        Some(1e9),
        &|i, n, name| seen.borrow_mut().push(format!("{i}/{n} {name}")),
    )
    .unwrap();
    assert_eq!(
        *seen.borrow(),
        ["0/2 host memory - mlx5_0", "1/2 host memory - rxe0"]
    );
    assert_eq!(r.pairs.len(), 2);
    assert_eq!(r.failed, 2);
    assert!(r.pairs.iter().all(|p| p.status != PairStatus::Ok));
    // A line per pair and direction, in order: write, then read.
    let lines = r.failure_lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let expected = [
        ("mlx5_0", "write"),
        ("mlx5_0", "read"),
        ("rxe0", "write"),
        ("rxe0", "read"),
    ];
    for (line, (dev, op)) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(&format!("nvpeer bench: host memory - {dev}: RDMA {op} "))
                && (line.contains(" failed: ") || line.contains(" below --min-gbps 1000000000")),
            "{line}"
        );
    }
    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["schema"], "nvpeer.bench-loopback-all/2");
    assert_eq!(json["ops"], serde_json::json!(["write", "read"]));
    assert_eq!(json["pairs"].as_array().unwrap().len(), 2);
    assert_eq!(json["pairs"][1]["nic"], "rxe0");
    assert_eq!(json["pairs"][0]["numa_node"], -1);
    assert_eq!(json["pairs"][0]["registration"]["path"], "host_memory");
    assert_eq!(json["pairs"][0]["registration"]["api"], "ibv_reg_mr");
    assert_eq!(json["pairs"][0]["directions"][1]["op"], "read");
    // Both directions failed here: not the "writes work, reads fail" class.
    assert_eq!(json["pairs"][0]["known_issue"], serde_json::Value::Null);
    // Nothing moved: the mode got is none, said in the JSON and once per pair in the table.
    assert_eq!(json["pairs"][0]["got"]["mode"], "none");
    let table = r.table();
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("host memory - "))
            .count(),
        6,
        "{table}"
    );
    assert!(
        table.contains("  host memory - rxe0: none (not measured)"),
        "{table}"
    );
    assert!(table.contains("host memory (ibv_reg_mr)"), "{table}");
    assert!(table.contains("NUMA node -1") && table.contains("software device"));
}

#[test]
fn bad_requests_are_usage_errors() {
    let mut o = opts(MemKind::Host);
    o.latency = true;
    assert!(matches!(
        loopback_all::run(&host("vm"), &o, &[Op::Write], None, &|_, _, _| {}),
        Err(BenchError::Usage(_))
    ));
    let o = opts(MemKind::Host);
    assert!(matches!(
        loopback_all::run(&host("vm"), &o, &[Op::Write], Some(-1.0), &|_, _, _| {}),
        Err(BenchError::Usage(_))
    ));
    assert!(matches!(
        loopback_all::run(&host("vm"), &o, &[], None, &|_, _, _| {}),
        Err(BenchError::Usage(_))
    ));
}

#[test]
fn an_unreadable_numa_node_is_a_note_not_an_abort() {
    let d = tempfile::tempdir().unwrap();
    let sys = d.path().join("sys");
    let dev = sys.join("class/infiniband/mlx5_0/device");
    fs::create_dir_all(&dev).unwrap();
    fs::write(dev.join("numa_node"), "zero\n").unwrap();
    let h = Host::new(&sys, d.path().join("proc"));
    assert!(loopback_all::pinning(&h, "mlx5_0").is_err());
    let r = loopback_all::run(&h, &opts(MemKind::Host), &[Op::Write], None, &|_, _, _| {}).unwrap();
    assert_eq!(r.pairs.len(), 1);
    let pin = &r.pairs[0].pinning;
    assert!(pin.cpulist.is_none());
    assert!(
        pin.note.as_deref().unwrap().starts_with("mlx5_0: ")
            && pin.note.as_deref().unwrap().ends_with(": not pinned"),
        "{pin:?}"
    );
    // The transfer itself cannot run here: a failed pair, exit 1 in the CLI.
    assert_eq!(r.failed, 1);
}
