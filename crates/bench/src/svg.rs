//! The report's charts as standalone SVG files, drawn by hand (four chart
//! shapes are all a report needs: distribution rows, lines over deadlines,
//! stacked shares, and x-y lines for quality against cloud share). It knows nothing of runs; callers hand it numbers and
//! labels. Output is plain SVG 1.1 with escaped text.

use super::stats::Distribution;
use std::fmt::Write as _;

const WIDTH: f64 = 860.0;
const LEFT: f64 = 230.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 56.0;
const ROW: f64 = 26.0;
const BOTTOM: f64 = 58.0;
const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

/// A colour from the fixed palette.
pub(crate) fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn open(height: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#ffffff\"/>\n\
         <text x=\"{}\" y=\"24\" font-size=\"16\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    );
    s
}

/// One legend entry: a colour swatch with its name, the text's baseline at
/// (`lx` + 16, `ly`).
fn legend_entry(s: &mut String, lx: f64, ly: f64, fill: &str, name: &str) {
    let _ = writeln!(
        s,
        "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{fill}\"/>\n\
         <text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
        ly - 10.0,
        lx + 16.0,
        escape(name)
    );
}

fn note(s: &mut String, y: f64, text: &str) {
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{y}\" text-anchor=\"middle\" fill=\"#555555\">{}</text>",
        WIDTH / 2.0,
        escape(text)
    );
}

/// A step of 1, 2 or 5 times a power of ten giving about five ticks up to
/// `max`.
pub(crate) fn nice_step(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let raw = max / 5.0;
    let pow = 10f64.powf(raw.log10().floor());
    let m = raw / pow;
    let mult = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    mult * pow
}

/// A tick label with as many decimals as the step needs.
fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 && step < 1.0 {
        (-step.log10().floor()) as usize
    } else {
        0
    };
    format!("{v:.decimals$}")
}

/// Vertical grid lines and tick labels for an x axis from 0 to `max`;
/// returns the scale (units to pixels).
fn x_axis(s: &mut String, max: f64, plot_bottom: f64, label: &str) -> impl Fn(f64) -> f64 {
    let step = nice_step(max);
    let top = (max / step).ceil().max(1.0) * step;
    let plot_w = WIDTH - LEFT - RIGHT;
    let scale = move |v: f64| LEFT + (v.clamp(0.0, top) / top) * plot_w;
    let ticks = (top / step).round() as u32;
    for k in 0..=ticks {
        let t = f64::from(k) * step;
        let x = scale(t);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{plot_bottom}\" stroke=\"#e0e0e0\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            plot_bottom + 16.0,
            fmt_tick(t, step)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        LEFT + plot_w / 2.0,
        plot_bottom + 36.0,
        escape(label)
    );
    scale
}

/// One row of a distribution chart.
pub(crate) struct RangeRow {
    pub(crate) label: String,
    pub(crate) dist: Option<Distribution>,
    /// A vertical marker drawn across the row (the deadline).
    pub(crate) marker: Option<f64>,
    pub(crate) color: usize,
}

/// Rows of distributions: a whisker from min to max, a box from p50 to
/// p95, a dark tick at p99, and a dashed red marker (the deadline).
pub(crate) fn range_chart(title: &str, x_label: &str, rows: &[RangeRow]) -> String {
    let n = rows.len().max(1) as f64;
    let plot_bottom = TOP + n * ROW + 8.0;
    let height = plot_bottom + BOTTOM + 18.0;
    let mut s = open(height, title);
    if rows.iter().all(|r| r.dist.is_none()) {
        note(&mut s, TOP + 20.0, "no data");
    }
    let max = rows
        .iter()
        .flat_map(|r| [r.dist.map(|d| d.max), r.marker])
        .flatten()
        .fold(0.0f64, f64::max);
    let x = x_axis(&mut s, max, plot_bottom, x_label);
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW + ROW / 2.0 + 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + 4.0,
            escape(&row.label)
        );
        if let Some(d) = row.dist {
            let c = color(row.color);
            let _ = writeln!(
                s,
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{c}\" stroke-width=\"1.5\"/>\n\
                 <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{c}\" fill-opacity=\"0.75\"/>\n\
                 <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222222\" stroke-width=\"2\"/>\n\
                 <title>{}</title>",
                x(d.min),
                x(d.max),
                x(d.p50),
                y - 7.0,
                (x(d.p95) - x(d.p50)).max(1.5),
                14.0,
                x(d.p99),
                y - 9.0,
                x(d.p99),
                y + 9.0,
                escape(&format!(
                    "{}: n={} min={:.1} p50={:.1} p95={:.1} p99={:.1} max={:.1}",
                    row.label, d.n, d.min, d.p50, d.p95, d.p99, d.max
                ))
            );
        } else {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#888888\">no data</text>",
                LEFT + 6.0,
                y + 4.0
            );
        }
        if let Some(m) = row.marker {
            let _ = writeln!(
                s,
                "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"#d62728\" stroke-dasharray=\"3,2\"/>",
                x(m),
                y - 11.0,
                y + 11.0
            );
        }
    }
    note(
        &mut s,
        height - 8.0,
        "line: min to max; box: p50 to p95; black tick: p99; red dashes: deadline",
    );
    s.push_str("</svg>\n");
    s
}

/// One line of a line chart: a name and a y value per x position.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) values: Vec<Option<f64>>,
}

/// Lines over categorical x positions (`xs`), y from 0 to `y_max`.
pub(crate) fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[Series],
    y_max: f64,
) -> String {
    let plot_h = 260.0;
    let plot_bottom = TOP + plot_h;
    let legend_rows = series.len().div_ceil(3) as f64;
    let height = plot_bottom + BOTTOM + legend_rows * 18.0 + 10.0;
    let mut s = open(height, title);
    let plot_w = WIDTH - LEFT - RIGHT;
    let y_of = |v: f64| plot_bottom - (v.clamp(0.0, y_max) / y_max) * plot_h;
    let x_of = |i: usize| {
        if xs.len() <= 1 {
            LEFT + plot_w / 2.0
        } else {
            LEFT + 20.0 + i as f64 * (plot_w - 40.0) / (xs.len() - 1) as f64
        }
    };
    for k in 0..=5 {
        let v = y_max * f64::from(k) / 5.0;
        let y = y_of(v);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e0e0e0\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v, y_max / 5.0)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1} {:.1})\">{}</text>",
        LEFT - 48.0,
        TOP + plot_h / 2.0,
        LEFT - 48.0,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (i, label) in xs.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x_of(i),
            plot_bottom + 16.0,
            escape(label)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        LEFT + plot_w / 2.0,
        plot_bottom + 36.0,
        escape(x_label)
    );
    for (k, line) in series.iter().enumerate() {
        let c = color(k);
        let pts: Vec<String> = line
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| format!("{:.1},{:.1}", x_of(i), y_of(v))))
            .collect();
        if pts.len() > 1 {
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"/>",
                pts.join(" ")
            );
        }
        for (i, v) in line.values.iter().enumerate() {
            if let Some(v) = v {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{c}\"><title>{}</title></circle>",
                    x_of(i),
                    y_of(*v),
                    escape(&format!("{} @ {}: {v:.3}", line.name, xs[i]))
                );
            }
        }
        let lx = LEFT + (k % 3) as f64 * 200.0;
        let ly = plot_bottom + BOTTOM + (k / 3) as f64 * 18.0;
        legend_entry(&mut s, lx, ly, c, &line.name);
    }
    s.push_str("</svg>\n");
    s
}

/// One line of an x-y chart: points in data units, drawn in order.
pub(crate) struct XySeries {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) dashed: bool,
}

/// Lines over a continuous x axis from 0 to 1 and a y axis from 0 to 1
/// (shares and accuracies), with an optional highlighted point.
pub(crate) fn xy_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[XySeries],
    marker: Option<(f64, f64)>,
) -> String {
    let plot_h = 320.0;
    let plot_bottom = TOP + plot_h;
    let legend_rows = series.len().div_ceil(2) as f64;
    let height = plot_bottom + BOTTOM + legend_rows * 18.0 + 10.0;
    let mut s = open(height, title);
    let x_of = x_axis(&mut s, 1.0, plot_bottom, x_label);
    let y_of = |v: f64| plot_bottom - v.clamp(0.0, 1.0) * plot_h;
    for k in 0..=5 {
        let v = f64::from(k) / 5.0;
        let y = y_of(v);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e0e0e0\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v, 0.2)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1} {:.1})\">{}</text>",
        LEFT - 48.0,
        TOP + plot_h / 2.0,
        LEFT - 48.0,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (k, line) in series.iter().enumerate() {
        let c = if line.dashed { "#888888" } else { color(k) };
        let pts: Vec<String> = line
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), y_of(y)))
            .collect();
        let dash = if line.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash}>\
             <title>{}</title></polyline>",
            pts.join(" "),
            escape(&line.name)
        );
        let lx = LEFT + (k % 2) as f64 * 300.0;
        let ly = plot_bottom + BOTTOM + (k / 2) as f64 * 18.0;
        legend_entry(&mut s, lx, ly, c, &line.name);
    }
    if let Some((x, y)) = marker {
        let _ = writeln!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\" fill=\"none\" stroke=\"#000000\" stroke-width=\"2\">\
             <title>{}</title></circle>",
            x_of(x),
            y_of(y),
            escape(&format!("chosen: cloud share {x:.3}, accuracy {y:.3}"))
        );
    }
    s.push_str("</svg>\n");
    s
}

/// One stacked bar: parts are fractions in [0, 1] in the order of the
/// chart's part names.
pub(crate) struct StackRow {
    pub(crate) label: String,
    pub(crate) parts: Vec<f64>,
}

/// Horizontal stacked bars of shares (each row sums to at most 1).
pub(crate) fn stacked_chart(title: &str, part_names: &[&str], rows: &[StackRow]) -> String {
    let n = rows.len().max(1) as f64;
    let plot_bottom = TOP + n * ROW + 8.0;
    let height = plot_bottom + BOTTOM + 24.0;
    let mut s = open(height, title);
    let x = x_axis(&mut s, 1.0, plot_bottom, "share of runs");
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW + 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + ROW / 2.0 + 2.0,
            escape(&row.label)
        );
        let mut start = 0.0;
        for (k, part) in row.parts.iter().enumerate() {
            let w = x(start + part) - x(start);
            if w > 0.0 {
                let _ = writeln!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                    x(start),
                    ROW - 8.0,
                    color(k),
                    escape(&format!(
                        "{}: {} {:.1}%",
                        row.label,
                        part_names.get(k).copied().unwrap_or("?"),
                        part * 100.0
                    ))
                );
            }
            start += part;
        }
    }
    for (k, name) in part_names.iter().enumerate() {
        let lx = LEFT + k as f64 * 140.0;
        let ly = plot_bottom + BOTTOM + 4.0;
        legend_entry(&mut s, lx, ly, color(k), name);
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(100.0), 20.0);
        assert_eq!(nice_step(1.0), 0.2);
        assert_eq!(nice_step(730.0), 200.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(fmt_tick(0.6000000000000001, 0.2), "0.6");
        assert_eq!(fmt_tick(400.0, 200.0), "400");
        assert_eq!(fmt_tick(0.05, 0.05), "0.05");
    }

    #[test]
    fn text_is_escaped() {
        let svg = range_chart(
            "a<b & \"c\"",
            "ms",
            &[RangeRow {
                label: "x<y".into(),
                dist: Distribution::of([1.0, 2.0]),
                marker: Some(3.0),
                color: 0,
            }],
        );
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(svg.contains("x&lt;y"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
