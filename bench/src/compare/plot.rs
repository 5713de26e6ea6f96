//! SVG plots of one `edge-bench compare` run, drawn with plotters' SVG backend (no font files:
//! without plotters' `ttf` feature text is emitted as SVG `<text>` and laid out with a width
//! estimate, so nothing needs fontconfig):
//! - `compare-latency-cdf.svg`: latency CDF per system for the `get-64` workload (the first
//!   workload run when `get-64` was not), from the merged percentiles of the counted rounds
//!   ([`crate::compare::report::cdf`]). The y axis is in "nines" (50 %, 90 %, 99 %, 99.9 %,
//!   99.99 %: equal steps in −log10(1 − p)) so the tail is as visible as the median;
//! - `compare-throughput.svg`: median req/s per system, one panel per workload (each with its own
//!   scale: 1 MiB responses run at a fraction of the small-GET rate).
//!
//! The file names are fixed so bench/README.md always shows the latest run; the JSON record
//! beside them is dated.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plotters::prelude::*;

use crate::compare::report::{cdf, of_workload, summarize, Sample};
use crate::compare::target::TargetKind;
use crate::compare::workload::Workload;
use crate::compare::RunInfo;

/// The line/bar colour of a system.
fn colour(k: TargetKind) -> RGBColor {
    match k {
        TargetKind::EdgeUring => RGBColor(214, 39, 40),
        TargetKind::EdgeEpoll => RGBColor(255, 127, 14),
        TargetKind::BaselineUring => RGBColor(148, 103, 189),
        TargetKind::BaselineEpoll => RGBColor(188, 189, 34),
        TargetKind::Nginx => RGBColor(44, 160, 44),
        TargetKind::Haproxy => RGBColor(31, 119, 180),
        TargetKind::Direct => RGBColor(127, 127, 127),
    }
}

/// Percentile (in %) on the "nines" scale: 0 → 0, 90 → 1, 99 → 2, 99.9 → 3.
pub fn nines(p: f64) -> f64 {
    -(1.0 - (p / 100.0).clamp(0.0, 0.999_999)).log10()
}

/// Inverse of [`nines`], as a label: 1 → `90 %`, 3 → `99.9 %`.
pub fn nines_label(y: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-y));
    let s = format!("{p:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} %")
}

fn plot_err<E: std::fmt::Debug>(e: E) -> io::Error {
    io::Error::other(format!("plotting: {e:?}"))
}

/// Writes both plots into `dir` and returns their paths (a plot with no data is skipped).
///
/// # Errors
/// Drawing or file errors.
pub fn write_plots(dir: &Path, info: &RunInfo, samples: &[Sample]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let w = if info.workloads.contains(&Workload::Get64) {
        Some(Workload::Get64)
    } else {
        info.workloads.first().copied()
    };
    if let Some(w) = w {
        let path = dir.join("compare-latency-cdf.svg");
        let title = format!(
            "Latency CDF, {} ({}); {} round(s) x {} s",
            w.name(),
            w.describe(info.connections),
            info.rounds,
            info.duration_s
        );
        let these = of_workload(samples, w);
        let curves: Vec<(TargetKind, Vec<(f64, Duration)>)> = info
            .kinds
            .iter()
            .map(|&k| (k, cdf(&these, k)))
            .filter(|(_, c)| !c.is_empty())
            .collect();
        if !curves.is_empty() {
            latency_cdf(&path, &title, &curves)?;
            out.push(path);
        }
    }
    let bars: Vec<(Workload, Vec<(TargetKind, f64)>)> = info
        .workloads
        .iter()
        .map(|&w| {
            let these = of_workload(samples, w);
            let v = info
                .kinds
                .iter()
                .filter_map(|&k| summarize(&these, k).map(|s| (k, s.req_per_sec)))
                .collect();
            (w, v)
        })
        .filter(|(_, v): &(Workload, Vec<_>)| !v.is_empty())
        .collect();
    if !bars.is_empty() {
        let path = dir.join("compare-throughput.svg");
        let title = format!(
            "Median requests/s per workload; {} round(s) x {} s, proxy on CPU {}, load on CPU {}",
            info.rounds, info.duration_s, info.proxy_cpus, info.load_cpus
        );
        throughput(&path, &title, &bars)?;
        out.push(path);
    }
    Ok(out)
}

/// Draws the latency CDF: x latency in ms, y percentile on the nines scale.
pub fn latency_cdf(
    path: &Path,
    title: &str,
    curves: &[(TargetKind, Vec<(f64, Duration)>)],
) -> io::Result<()> {
    let to_ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let max_ms = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(_, d)| to_ms(d)))
        .fold(0.0f64, f64::max)
        .max(0.001)
        * 1.05;
    let max_p = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|&(p, _)| nines(p)))
        .fold(1.0f64, f64::max)
        .ceil();
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_ms, 0.0..max_p)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("percentile")
        .y_labels((max_p as usize) * 2 + 1)
        .y_label_formatter(&|y| nines_label(*y))
        .draw()
        .map_err(plot_err)?;
    for (k, c) in curves {
        let col = colour(*k);
        chart
            .draw_series(LineSeries::new(
                c.iter().map(|(p, d)| (to_ms(d), nines(*p))),
                col.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(k.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// Draws one bar panel per workload (median req/s per system), in a grid of up to 3 columns.
pub fn throughput(
    path: &Path,
    title: &str,
    bars: &[(Workload, Vec<(TargetKind, f64)>)],
) -> io::Result<()> {
    let cols = bars.len().min(3);
    let rows = bars.len().div_ceil(cols);
    let root =
        SVGBackend::new(path, (420 * cols as u32, 40 + 320 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let root = root.titled(title, ("sans-serif", 18)).map_err(plot_err)?;
    let panels = root.split_evenly((rows, cols));
    for ((w, v), area) in bars.iter().zip(panels.iter()) {
        let top = v.iter().map(|(_, r)| *r).fold(0.0f64, f64::max).max(1.0) * 1.15;
        let n = v.len();
        let mut chart = ChartBuilder::on(area)
            .caption(w.name(), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, 0.0..top)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("req/s")
            .y_label_formatter(&|y| format!("{:.0}k", y / 1000.0))
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(v.iter().enumerate().map(|(i, (k, r))| {
                let x = i as f64;
                Rectangle::new([(x + 0.12, 0.0), (x + 0.88, *r)], colour(*k).filled())
            }))
            .map_err(plot_err)?;
        chart
            .draw_series(v.iter().enumerate().map(|(i, (k, r))| {
                Text::new(
                    format!("{}: {:.1}k", short(*k), r / 1000.0),
                    (i as f64 + 0.1, *r + top * 0.04),
                    ("sans-serif", 11),
                )
            }))
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)
}

/// A short bar label.
fn short(k: TargetKind) -> &'static str {
    match k {
        TargetKind::EdgeUring => "edge uring",
        TargetKind::EdgeEpoll => "edge epoll",
        TargetKind::BaselineUring => "base uring",
        TargetKind::BaselineEpoll => "base epoll",
        TargetKind::Nginx => "nginx",
        TargetKind::Haproxy => "haproxy",
        TargetKind::Direct => "direct",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_scale() {
        assert!((nines(90.0) - 1.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert_eq!(nines(0.0), 0.0);
        assert_eq!(nines_label(0.0), "0 %");
        assert_eq!(nines_label(2.0), "99 %");
        assert_eq!(nines_label(3.0), "99.9 %");
        assert_eq!(nines_label(0.5), "68.3772 %");
    }

    #[test]
    fn plots_are_svg_documents() {
        let dir = std::env::temp_dir().join(format!("edge-bench-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let us = Duration::from_micros;
        let c = vec![(
            TargetKind::Nginx,
            vec![(50.0, us(800)), (99.0, us(1500)), (99.9, us(3000))],
        )];
        let p = dir.join("cdf.svg");
        latency_cdf(&p, "t <&> title", &c).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.starts_with("<svg") && text.trim_end().ends_with("</svg>"),
            "{text}"
        );
        assert!(
            text.contains("<text") && text.contains("99.9 %") && text.contains("&lt;&amp;&gt;")
        );
        let b = vec![
            (
                Workload::Get64,
                vec![
                    (TargetKind::EdgeUring, 80_000.0),
                    (TargetKind::Nginx, 60_000.0),
                ],
            ),
            (Workload::Get1m, vec![(TargetKind::Nginx, 2_000.0)]),
        ];
        let p = dir.join("bars.svg");
        throughput(&p, "bars", &b).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("get-1m") && text.contains("edge uring: 80.0k"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
