// SPDX-License-Identifier: MIT OR Apache-2.0
//! Generates the rdma-core declarations of `src/commands/bench/rdma_sys.rs` from the installed
//! <infiniband/verbs.h> and <rdma/rdma_cma.h> (see `rdma_sys.h`): types and enum constants
//! only, no functions, nothing linked (the engine loads libibverbs/librdmacm with libloading).
//!
//! A missing header or libclang stops the build with one line naming the package to install.

use std::path::{Path, PathBuf};

/// The rdma-core types the engine reads, writes or points to. Types they contain are generated
/// too (bindgen follows fields by value); those only pointed to are in `OPAQUE`.
const TYPES: &[&str] = &[
    // libibverbs objects: the op table and the fields the engine reads.
    "ibv_device",
    "ibv_context",
    "ibv_context_ops",
    "ibv_pd",
    "ibv_mr",
    "ibv_cq",
    "ibv_comp_channel",
    "ibv_qp",
    "ibv_port_attr",
    "ibv_gid",
    // What the engine builds.
    "ibv_sge",
    "ibv_send_wr",
    "ibv_recv_wr",
    "ibv_wc",
    "ibv_qp_cap",
    "ibv_qp_init_attr",
    "ibv_qp_attr",
    "ibv_ah_attr",
    "ibv_global_route",
    // Enums (constified: `pub type ibv_x = c_uint` and `pub const IBV_...: ibv_x`).
    "ibv_wr_opcode",
    "ibv_wc_opcode",
    "ibv_wc_status",
    "ibv_send_flags",
    "ibv_access_flags",
    "ibv_qp_type",
    "ibv_qp_state",
    "ibv_qp_attr_mask",
    "ibv_mtu",
    "ibv_port_state",
    // librdmacm.
    "rdma_event_channel",
    "rdma_cm_id",
    "rdma_cm_event",
    "rdma_cm_event_type",
    "rdma_conn_param",
    "rdma_port_space",
];

/// Constants of anonymous enums (no type name to allowlist), as regular expressions.
const VARS: &[&str] = &[
    // `enum { IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET }`,
    // the values of `ibv_port_attr.link_layer`.
    "IBV_LINK_LAYER_.*",
];

/// Only ever behind a pointer here: their contents are not generated (bindgen keeps size and
/// alignment).
const OPAQUE: &[&str] = &["ibv_device", "ibv_comp_channel", "rdma_cm_id"];

/// Where `stddef.h` and the other compiler headers are when libclang lacks its own (the PyPI
/// wheel of tests/setup/env.sh's LIBCLANG_PATH has no resource directory): clang's from
/// libclang-common-*-dev (newest), else the C compiler's. Passed with `-idirafter`, so it is
/// searched only after libclang's own resource directory and /usr/include.
fn builtin_headers() -> Option<PathBuf> {
    let has = |d: &Path| d.join("stddef.h").is_file();
    let mut clang: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let major = name.strip_prefix("llvm-")?.parse::<u32>().ok()?;
            let dir = std::fs::read_dir(e.path().join("lib/clang"))
                .ok()?
                .flatten()
                .map(|v| v.path().join("include"))
                .find(|d| has(d))?;
            Some((major, dir))
        })
        .collect();
    clang.sort();
    if let Some((_, dir)) = clang.pop() {
        return Some(dir);
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = std::process::Command::new(cc)
        .arg("-print-file-name=include")
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (dir.is_absolute() && has(&dir)).then_some(dir)
}

fn fail(line: &str) -> ! {
    eprintln!("{line}");
    std::process::exit(1);
}

fn main() {
    let header = "rdma_sys.h";
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    let mut b = bindgen::Builder::default()
        .header(header)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .generate_comments(false)
        .formatter(bindgen::Formatter::Prettyplease);
    for t in TYPES {
        b = b.allowlist_type(t);
    }
    for t in OPAQUE {
        b = b.opaque_type(t);
    }
    for v in VARS {
        b = b.allowlist_var(v);
    }
    if let Some(dir) = builtin_headers() {
        b = b.clang_arg(format!("-idirafter{}", dir.display()));
    }
    // bindgen panics when it cannot load libclang: keep its message, on one line.
    std::panic::set_hook(Box::new(|_| {}));
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || b.generate()));
    let _ = std::panic::take_hook();
    let bindings = match generated {
        Ok(Ok(bindings)) => bindings,
        Ok(Err(e)) => {
            // libclang has already printed its diagnostics on stderr (bindgen opens its index
            // with displayDiagnostics): for a missing header that is the one #error line of
            // rdma_sys.h, naming the package; do not repeat it.
            if e.to_string().contains("nvpeer-core: <") {
                std::process::exit(1);
            }
            fail(
                "nvpeer-core: bindgen could not parse the rdma-core headers of libibverbs-dev and \
                 librdmacm-dev (clang's diagnostics above)",
            )
        }
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("libclang could not be loaded");
            fail(&format!(
                "nvpeer-core: bindgen needs libclang: install libclang-dev or set LIBCLANG_PATH \
                 ({})",
                why.replace('\n', "; ")
            ))
        }
    };
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        fail("nvpeer-core: OUT_DIR is not set (build.rs runs under cargo)");
    };
    if let Err(e) = bindings.write_to_file(out.join("rdma_sys.rs")) {
        fail(&format!(
            "nvpeer-core: cannot write {}: {e}",
            out.join("rdma_sys.rs").display()
        ));
    }
}
