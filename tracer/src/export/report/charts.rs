//! The report's charts: inline SVG drawn here (throughput, cwnd/ssthresh, srtt/min_rtt and
//! retransmissions over the session), with no script and nothing fetched.

use super::html::{html, Html, Raw};
use super::{at, si};
use crate::export::flows::{FlowTrack, Session};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Line,
    Dashed,
    Bars,
}

struct Series<'a> {
    label: &'a str,
    color: &'a str,
    kind: Kind,
    points: Vec<(f64, f64)>,
}

/// The smallest of 1, 2, 2.5, 5 x 10^k at or above `v`.
fn nice(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|&c| c >= v * 0.999_999).unwrap_or(10.0 * p)
}

const W: f64 = 560.0;
const H: f64 = 190.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 24.0;

/// One chart: x in seconds from 0 to `x_max`, y from 0 to a round number above the data.
fn chart(title: &str, series: &[Series<'_>], x_max: f64, fmt_y: fn(f64) -> String) -> Html {
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let y_data = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let y_max = nice(y_data * 1.08);
    let x_max = x_max.max(1.0);
    let x = |t: f64| LEFT + (t / x_max).clamp(0.0, 1.0) * pw;
    let y = |v: f64| TOP + ph - (v / y_max).clamp(0.0, 1.0) * ph;
    let mut svg = Html::new();
    html!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {0} {1}" role="img" aria-label="{2}"><text class="ct" x="{3}" y="16">{2}</text>"#,
        W,
        H,
        title,
        LEFT
    );
    legend(&mut svg, series);
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let yy = y(v);
        html!(
            svg,
            r#"<line class="grid" x1="{0}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}"/><text class="ax" x="{3:.1}" y="{4:.1}" text-anchor="end">{5}</text>"#,
            LEFT,
            yy,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            fmt_y(v)
        );
    }
    let step = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0]
        .into_iter()
        .find(|s| x_max / s <= 8.0)
        .unwrap_or(14_400.0);
    let mut t = 0.0;
    while t <= x_max + 1e-9 {
        html!(svg, r#"<text class="ax" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, x(t), H - 6.0, at(t));
        t += step;
    }
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        if s.kind == Kind::Bars {
            let bw = (pw / (x_max + 1.0)).clamp(1.0, 12.0);
            for &(t, v) in s.points.iter().filter(|p| p.1 > 0.0) {
                html!(
                    svg,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                    x(t) - bw / 2.0,
                    y(v),
                    bw,
                    TOP + ph - y(v),
                    s.color
                );
            }
            continue;
        }
        let path: Vec<String> = s.points.iter().map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v))).collect();
        html!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.8" stroke-linejoin="round"{} points="{}"/>"#,
            s.color,
            dash(s.kind),
            path.join(" ")
        );
    }
    html!(svg, r#"<line class="axis" x1="{0}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}"/></svg>"#, LEFT, TOP + ph, LEFT + pw);
    svg
}

/// The dash pattern of a dashed series' stroke.
fn dash(kind: Kind) -> Raw {
    Raw(if kind == Kind::Dashed { r#" stroke-dasharray="5 3""# } else { "" })
}

/// The legend, right-aligned on the title line.
fn legend(svg: &mut Html, series: &[Series<'_>]) {
    let mut lx = W - RIGHT;
    for s in series.iter().rev() {
        lx -= s.label.len() as f64 * 6.4 + 26.0;
        html!(
            svg,
            r#"<line x1="{}" y1="12" x2="{}" y2="12" stroke="{}" stroke-width="{}"{}/><text class="lg" x="{}" y="16">{}</text>"#,
            lx,
            lx + 16.0,
            s.color,
            if s.kind == Kind::Bars { 6 } else { 2 },
            dash(s.kind),
            lx + 20.0,
            s.label
        );
    }
}

pub(super) fn charts(f: &FlowTrack, session: &Session) -> Html {
    let start = session.start_ns();
    let t = |ts: u64| ts.saturating_sub(start) as f64 / 1e9;
    let x_max = session.duration_s();
    let pts = |g: &dyn Fn(&crate::export::flows::Point) -> Option<f64>| -> Vec<(f64, f64)> {
        f.points.iter().filter_map(|p| g(p).map(|v| (t(p.ts_ns), v))).collect()
    };
    let line = |label, color, kind, points| Series { label, color, kind, points };
    let fmt_si: fn(f64) -> String = si;
    let fmt_plain: fn(f64) -> String = |v| if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.1}") };
    let charts = [
        chart(
            "Throughput (bit/s)",
            &[line("goodput", "#2563eb", Kind::Line, pts(&|p| Some(p.throughput_bps)))],
            x_max,
            fmt_si,
        ),
        chart(
            "Congestion window (segments)",
            &[
                line("cwnd", "#0d9488", Kind::Line, pts(&|p| Some(f64::from(p.cwnd)))),
                line("ssthresh", "#d97706", Kind::Dashed, pts(&|p| p.ssthresh.map(f64::from))),
            ],
            x_max,
            fmt_plain,
        ),
        chart(
            "Round-trip time (ms)",
            &[
                line("srtt", "#7c3aed", Kind::Line, pts(&|p| Some(p.srtt_ms))),
                line("min_rtt", "#64748b", Kind::Dashed, pts(&|p| Some(p.min_rtt_ms))),
            ],
            x_max,
            fmt_plain,
        ),
        chart(
            "Retransmissions (segments per second)",
            &[line("retransmitted", "#dc2626", Kind::Bars, pts(&|p| Some(f64::from(p.retrans))))],
            x_max,
            fmt_plain,
        ),
    ];
    let mut out = Html::new();
    for (i, chart) in charts.into_iter().enumerate() {
        if i > 0 {
            html!(out, "\n");
        }
        out.push(chart);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round_numbers_above_the_data() {
        assert_eq!(nice(37.0), 50.0);
        assert_eq!(nice(4.1e6), 5e6);
    }
}
