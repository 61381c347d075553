// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer who`: who holds pinned GPU memory, from the module's registration records.

use std::process::ExitCode;

use nvpeer_core::commands::render::Table;
use nvpeer_core::commands::who::{self, Who};
use nvpeer_core::host::limits::human_bytes;
use nvpeer_core::host::Host;

use crate::output::{to_json, Out};

/// The holders (process, cgroup, GPU), then the GPUs with their pinned bytes against BAR1;
/// without a peer-memory module, why nothing is held.
fn table(w: &Who) -> String {
    let Some(module) = &w.module else {
        return format!("{}\n", who::NOTHING_LOADED);
    };
    let mut t = Table::new();
    t.row([
        "Process",
        "Cgroup",
        "GPU",
        "Registrations",
        "Bytes",
        "Pinned",
        "NICs",
        "Oldest",
    ]);
    for h in &w.holders {
        let gpu = match (&h.gpu_label, &h.gpu) {
            (Some(l), _) => l.clone(),
            (None, Some(u)) => u.clone(),
            (None, None) => "-".to_owned(),
        };
        t.row([
            who::process(h.tgid, &h.comm),
            who::printable(&h.cgroup),
            gpu,
            h.registrations.to_string(),
            human_bytes(h.bytes),
            human_bytes(h.pinned_bytes),
            if h.nics.is_empty() {
                "-".to_owned()
            } else {
                h.nics.join(",")
            },
            format!("{:.1} s", h.oldest_age_ms as f64 / 1000.0),
        ])
        .right_last(3);
    }
    let mut out = t.render(false);
    if !w.gpus.is_empty() {
        let mut g = Table::new();
        g.row([
            "GPU",
            "PCI",
            "UUID",
            "Pinned",
            "BAR1",
            "Of BAR1",
            "Pins",
            "Registrations",
        ]);
        for u in &w.gpus {
            let share = u.bar1_bytes.filter(|b| *b > 0).map_or_else(
                || "-".to_owned(),
                |b| format!("{:.1}%", u.pinned_bytes as f64 * 100.0 / b as f64),
            );
            g.row([
                u.label.clone().unwrap_or_else(|| "-".to_owned()),
                u.address.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                u.uuid.clone(),
                human_bytes(u.pinned_bytes),
                u.bar1_bytes.map_or_else(|| "-".to_owned(), human_bytes),
                share,
                u.pins.to_string(),
                u.registrations.to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&g.render(false));
    }
    for n in &w.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let regs = if w.registrations == 1 {
        "registration"
    } else {
        "registrations"
    };
    out.push_str(&format!("{module}: {} live {regs}\n", w.registrations));
    out
}

/// Exit 0 with the records shown, or nothing held where no peer-memory module is loaded; 2
/// when they cannot be read, or another's module is loaded (one line).
pub fn run(host: &Host, json: bool, brief: bool, out: &mut Out) -> std::io::Result<ExitCode> {
    let w = match who::gather(host) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("nvpeer who: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        out.print(&to_json(&w, true)?)?;
    } else if brief {
        out.print(&format!("{}\n", who::brief(&w, 3)))?;
    } else {
        out.print(&table(&w))?;
    }
    Ok(ExitCode::SUCCESS)
}
