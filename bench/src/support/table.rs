//! Plain-text result tables, the small statistics the scenario tables print, and the duration and
//! byte formats of their cells.
//!
//! [`Table`] right-aligns every column except the first, so numbers line up; [`Quantiles`]
//! summarises a handful of probe latencies with nearest-rank percentiles (HDR histograms are for
//! the load generator's millions of samples, not for ten probes).

use std::fmt::Write as _;
use std::time::Duration;

/// A table of strings with a header row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells print empty, extra cells are kept.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// The table as text: header, a rule, then the rows, each line ending in a newline.
    pub fn render(&self) -> String {
        let cols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0; cols];
        for line in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in width.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut text = String::new();
            for (i, w) in width.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                let sep = if i == 0 { "" } else { "  " };
                if i == 0 {
                    let _ = write!(text, "{sep}{cell:<w$}");
                } else {
                    let _ = write!(text, "{sep}{cell:>w$}");
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: usize = width.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
        out.push_str(&"-".repeat(rule));
        out.push('\n');
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

impl Table {
    /// The table as Markdown: a header row, a `|---|` row, then the rows (cells with `|` escaped).
    pub fn render_markdown(&self) -> String {
        let cols = self.columns();
        let mut out = markdown_line(cols, &self.header);
        out.push_str(&format!("|{}\n", "---|".repeat(cols)));
        self.markdown_rows(cols, out)
    }

    /// Markdown for tables of numbers: like [`Table::render_markdown`], with every column but the
    /// first right-aligned (`| --- | ---: |`).
    pub fn render_markdown_numeric(&self) -> String {
        let cols = self.columns();
        let mut out = markdown_line(cols, &self.header);
        let rule: Vec<String> = (0..cols)
            .map(|i| if i == 0 { "---".into() } else { "---:".into() })
            .collect();
        out.push_str(&markdown_line(cols, &rule));
        self.markdown_rows(cols, out)
    }

    fn columns(&self) -> usize {
        self.rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0)
    }

    fn markdown_rows(&self, cols: usize, mut out: String) -> String {
        for r in &self.rows {
            out.push_str(&markdown_line(cols, r));
        }
        out
    }
}

/// One Markdown table line of `cols` cells (missing cells empty, `|` escaped).
fn markdown_line(cols: usize, cells: &[String]) -> String {
    let cells: Vec<String> = (0..cols)
        .map(|i| cells.get(i).map_or("", String::as_str).replace('|', "\\|"))
        .collect();
    format!("| {} |\n", cells.join(" | "))
}

/// A duration in milliseconds with a precision that suits its size: `0.153 ms`, `12.4 ms`, `3001 ms`.
pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v < 10.0 {
        format!("{v:.3} ms")
    } else if v < 100.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

/// Nearest-rank percentiles of a small sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantiles {
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest sample.
    pub max: Duration,
}

impl Quantiles {
    /// Percentiles of `samples`, or `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let at = |q: f64| {
            let rank = (q * s.len() as f64).ceil() as usize;
            s[rank.clamp(1, s.len()) - 1]
        };
        (!s.is_empty()).then(|| Quantiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: s[s.len() - 1],
        })
    }
}

/// Bytes as KiB/MiB text: `812 B`, `7.3 KiB`, `41.2 MiB`; negative values keep their sign.
pub fn bytes(v: i64) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs() as f64;
    if a < 1024.0 {
        format!("{v} B")
    } else if a < 1024.0 * 1024.0 {
        format!("{sign}{:.1} KiB", a / 1024.0)
    } else {
        format!("{sign}{:.1} MiB", a / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_aligns_columns() {
        let mut t = Table::new(&["k", "probes"]);
        t.row(["1", "10"]).row(["128", "9"]);
        assert_eq!(
            t.render(),
            "k    probes\n-----------\n1        10\n128       9\n"
        );
    }

    #[test]
    fn markdown() {
        let mut t = Table::new(&["k", "v"]);
        t.row(["a|b", "1"]).row(["c"]);
        assert_eq!(
            t.render_markdown(),
            "| k | v |\n|---|---|\n| a\\|b | 1 |\n| c |  |\n"
        );
    }

    #[test]
    fn quantiles_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let q = Quantiles::of(&(1..=10).rev().map(ms).collect::<Vec<_>>()).unwrap();
        assert_eq!((q.p50, q.p90, q.p99, q.max), (ms(5), ms(9), ms(10), ms(10)));
        assert_eq!(Quantiles::of(&[]), None);
        assert_eq!(Quantiles::of(&[ms(7)]).unwrap().p50, ms(7));
    }

    #[test]
    fn ms_formatting() {
        assert_eq!(ms(Duration::from_micros(153)), "0.153 ms");
        assert_eq!(ms(Duration::from_micros(12_400)), "12.4 ms");
        assert_eq!(ms(Duration::from_millis(3001)), "3001 ms");
    }

    #[test]
    fn byte_formatting() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(-2048), "-2.0 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
