// SPDX-License-Identifier: MIT OR Apache-2.0
//! GDRCopy 2.6's dma-buf mmap backend (`../shared/FIELD.md` U3) on hand-made [`Facts`]: the
//! `gdrcopy_mode` row, gdrdrv not required, `RLIMIT_NOFILE`, `gin_gdrcopy`.

use super::job_rule_tests::{gdrdrv_ok, gin};
use super::path_rule_tests::{dmabuf_facts, proc_580};
use super::*;

/// libgdrapi `lib` installed without gdrdrv, driver `release` (open modules), `nofile` open files.
fn facts(lib: &str, release: &str, nofile: Option<u64>) -> Facts {
    let mut f = dmabuf_facts();
    f.nvidia_proc = Some(proc_580(release, true, ""));
    f.gdrcopy = Some(GdrcopyFacts {
        libraries: vec![GdrapiLibrary {
            path: format!("/usr/lib64/libgdrapi.so.{lib}"),
            version: lib.to_owned(),
        }],
        ..GdrcopyFacts::default()
    });
    f.process
        .get_or_insert_with(ProcessFacts::default)
        .open_files_soft = nofile;
    f
}

fn row<'a>(r: &'a Report, id: &str) -> &'a Check {
    r.get(id)
        .unwrap_or_else(|| panic!("no {id} in {:?}", r.checks))
}

#[test]
fn libgdrapi_2_6_without_gdrdrv_maps_dma_bufs() {
    let r = report(facts("2.6", "610.10", Some(1_048_576)), &Options::default());
    let m = row(&r, "gdrcopy_mode");
    assert_eq!(m.status, Status::Info, "{m:?}");
    assert!(
        m.detail
            .starts_with("mode: dma-buf mmap (libgdrapi 2.6, gdrdrv does not open")
            && m.detail.contains("one file descriptor per pinned buffer")
            && m.detail.contains("RLIMIT_NOFILE soft limit 1048576"),
        "{}",
        m.detail
    );
    // gdrdrv is not required: no warning for its absence.
    let g = row(&r, "gdrcopy");
    assert_eq!(g.status, Status::Ok, "{g:?}");
    assert!(g
        .detail
        .contains("not required: libgdrapi 2.6+ uses dma-buf mmap"));

    // The usual 1024 open files: a warning naming the limit.
    let r = report(facts("2.6", "610.10", Some(1024)), &Options::default());
    let m = row(&r, "gdrcopy_mode");
    assert_eq!(m.status, Status::Warn, "{m:?}");
    assert!(m.detail.contains("RLIMIT_NOFILE soft limit 1024"));
    assert!(m.fix.as_deref().unwrap().contains("ulimit -n"));
}

#[test]
fn the_backend_depends_on_the_library_the_driver_and_the_variable() {
    // Before 2.6: gdrdrv only, and the old warning stays.
    let r = report(facts("2.5", "610.10", None), &Options::default());
    assert!(row(&r, "gdrcopy_mode")
        .detail
        .starts_with("mode: none (gdr_open fails) (libgdrapi before 2.6 has gdrdrv only"));
    assert_eq!(row(&r, "gdrcopy").status, Status::Warn);
    assert!(row(&r, "gdrcopy").detail.starts_with("no gdrdrv:"));
    // A driver before CUDA 13.3: no dma-buf mmap.
    let r = report(facts("2.6", "595.44.02", None), &Options::default());
    let m = row(&r, "gdrcopy_mode");
    assert!(
        m.detail.starts_with("mode: none (gdr_open fails)")
            && m.detail.contains("driver 595.44.02 predates CUDA 13.3"),
        "{}",
        m.detail
    );
    assert_eq!(row(&r, "gdrcopy").status, Status::Warn);
    // Between: not probed.
    let r = report(facts("2.6", "600.20", None), &Options::default());
    assert!(row(&r, "gdrcopy_mode")
        .detail
        .starts_with("mode: not probed"));
    // The proprietary modules export no dma-buf.
    let mut f = facts("2.6", "610.10", None);
    f.dmabuf.gpu_open_kernel_module = Some(false);
    assert!(row(&report(f, &Options::default()), "gdrcopy_mode")
        .detail
        .contains("the proprietary NVIDIA modules export no dma-buf"));
    // gdrdrv opens: 2.6 tries it first; GDRCOPY_USE_DMABUF_MMAP=1 skips it.
    let mut f = facts("2.6", "610.10", None);
    let mut g = gdrdrv_ok();
    g.version = Some("2.6".to_owned());
    g.libraries[0].version = "2.6".to_owned();
    f.gdrcopy = Some(g);
    let r = report(f.clone(), &Options::default());
    assert_eq!(
        row(&r, "gdrcopy_mode").detail,
        "mode: gdrdrv (libgdrapi 2.6 tries gdrdrv first)"
    );
    f.gin_env
        .insert("GDRCOPY_USE_DMABUF_MMAP".to_owned(), "1".to_owned());
    let r = report(f, &Options::default());
    assert!(row(&r, "gdrcopy_mode")
        .detail
        .starts_with("mode: dma-buf mmap (libgdrapi 2.6, GDRCOPY_USE_DMABUF_MMAP=1"));
}

#[test]
fn gin_takes_the_dma_buf_backend_where_the_library_would() {
    let asked = |release: &str| {
        let mut f = facts("2.6", release, Some(65536));
        f.gin_env
            .insert("NCCL_GDRCOPY_ENABLE".to_owned(), "1".to_owned());
        report(f, &gin())
    };
    let c = row(&asked("610.10"), "gin_gdrcopy").clone();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(c.detail.contains("GDRCopy 2.6"), "{}", c.detail);
    let c = row(&asked("595.44.02"), "gin_gdrcopy").clone();
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(c.detail.contains("predates CUDA 13.3"), "{}", c.detail);
}
