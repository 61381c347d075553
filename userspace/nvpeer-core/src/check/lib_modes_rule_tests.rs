// SPDX-License-Identifier: MIT OR Apache-2.0
//! UCX's, NVSHMEM's and libfabric EFA's modes (`modes` row, each pair's `modes`) on hand-made
//! [`Facts`].

use super::job_rule_tests::gin;
use super::modes_rule_tests::{mode, row, verb_version};
use super::path_rule_tests::{dmabuf_facts, efa_facts, proc_580};
use super::rule_tests::ready_facts;
use super::*;
use crate::host::verbs::DmabufProbe;

/// `f` with `settings` (name, value, config file or `None` for the environment) and `installed`
/// (library, release).
fn with(
    mut f: Facts,
    settings: &[(&str, &str, Option<&str>)],
    installed: &[(&str, &str)],
) -> Facts {
    let l = f.libraries.get_or_insert_with(LibraryFacts::default);
    for (name, value, file) in settings {
        l.settings.insert(
            (*name).to_owned(),
            LibrarySetting {
                value: (*value).to_owned(),
                file: file.map(str::to_owned),
            },
        );
    }
    for (library, version) in installed {
        l.installed.push(InstalledLibrary {
            library: (*library).to_owned(),
            version: (*version).to_owned(),
            path: format!("/usr/lib/{library}"),
        });
    }
    f
}

#[test]
fn ucx_mode_follows_its_settings_and_the_pair_paths() {
    let r = report(dmabuf_facts(), &Options::default());
    let m = mode(&r, "ucx");
    assert_eq!(m.mode, "IB, GDR, dma-buf");
    assert!(
        m.decided_by.starts_with(
            "UCX_CUDA_COPY_DMABUF unset (default try): UCX registers GPU memory as dma-buf"
        ) && m.decided_by.contains("UCX not found installed"),
        "{m:?}"
    );
    assert_eq!(row(&r).status, Status::Ok, "{:?}", row(&r));

    // ucx.conf turning GPUDirect RDMA off: staged, a warning naming the file and the cost.
    let f = with(
        dmabuf_facts(),
        &[("UCX_IB_GPU_DIRECT_RDMA", "no", Some("/etc/ucx/ucx.conf"))],
        &[("ucx", "1.18.0")],
    );
    let r = report(f, &Options::default());
    let m = mode(&r, "ucx");
    assert_eq!(m.mode, "IB, staged");
    assert_eq!(
        m.decided_by,
        "UCX_IB_GPU_DIRECT_RDMA=no (set to \"no\" in /etc/ucx/ucx.conf); UCX 1.18.0"
    );
    let c = row(&r);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail.contains("degraded: ucx IB, staged on GPU0-")
            && c.detail.contains("copied through host memory"),
        "{}",
        c.detail
    );

    // No IB transport in UCX_TLS.
    let f = with(dmabuf_facts(), &[("UCX_TLS", "tcp,cuda_copy", None)], &[]);
    let m = mode(&report(f, &Options::default()), "ucx").clone();
    assert_eq!(m.mode, "no IB transport, staged");
    assert!(m
        .decided_by
        .starts_with("UCX_TLS=tcp,cuda_copy (set to \"tcp,cuda_copy\")"));
    let f = with(dmabuf_facts(), &[("UCX_TLS", "^rc,dc_x,ud_v", None)], &[]);
    assert_eq!(
        mode(&report(f, &Options::default()), "ucx").mode,
        "no IB transport, staged"
    );
    let f = with(dmabuf_facts(), &[("UCX_TLS", "^tcp", None)], &[]);
    assert_eq!(
        mode(&report(f, &Options::default()), "ucx").mode,
        "IB, GDR, dma-buf"
    );

    // Both paths, dma-buf off in UCX: peer memory through UCX's own test.
    let f = with(ready_facts(), &[("UCX_CUDA_COPY_DMABUF", "no", None)], &[]);
    let m = mode(&report(f, &Options::default()), "ucx").clone();
    assert_eq!(m.mode, "IB, GDR, peer memory");
    assert!(m.decided_by.starts_with("UCX_CUDA_COPY_DMABUF=no"), "{m:?}");
    // A UCX too old for dma-buf on the dma-buf-only host: staged.
    let f = with(dmabuf_facts(), &[], &[("ucx", "1.12.1")]);
    let r = report(f, &Options::default());
    assert_eq!(mode(&r, "ucx").mode, "IB, staged");
    assert_eq!(row(&r).status, Status::Warn);
}

#[test]
fn ucx_gives_no_mode_on_efa_and_reads_old_facts() {
    let r = report(
        efa_facts(true, DmabufProbe::Unsupported { errno: 95 }),
        &Options::default(),
    );
    assert!(r.pairs[0].modes.iter().all(|m| m.library != "ucx"));
    // Facts of an nvpeer before the library settings: UCX's own field, and it says so.
    let mut f = dmabuf_facts();
    f.libraries = None;
    f.ucx_gpu_direct_rdma = Some(false);
    let r = report(f, &Options::default());
    let m = mode(&r, "ucx");
    assert_eq!(m.mode, "IB, staged");
    assert!(
        m.decided_by
            .contains("not recorded (facts of an older nvpeer"),
        "{m:?}"
    );
    // Nothing says UCX is used there: no warning.
    assert_eq!(row(&r).status, Status::Ok, "{:?}", row(&r));
}

#[test]
fn nvshmem_proxy_by_default_ibgda_falls_back_to_cpu_assisted() {
    let r = report(dmabuf_facts(), &Options::default());
    let m = mode(&r, "nvshmem");
    assert_eq!(m.mode, "proxy (IBRC)");
    assert!(m
        .decided_by
        .starts_with("NVSHMEM_IB_ENABLE_IBGDA unset (default 0)"));
    assert_eq!(row(&r).status, Status::Ok);

    // IBGDA asked, no PeerMappingOverride, NVSHMEM 3.4.5: CPU-assisted, a warning.
    let ibgda = [("NVSHMEM_IB_ENABLE_IBGDA", "1", Some("/etc/nvshmem.conf"))];
    let f = with(dmabuf_facts(), &ibgda, &[("nvshmem", "3.4.5")]);
    let r = report(f, &Options::default());
    let m = mode(&r, "nvshmem");
    assert_eq!(m.mode, "IBGDA, CPU-assisted");
    assert!(
        m.decided_by
            .starts_with("NVSHMEM_IB_ENABLE_IBGDA=1 (set to \"1\" in /etc/nvshmem.conf)")
            && m.decided_by
                .contains("NVSHMEM 3.4.5 (3.4.5 and later) falls back"),
        "{m:?}"
    );
    let c = row(&r);
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.detail.contains("nvshmem IBGDA, CPU-assisted on GPU0-")
            && c.detail.contains("busy CPU core")
    );
    // Not a failure under --for gin.
    let f = with(dmabuf_facts(), &ibgda, &[("nvshmem", "3.4.5")]);
    assert_eq!(row(&report(f, &gin())).status, Status::Warn);

    // Before 3.4.5 without GDRCopy: IBGDA fails; a failure only under --for gin.
    let f = with(dmabuf_facts(), &ibgda, &[("nvshmem", "3.3.9")]);
    let r = report(f.clone(), &Options::default());
    assert_eq!(mode(&r, "nvshmem").mode, "none (IBGDA fails)");
    assert_ne!(row(&r).status, Status::Fail);
    assert_eq!(row(&report(f, &gin())).status, Status::Fail);

    // The regkey set: the GPU-side handler.
    let mut f = with(dmabuf_facts(), &ibgda, &[]);
    f.nvidia_proc = Some(proc_580(
        "580.159.04",
        true,
        "RegistryDwords: \"PeerMappingOverride=1\"\n",
    ));
    assert_eq!(
        mode(&report(f, &Options::default()), "nvshmem").mode,
        "IBGDA, GPU-side NIC handler"
    );
    // The GPU-side handler forced without the regkey: fails; the CPU handler forced: degraded.
    let f = with(
        dmabuf_facts(),
        &[
            ("NVSHMEM_IB_ENABLE_IBGDA", "1", None),
            ("NVSHMEM_IBGDA_NIC_HANDLER", "gpu", None),
        ],
        &[],
    );
    let r = report(f, &gin());
    assert_eq!(mode(&r, "nvshmem").mode, "none (IBGDA fails)");
    assert_eq!(row(&r).status, Status::Fail, "{:?}", row(&r));
    let f = with(
        dmabuf_facts(),
        &[
            ("NVSHMEM_IB_ENABLE_IBGDA", "1", None),
            ("NVSHMEM_IBGDA_NIC_HANDLER", "cpu", None),
        ],
        &[],
    );
    let m = mode(&report(f, &Options::default()), "nvshmem").clone();
    assert_eq!(m.mode, "IBGDA, CPU-assisted");
    assert!(m.decided_by.contains("NVSHMEM_IBGDA_NIC_HANDLER=cpu"));
}

#[test]
fn libfabric_efa_mode_dma_buf_peer_memory_or_bounce_buffers() {
    // Not an EFA pair: no libfabric mode.
    let r = report(dmabuf_facts(), &Options::default());
    assert!(r.pairs[0].modes.iter().all(|m| m.library != "libfabric"));

    let r = report(
        efa_facts(true, DmabufProbe::Unsupported { errno: 95 }),
        &Options::default(),
    );
    let m = mode(&r, "libfabric");
    assert_eq!(m.mode, "EFA, peer memory");
    assert!(m.decided_by.contains("through efa_nv_peermem"), "{m:?}");
    assert_eq!(mode(&r, "nvshmem").mode, "proxy (libfabric)");

    let r = report(
        efa_facts(false, DmabufProbe::Supported { errno: 9 }),
        &Options::default(),
    );
    assert_eq!(mode(&r, "libfabric").mode, "EFA, dma-buf");
    // dma-buf off in libfabric, no shim: no path it uses... here dma-buf is the only path.
    let f = with(
        efa_facts(true, DmabufProbe::Supported { errno: 9 }),
        &[("FI_HMEM_CUDA_USE_DMABUF", "0", None)],
        &[("libfabric", "2.1.0amzn3.0")],
    );
    let m = mode(&report(f, &Options::default()), "libfabric").clone();
    assert_eq!(m.mode, "EFA, peer memory");
    assert!(
        m.decided_by
            .starts_with("FI_HMEM_CUDA_USE_DMABUF=0 (set to \"0\")")
            && m.decided_by.contains("libfabric 2.1.0amzn3.0")
    );

    // P2P disabled: bounce buffers, a warning naming the cost.
    let f = with(
        efa_facts(true, DmabufProbe::Unsupported { errno: 95 }),
        &[("FI_HMEM_DISABLE_P2P", "1", None)],
        &[],
    );
    let r = report(f, &Options::default());
    assert_eq!(mode(&r, "libfabric").mode, "EFA, bounce buffers");
    let c = row(&r);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.detail.contains("libfabric EFA, bounce buffers on GPU0-efa_0: every GPU transfer is copied through host bounce buffers"));

    // No path at all: the provider latches onto bounce buffers after its first registration.
    let r = report(
        efa_facts(false, DmabufProbe::Unsupported { errno: 95 }),
        &Options::default(),
    );
    let m = mode(&r, "libfabric");
    assert_eq!(m.mode, "EFA, bounce buffers");
    assert!(m
        .decided_by
        .contains("warns once and copies through host bounce buffers for good"));
}

#[test]
fn facts_of_an_older_nvpeer_load_without_the_library_settings() {
    let f = with(
        dmabuf_facts(),
        &[("UCX_TLS", "rc", Some("/etc/ucx/ucx.conf"))],
        &[("ucx", "1.18.0")],
    );
    // The new facts round-trip.
    let json = serde_json::to_value(&f).unwrap();
    let back: Facts = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back.libraries, f.libraries);
    // Without them: loaded, judged as not recorded.
    let mut json = json;
    json.as_object_mut().unwrap().remove("libraries");
    let back: Facts = serde_json::from_value(json).unwrap();
    assert_eq!(back.libraries, None);
    let r = report(back, &Options::default());
    assert!(mode(&r, "nvshmem")
        .decided_by
        .starts_with("NVSHMEM_IB_ENABLE_IBGDA not recorded (facts of an older nvpeer"));
}

/// UCX and libfabric call `ibv_reg_dmabuf_mr` directly (linked) and NVSHMEM loads it by `dlsym`:
/// the symbol version NCCL asks for (`dlvsym` at `IBVERBS_1.12`) does not decide dma-buf for them.
/// On a dma-buf-only host whose libibverbs exports the verb at another version, or whose facts
/// do not record the version, NCCL is staged or unknown while UCX, NVSHMEM and libfabric EFA
/// register dma-bufs, and say why; any other failing dma-buf condition still decides for them.
#[test]
fn dma_buf_by_the_default_symbol_is_not_judged_by_the_version_nccl_asks_for() {
    let ibgda = [("NVSHMEM_IB_ENABLE_IBGDA", "1", None)];
    for (versioned, nccl) in [
        (Some(false), "net IB, staged"),
        (None, "net IB, unknown (GDR, dma-buf or staged)"),
    ] {
        let state = if versioned.is_some() {
            "(libibverbs exports it, not at IBVERBS_1.12)"
        } else {
            "(libibverbs exports it; these facts, of an older nvpeer, do not record at which version)"
        };
        let f = with(
            verb_version(dmabuf_facts(), versioned),
            &ibgda,
            &[("ucx", "1.18.0"), ("nvshmem", "3.4.5")],
        );
        let r = report(f, &Options::default());
        assert!(r.pairs[0].paths.is_empty(), "{versioned:?}");
        assert_eq!(mode(&r, "nccl").mode, nccl, "{versioned:?}");
        let m = mode(&r, "ucx");
        assert_eq!(m.mode, "IB, GDR, dma-buf", "{versioned:?} {m:?}");
        assert!(
            m.decided_by
                .contains("UCX calls ibv_reg_dmabuf_mr directly, by its default symbol")
                && m.decided_by
                    .contains("the version IBVERBS_1.12 NCCL asks for (dlvsym) does not decide it")
                && m.decided_by.contains(state),
            "{m:?}"
        );
        let m = mode(&r, "nvshmem");
        assert_eq!(m.mode, "IBGDA, CPU-assisted", "{versioned:?} {m:?}");
        assert!(
            m.decided_by.contains(
                "; dma-buf; NVSHMEM loads ibv_reg_dmabuf_mr by dlsym, its default symbol"
            ) && m.decided_by.contains(state),
            "{m:?}"
        );
        // libfabric's EFA provider on an EFA pair that only dma-buf carries.
        let f = verb_version(
            efa_facts(false, DmabufProbe::Supported { errno: 9 }),
            versioned,
        );
        let r = report(f, &Options::default());
        assert!(r.pairs[0].paths.is_empty(), "{versioned:?}");
        let m = mode(&r, "libfabric");
        assert_eq!(m.mode, "EFA, dma-buf", "{versioned:?} {m:?}");
        assert!(
            m.decided_by.contains(
                "the EFA provider calls ibv_reg_dmabuf_mr directly, by its default symbol"
            ) && m.decided_by.contains(state),
            "{m:?}"
        );
        assert_eq!(mode(&r, "nvshmem").mode, "proxy (libfabric)");
    }
    // Recorded at IBVERBS_1.12: the same modes, with no word about the version.
    let r = report(
        verb_version(dmabuf_facts(), Some(true)),
        &Options::default(),
    );
    let m = mode(&r, "ucx");
    assert_eq!(m.mode, "IB, GDR, dma-buf");
    assert!(!m.decided_by.contains("default symbol"), "{m:?}");

    // Another condition fails: it decides for every caller, the version changes nothing.
    let mut f = verb_version(dmabuf_facts(), Some(false));
    if let crate::host::verbs::Verbs::Probed { devices, .. } = &mut f.verbs {
        devices[0].dmabuf = DmabufProbe::Unsupported { errno: 95 };
    }
    let r = report(with(f, &ibgda, &[]), &Options::default());
    assert_eq!(mode(&r, "ucx").mode, "IB, staged");
    assert_eq!(mode(&r, "nvshmem").mode, "none (no GPUDirect RDMA)");
    let mut f = verb_version(dmabuf_facts(), None);
    if let crate::host::verbs::Verbs::Probed { reg_dmabuf_mr, .. } = &mut f.verbs {
        *reg_dmabuf_mr = Some(false);
    }
    assert_eq!(
        mode(&report(f, &Options::default()), "ucx").mode,
        "IB, staged"
    );
    let f = verb_version(
        efa_facts(false, DmabufProbe::Unsupported { errno: 95 }),
        Some(false),
    );
    assert_eq!(
        mode(&report(f, &Options::default()), "libfabric").mode,
        "EFA, bounce buffers"
    );
    // What the platform forbids every path (a GeForce GPU) holds for them too.
    let mut f = verb_version(dmabuf_facts(), Some(false));
    super::job_rule_tests::information(&mut f, "NVIDIA GeForce RTX 4090");
    let r = report(f, &Options::default());
    assert_eq!(
        mode(&r, "ucx").mode,
        "IB, staged",
        "{:?}",
        r.pairs[0].why_not
    );
}

/// GDRCopy uses no verbs: its mode is the same whatever libibverbs' verb and its version.
#[test]
fn gdrcopy_mode_does_not_depend_on_the_verb_or_its_version() {
    let modes: Vec<rules::modes::LibraryMode> = [Some(true), Some(false), None]
        .into_iter()
        .map(|versioned| {
            let mut f = verb_version(dmabuf_facts(), versioned);
            f.gdrcopy = Some(super::job_rule_tests::gdrdrv_ok());
            mode(&report(f, &Options::default()), "gdrcopy").clone()
        })
        .collect();
    assert_eq!(modes[0].mode, "gdrdrv", "{:?}", modes[0]);
    assert!(modes.iter().all(|m| *m == modes[0]), "{modes:?}");
}
