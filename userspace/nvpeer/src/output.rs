// SPDX-License-Identifier: MIT OR Apache-2.0
//! Where the commands print: standard output (a closed pipe ends the command quietly) and
//! the JSON form of a report.

use std::io::{IsTerminal, Write};

/// Where output goes; a closed pipe (`nvpeer stats --watch 1 | head`) ends the command quietly.
pub struct Out {
    stdout: std::io::Stdout,
    pub color: bool,
}

impl Out {
    pub fn new() -> Self {
        let stdout = std::io::stdout();
        let color = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { stdout, color }
    }

    pub fn print(&mut self, text: &str) -> std::io::Result<()> {
        let mut lock = self.stdout.lock();
        lock.write_all(text.as_bytes())?;
        lock.flush()
    }
}

pub fn to_json<T: serde::Serialize>(value: &T, pretty: bool) -> std::io::Result<String> {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    text.map(|mut s| {
        s.push('\n');
        s
    })
    .map_err(std::io::Error::other)
}
