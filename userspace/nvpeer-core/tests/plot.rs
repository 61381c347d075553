// SPDX-License-Identifier: MIT OR Apache-2.0
//! `bench --plot`: what the SVG shows, read back from the document ([`common::svg`]). The same
//! document is checked by `tests/scenarios/plot_check.py` (the VM's `rdma-bench` runs it on the
//! binary's real plot), which must fail on the same omissions: run here on the same files.

use std::process::Command;

mod common;
use common::svg::{attribute, Drawn, FIRST, SECOND};

use nvpeer_core::commands::bench::plot::{Plot, Series, COPY, DIRECT, STAGED};
use nvpeer_core::commands::bench::{crossover, StagedRow};

fn gbps(size: u64, us: f64) -> f64 {
    size as f64 * 8.0 / (us * 1e3)
}

/// A direct/staged comparison over 2 B .. 8 MiB whose crossover is 64 KiB.
fn comparison() -> Plot {
    let rows: Vec<StagedRow> = (1..=23)
        .map(|i| {
            let size = 1u64 << i;
            // Direct: 20 us fixed cost; staged: 5 us plus a slower per-byte cost.
            let (direct_us, staged_us) =
                (20.0 + size as f64 / 10_000.0, 5.0 + size as f64 / 2_000.0);
            StagedRow {
                size,
                direct_us,
                copy_us: staged_us / 2.0,
                staged_us,
                direct_gbps: gbps(size, direct_us),
                staged_gbps: gbps(size, staged_us),
                winner: if direct_us <= staged_us {
                    "direct"
                } else {
                    "staged"
                },
            }
        })
        .collect();
    Plot {
        title: "t".to_owned(),
        latency_caption: "time per message".to_owned(),
        series: vec![
            Series {
                name: DIRECT.to_owned(),
                points: rows
                    .iter()
                    .map(|x| (x.size, x.direct_gbps, x.direct_us))
                    .collect(),
            },
            Series {
                name: STAGED.to_owned(),
                points: rows
                    .iter()
                    .map(|x| (x.size, x.staged_gbps, x.staged_us))
                    .collect(),
            },
        ],
        crossover: crossover(&rows),
        note: None,
    }
}

const BOTH: [(&str, &str, usize); 2] = [(DIRECT, FIRST, 23), (STAGED, SECOND, 23)];

/// The SVG with every polyline of `colour` that has `points` points removed from its `nth`
/// panel (0: bandwidth, 1: time per message): a curve lost while its legend stays.
fn without_curve(svg: &str, colour: &str, points: usize, nth: usize) -> String {
    let mut out = String::new();
    let mut rest = svg;
    let mut seen = 0;
    while let Some(i) = rest.find("<polyline") {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest.find("/>").map_or(rest.len(), |e| e + 2);
        let el = &rest[..end];
        let is_curve = attribute(el, "stroke").is_some_and(|s| s.eq_ignore_ascii_case(colour))
            && attribute(el, "points").map_or(0, |p| p.split_whitespace().count()) == points;
        if is_curve {
            seen += 1;
        }
        if !(is_curve && seen == nth + 1) {
            out.push_str(el);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_crossover_is_where_direct_starts_to_win() {
    // 5 + s/2e3 < 20 + s/1e4 while s < 37500 bytes: staged wins up to 32 KiB.
    assert_eq!(comparison().crossover, Some(65536));
}

#[test]
fn the_svg_shows_both_series_the_axes_and_the_crossover() {
    let svg = comparison().svg().unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    let d = Drawn::read(&svg);
    assert_eq!(d.missing(&BOTH, Some("64 KiB")), None, "{:?}", d.texts);
    assert!(d.has_text("8 MiB") || d.has_text("4 MiB"), "{:?}", d.texts);
}

#[test]
fn the_check_fails_when_a_curve_a_series_or_the_crossover_is_missing() {
    let svg = comparison().svg().unwrap();
    // The staged curve gone from one panel, its legend entries kept.
    for panel in [0, 1] {
        let cut = without_curve(&svg, SECOND, 23, panel);
        assert!(cut.len() < svg.len());
        let d = Drawn::read(&cut);
        assert_eq!(d.texts.iter().filter(|t| *t == STAGED).count(), 2);
        let why = d
            .missing(&BOTH, Some("64 KiB"))
            .expect("a curve is missing");
        assert!(why.contains(STAGED) && why.contains("polylines"), "{why}");
    }
    // A whole series gone.
    let mut p = comparison();
    p.series.pop();
    let why = Drawn::read(&p.svg().unwrap())
        .missing(&BOTH, Some("64 KiB"))
        .expect("staged is missing");
    assert!(why.contains(STAGED), "{why}");
    // The crossover gone.
    let mut p = comparison();
    p.crossover = None;
    let d = Drawn::read(&p.svg().unwrap());
    assert!(d.missing(&BOTH, Some("64 KiB")).is_some());
    assert_eq!(d.missing(&BOTH, None), None);
}

#[test]
fn copies_alone_are_a_plot_of_one_series_that_says_why() {
    let copies: Vec<(usize, f64)> = (1..=23).map(|i| (1usize << i, 8.0 + i as f64)).collect();
    let p = Plot::of_copies("cuda", &copies, "no RDMA device");
    let d = Drawn::read(&p.svg().unwrap());
    assert_eq!(d.missing(&[(COPY, FIRST, 23)], None), None, "{:?}", d.texts);
    assert!(
        d.has_text("no RDMA transfer: no RDMA device"),
        "{:?}",
        d.texts
    );
    assert!(d.missing(&[(DIRECT, FIRST, 23)], None).is_some());
}

/// `plot_check.py` (what the VM runs on the binary's plot) on the same documents: it passes the
/// whole plot and fails each one with a curve cut out of a panel.
#[test]
fn plot_check_py_fails_when_a_curve_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios/plot_check.py");
    let svg = comparison().svg().unwrap();
    let report = dir.path().join("report.json");
    let sizes: Vec<serde_json::Value> = (1..=23)
        .map(|i| serde_json::json!({ "size": 1u64 << i }))
        .collect();
    std::fs::write(
        &report,
        serde_json::json!({
            "staged": sizes,
            "rows": sizes,
            "recommendation": "use the direct path for messages of 64 KiB and larger"
        })
        .to_string(),
    )
    .unwrap();
    let check = |name: &str, svg: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, svg).unwrap();
        let out = Command::new("python3")
            .arg(&script)
            .arg(&file)
            .arg(&report)
            .output()
            .expect("python3 runs plot_check.py");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = check("whole.svg", &svg);
    assert_eq!(code, Some(0), "{text}");
    for (colour, panel) in [(FIRST, 0), (SECOND, 1)] {
        let (code, text) = check("cut.svg", &without_curve(&svg, colour, 23, panel));
        assert_eq!(code, Some(1), "{colour} in panel {panel}: {text}");
        assert!(text.contains("FAIL") && text.contains("curve"), "{text}");
    }
}
