// SPDX-License-Identifier: MIT OR Apache-2.0
//! Helpers of the integration tests of nvpeer-core and of the binary (`nvpeer/tests` take this
//! file by `#[path]`): the fixture trees and the plot reader. Each test crate uses a part.
#![allow(dead_code)]

pub mod svg;
pub mod trees;

use std::path::PathBuf;

/// `tests/fixtures` of the repository.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// The name of every fixture tree (a directory with a `sys` tree), sorted.
pub fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.path()
                .join("sys")
                .is_dir()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}
