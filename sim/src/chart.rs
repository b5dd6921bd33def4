//! The simulator's charts: the sweep's series drawn with the shared SVG line
//! chart (`leaseq-charts`, also used by the benchmark report).
//!
//! Invariant: the output depends only on the series given, so charts in the
//! docs are reproducible from the CSV the sweep writes.

use leaseq_charts::{Labels, Scale, line_chart, short};

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

const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];

impl Chart {
    /// The chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let series: Vec<leaseq_charts::Series> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| leaseq_charts::Series {
                name: s.label.clone(),
                color: COLOURS[i % COLOURS.len()],
                dashed: false,
                points: s.points.clone(),
            })
            .collect();
        // On a log axis the sweep's own x values make the clearest ticks.
        let sweep_ticks: Option<Vec<f64>> = match self.series.first() {
            Some(s) if self.log_x && s.points.len() <= 12 => Some(s.points.iter().map(|p| p.0).collect()),
            _ => None,
        };
        let labels = Labels { title: &self.title, x: &self.x_label, y: &self.y_label };
        let x_scale = if self.log_x { Scale::Log } else { Scale::Linear };
        line_chart(&labels, &series, x_scale, Scale::Linear, &short, sweep_ticks.as_deref())
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
