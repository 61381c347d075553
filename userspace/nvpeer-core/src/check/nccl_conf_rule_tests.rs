// SPDX-License-Identifier: MIT OR Apache-2.0
//! NCCL's config files (`NCCL_CONF_FILE`, `~/.nccl.conf`, `/etc/nccl.conf`, `../shared/FIELD.md`
//! U7) as NCCL layers them under the environment, and the rows that read them.

use std::collections::BTreeMap;

use super::rule_tests::ready_facts;
use super::*;
use crate::check::nccl::{self, Source};
use crate::host::Host;

fn write(root: &std::path::Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_environment_wins_then_the_first_file_then_etc() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sys")).unwrap();
    let host = Host::new(dir.path().join("sys"), dir.path().join("proc"));
    write(
        dir.path(),
        "etc/nccl.conf",
        "NCCL_IB_DISABLE=1\nNCCL_NET_GDR_LEVEL=LOC\nNCCL_DMABUF_ENABLE=0\n# a comment\n",
    );
    write(dir.path(), "home/u/.nccl.conf", "NCCL_NET_GDR_LEVEL=SYS\n");
    let files = nccl::conf_files(&host, &BTreeMap::new(), Some("/home/u"));
    assert_eq!(
        files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        ["/home/u/.nccl.conf", "/etc/nccl.conf"]
    );
    let e = nccl::nccl_env_with_files(&vars(&[("NCCL_IB_DISABLE", "0")]), &files);
    assert!(!e.ib_disable);
    assert_eq!(e.ib_disable_source, Source::Environment("0".to_owned()));
    assert_eq!(e.gdr_level, crate::host::topo::NcclPathType::Sys);
    assert_eq!(
        e.gdr_level_source,
        Source::File {
            path: "/home/u/.nccl.conf".to_owned(),
            value: "SYS".to_owned()
        }
    );
    assert!(!e.dmabuf_enable);
    assert_eq!(e.conf_files, ["/home/u/.nccl.conf", "/etc/nccl.conf"]);
    // NCCL_CONF_FILE replaces ~/.nccl.conf; /etc/nccl.conf is read after it.
    write(dir.path(), "opt/job.conf", "NCCL_DMABUF_ENABLE=1\n");
    let env = vars(&[("NCCL_CONF_FILE", "/opt/job.conf")]);
    let files = nccl::conf_files(&host, &env, Some("/home/u"));
    let e = nccl::nccl_env_with_files(&env, &files);
    assert_eq!(e.conf_files, ["/opt/job.conf", "/etc/nccl.conf"]);
    assert!(e.dmabuf_enable);
    assert_eq!(e.gdr_level, crate::host::topo::NcclPathType::Loc);
}

#[test]
fn a_setting_from_etc_nccl_conf_is_judged_and_named() {
    let mut f = ready_facts();
    let files = [nccl::ConfFile {
        path: "/etc/nccl.conf".to_owned(),
        vars: vars(&[("NCCL_IB_DISABLE", "1")]),
    }];
    f.nccl_env = nccl::nccl_env_with_files(&BTreeMap::new(), &files);
    let r = report(f, &Options::default());
    let c = r.get("nccl_env").unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.detail
            .starts_with("NCCL_IB_DISABLE=1 (set to \"1\" in /etc/nccl.conf)"),
        "{}",
        c.detail
    );
}

#[test]
fn facts_of_an_older_nvpeer_load_without_conf_files() {
    let mut json = serde_json::to_value(ready_facts()).unwrap();
    json["nccl_env"]
        .as_object_mut()
        .unwrap()
        .remove("conf_files");
    let back: Facts = serde_json::from_value(json).unwrap();
    assert!(back.nccl_env.conf_files.is_empty());
}
