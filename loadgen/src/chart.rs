//! A grouped bar chart in SVG (log scale, with min–max whiskers), written by
//! hand like leaseq-charts' line charts: one group per server, one bar per
//! mode.
//!
//! Invariant: every bar and whisker lies inside the plot area; a missing bar
//! leaves its slot empty.

use std::fmt::Write;

/// One bar: the median and the range over rounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bar {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// One server's bars, in the order of the chart's series names.
#[derive(Debug, Clone)]
pub(crate) struct BarGroup {
    pub(crate) name: String,
    pub(crate) bars: Vec<Option<Bar>>,
}

const COLORS: [&str; 4] = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"];

/// The SVG text of the chart.
pub(crate) fn grouped_bars(title: &str, series: &[&str], groups: &[BarGroup]) -> String {
    let (width, height) = (760.0, 420.0);
    let (left, right, top, bottom) = (80.0, 20.0, 50.0, 70.0);
    let values: Vec<f64> = groups.iter().flat_map(|g| g.bars.iter().flatten().flat_map(|b| [b.min, b.max])).collect();
    let hi = values.iter().copied().fold(1.0_f64, f64::max).log10().ceil().max(1.0);
    let lo = values.iter().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min).log10().floor().min(hi - 1.0);
    let lo = if lo.is_finite() { lo } else { 0.0 };
    let plot_h = height - top - bottom;
    let y = |v: f64| top + plot_h * (1.0 - (v.max(10f64.powf(lo)).log10() - lo) / (hi - lo));
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{title}</text>"#, width / 2.0);
    for e in (lo as i32)..=(hi as i32) {
        let v = 10f64.powi(e);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            width - right,
            left - 6.0,
            y(v) + 4.0,
            leaseq_charts::short(v),
            y = y(v)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">msg/s (log)</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    let slot = (width - left - right) / groups.len().max(1) as f64;
    let bar_w = slot * 0.8 / series.len().max(1) as f64;
    for (gi, group) in groups.iter().enumerate() {
        let x0 = left + slot * gi as f64 + slot * 0.1;
        for (bi, bar) in group.bars.iter().enumerate() {
            let Some(bar) = bar else { continue };
            let x = x0 + bar_w * bi as f64;
            let color = COLORS[bi % COLORS.len()];
            let top_y = y(bar.median);
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{top_y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                bar_w - 2.0,
                (top + plot_h - top_y).max(0.0)
            );
            let cx = x + (bar_w - 2.0) / 2.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
                y(bar.min),
                y(bar.max)
            );
            let _ = writeln!(
                svg,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                y(bar.max) - 4.0,
                leaseq_charts::short(bar.median)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            left + slot * (gi as f64 + 0.5),
            top + plot_h + 18.0,
            group.name
        );
    }
    for (i, name) in series.iter().enumerate() {
        let x = left + 160.0 * i as f64;
        let yl = height - 22.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{yl}">{name}</text>"#,
            yl - 10.0,
            COLORS[i % COLORS.len()],
            x + 16.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stay_inside_the_plot() {
        let groups = vec![
            BarGroup { name: "a".into(), bars: vec![Some(Bar { median: 50.0, min: 40.0, max: 60.0 }), None] },
            BarGroup { name: "b".into(), bars: vec![Some(Bar { median: 2e5, min: 1e5, max: 3e5 }), None] },
        ];
        let svg = grouped_bars("t", &["one", "two"], &groups);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        for part in svg.split(" y=\"").skip(1) {
            let text = part.split('"').next().unwrap();
            let v: f64 = text.parse().unwrap_or_else(|_| panic!("y={text:?}"));
            assert!((0.0..=420.0).contains(&v), "{v}");
        }
    }
}
