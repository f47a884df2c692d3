//! The detail view of one flow: who it is, its numbers now, its history (charts when there is
//! room, one-line sparklines when not), a CA-state timeline, and the verdict with evidence and
//! the exact fix commands.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Sparkline, Widget};

use super::fixing;
use super::format;
use super::origin::Origin;
use super::state::{AppState, Whereabouts};
use super::view::{ca_color, dim, CLOSED_MARK, FLAG_MARK};
use crate::analysis::container::Runtime;
use crate::analysis::diagnosis::{is_loss_based, Verdict};
use crate::analysis::event::CaState;
use crate::analysis::model::{Flow, HistoryPoint};

/// Full charts need this much room; below it the history is drawn as sparklines.
const CHARTS_MIN_WIDTH: u16 = 100;
const CHARTS_MIN_HEIGHT: u16 = 32;

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

pub(crate) fn render(state: &AppState, area: Rect, buf: &mut Buffer) {
    let Some(detail) = state.detail_copy() else {
        Paragraph::new("this flow is gone (closed and expired); Esc goes back")
            .style(dim())
            .centered()
            .render(area, buf);
        return;
    };
    let (flow, verdict) = (&detail.flow, detail.verdict.as_ref());
    let full = area.width >= CHARTS_MIN_WIDTH && area.height >= CHARTS_MIN_HEIGHT;
    // (In the panel, inside its borders.)
    let whereabouts =
        where_lines(flow, &detail.whereabouts, if full { area.width } else { area.width.saturating_sub(2) });
    // Where the flow lives goes under its identity when there is room, else at the top of the
    // scrolling panel, where it can be read on any screen.
    let (ident, lead) = if full {
        (ident_lines(flow, verdict, &detail.whereabouts, whereabouts, area.width), Vec::new())
    } else {
        (ident_lines(flow, verdict, &detail.whereabouts, Vec::new(), area.width), whereabouts)
    };
    let ident_height = u16::try_from(ident.len()).unwrap_or(u16::MAX).min(if full { 9 } else { 3 });
    let history: Vec<&HistoryPoint> = flow.history().collect();
    let step = state.history_step_ns;
    let retrans = retrans_series(flow, &history, step);
    // A fix that switched this flow: its numbers either side, and where on the charts.
    let compared = fixing::before_after_lines(&state.actions, flow.cookie(), &history, step);
    let marks = fixing::marks(&state.actions, flow.cookie());
    if full {
        let rest = area.height.saturating_sub(ident_height + 4);
        let charts_height = (rest * 11 / 20).max(16).min(rest);
        let [id, charts, ca, verdict_area] = Layout::vertical([
            Constraint::Length(ident_height),
            Constraint::Length(charts_height),
            Constraint::Length(4),
            Constraint::Min(0),
        ])
        .areas(area);
        Paragraph::new(ident).render(id, buf);
        render_charts(&history, &retrans, &marks, charts, buf);
        let block = Block::bordered().title(" congestion-avoidance state, 1 cell = 1 s ").border_style(dim());
        let inner = block.inner(ca);
        block.render(ca, buf);
        let [timeline, legend] = Layout::vertical([Constraint::Length(1); 2]).areas(inner);
        ca_timeline(&history, timeline, buf);
        ca_legend(flow).render(legend, buf);
        render_verdict(state, verdict, compared, lead, verdict_area, buf);
    } else {
        let [id, hist, verdict_area] =
            Layout::vertical([Constraint::Length(ident_height), Constraint::Length(8), Constraint::Min(0)]).areas(area);
        Paragraph::new(ident).render(id, buf);
        render_sparklines(flow, &history, &retrans, hist, buf);
        render_verdict(state, verdict, compared, lead, verdict_area, buf);
    }
}

/// Pack `chunks` into lines of at most `width` columns, two spaces apart, never splitting one.
fn pack(chunks: Vec<Vec<Span<'static>>>, width: u16, out: &mut Vec<Line<'static>>) {
    let width = usize::from(width).max(1);
    let mut line: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    for chunk in chunks {
        let w: usize = chunk.iter().map(Span::width).sum();
        if used > 0 && used + 2 + w > width {
            out.push(Line::from(std::mem::take(&mut line)));
            used = 0;
        }
        if used > 0 {
            line.push(Span::raw("  "));
            used += 2;
        }
        line.extend(chunk);
        used += w;
    }
    if !line.is_empty() {
        out.push(Line::from(line));
    }
}

fn ident_lines(
    flow: &Flow,
    verdict: Option<&Verdict>,
    whereabouts: &Whereabouts,
    where_lines: Vec<Line<'static>>,
    width: u16,
) -> Vec<Line<'static>> {
    let s = &flow.latest;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut who: Vec<Vec<Span<'static>>> = Vec::new();
    if verdict.is_some_and(|v| v.flagged) {
        who.push(vec![Span::styled(
            format!("{FLAG_MARK} flagged"),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )]);
    }
    if flow.is_closed() {
        who.push(vec![Span::styled(format!("{CLOSED_MARK} closed"), dim())]);
    }
    who.push(vec![Span::styled(format!("{} → {}", s.local, s.remote), bold)]);
    who.push(vec![Span::styled(s.cc.clone(), Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD))]);
    who.push(vec![Span::raw(s.tcp_state.name())]);
    who.push(vec![Span::raw(match &s.owner {
        Some(o) => format!("{} (pid {})", o.comm, o.pid),
        None => "process unknown".into(),
    })]);
    // Where the flow lives, in short, when its full account is not right below.
    if where_lines.is_empty() {
        let origin = Origin::of(s.cgroup_id, whereabouts.cgroup.as_ref());
        who.push(vec![Span::styled(origin.full(), Style::new().fg(Color::Cyan))]);
    }
    who.push(vec![Span::styled(format!("seen {:.0} s", flow.age_secs()), dim())]);

    let kv = |k: &str, v: String| vec![Span::styled(format!("{k} "), dim()), Span::raw(v)];
    let r = &flow.rates;
    let numbers = vec![
        kv("cwnd", s.snd_cwnd.to_string()),
        kv("ssthresh", format::ssthresh(s.snd_ssthresh)),
        kv(
            "rtt",
            format!("{} ms (min {}, var {})", format::ms(s.srtt_us), format::ms(s.min_rtt_us), format::ms(s.rttvar_us)),
        ),
        kv("mss", s.mss.to_string()),
        kv("in flight", s.packets_out.to_string()),
        kv("thpt", format::rate(r.throughput_bps)),
        kv("delivery", format::rate(s.delivery_rate_bps as f64)),
        kv("pacing", format::rate(s.pacing_rate_bps as f64)),
        kv("retrans", format!("{} ({:.1}/s)", format::pct(r.retrans_ratio), r.retrans_per_sec)),
        kv("sent", format::bytes(s.bytes_sent)),
        kv("received", format::bytes(s.bytes_received)),
    ];
    let mut lines = Vec::new();
    pack(who, width, &mut lines);
    lines.extend(where_lines);
    pack(numbers, width, &mut lines);
    lines
}

/// Where the flow lives: its container, its cgroup, its network namespace with the default
/// congestion control there, and the host's lists; a hint when the namespace's default is
/// loss-based and the host does not let namespaces choose bbr.
fn where_lines(flow: &Flow, w: &Whereabouts, width: u16) -> Vec<Line<'static>> {
    let s = &flow.latest;
    let kv = |k: &str, v: String| vec![Span::styled(format!("{k} "), dim()), Span::raw(v)];
    let room = usize::from(width).saturating_sub(7);
    let mut chunks = Vec::new();
    match w.cgroup.as_ref().and_then(|c| c.container.as_ref()) {
        Some(c) if c.runtime == Runtime::Systemd => chunks.push(kv("unit", c.id.clone())),
        Some(c) => {
            let name = c.name.clone().unwrap_or_else(|| "(no name)".into());
            chunks.push(kv("container", format!("{name} ({})", c.runtime.name())));
            chunks.push(kv("id", c.short_id().to_string()));
            if let Some(p) = &c.pod {
                chunks.push(kv("pod", format!("{}/{}", p.namespace, p.name)));
            }
        }
        None => chunks.push(kv("container", "none".into())),
    }
    let path = match &w.cgroup {
        Some(c) => format!("{} (id {})", format::truncate_middle(&c.path, room.saturating_sub(12)), s.cgroup_id),
        None => format!("{} (path unknown)", s.cgroup_id),
    };
    chunks.push(kv("cgroup", path));
    let mut lines = Vec::new();
    pack(chunks, width, &mut lines);

    let default = w.netns_cc.as_deref().unwrap_or("unknown");
    let host = if w.host_netns { " (host)" } else { "" };
    let list = |l: &[String]| if l.is_empty() { "unknown".to_string() } else { l.join(" ") };
    let cc = vec![
        kv("netns", format!("{}{host}, default cc {default}", s.netns)),
        kv("host cc:", format!("available {}, allowed in namespaces {}", list(&w.available_cc), list(&w.allowed_cc))),
    ];
    pack(cc, width, &mut lines);

    if let Some(hint) = bbr_hint(w) {
        for l in format::wrap(&hint, usize::from(width).max(1)) {
            lines.push(Line::styled(l, Style::new().fg(Color::Yellow)));
        }
    }
    lines
}

/// A namespace whose default is loss-based while the host does not allow bbr in namespaces
/// cannot be switched to bbr from inside: worth knowing before trying the fix. (A hint: the
/// lists may be stale, and a socket may have chosen its cc itself.)
fn bbr_hint(w: &Whereabouts) -> Option<String> {
    let default = w.netns_cc.as_deref()?;
    if w.host_netns || !is_loss_based(default) || w.allowed_cc.is_empty() || w.allowed_cc.iter().any(|c| c == "bbr") {
        return None;
    }
    let available = w.available_cc.iter().any(|c| c == "bbr");
    Some(if available {
        format!(
            "hint: this namespace defaults to {default} (loss-based) and the host does not allow bbr for \
             namespaces: add it to net.ipv4.tcp_allowed_congestion_control on the host first"
        )
    } else {
        format!(
            "hint: this namespace defaults to {default} (loss-based) and bbr is neither available nor allowed on \
             the host: load tcp_bbr and add it to net.ipv4.tcp_allowed_congestion_control first"
        )
    })
}

/// Retransmissions per history bucket, without the bucket still filling up (its count so far
/// would read as a drop): a count, unlike the other series, which are rates or levels.
fn retrans_series(flow: &Flow, history: &[&HistoryPoint], step_ns: u64) -> Vec<u64> {
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

fn ca_timeline(history: &[&HistoryPoint], area: Rect, buf: &mut Buffer) {
    let (area, n) = right_aligned(area, history.len());
    let spans: Vec<Span> = history[history.len() - n..]
        .iter()
        .map(|h| Span::styled(ca_glyph(h.worst_ca_state), Style::new().fg(ca_color(h.worst_ca_state))))
        .collect();
    Line::from(spans).render(area, buf);
}

/// Legend for the timeline, with the share of observed time spent in each state.
fn ca_legend(flow: &Flow) -> Line<'static> {
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

fn render_sparklines(flow: &Flow, history: &[&HistoryPoint], retrans: &[u64], area: Rect, buf: &mut Buffer) {
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

fn render_charts(history: &[&HistoryPoint], retrans: &[u64], marks: &[fixing::Mark], area: Rect, buf: &mut Buffer) {
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

/// The verdict panel's lines, wrapped to `width`; `lead` (where the flow lives, when the view
/// had no room for it above) follows the verdict's text.
fn verdict_lines(verdict: Option<&Verdict>, lead: Vec<Line<'static>>, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width).max(1);
    let mut out = Vec::new();
    let para = |text: &str, style: Style, indent: usize, out: &mut Vec<Line<'static>>| {
        for l in format::wrap(text, width.saturating_sub(indent)) {
            out.push(Line::styled(format!("{}{l}", " ".repeat(indent)), style));
        }
    };
    let with_lead = |mut out: Vec<Line<'static>>| {
        if !lead.is_empty() {
            out.push(Line::raw(""));
            out.extend(lead);
        }
        out
    };
    let Some(v) = verdict else {
        para("no verdict yet: the first one comes after a few seconds of samples", dim(), 0, &mut out);
        return with_lead(out);
    };
    // An unflagged verdict's text already opens with the description.
    if !v.text.starts_with(v.limited_by.describe()) {
        para(v.limited_by.describe(), Style::new().add_modifier(Modifier::BOLD), 0, &mut out);
    }
    para(&v.text, Style::new(), 0, &mut out);
    let mut out = with_lead(out);
    if let Some(e) = &v.evidence {
        out.push(Line::raw(""));
        let loss = if e.loss_ratio > 0.0 { format::pct(e.loss_ratio) } else { "0%".into() };
        let mut evidence = format!(
            "evidence: retransmitted {loss} of bytes sent · srtt {:.1} ms · min_rtt {:.1} ms · mean cwnd {:.0} x {} B · goodput {}",
            e.srtt_ms,
            e.min_rtt_ms,
            e.mean_cwnd,
            e.mss,
            format::rate(e.goodput_bps),
        );
        // Without loss the Mathis bound is infinite: nothing to compare with.
        if e.mathis_bps.is_finite() {
            evidence.push_str(&format!(" · Mathis bound {}", format::rate(e.mathis_bps)));
        }
        evidence.push_str(&format!(
            " · busy {:.0}% · rwnd-limited {:.0}% · sndbuf-limited {:.0}%",
            e.busy_share * 100.0,
            e.rwnd_share * 100.0,
            e.sndbuf_share * 100.0,
        ));
        // The signals that decided (loss episodes, the queue at them, the standing queue).
        if !e.decided_by.is_empty() {
            evidence.push_str(&format!(" · decided by: {}", e.decided_by));
        }
        para(&evidence, Style::new().fg(Color::Gray), 0, &mut out);
    }
    if !v.fix.is_empty() {
        out.push(Line::raw(""));
        out.push(Line::styled("fix (as root):", Style::new().add_modifier(Modifier::BOLD)));
        // Wrapped so that each row pasted alone still means what the line means: a comment's
        // tail is a comment, a command's tail follows a backslash (never a command of its own).
        for cmd in &v.fix {
            for row in format::wrap_shell(cmd, width.saturating_sub(2)) {
                let style = if row.trim_start().starts_with('#') {
                    dim()
                } else {
                    Style::new().fg(Color::Green).add_modifier(Modifier::BOLD)
                };
                out.push(Line::styled(format!("  {row}"), style));
            }
        }
    }
    out
}

fn render_verdict(
    state: &AppState,
    verdict: Option<&Verdict>,
    compared: Vec<Line<'static>>,
    lead: Vec<Line<'static>>,
    area: Rect,
    buf: &mut Buffer,
) {
    let title = match verdict {
        Some(v) if v.flagged => Line::styled(
            format!(" {FLAG_MARK} FLAGGED · limited by {} ", v.limited_by.name()),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        Some(v) => Line::raw(format!(" verdict · limited by {} ", v.limited_by.name())),
        None => Line::raw(" verdict "),
    };
    let mut block = Block::bordered().title(title).border_style(dim());
    let inner = block.inner(area);
    // Before/after a fix first: it is what the user just did.
    let mut lines = compared;
    lines.extend(verdict_lines(verdict, lead, inner.width));
    let max_scroll = u16::try_from(lines.len().saturating_sub(usize::from(inner.height))).unwrap_or(u16::MAX);
    state.detail_max_scroll.set(max_scroll);
    state.page_rows.set(usize::from(inner.height.max(1)));
    let scroll = state.detail_scroll.min(max_scroll);
    if max_scroll > 0 {
        let more = if scroll < max_scroll { "↓ more, j/k scroll" } else { "k scrolls up" };
        block = block.title_bottom(Line::styled(format!(" {more} "), Style::new().fg(Color::Yellow)).right_aligned());
    }
    block.render(area, buf);
    Paragraph::new(lines).scroll((scroll, 0)).render(inner, buf);
}
