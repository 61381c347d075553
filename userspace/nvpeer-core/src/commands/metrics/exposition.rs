// SPDX-License-Identifier: MIT OR Apache-2.0
//! The Prometheus text exposition format (version 0.0.4): metric families with one `# HELP`
//! and one `# TYPE` line each, sanitized names, escaped label values.

use std::fmt::Write as _;

/// Prometheus metric type of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// One metric family: its name, HELP text, type and samples (one per label set).
#[derive(Clone, Debug)]
pub struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(Labels, u64)>,
}

impl Family {
    /// Sets the sample with these labels; a label set given twice keeps the last value, so
    /// that a family never holds two series with the same labels.
    pub fn set(&mut self, labels: &[(&'static str, &str)], value: u64) -> &mut Self {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        match self.samples.iter_mut().find(|(l, _)| *l == labels) {
            Some(sample) => sample.1 = value,
            None => self.samples.push((labels, value)),
        }
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Metric families in the order they were first named.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

/// A metric name with every character outside `[a-zA-Z0-9_:]` replaced by `_` (a counter file
/// name the module may add one day must not break the exposition).
pub fn sanitize_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

/// A label value as the exposition format writes it: `\` as `\\`, `"` as `\"`, a line feed
/// as `\n`.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A HELP text: `\` as `\\`, a line feed as `\n` (quotes stay as they are).
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// The family `name` (sanitized; a counter gets `_total` appended when it lacks it),
    /// created on first use: later calls with the same name add samples to the same family.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Family {
        let mut name = sanitize_name(name);
        if kind == Kind::Counter && !name.ends_with("_total") {
            name.push_str("_total");
        }
        let index = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name,
                    help: help.to_owned(),
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[index]
    }

    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The text exposition: per family with samples `# HELP`, `# TYPE`, then its samples.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.label());
            for (labels, value) in &f.samples {
                out.push_str(&f.name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// (name, TYPE) per family, and every sample line as (series, value), checked for the
    /// rules of the text format this module promises.
    pub(in crate::commands::metrics) fn parse(
        text: &str,
    ) -> (BTreeMap<String, String>, Vec<(String, String)>) {
        let mut types = BTreeMap::new();
        let mut helps = BTreeSet::new();
        let mut samples = Vec::new();
        let mut seen = BTreeSet::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_owned();
                assert!(helps.insert(name.clone()), "second HELP for {name}");
                current = name;
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(name, current, "TYPE of {name} not after its HELP");
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "second TYPE for {name}"
                );
            } else {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let name = series.split('{').next().unwrap();
                assert_eq!(name, current, "{series} outside its family");
                assert!(name.starts_with("nvpeer_"), "{name} without the prefix");
                assert!(seen.insert(series.to_owned()), "duplicate series {series}");
                value.parse::<u64>().unwrap();
                samples.push((series.to_owned(), value.to_owned()));
            }
        }
        for (name, kind) in &types {
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name} is a {kind}"
            );
        }
        (types, samples)
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("two\nlines"), "two\\nlines");
        assert_eq!(escape_label_value("nccl<=2.9.6"), "nccl<=2.9.6");
        let mut e = Exposition::new();
        e.family("nvpeer_x", Kind::Gauge, "back\\slash\nnewline \"quoted\"")
            .set(&[("check", "say \"hi\"\\\n")], 1);
        assert_eq!(
            e.render(),
            "# HELP nvpeer_x back\\\\slash\\nnewline \"quoted\"\n# TYPE nvpeer_x gauge\n\
             nvpeer_x{check=\"say \\\"hi\\\"\\\\\\n\"} 1\n"
        );
    }

    #[test]
    fn counters_get_total_and_names_are_sanitized() {
        let mut e = Exposition::new();
        assert_eq!(
            e.family("nvpeer_module_registrations", Kind::Counter, "h")
                .name(),
            "nvpeer_module_registrations_total"
        );
        assert_eq!(
            e.family("nvpeer_memory_peers_reg_bytes_total", Kind::Counter, "h")
                .name(),
            "nvpeer_memory_peers_reg_bytes_total"
        );
        assert_eq!(
            e.family("nvpeer_module_pinned_bytes", Kind::Gauge, "h")
                .name(),
            "nvpeer_module_pinned_bytes"
        );
        assert_eq!(
            sanitize_name("nvpeer_module_new-file.x"),
            "nvpeer_module_new_file_x"
        );
        assert_eq!(sanitize_name("9lives"), "_9lives");
    }

    #[test]
    fn one_help_and_type_per_family_and_no_duplicate_series() {
        let mut e = Exposition::new();
        for _ in 0..2 {
            e.family("nvpeer_a", Kind::Gauge, "first")
                .set(&[("x", "1")], 1);
            e.family("nvpeer_b", Kind::Counter, "other").set(&[], 3);
            e.family("nvpeer_a", Kind::Gauge, "ignored")
                .set(&[("x", "2")], 2);
        }
        e.family("nvpeer_a", Kind::Gauge, "").set(&[("x", "1")], 7);
        e.family("nvpeer_empty", Kind::Gauge, "no samples");
        let text = e.render();
        let (types, samples) = parse(&text);
        assert_eq!(types.len(), 2, "{text}");
        assert_eq!(
            samples,
            vec![
                ("nvpeer_a{x=\"1\"}".to_owned(), "7".to_owned()),
                ("nvpeer_a{x=\"2\"}".to_owned(), "2".to_owned()),
                ("nvpeer_b_total".to_owned(), "3".to_owned()),
            ]
        );
        assert!(!text.contains("nvpeer_empty"));
    }
}
