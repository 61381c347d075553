// SPDX-License-Identifier: MIT OR Apache-2.0
//! `bench --plot FILE.svg`: bandwidth and latency against message size, drawn with `plotters`'
//! SVG backend: the direct path and, with `--compare-staged`, the path staged through a host
//! bounce buffer, with the crossover marked (the message size below which the staged path
//! wins, the threshold users pick a path by). A host without an RDMA device still gets the
//! staging copies' curve (`--compare-staged` measures them alone there).
//!
//! [`Plot`] is what is drawn (built from a report or from the copy times alone), [`Plot::svg`]
//! draws it.

use plotters::prelude::*;

use super::report::size_str;
use super::staged::crossover;
use super::BenchReport;

/// One curve: (message size in bytes, Gb/s, microseconds per message) per point.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(u64, f64, f64)>,
}

/// What a plot shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    pub title: String,
    /// The lower panel's caption (what "latency" is for this run).
    pub latency_caption: String,
    pub series: Vec<Series>,
    /// The smallest size from which the direct path wins at every larger size, when the staged
    /// path wins below it.
    pub crossover: Option<u64>,
    /// A line under the title: what the comparison found or why a curve is missing.
    pub note: Option<String>,
}

/// The name of the direct path's curve.
pub const DIRECT: &str = "direct";
/// The name of the staged path's curve.
pub const STAGED: &str = "staged through host memory (copy included)";
/// The name of the staging copy's curve (hosts without an RDMA device).
pub const COPY: &str = "staging copy into a host bounce buffer";

/// Gb/s of `size` bytes moved in `us` microseconds.
fn gbps(size: u64, us: f64) -> f64 {
    size as f64 * 8.0 / (us * 1e3)
}

impl Plot {
    /// The plot of a finished run: the direct curve from its rows (or its staged comparison's
    /// direct times), the staged curve and the crossover with `--compare-staged`.
    pub fn of_report(r: &BenchReport) -> Self {
        let title = format!(
            "nvpeer bench: RDMA {} {}, {} -> {}, {} memory",
            r.op.name(),
            r.test,
            r.device,
            r.peer_device,
            r.mem
        );
        let latency_caption = match r.latency_method {
            Some(m) => format!("latency: {m}"),
            None => "time per message: 1 / message rate (bandwidth run; --lat measures latency)"
                .to_owned(),
        };
        let (series, crossover) = match &r.staged {
            Some(st) => (
                vec![
                    Series {
                        name: DIRECT.to_owned(),
                        points: st
                            .iter()
                            .map(|x| (x.size, x.direct_gbps, x.direct_us))
                            .collect(),
                    },
                    Series {
                        name: STAGED.to_owned(),
                        points: st
                            .iter()
                            .map(|x| (x.size, x.staged_gbps, x.staged_us))
                            .collect(),
                    },
                ],
                crossover(st),
            ),
            None => (
                vec![Series {
                    name: DIRECT.to_owned(),
                    points: r
                        .rows
                        .iter()
                        .filter_map(|row| {
                            let us = match (&row.latency, &row.bandwidth) {
                                (Some(l), _) => l.avg_us,
                                (None, Some(b)) if b.msg_rate_mpps > 0.0 => 1.0 / b.msg_rate_mpps,
                                _ => return None,
                            };
                            let g = match &row.bandwidth {
                                Some(b) => b.avg_gbps,
                                None => gbps(row.size, us),
                            };
                            Some((row.size, g, us))
                        })
                        .collect(),
                }],
                None,
            ),
        };
        Self {
            title,
            latency_caption,
            series,
            crossover,
            note: r.recommendation.clone(),
        }
    }

    /// The staging copies alone (`--compare-staged` on a host without an RDMA device):
    /// `copies` is (size, microseconds) per size, `why` the reason nothing else was measured.
    pub fn of_copies(mem: &str, copies: &[(usize, f64)], why: &str) -> Self {
        Self {
            title: format!("nvpeer bench: staging copies, {mem} memory -> host bounce buffer"),
            latency_caption: "time per copy (cuMemcpyDtoH for GPU memory, memcpy otherwise)"
                .to_owned(),
            series: vec![Series {
                name: COPY.to_owned(),
                points: copies
                    .iter()
                    .map(|&(s, us)| (s as u64, gbps(s as u64, us), us))
                    .collect(),
            }],
            crossover: None,
            note: Some(format!(
                "no RDMA transfer: {why}; only the copy a staged transfer adds was measured"
            )),
        }
    }

    /// The SVG document.
    pub fn svg(&self) -> Result<String, String> {
        let mut out = String::new();
        draw(self, &mut out).map_err(|e| format!("drawing the plot: {e}"))?;
        Ok(out)
    }
}

/// The colour of the n-th curve (`tests/plot.rs` and `tests/scenarios/plot_check.py` find the
/// curves by it: keep them in step).
fn colour(n: usize) -> RGBColor {
    [BLUE, RGBColor(230, 120, 0), RGBColor(0, 140, 70)][n % 3]
}

/// The range of `values` padded a little on a log axis (a flat curve still gets a range).
fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi <= 0.0 {
        return 0.1..10.0;
    }
    lo / 1.5..hi * 1.5
}

/// An axis number: 1e-4, 0.005, 2.5, 40, 1200.
fn number(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else if v >= 0.001 {
        format!("{v:.3}")
    } else {
        format!("{v:.0e}")
    }
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(p: &Plot, out: &mut String) -> DrawResult {
    let root = SVGBackend::with_string(out, (1000, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&p.title, ("sans-serif", 20))?;
    let (head, body) = root.split_vertically(30);
    if let Some(note) = &p.note {
        head.draw(&Text::new(
            note.clone(),
            (60, 5),
            ("sans-serif", 14).into_font().color(&BLACK),
        ))?;
    }
    let (top, bottom) = body.split_vertically(375);
    let sizes = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|pt| pt.0 as f64));
    let (smin, smax) = sizes.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let x = if smax > 0.0 {
        smin / 1.4..smax * 1.4
    } else {
        1.0..16.0
    };
    panel(p, &top, x.clone(), "bandwidth", "Gb/s", |pt| pt.1)?;
    panel(p, &bottom, x, &p.latency_caption, "us per message", |pt| {
        pt.2
    })?;
    root.present()?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    p: &Plot,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    x: std::ops::Range<f64>,
    caption: &str,
    y_desc: &str,
    value: impl Fn(&(u64, f64, f64)) -> f64,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let y = log_range(p.series.iter().flat_map(|s| s.points.iter().map(&value)));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x.log_scale().base(2.0), y.clone().log_scale())?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc(y_desc)
        .x_labels(12)
        .x_label_formatter(&|v| size_str(v.round() as u64))
        .y_label_formatter(&|v| number(*v))
        .draw()?;
    for (n, s) in p.series.iter().enumerate() {
        let c = colour(n);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|pt| (pt.0 as f64, value(pt)))
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|pt| Circle::new(pt, 3, c.filled())))?;
    }
    if let Some(c) = p.crossover {
        let cx = c as f64;
        chart.draw_series(DashedLineSeries::new(
            vec![(cx, y.start), (cx, y.end)],
            6,
            4,
            RED.stroke_width(2),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("crossover {}: staged wins below", size_str(c)),
            (cx * 1.06, y.end / 1.3),
            ("sans-serif", 13).into_font().color(&RED),
        )))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_keep_their_digits() {
        let n: Vec<String> = [0.0001, 0.005, 2.5, 40.0, 1200.0].map(number).into();
        assert_eq!(n, ["1e-4", "0.005", "2.5", "40", "1200"]);
    }
}
