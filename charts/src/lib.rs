//! Hand-written SVG line charts (no plotting dependency), shared by the
//! benchmark report (`bench/`) and the lease simulator (`sim/`).
//!
//! Invariant: a chart is a pure function of its series; axes are linear or
//! log10, chosen by the caller, and every point is drawn inside the plot area.

use std::fmt::Write;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// An SVG colour.
    pub color: &'static str,
    /// Drawn dashed.
    pub dashed: bool,
    /// Points in data units, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    Linear,
    /// Powers of ten evenly spaced.
    Log,
}

/// A chart's text.
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x: &'a str,
    /// Y axis label.
    pub y: &'a str,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

fn map(v: f64, scale: Scale) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log => v.max(1e-12).log10(),
    }
}

fn ticks(lo: f64, hi: f64, scale: Scale) -> Vec<f64> {
    match scale {
        Scale::Log => {
            let (a, b) = (lo.floor() as i32, hi.ceil() as i32);
            // Under two decades, 2x and 5x ticks too, so the axis has labels.
            let steps: &[f64] = if hi - lo < 2.0 { &[1.0, 2.0, 5.0] } else { &[1.0] };
            (a..=b).flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e))).collect()
        }
        Scale::Linear => {
            let span = (hi - lo).max(1e-12);
            let raw = span / 5.0;
            let magnitude = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| span / s <= 6.0).unwrap_or(raw);
            let mut out = Vec::new();
            let mut t = (lo / step).floor() * step;
            while t <= hi + step * 1e-9 {
                if t >= lo - step * 1e-9 {
                    out.push(t);
                }
                t += step;
            }
            out
        }
    }
}

/// Formats a tick value compactly (1.5M, 20k, 0.99).
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Draws `series` with `labels`; `x_tick_label` formats x ticks, `x_ticks`
/// overrides where they go.
pub fn line_chart(
    labels: &Labels<'_>,
    series: &[Series],
    x_scale: Scale,
    y_scale: Scale,
    x_tick_label: &dyn Fn(f64) -> String,
    x_ticks: Option<&[f64]>,
) -> String {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().copied()).collect();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &all {
        let (mx, my) = (map(*x, x_scale), map(*y, y_scale));
        (x0, x1, y0, y1) = (x0.min(mx), x1.max(mx), y0.min(my), y1.max(my));
    }
    if all.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if y_scale == Scale::Linear {
        y0 = y0.min(0.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let px = |v: f64| LEFT + (map(v, x_scale) - x0) / (x1 - x0) * pw;
    let py = |v: f64| TOP + ph - (map(v, y_scale) - y0) / (y1 - y0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        escape(labels.title)
    );
    // `ticks` returns values (not mapped positions) on both scales.
    let x_tick_values = x_ticks.map_or_else(|| ticks(x0, x1, x_scale), <[f64]>::to_vec);
    for v in x_tick_values {
        if map(v, x_scale) < x0 - 1e-9 || map(v, x_scale) > x1 + 1e-9 {
            continue;
        }
        let x = px(v);
        let _ = write!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##, TOP + ph);
        let _ = write!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + ph + 16.0,
            escape(&x_tick_label(v))
        );
    }
    for v in ticks(y0, y1, y_scale) {
        if map(v, y_scale) < y0 - 1e-9 || map(v, y_scale) > y1 + 1e-9 {
            continue;
        }
        let y = py(v);
        let _ = write!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, LEFT + pw);
        let _ = write!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, short(v));
    }
    let _ = write!(s, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 18.0,
        escape(labels.x)
    );
    let _ = write!(
        s,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        escape(labels.y)
    );
    for (i, series) in series.iter().enumerate() {
        let path: Vec<String> = series.points.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let dash = if series.dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
            path.join(" "),
            series.color
        );
        for (x, y) in &series.points {
            let _ = write!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#, px(*x), py(*y), series.color);
        }
        let ly = TOP + 10.0 + i as f64 * 20.0;
        let lx = LEFT + pw + 14.0;
        let _ = write!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{dash}/>"#,
            lx + 24.0,
            series.color
        );
        let _ = write!(s, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, lx + 30.0, ly + 4.0, escape(&series.name));
    }
    s.push_str("</svg>\n");
    s
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_land_inside_the_plot_area() {
        let series = [Series { name: "a".into(), color: "red", dashed: false, points: vec![(1.0, 10.0), (1e6, 1e3)] }];
        let svg = line_chart(&Labels { title: "t", x: "x", y: "y" }, &series, Scale::Log, Scale::Log, &short, None);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for circle in svg.split("<circle").skip(1) {
            let cx: f64 = circle.split("cx=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            let cy: f64 = circle.split("cy=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            assert!((LEFT..=W - RIGHT).contains(&cx), "{cx}");
            assert!((TOP..=H - BOTTOM).contains(&cy), "{cy}");
        }
    }

    #[test]
    fn short_labels() {
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(20_000.0), "20k");
        assert_eq!(short(0.99), "0.99");
    }
}
