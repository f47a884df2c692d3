//! The header: who and what is traced on line 1 with the status badges at the right, the
//! counters and the filters in force on line 2, each part dropped whole when the line is short.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::{dim, FLAG_MARK};
use crate::tui::format;
use crate::tui::state::AppState;

const SEP: &str = " │ ";

/// Parts of a line, each with the priority it is dropped by when the line is short (a
/// higher number goes first; 0 stays).
type Parts = Vec<(u8, Vec<Span<'static>>)>;

pub(super) fn render(state: &AppState, area: Rect, buf: &mut Buffer) {
    let [line1, line2] = Layout::vertical([Constraint::Length(1); 2]).areas(area);
    render_title(state, area.width, line1, buf);
    render_counters(state, line2, buf);
}

/// Line 1: who and what is traced, the status badges at the right (always visible).
fn render_title(state: &AppState, screen_width: u16, line1: Rect, buf: &mut Buffer) {
    let badges = badges(state, screen_width);
    let badge_width = u16::try_from(badges.width()).unwrap_or(u16::MAX).min(line1.width);
    let [left, right] = Layout::horizontal([Constraint::Min(0), Constraint::Length(badge_width)]).areas(line1);
    let h = &state.header;
    let mut source = h.source.clone();
    if state.source_ended() {
        source.push_str(" (ended)");
    }
    // The source's description is the long part: it ends at a word, never in one; on a narrow
    // screen the kernel release and then the host name make room for its start.
    let mut fixed: Parts = vec![
        (0, vec![Span::styled("cctrace", Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD))]),
        (2, vec![Span::raw(h.host.clone())]),
        (3, vec![Span::raw(format!("Linux {}", h.kernel))]),
    ];
    let want = Span::raw(source.as_str()).width().min(24);
    for prio in [3, 2] {
        if parts_width(&fixed) + SEP.chars().count() + want <= usize::from(left.width) {
            break;
        }
        fixed.retain(|(p, _)| *p != prio);
    }
    let mut spans = joined(fixed);
    spans.push(Span::styled(SEP, dim()));
    let used: usize = spans.iter().map(Span::width).sum();
    spans.push(Span::raw(fit_words(&source, usize::from(left.width).saturating_sub(used))));
    Line::from(spans).render(left, buf);
    badges.render(right, buf);
}

/// Recording, playback and pause badges.
fn badges(state: &AppState, screen_width: u16) -> Line<'static> {
    let mut badges = Vec::new();
    if let Some(rec) = &state.header.recording {
        let room = usize::from(screen_width / 3).saturating_sub(4);
        badges.push(Span::styled(
            format!(" ● {} ", format::truncate(rec, room)),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(p) = &state.playback {
        let secs = p.position_ns / 1_000_000_000;
        let at = format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
        let text = if p.paused { format!(" ⏸ {at} ") } else { format!(" ▶ {}x {at} ", p.speed) };
        badges.push(Span::styled(text, Style::new().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD)));
    }
    if state.paused {
        badges.push(Span::styled(
            " PAUSED ",
            Style::new().fg(Color::Black).bg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    Line::from(badges)
}

/// Line 2: the counters, then the filters in force, which are never dropped: the other parts
/// make room for them first (at least the first phrase), then they take what is left, whole
/// phrases only.
fn render_counters(state: &AppState, line2: Rect, buf: &mut Buffer) {
    let mut parts = counter_parts(state);
    let width = usize::from(line2.width);
    let filters = state.active_filters();
    let filter_min = filters.first().map_or(0, |f| "filter: ".len() + f.chars().count() + SEP.chars().count());
    for prio in [5, 4, 3, 1] {
        if parts_width(&parts) + filter_min <= width {
            break;
        }
        parts.retain(|(p, _)| *p != prio);
    }
    if !filters.is_empty() {
        let room = width.saturating_sub(parts_width(&parts) + SEP.chars().count());
        parts.push((0, vec![Span::styled(fit_phrases(&filters, room), Style::new().fg(Color::Yellow))]));
    }
    Line::from(joined(parts)).render(line2, buf);
}

/// The counters of line 2, dropped least useful first when the line is too narrow, so none
/// is cut.
fn counter_parts(state: &AppState) -> Parts {
    let c = &state.counters;
    let mut parts: Parts = vec![(0, flow_counts(state)), (3, vec![Span::raw(format!("{:.0} ev/s", c.events_per_sec))])];
    let lost_style =
        if c.source.lost > 0 { Style::new().fg(Color::Red).add_modifier(Modifier::BOLD) } else { Style::new() };
    parts.push((1, vec![Span::styled(format!("lost {}", c.source.lost), lost_style)]));
    // The summary's other counters: shown once they are not zero, since then data is missing.
    for (what, n) in [
        ("decode errors", c.source.decode_errors),
        ("kernel read errors", c.source.kernel_read_errors),
        ("flow map full", c.source.flow_map_full),
    ] {
        if n > 0 {
            parts.push((1, vec![Span::styled(format!("{what} {n}"), Style::new().fg(Color::Yellow))]));
        }
    }
    // Not missing data but what the kernel filter kept out: shown dim, dropped first.
    if c.source.filtered > 0 {
        parts.push((5, vec![Span::styled(format!("filtered {}", c.source.filtered), dim())]));
    }
    if !state.cc_seen.is_empty() {
        let cc: Vec<String> = state.cc_seen.iter().map(|(name, n)| format!("{name} {n}")).collect();
        parts.push((4, vec![Span::raw(format!("cc: {}", cc.join(", ")))]));
    }
    parts
}

/// `flows N (H heavy, F ⚑)`, the flagged count in red.
fn flow_counts(state: &AppState) -> Vec<Span<'static>> {
    let mut flows = vec![Span::raw(format!("flows {}", state.snapshot.len()))];
    let mut extra = format!(" ({} heavy", state.heavy_count);
    if state.flagged_count > 0 {
        flows.push(Span::raw(extra));
        flows.push(Span::styled(
            format!(", {} {FLAG_MARK}", state.flagged_count),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
        extra = String::new();
    }
    extra.push(')');
    flows.push(Span::raw(extra));
    flows
}

/// The width of `parts` joined by separators.
fn parts_width(parts: &Parts) -> usize {
    parts.iter().map(|(_, p)| p.iter().map(Span::width).sum::<usize>()).sum::<usize>()
        + SEP.chars().count() * parts.len().saturating_sub(1)
}

/// The spans of `parts`, separated.
fn joined(parts: Parts) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    for (i, (_, part)) in parts.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(SEP, dim()));
        }
        spans.extend(part);
    }
    spans
}

/// `text` cut at a word to fit `width` columns, "…" marking the cut.
fn fit_words(text: &str, width: usize) -> String {
    if Span::raw(text).width() <= width {
        return text.to_string();
    }
    let mut out = String::new();
    for word in text.split(' ') {
        let next = if out.is_empty() { word.to_string() } else { format!("{out} {word}") };
        if Span::raw(next.as_str()).width() + 1 > width {
            break;
        }
        out = next;
    }
    if width > 0 {
        out.push('…');
    }
    out
}

/// `filter: a, b` with as many whole phrases as fit in `width`, then `+N` for the rest.
fn fit_phrases(phrases: &[String], width: usize) -> String {
    let mut shown = String::from("filter:");
    for (i, p) in phrases.iter().enumerate() {
        let candidate = format!("{shown}{} {p}", if i > 0 { "," } else { "" });
        let rest = phrases.len() - i - 1;
        let tail = if rest > 0 { format!(" +{rest}").len() } else { 0 };
        if candidate.chars().count() + tail > width {
            return format!("{shown} +{}", phrases.len() - i);
        }
        shown = candidate;
    }
    shown
}
