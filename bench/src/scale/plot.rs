//! SVG plots of `edge-bench scale` results with plotters (SVG backend only, no font files: text
//! is written as SVG `<text>` elements with a generic `sans-serif` family, which any SVG viewer
//! renders with its own fonts; plotters only estimates text extents for the layout).
//!
//! Files, beside the JSON (`STEM` = `bench/results/scale-DATE-COMMIT`):
//! - `STEM-rss.svg`: bytes of VmRSS per idle connection against idle connections;
//! - `STEM-connections.svg`: requests/s and p99 against busy connections;
//! - `STEM-rate.svg`: p99 (from the scheduled send time) against the offered rate.
//!
//! X axes are logarithmic (counts and rates span decades); latency axes too.

use std::io;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::scale::report::ScaleReport;

/// One line: a name and its (x, y) points in x order.
pub type Series = (String, Vec<(f64, f64)>);

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn plot_err<E: std::fmt::Debug>(e: E) -> io::Error {
    io::Error::other(format!("plotting: {e:?}"))
}

/// Groups `(target, x, y)` rows into one series per target (first-seen order), sorted by x,
/// keeping points usable on the axes (finite; positive where `log_y`).
pub fn series_by_target<I>(rows: I, log_y: bool) -> Vec<Series>
where
    I: IntoIterator<Item = (String, f64, f64)>,
{
    let mut out: Vec<Series> = Vec::new();
    for (name, x, y) in rows {
        if !(x.is_finite() && x > 0.0 && y.is_finite()) || (log_y && y <= 0.0) {
            continue;
        }
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((x, y)),
            None => out.push((name, vec![(x, y)])),
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
    }
    out
}

/// Axis range covering `values` with a margin; for log axes, whole decades around them.
fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (1.0, 10.0);
    }
    if log {
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil());
        (lo, if hi <= lo { lo * 10.0 } else { hi })
    } else {
        let lo = lo.min(0.0);
        let hi = if hi <= lo { lo + 1.0 } else { hi * 1.1 };
        (lo, hi)
    }
}

/// Draws one line chart into `area`. X is logarithmic; Y is logarithmic when `log_y`.
fn line_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log_y: bool,
) -> io::Result<()> {
    let all = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (x0, x1) = range(all().map(|p| p.0), true);
    let (y0, y1) = range(all().map(|p| p.1), log_y);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(plot_err)?;
            for (i, (name, pts)) in series.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                    .map_err(plot_err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(plot_err)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 13))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(plot_err)?;
        }};
    }
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    if log_y {
        draw!(builder
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(plot_err)?);
    } else {
        draw!(builder
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(plot_err)?);
    }
    Ok(())
}

/// An SVG of one or more charts side by side, as a string.
fn svg(size: (u32, u32), panels: &[(&str, &str, &str, Vec<Series>, bool)]) -> io::Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let areas = root.split_evenly((1, panels.len().max(1)));
        for (area, (title, x, y, series, log_y)) in areas.iter().zip(panels) {
            line_chart(area, title, x, y, series, *log_y)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

/// The SVG documents for `report`, by file suffix; a part without data has none.
///
/// # Errors
/// Plotting failures.
pub fn render(report: &ScaleReport) -> io::Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    let rss = series_by_target(
        report
            .idle
            .iter()
            .map(|r| (r.target.clone(), r.reached as f64, r.per_conn as f64)),
        false,
    );
    if !rss.is_empty() {
        out.push((
            "rss",
            svg(
                (800, 500),
                &[(
                    "VmRSS per idle keep-alive connection",
                    "idle connections",
                    "bytes per connection",
                    rss,
                    false,
                )],
            )?,
        ));
    }
    let conns = |f: fn(&crate::scale::report::ConnRow) -> f64, log_y| {
        series_by_target(
            report
                .connections
                .iter()
                .map(|r| (r.target.clone(), r.connections as f64, f(r))),
            log_y,
        )
    };
    let rps = conns(|r| r.rps, false);
    if !rps.is_empty() {
        out.push((
            "connections",
            svg(
                (1200, 500),
                &[
                    (
                        "Requests/s against busy connections",
                        "connections",
                        "requests/s",
                        rps,
                        false,
                    ),
                    (
                        "p99 latency against busy connections",
                        "connections",
                        "p99 (ms)",
                        conns(|r| r.p99_ms, true),
                        true,
                    ),
                ],
            )?,
        ));
    }
    let rate = series_by_target(
        report
            .rate
            .iter()
            .map(|r| (r.target.clone(), r.rate, r.p99_ms)),
        true,
    );
    if !rate.is_empty() {
        out.push((
            "rate",
            svg(
                (800, 500),
                &[(
                    "p99 latency at a fixed rate (open loop, from the scheduled send)",
                    "offered requests/s",
                    "p99 (ms)",
                    rate,
                    true,
                )],
            )?,
        ));
    }
    Ok(out)
}

/// Writes the plots as `STEM-SUFFIX.svg`; returns the paths.
///
/// # Errors
/// Plotting or write failures.
pub fn write_plots(report: &ScaleReport, stem: &Path) -> io::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for (suffix, text) in render(report)? {
        let path = PathBuf::from(format!("{}-{suffix}.svg", stem.display()));
        std::fs::write(&path, text)?;
        paths.push(path);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::report::{ConnRow, IdleRow, RateRow, RunInfo};

    #[test]
    fn series_group_sort_and_filter() {
        let rows = vec![
            ("b".to_string(), 10.0, 2.0),
            ("a".to_string(), 100.0, 1.0),
            ("b".to_string(), 1.0, 3.0),
            ("a".to_string(), 10.0, 0.0),
            ("a".to_string(), f64::NAN, 1.0),
        ];
        let s = series_by_target(rows.clone(), false);
        assert_eq!(s[0], ("b".to_string(), vec![(1.0, 3.0), (10.0, 2.0)]));
        assert_eq!(s[1], ("a".to_string(), vec![(10.0, 0.0), (100.0, 1.0)]));
        // A log axis drops the zero.
        assert_eq!(series_by_target(rows, true)[1].1, vec![(100.0, 1.0)]);
    }

    #[test]
    fn ranges() {
        assert_eq!(range([16.0, 10_000.0].into_iter(), true), (10.0, 10_000.0));
        assert_eq!(range([0.3, 2.0].into_iter(), true), (0.1, 10.0));
        assert_eq!(range([5.0].into_iter(), true), (1.0, 10.0));
        let (lo, hi) = range([100.0, 200.0].into_iter(), false);
        assert_eq!(lo, 0.0);
        assert!((hi - 220.0).abs() < 1e-9);
        assert_eq!(range(std::iter::empty(), false), (1.0, 10.0));
    }

    fn report() -> ScaleReport {
        let mut idle = Vec::new();
        let mut connections = Vec::new();
        let mut rate = Vec::new();
        for (i, t) in ["edge-io_uring", "edge-epoll", "nginx"].iter().enumerate() {
            for (n, per) in [(1000u64, 3900i64), (9191, 3850), (19_744, 3000)] {
                idle.push(IdleRow {
                    target: t.to_string(),
                    requested: n,
                    reached: n,
                    note: None,
                    baseline_rss: 5_000_000,
                    rss: 5_000_000 + (per * n as i64) as u64,
                    per_conn: per + i as i64 * 100,
                });
            }
            for n in [16u64, 256, 1000, 9191] {
                connections.push(ConnRow {
                    target: t.to_string(),
                    requested: n,
                    connections: n,
                    note: None,
                    rps: 60_000.0 - n as f64,
                    p50_ms: 0.2,
                    p99_ms: n as f64 / 100.0,
                    errors: 0,
                    proxy_cpu: Some(0.9),
                });
            }
            for r in [10_000.0, 20_000.0, 40_000.0] {
                rate.push(RateRow {
                    target: t.to_string(),
                    rate: r,
                    connections: 64,
                    scheduled: 0,
                    responses: 0,
                    achieved: r,
                    errors: 0,
                    unsent: 0,
                    p50_ms: 0.5,
                    p99_ms: r / 10_000.0,
                    p999_ms: 3.0,
                    max_ms: 9.0,
                    service_p99_ms: 1.0,
                    send_lag_p99_ms: 0.9,
                    proxy_cpu: None,
                });
            }
        }
        ScaleReport {
            run: RunInfo {
                tool: "edge-bench scale".into(),
                date: "2026-11-29".into(),
                commit: "abc".into(),
                machine: String::new(),
                kernel: String::new(),
                versions: Vec::new(),
                placement: String::new(),
                fd_limit: (0, 0),
                command: String::new(),
            },
            rate,
            connections,
            idle,
            skipped: Vec::new(),
        }
    }

    /// Checks that `svg` is well-formed XML as far as tags go: every element opened is closed
    /// in order (self-closing ones aside), and it starts with `<svg` after any prolog.
    fn assert_well_formed(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unclosed tag") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.trim()),
                    "mismatched </{name}>"
                );
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap().to_string();
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed elements: {stack:?}");
        assert!(
            svg.trim_start()
                .trim_start_matches(|c| c != '<')
                .starts_with("<svg")
                || svg.contains("<svg")
        );
    }

    #[test]
    fn plots_are_svg_with_their_labels() {
        let plots = render(&report()).unwrap();
        let names: Vec<_> = plots.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["rss", "connections", "rate"]);
        for (name, svg) in &plots {
            assert_well_formed(svg);
            assert!(svg.contains("<text"), "{name}: no text elements");
            for label in ["edge-io_uring", "edge-epoll", "nginx"] {
                assert!(svg.contains(label), "{name}: no legend {label}");
            }
        }
        let text = |n: &str| &plots.iter().find(|(k, _)| *k == n).unwrap().1;
        assert!(text("rss").contains("bytes per connection"));
        assert!(text("rss").contains("idle connections"));
        assert!(text("connections").contains("requests/s"));
        assert!(text("connections").contains("p99 (ms)"));
        assert!(text("rate").contains("offered requests/s"));
    }

    #[test]
    fn no_data_no_plot() {
        let mut r = report();
        r.idle.clear();
        r.rate.clear();
        r.connections.clear();
        assert!(render(&r).unwrap().is_empty());
    }
}
