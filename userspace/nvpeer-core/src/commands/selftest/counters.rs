// SPDX-License-Identifier: MIT OR Apache-2.0
//! Whether exactly one registration, and its release, went through our client: the module's
//! counters and MOFED's `memory_peers` ones, before, during and after.

use super::{Run, GPU_PAGE};
use crate::commands::stats;

fn delta(a: &stats::Stats, b: &stats::Stats, k: &str) -> i128 {
    i128::from(*a.counters.get(k).unwrap_or(&0)) - i128::from(*b.counters.get(k).unwrap_or(&0))
}

fn peer_delta(a: &stats::Stats, b: &stats::Stats, k: &str) -> Option<i128> {
    let get = |s: &stats::Stats| {
        s.memory_peers
            .as_ref()?
            .iter()
            .find(|p| p.name == "nv_mem")
            .and_then(|p| p.counters.get(k).copied())
    };
    Some(i128::from(get(a)?) - i128::from(get(b)?))
}

pub(super) fn compare_counters(
    r: &mut Run,
    before: &stats::Stats,
    during: &stats::Stats,
    after: &stats::Stats,
    size: u64,
) {
    let pages = size / GPU_PAGE;
    let size_i = i128::from(size);
    // (counter, expected change while registered, expected change after the release)
    let expected: [(&str, i128, i128); 5] = [
        ("registrations", 1, 1),
        ("deregistrations", 0, 1),
        ("live_contexts", 1, 0),
        ("pinned_bytes", size_i, 0),
        ("pinned_pages", i128::from(pages), 0),
    ];
    let mut bad = Vec::new();
    for (key, while_registered, after_release) in expected {
        for (when, snapshot, exp) in [
            ("during", during, while_registered),
            ("after", after, after_release),
        ] {
            let got = delta(snapshot, before, key);
            if got != exp {
                bad.push(format!("{key} {when}: {got}, expected {exp}"));
            }
        }
    }
    if bad.is_empty() {
        r.ok(
            "module_counters",
            format!(
                "exactly one registration of {pages} GPU pages ({size} bytes) through our client, and its release"
            ),
        );
    } else {
        r.fail("module_counters", bad.join("; "));
    }
    match (
        peer_delta(during, before, "num_alloc_mrs"),
        peer_delta(during, before, "num_reg_bytes"),
        peer_delta(after, before, "num_dealloc_mrs"),
        peer_delta(after, before, "num_dereg_bytes"),
    ) {
        (Some(1), Some(rb), Some(1), Some(db)) if rb == i128::from(size) && db == rb => r.ok(
            "memory_peers",
            format!("nv_mem: num_alloc_mrs +1, num_reg_bytes +{rb}, num_dealloc_mrs +1, num_dereg_bytes +{db}"),
        ),
        (None, ..) => r.skip("memory_peers", "/sys/kernel/mm/memory_peers/nv_mem is absent"),
        (a, rb, d, db) => r.fail(
            "memory_peers",
            format!(
                "nv_mem: num_alloc_mrs {a:?}, num_reg_bytes {rb:?}, num_dealloc_mrs {d:?}, num_dereg_bytes {db:?}; expected +1, +{size}, +1, +{size}"
            ),
        ),
    }
}
