//! Line charts as standalone SVG, written by hand (no plotting dependency).
//!
//! Invariant: the output depends only on the series given, so charts in the
//! docs are reproducible from the CSV the sweep writes.

use std::fmt::Write;

/// One line on a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels, series; x may be logarithmic.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Log-scale x axis.
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];

fn nice_step(span: f64) -> f64 {
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm < 1.5 {
        1.0
    } else if norm < 3.5 {
        2.0
    } else if norm < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn label(v: f64) -> String {
    if v.abs() >= 1000.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.2}") }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl Chart {
    /// The chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let points = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
        for &(x, y) in points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
        if !x_min.is_finite() {
            (x_min, x_max) = (0.0, 1.0);
        }
        if x_max <= x_min {
            x_max = x_min + 1.0;
        }
        let y_step = nice_step(if y_max > 0.0 { y_max } else { 1.0 });
        let y_top = (y_max / y_step).ceil().max(1.0) * y_step;
        let fx = |x: f64| -> f64 {
            let t = if self.log_x && x_min > 0.0 {
                (x.ln() - x_min.ln()) / (x_max.ln() - x_min.ln())
            } else {
                (x - x_min) / (x_max - x_min)
            };
            LEFT + t * (WIDTH - LEFT - RIGHT)
        };
        let fy = |y: f64| HEIGHT - BOTTOM - (y / y_top) * (HEIGHT - TOP - BOTTOM);
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        // Axes, grid and ticks.
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#333"/>"##,
            HEIGHT - BOTTOM,
            WIDTH - RIGHT
        );
        let _ = writeln!(svg, r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#333"/>"##, HEIGHT - BOTTOM);
        let mut y = 0.0;
        while y <= y_top + y_step / 2.0 {
            let py = fy(y);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#eee"/>"##,
                WIDTH - RIGHT
            );
            let _ =
                writeln!(svg, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, py + 4.0, label(y));
            y += y_step;
        }
        // On a log axis the sweep's own x values make the clearest ticks.
        let x_ticks: Vec<f64> = match self.series.first() {
            Some(s) if self.log_x && s.points.len() <= 12 => s.points.iter().map(|p| p.0).collect(),
            _ => {
                let step = nice_step(x_max - x_min);
                let mut ticks = vec![];
                let mut x = (x_min / step).ceil() * step;
                while x <= x_max {
                    ticks.push(x);
                    x += step;
                }
                ticks
            }
        };
        for x in x_ticks {
            let px = fx(x);
            let _ = writeln!(
                svg,
                r#"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
                HEIGHT - BOTTOM + 16.0,
                label(x)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (LEFT + WIDTH - RIGHT) / 2.0,
            HEIGHT - 18.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (TOP + HEIGHT - BOTTOM) / 2.0,
            escape(&self.y_label)
        );
        for (i, series) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = series.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", fx(x), fy(y))).collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            for &(x, y) in &series.points {
                let _ = writeln!(svg, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#, fx(x), fy(y));
            }
            let ly = TOP + 8.0 + 18.0 * i as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{}" y="{:.1}" width="14" height="4" fill="{colour}"/>"#,
                WIDTH - RIGHT - 230.0,
                ly
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{:.1}">{}</text>"#,
                WIDTH - RIGHT - 210.0,
                ly + 6.0,
                escape(&series.label)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_point_and_escapes_text() {
        let chart = Chart {
            title: "a < b".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            series: vec![
                Series { label: "one".into(), points: vec![(1.0, 2.0), (10.0, 5.0), (100.0, 1.0)] },
                Series { label: "two".into(), points: vec![(1.0, 0.0), (100.0, 3.0)] },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 5);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt; b"));
    }
}
