//! A gate window's samples as a small server-rendered SVG chart: one point per sample
//! the status keeps (bounded by the controller), coloured by how it counted, against the
//! condition's threshold(s) drawn as dashed lines. Samples without a value (query errors,
//! no data) sit on the bottom edge as crosses. No script, no library.

use std::fmt::Write as _;

use super::html::escape;
use crate::render::time;
use configrollout_api::{GateSample, GateStatus, SampleVerdict};
use configrollout_core::gates::{Comparison, Condition};

/// Width and height of the chart, in CSS pixels.
pub const WIDTH: f64 = 320.0;
/// See [`WIDTH`].
pub const HEIGHT: f64 = 120.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 22.0;

/// The class (and colour) of a sample.
pub fn verdict_class(verdict: SampleVerdict) -> &'static str {
    match verdict {
        SampleVerdict::Successful => "sample-ok",
        SampleVerdict::Failed => "sample-failed",
        SampleVerdict::Inconclusive => "sample-inconclusive",
        SampleVerdict::Error => "sample-error",
    }
}

/// Every `result <op> threshold` of a condition, in the order written.
pub fn thresholds(condition: &str) -> Vec<(Comparison, f64)> {
    fn walk(condition: &Condition, out: &mut Vec<(Comparison, f64)>) {
        match condition {
            Condition::Compare { op, threshold } => out.push((*op, *threshold)),
            Condition::All(inner) | Condition::Any(inner) => walk(inner, out),
            Condition::And(left, right) | Condition::Or(left, right) => {
                walk(left, out);
                walk(right, out);
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(parsed) = Condition::parse(condition) {
        walk(&parsed, &mut out);
    }
    out
}

fn value_of(sample: &GateSample) -> Option<f64> {
    sample
        .value
        .as_deref()
        .and_then(|value| value.parse::<f64>().ok())
        .filter(|value| value.is_finite())
}

/// A number short enough for an axis label.
fn short(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() || text == "-" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// The SVG chart of `gate`'s samples against `condition` (the gate's declared condition,
/// when the spec still declares it).
pub fn gate_chart(gate: &GateStatus, condition: Option<&str>) -> String {
    let limits = condition.map(thresholds).unwrap_or_default();
    let values: Vec<f64> = gate.samples.iter().filter_map(value_of).collect();
    let mut low = 0.0_f64;
    let mut high = f64::MIN;
    for value in values.iter().chain(limits.iter().map(|(_, t)| t)) {
        low = low.min(*value);
        high = high.max(*value);
    }
    if high <= low {
        high = low + 1.0;
    }
    // Headroom, so that a point on the maximum is not drawn on the frame.
    high += (high - low) * 0.1;
    let plot_width = WIDTH - LEFT - RIGHT;
    let plot_height = HEIGHT - TOP - BOTTOM;
    let y = |value: f64| TOP + plot_height * (1.0 - (value - low) / (high - low));
    let count = gate.samples.len();
    let x = |index: usize| {
        if count <= 1 {
            LEFT + plot_width / 2.0
        } else {
            LEFT + plot_width * index as f64 / (count - 1) as f64
        }
    };
    let label = match &gate.region {
        Some(region) => format!("gate {} in {region}", gate.name),
        None => format!("gate {}", gate.name),
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="gate-chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}"><title>{}</title>"#,
        escape(&label),
        escape(&label)
    );
    let _ = write!(
        svg,
        r#"<rect class="frame" x="{LEFT}" y="{TOP}" width="{plot_width}" height="{plot_height}"/>"#
    );
    let _ = write!(
        svg,
        r#"<text class="axis" x="{}" y="{}" text-anchor="end">{}</text><text class="axis" x="{}" y="{}" text-anchor="end">{}</text>"#,
        LEFT - 4.0,
        TOP + 8.0,
        escape(&short(high)),
        LEFT - 4.0,
        TOP + plot_height,
        escape(&short(low))
    );
    for (op, threshold) in &limits {
        let at = y(*threshold);
        let _ = write!(
            svg,
            r#"<line class="threshold" x1="{LEFT}" x2="{}" y1="{at:.1}" y2="{at:.1}"/><text class="threshold-label" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT + plot_width,
            LEFT + plot_width - 2.0,
            at - 3.0,
            escape(&format!("result {} {}", op.symbol(), short(*threshold)))
        );
    }
    let line: Vec<String> = gate
        .samples
        .iter()
        .enumerate()
        .filter_map(|(index, sample)| {
            value_of(sample).map(|value| format!("{:.1},{:.1}", x(index), y(value)))
        })
        .collect();
    if line.len() > 1 {
        let _ = write!(
            svg,
            r#"<polyline class="series" points="{}"/>"#,
            line.join(" ")
        );
    }
    for (index, sample) in gate.samples.iter().enumerate() {
        let class = verdict_class(sample.verdict);
        let mut tip = format!(
            "{} {:?}: {}",
            time(&sample.at),
            sample.verdict,
            sample.value.as_deref().unwrap_or("no value")
        );
        if let Some(message) = &sample.message {
            let _ = write!(tip, " ({message})");
        }
        match value_of(sample) {
            Some(value) => {
                let _ = write!(
                    svg,
                    r#"<circle class="sample {class}" cx="{:.1}" cy="{:.1}" r="3.5" data-value="{}"><title>{}</title></circle>"#,
                    x(index),
                    y(value),
                    escape(&short(value)),
                    escape(&tip)
                );
            }
            None => {
                let (cx, cy) = (x(index), TOP + plot_height);
                let _ = write!(
                    svg,
                    r#"<path class="sample {class}" d="M{:.1},{:.1} l7,7 m0,-7 l-7,7"><title>{}</title></path>"#,
                    cx - 3.5,
                    cy - 3.5,
                    escape(&tip)
                );
            }
        }
    }
    if let (Some(first), Some(last)) = (gate.samples.first(), gate.samples.last()) {
        let clock = |sample: &GateSample| sample.at.0.strftime("%H:%M:%S").to_string();
        let _ = write!(
            svg,
            r#"<text class="axis" x="{LEFT}" y="{}">{}</text><text class="axis" x="{}" y="{}" text-anchor="end">{}</text>"#,
            HEIGHT - 6.0,
            clock(first),
            LEFT + plot_width,
            HEIGHT - 6.0,
            clock(last)
        );
    } else {
        let _ = write!(
            svg,
            r#"<text class="axis" x="{}" y="{}" text-anchor="middle">no samples yet</text>"#,
            LEFT + plot_width / 2.0,
            TOP + plot_height / 2.0
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use configrollout_api::GateVerdict;

    fn sample(second: i64, value: Option<&str>, verdict: SampleVerdict) -> GateSample {
        GateSample {
            at: Time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + second).expect("time"),
            ),
            value: value.map(str::to_owned),
            verdict,
            message: None,
            comparison: None,
        }
    }

    fn gate(samples: Vec<GateSample>) -> GateStatus {
        GateStatus {
            name: "errors".to_owned(),
            region: Some("region-1".to_owned()),
            verdict: Some(GateVerdict::Failed),
            successes: 2,
            failures: 1,
            samples,
            ..GateStatus::default()
        }
    }

    #[test]
    fn thresholds_are_read_from_the_condition() {
        assert_eq!(thresholds("result < 0.1"), vec![(Comparison::Lt, 0.1)]);
        assert_eq!(
            thresholds("all(result >= 1) and result < 5"),
            vec![(Comparison::Ge, 1.0), (Comparison::Lt, 5.0)]
        );
        assert!(thresholds("result <<< 1").is_empty());
    }

    #[test]
    fn samples_are_drawn_against_the_threshold_with_their_verdicts() {
        let chart = gate_chart(
            &gate(vec![
                sample(0, Some("0.02"), SampleVerdict::Successful),
                sample(2, Some("0.03"), SampleVerdict::Successful),
                sample(4, Some("0.5"), SampleVerdict::Failed),
                sample(6, None, SampleVerdict::Error),
            ]),
            Some("result < 0.1"),
        );
        assert!(chart.starts_with("<svg class=\"gate-chart\""), "{chart}");
        assert!(chart.ends_with("</svg>"));
        assert_eq!(chart.matches("class=\"sample sample-ok\"").count(), 2);
        assert_eq!(chart.matches("class=\"sample sample-failed\"").count(), 1);
        assert_eq!(chart.matches("class=\"sample sample-error\"").count(), 1);
        assert!(chart.contains("data-value=\"0.5\""), "{chart}");
        assert!(chart.contains("<line class=\"threshold\""), "{chart}");
        assert!(chart.contains(">result &lt; 0.1</text>"), "{chart}");
        assert!(chart.contains("<polyline class=\"series\""), "{chart}");
        assert!(chart.contains("aria-label=\"gate errors in region-1\""));

        // The failed sample is drawn above the threshold line, the good ones below it
        // (SVG's y grows downwards).
        let cy = |value: &str| -> f64 {
            let at = chart
                .find(&format!("data-value=\"{value}\""))
                .expect("point");
            let before = &chart[..at];
            let start = before.rfind("cy=\"").expect("cy") + 4;
            before[start..]
                .split('"')
                .next()
                .expect("number")
                .parse()
                .expect("cy")
        };
        let line_at = chart.find("<line class=\"threshold\"").expect("line");
        let y1 = &chart[line_at..];
        let y1: f64 = y1[y1.find("y1=\"").expect("y1") + 4..]
            .split('"')
            .next()
            .expect("y1")
            .parse()
            .expect("y1");
        assert!(cy("0.5") < y1 && cy("0.02") > y1, "{chart}");
    }

    #[test]
    fn an_empty_window_says_so() {
        let chart = gate_chart(&gate(Vec::new()), None);
        assert!(chart.contains("no samples yet"), "{chart}");
        assert!(!chart.contains("<circle"));
    }

    #[test]
    fn names_and_messages_are_escaped() {
        let mut status = gate(vec![GateSample {
            message: Some("<b>boom</b>".to_owned()),
            ..sample(0, Some("1"), SampleVerdict::Failed)
        }]);
        status.name = "<script>".to_owned();
        let chart = gate_chart(&status, Some("result < 0.1"));
        assert!(
            !chart.contains("<script>") && !chart.contains("<b>"),
            "{chart}"
        );
        assert!(chart.contains("&lt;b&gt;boom&lt;/b&gt;"), "{chart}");
    }
}
