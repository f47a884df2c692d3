//! The flow's history drawn: line charts with the fixes marked, sparklines when the screen is
//! small, and the CA-state timeline with its legend.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Sparkline, Widget};

use crate::analysis::flow_table::{Flow, HistoryPoint};
use crate::analysis::sample::CaState;
use crate::tui::format;
use crate::tui::panels::Mark;
use crate::tui::view::{ca_color, dim};

fn ca_glyph(ca: CaState) -> &'static str {
    // Height grows with severity, so the timeline reads without colour too.
    match ca {
        CaState::Open => "▁",
        CaState::Disorder => "▃",
        CaState::Cwr => "▄",
        CaState::Recovery => "▆",
        CaState::Loss => "█",
    }
}

/// Retransmissions per history bucket, without the bucket still filling up (its count so far
/// would read as a drop): a count, unlike the other series, which are rates or levels.
pub(super) fn retrans_series(flow: &Flow, history: &[&HistoryPoint], step_ns: u64) -> Vec<u64> {
    let mut complete = history;
    if let Some((last, rest)) = history.split_last() {
        if !flow.is_closed() && last.ts_ns.saturating_add(step_ns) > flow.last_seen_ns {
            complete = rest;
        }
    }
    complete.iter().map(|h| u64::from(h.retrans)).collect()
}

/// The last `n` points that fit in `width` cells, and the sub-area ending at the right edge
/// that they fill (so "now" is always at the right).
fn right_aligned(area: Rect, n: usize) -> (Rect, usize) {
    let n = n.min(usize::from(area.width));
    let w = u16::try_from(n).unwrap_or(area.width);
    (Rect { x: area.x + area.width - w, width: w, ..area }, n)
}

fn sparkline(values: &[u64], area: Rect, style: Style, buf: &mut Buffer) {
    let (area, n) = right_aligned(area, values.len());
    let max = values.iter().copied().max().unwrap_or(0).max(1);
    Sparkline::default().data(&values[values.len() - n..]).max(max).style(style).render(area, buf);
}

pub(super) fn ca_timeline(history: &[&HistoryPoint], area: Rect, buf: &mut Buffer) {
    let (area, n) = right_aligned(area, history.len());
    let spans: Vec<Span> = history[history.len() - n..]
        .iter()
        .map(|h| Span::styled(ca_glyph(h.worst_ca_state), Style::new().fg(ca_color(h.worst_ca_state))))
        .collect();
    Line::from(spans).render(area, buf);
}

/// Legend for the timeline, with the share of observed time spent in each state.
pub(super) fn ca_legend(flow: &Flow) -> Line<'static> {
    let total: u64 = flow.ca_time_ns.iter().sum();
    let mut spans = Vec::new();
    for ca in CaState::ALL {
        let share = if total > 0 { flow.ca_time_ns[ca.index()] as f64 / total as f64 } else { 0.0 };
        spans.push(Span::styled(ca_glyph(ca), Style::new().fg(ca_color(ca))));
        spans.push(Span::raw(format!(" {} {:.0}%  ", ca.name(), share * 100.0)));
    }
    Line::from(spans)
}

const LABEL_WIDTH: u16 = 7;
const VALUE_WIDTH: u16 = 24;

pub(super) fn render_sparklines(flow: &Flow, history: &[&HistoryPoint], retrans: &[u64], area: Rect, buf: &mut Buffer) {
    let untitled = Block::bordered().border_style(dim());
    let chart_width = untitled.inner(area).width.saturating_sub(LABEL_WIDTH + VALUE_WIDTH);
    let shown = history.len().min(usize::from(chart_width));
    let block = untitled.title(format!(" last {shown} s, 1 cell = 1 s "));
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let s = &flow.latest;
    let rows: [(&str, Vec<u64>, String, Color); 4] = [
        (
            "thpt",
            history.iter().map(|h| h.throughput_bps as u64).collect(),
            format::rate(flow.rates.throughput_bps),
            Color::Green,
        ),
        (
            "cwnd",
            history.iter().map(|h| u64::from(h.cwnd)).collect(),
            format!("{} (ssthresh {})", s.snd_cwnd, format::ssthresh(s.snd_ssthresh)),
            Color::Cyan,
        ),
        (
            "rtt",
            history.iter().map(|h| u64::from(h.srtt_us)).collect(),
            format!("{} ms (min {})", format::ms(s.srtt_us), format::ms(s.min_rtt_us)),
            Color::Yellow,
        ),
        ("retr/s", retrans.to_vec(), format!("{:.1}/s", flow.rates.retrans_per_sec), Color::Red),
    ];
    let lines = Layout::vertical([Constraint::Length(1); 6]).split(inner);
    let columns = |r: Rect| {
        Layout::horizontal([Constraint::Length(LABEL_WIDTH), Constraint::Min(0), Constraint::Length(VALUE_WIDTH)])
            .areas::<3>(r)
    };
    for (i, (label, values, now, color)) in rows.into_iter().enumerate() {
        let [l, chart, v] = columns(lines[i]);
        Span::styled(label, dim()).render(l, buf);
        sparkline(&values, chart, Style::new().fg(color), buf);
        Paragraph::new(now).right_aligned().render(v, buf);
    }
    let [l, chart, v] = columns(lines[4]);
    Span::styled("ca", dim()).render(l, buf);
    ca_timeline(history, chart, buf);
    Paragraph::new(s.ca_state.name()).style(Style::new().fg(ca_color(s.ca_state))).right_aligned().render(v, buf);
    ca_legend(flow).render(lines[5], buf);
}

/// One line of a chart: (seconds before now, value) points.
struct Series {
    name: &'static str,
    points: Vec<(f64, f64)>,
    color: Color,
}

fn series(name: &'static str, points: Vec<(f64, f64)>, color: Color) -> Series {
    Series { name, points, color }
}

/// A line chart over the history; x is seconds before the newest point. `marks` (x, undo) are
/// drawn as vertical lines: where a fix switched the flow, and where it was undone.
fn line_chart(
    area: Rect,
    buf: &mut Buffer,
    title: String,
    mut lines: Vec<Series>,
    marks: &[(f64, bool)],
    y_label: fn(f64) -> String,
) {
    let all = || lines.iter().flat_map(|s| s.points.iter());
    let oldest = all().map(|p| p.0).fold(0.0_f64, f64::min).min(-1.0);
    let top = all().map(|p| p.1).fold(0.0_f64, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    for &(x, undo) in marks.iter().filter(|(x, _)| *x >= oldest) {
        let (name, color) = if undo { ("undo", Color::Gray) } else { ("fix", Color::LightRed) };
        lines.push(series(name, vec![(x, 0.0), (x, top)], color));
    }
    let datasets: Vec<Dataset> = lines
        .iter()
        .map(|s| {
            Dataset::default()
                .name(s.name)
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(s.color))
                .data(&s.points)
        })
        .collect();
    let chart = Chart::new(datasets)
        .block(Block::bordered().title(title).border_style(dim()))
        .x_axis(Axis::default().bounds([oldest, 0.0]).labels([format!("{oldest:.0}s"), "now".into()]).style(dim()))
        .y_axis(
            Axis::default().bounds([0.0, top]).labels([y_label(0.0), y_label(top / 2.0), y_label(top)]).style(dim()),
        );
    chart.render(area, buf);
}

pub(super) fn render_charts(history: &[&HistoryPoint], retrans: &[u64], marks: &[Mark], area: Rect, buf: &mut Buffer) {
    let Some(newest) = history.last().map(|h| h.ts_ns) else {
        Paragraph::new("no history yet").style(dim()).render(area, buf);
        return;
    };
    let x = |h: &HistoryPoint| -((newest - h.ts_ns) as f64 / 1e9);
    let marks: Vec<(f64, bool)> =
        marks.iter().map(|m| (-((newest as f64 - m.ts_ns as f64) / 1e9).max(0.0), m.undo)).collect();
    let [top, bottom] = Layout::vertical([Constraint::Fill(1); 2]).areas(area);
    let [a, b] = Layout::horizontal([Constraint::Fill(1); 2]).areas(top);
    let [c, d] = Layout::horizontal([Constraint::Fill(1); 2]).areas(bottom);
    let last = history[history.len() - 1];

    let thpt: Vec<(f64, f64)> = history.iter().map(|h| (x(h), f64::from(h.throughput_bps) / 1e6)).collect();
    line_chart(
        a,
        buf,
        format!(" throughput, Mbit/s · now {} ", format::rate(f64::from(last.throughput_bps))),
        vec![series("thpt", thpt, Color::Green)],
        &marks,
        |v| format!("{v:.1}"),
    );

    let cwnd: Vec<(f64, f64)> = history.iter().map(|h| (x(h), f64::from(h.cwnd))).collect();
    let ssthresh: Vec<(f64, f64)> = history
        .iter()
        .filter(|h| h.ssthresh < format::INFINITE_SSTHRESH)
        .map(|h| (x(h), f64::from(h.ssthresh)))
        .collect();
    line_chart(
        b,
        buf,
        format!(" cwnd / ssthresh, segments · now {} / {} ", last.cwnd, format::ssthresh(last.ssthresh)),
        vec![series("cwnd", cwnd, Color::Cyan), series("ssthresh", ssthresh, Color::Magenta)],
        &marks,
        |v| format!("{v:.0}"),
    );

    let rtt: Vec<(f64, f64)> = history.iter().map(|h| (x(h), f64::from(h.srtt_us) / 1000.0)).collect();
    let min_rtt: Vec<(f64, f64)> = history.iter().map(|h| (x(h), f64::from(h.min_rtt_us) / 1000.0)).collect();
    line_chart(
        c,
        buf,
        format!(" srtt / min_rtt, ms · now {} / {} ", format::ms(last.srtt_us), format::ms(last.min_rtt_us)),
        vec![series("srtt", rtt, Color::Yellow), series("min_rtt", min_rtt, Color::Blue)],
        &marks,
        |v| format!("{v:.1}"),
    );

    let peak = retrans.iter().copied().max().unwrap_or(0);
    let latest = retrans.last().copied().unwrap_or(0);
    let block = Block::bordered()
        .title(format!(" retransmitted segments/s · last full second {latest}, peak {peak} "))
        .border_style(dim());
    let inner = block.inner(d);
    block.render(d, buf);
    sparkline(retrans, inner, Style::new().fg(Color::Red), buf);
}
