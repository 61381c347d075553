// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer selftest`: the steps of the self-test and its verdict.

use std::process::ExitCode;

use nvpeer_core::commands::selftest;
use nvpeer_core::host::Host;

use crate::output::{to_json, Out};

pub fn run(
    host: &Host,
    opts: &selftest::SelftestOpts,
    json: bool,
    out: &mut Out,
) -> std::io::Result<ExitCode> {
    let r = selftest::run(host, opts);
    if json {
        out.print(&to_json(&r, true)?)?;
    } else {
        let mut s = format!(
            "nvpeer selftest: {} bytes of {} memory, registered through {}\n",
            r.size,
            if r.memory.is_empty() { "no" } else { &r.memory },
            if r.registration.is_empty() {
                "-"
            } else {
                &r.registration
            }
        );
        for st in &r.steps {
            let tag = match st.status {
                selftest::Status::Ok => "ok  ",
                selftest::Status::Fail => "FAIL",
                selftest::Status::Skip => "skip",
            };
            s.push_str(&format!("  [{tag}] {:<18} {}\n", st.name, st.detail));
        }
        s.push_str(&format!(
            "mode got (as check names it): {} ({})\n",
            r.got.mode, r.got.shown_by
        ));
        s.push_str(if r.passed {
            "selftest passed\n"
        } else {
            "selftest FAILED\n"
        });
        out.print(&s)?;
    }
    Ok(if r.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
