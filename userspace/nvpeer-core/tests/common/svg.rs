// SPDX-License-Identifier: MIT OR Apache-2.0
//! What an SVG of `bench --plot` shows, read back from the document (for the tests of
//! nvpeer-core and of the binary). A curve is a polyline in its series' colour with one point
//! per measured size, once in each panel; the legend's samples (two-point strokes), the grid and
//! the crossover's dashes do not count as one, so a plot whose curve is missing fails even while
//! its legend still names it. `tests/scenarios/plot_check.py` applies the same rule in the VM.

/// The colours of the first and second curve (`commands/bench/plot.rs`: `colour`).
pub const FIRST: &str = "#0000FF";
pub const SECOND: &str = "#E67800";

/// One `<polyline>`: its stroke colour and points.
#[derive(Debug)]
pub struct Polyline {
    pub stroke: String,
    pub points: usize,
}

/// What an SVG written by [`Plot::svg`] shows: its texts and its polylines.
#[derive(Debug, Default)]
pub struct Drawn {
    pub texts: Vec<String>,
    pub polylines: Vec<Polyline>,
}

/// The value of attribute `name` in the element text `el`.
pub fn attribute<'a>(el: &'a str, name: &str) -> Option<&'a str> {
    let at = el.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = el[at..].find('"')?;
    Some(&el[at..at + end])
}

impl Drawn {
    pub fn read(svg: &str) -> Self {
        let mut d = Drawn::default();
        let mut rest = svg;
        while let Some(i) = rest.find("<text") {
            rest = &rest[i..];
            let (Some(open), Some(close)) = (rest.find('>'), rest.find("</text>")) else {
                break;
            };
            if open < close {
                d.texts.push(unescape(rest[open + 1..close].trim()));
            }
            rest = &rest[close..];
        }
        let mut rest = svg;
        while let Some(i) = rest.find("<polyline") {
            rest = &rest[i..];
            let end = rest.find("/>").unwrap_or(rest.len());
            let el = &rest[..end];
            d.polylines.push(Polyline {
                stroke: attribute(el, "stroke").unwrap_or("").to_ascii_uppercase(),
                points: attribute(el, "points").map_or(0, |p| p.split_whitespace().count()),
            });
            rest = &rest[end..];
        }
        d
    }

    pub fn has_text(&self, t: &str) -> bool {
        self.texts.iter().any(|x| x.contains(t))
    }

    /// Why this is not a plot of `series` (name, colour, points per curve): each in both
    /// panels' legends and drawn as a curve in both panels, each axis described, the crossover
    /// labelled when `crossover` is given.
    pub fn missing(
        &self,
        series: &[(&str, &str, usize)],
        crossover: Option<&str>,
    ) -> Option<String> {
        for want in ["message size", "Gb/s", "us per message", "bandwidth"] {
            if !self.has_text(want) {
                return Some(format!("no text {want:?}"));
            }
        }
        for (name, colour, points) in series {
            let n = self.texts.iter().filter(|t| t.as_str() == *name).count();
            if n != 2 {
                return Some(format!("series {name:?} in {n} legends, not 2"));
            }
            let curves = self
                .polylines
                .iter()
                .filter(|p| p.stroke == *colour && p.points == *points)
                .count();
            // A two-point series is as long as its legend sample: two curves and two samples.
            let want = if *points == 2 { 4 } else { 2 };
            if curves != want {
                return Some(format!(
                    "series {name:?}: {curves} polylines in {colour} with {points} points, not {want} (a curve in each panel)"
                ));
            }
        }
        if let Some(c) = crossover {
            let label = format!("crossover {c}: staged wins below");
            let n = self.texts.iter().filter(|t| **t == label).count();
            if n != 2 {
                return Some(format!("crossover label {label:?} in {n} panels, not 2"));
            }
        }
        None
    }
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}
