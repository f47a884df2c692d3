//! Drawing the state: header, flow table, footer, help and the empty and tiny-window states.
//! Reads [`AppState`] only (plus the few layout facts it records for paging); the detail view
//! lives in [`super::detail`]. Only the rows on screen are put in order and formatted, so
//! 10,000 flows cost no more to draw than 40.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Widget, Wrap};
use ratatui::Frame;

use super::detail;
use super::format;
use super::state::{AppState, Column, FlowRow, Group, Screen, TableLine};
use crate::analysis::diagnosis::LimitedBy;
use crate::analysis::event::CaState;

/// Below this the full layout cannot work; a one-paragraph summary is drawn instead.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 8;

pub const FLAG_MARK: &str = "⚑";
pub const CLOSED_MARK: &str = "×";

/// Columns kept when the terminal is narrow, most important first.
const PRIORITY: [Column; 15] = [
    Column::Flag,
    Column::Remote,
    Column::Throughput,
    Column::LimitedBy,
    Column::Cc,
    Column::CaState,
    Column::Retrans,
    Column::Container,
    Column::Process,
    Column::Rtt,
    Column::Cwnd,
    Column::Ssthresh,
    Column::Local,
    Column::MinRtt,
    Column::Delivery,
];

const SEP: &str = " │ ";

/// Draw the whole UI into a frame.
pub fn draw(frame: &mut Frame, state: &AppState) {
    frame.render_widget(state, frame.area());
}

impl Widget for &AppState {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            render_tiny(self, area, buf);
            return;
        }
        let [header, body, footer] =
            Layout::vertical([Constraint::Length(2), Constraint::Min(0), Constraint::Length(1)]).areas(area);
        render_header(self, header, buf);
        match self.screen {
            Screen::Table => render_table(self, body, buf),
            Screen::Detail => detail::render(self, body, buf),
        }
        render_footer(self, footer, buf);
        if let Some(panel) = &self.fix_panel {
            super::fixing::render_panel(panel, body, buf);
        }
        if self.help {
            render_help(self, area, buf);
        }
    }
}

pub(crate) fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub(crate) fn ca_color(ca: CaState) -> Color {
    match ca {
        CaState::Open => Color::Green,
        CaState::Disorder => Color::Yellow,
        CaState::Cwr => Color::Cyan,
        CaState::Recovery => Color::Magenta,
        CaState::Loss => Color::Red,
    }
}

fn render_tiny(state: &AppState, area: Rect, buf: &mut Buffer) {
    let mut text = format!("cctrace: {} flows", state.snapshot.len());
    if state.flagged_count > 0 {
        text.push_str(&format!(", {} {FLAG_MARK}", state.flagged_count));
    }
    if state.paused {
        text.push_str(" PAUSED");
    }
    text.push_str(&format!(" (window too small: need {MIN_WIDTH}x{MIN_HEIGHT})"));
    Paragraph::new(text).wrap(Wrap { trim: true }).render(area, buf);
}

fn render_header(state: &AppState, area: Rect, buf: &mut Buffer) {
    let [line1, line2] = Layout::vertical([Constraint::Length(1); 2]).areas(area);
    let h = &state.header;
    let sep = || Span::styled(SEP, dim());

    // Right side of line 1: status badges, always visible.
    let mut badges = Vec::new();
    if let Some(rec) = &h.recording {
        let room = usize::from(area.width / 3).saturating_sub(4);
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
    let badges = Line::from(badges);
    let badge_width = u16::try_from(badges.width()).unwrap_or(u16::MAX).min(line1.width);
    let [left, right] = Layout::horizontal([Constraint::Min(0), Constraint::Length(badge_width)]).areas(line1);

    let mut source = h.source.clone();
    if state.source_ended() {
        source.push_str(" (ended)");
    }
    // The source's description is the long part: it ends at a word, never in one; on a narrow
    // screen the kernel release and then the host name make room for its start.
    let mut fixed: Vec<(u8, Span<'static>)> = vec![
        (0, Span::styled("cctrace", Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD))),
        (2, Span::raw(h.host.clone())),
        (3, Span::raw(format!("Linux {}", h.kernel))),
    ];
    let sep_width = SEP.chars().count();
    let fixed_width = |f: &[(u8, Span)]| f.iter().map(|(_, s)| s.width() + sep_width).sum::<usize>();
    let want = Span::raw(source.as_str()).width().min(24);
    for prio in [3, 2] {
        if fixed_width(&fixed) + want <= usize::from(left.width) {
            break;
        }
        fixed.retain(|(p, _)| *p != prio);
    }
    let mut spans = Vec::new();
    for (_, span) in fixed {
        if !spans.is_empty() {
            spans.push(sep());
        }
        spans.push(span);
    }
    spans.push(sep());
    let used: usize = spans.iter().map(Span::width).sum();
    spans.push(Span::raw(fit_words(&source, usize::from(left.width).saturating_sub(used))));
    Line::from(spans).render(left, buf);
    badges.render(right, buf);

    let c = &state.counters;
    // Line 2 in parts, dropped least useful first when the line is too narrow, so none is cut.
    let mut parts: Vec<(u8, Vec<Span<'static>>)> = Vec::new();
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
    parts.push((0, flows));
    parts.push((3, vec![Span::raw(format!("{:.0} ev/s", c.events_per_sec))]));
    let lost_style = if c.lost > 0 { Style::new().fg(Color::Red).add_modifier(Modifier::BOLD) } else { Style::new() };
    parts.push((1, vec![Span::styled(format!("lost {}", c.lost), lost_style)]));
    // The summary's other counters: shown once they are not zero, since then data is missing.
    for (what, n) in [
        ("decode errors", c.decode_errors),
        ("kernel read errors", c.kernel_read_errors),
        ("flow map full", c.flow_map_full),
    ] {
        if n > 0 {
            parts.push((1, vec![Span::styled(format!("{what} {n}"), Style::new().fg(Color::Yellow))]));
        }
    }
    // Not missing data but what the kernel filter kept out: shown dim, dropped first.
    if c.filtered > 0 {
        parts.push((5, vec![Span::styled(format!("filtered {}", c.filtered), dim())]));
    }
    if !state.cc_seen.is_empty() {
        let cc: Vec<String> = state.cc_seen.iter().map(|(name, n)| format!("{name} {n}")).collect();
        parts.push((4, vec![Span::raw(format!("cc: {}", cc.join(", ")))]));
    }
    let width = usize::from(line2.width);
    let line_width = |parts: &[(u8, Vec<Span<'static>>)]| -> usize {
        parts.iter().map(|(_, p)| p.iter().map(Span::width).sum::<usize>()).sum::<usize>()
            + SEP.chars().count() * parts.len().saturating_sub(1)
    };
    let filters = state.active_filters();
    // The filter is never dropped: the other parts make room for it first (at least its first
    // phrase), then it takes what is left, whole phrases only.
    let filter_min = filters.first().map_or(0, |f| "filter: ".len() + f.chars().count() + SEP.chars().count());
    for prio in [5, 4, 3, 1] {
        if line_width(&parts) + filter_min <= width {
            break;
        }
        parts.retain(|(p, _)| *p != prio);
    }
    if !filters.is_empty() {
        let room = width.saturating_sub(line_width(&parts) + SEP.chars().count());
        parts.push((0, vec![Span::styled(fit_phrases(&filters, room), Style::new().fg(Color::Yellow))]));
    }
    let mut spans = Vec::new();
    for (i, (_, part)) in parts.into_iter().enumerate() {
        if i > 0 {
            spans.push(sep());
        }
        spans.extend(part);
    }
    Line::from(spans).render(line2, buf);
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

fn render_footer(state: &AppState, area: Rect, buf: &mut Buffer) {
    let key = Style::new().fg(Color::Black).bg(Color::Gray);
    let hint = |k: &'static str, what: &'static str| vec![Span::styled(k, key), Span::raw(format!(" {what}  "))];
    let prompt = |label: &'static str, input: &str, help: &[&str]| {
        let mut spans = vec![
            Span::styled(label, key),
            Span::raw(input.to_string()),
            Span::styled("▏", Style::new().fg(Color::Yellow)),
        ];
        // The help after the input, as much of it as fits, never cut in a word.
        let mut room = usize::from(area.width).saturating_sub(spans.iter().map(Span::width).sum());
        let mut text = String::new();
        for (i, part) in help.iter().enumerate() {
            let piece = if i == 0 { format!("  {part}") } else { format!(" · {part}") };
            let w = Span::raw(piece.as_str()).width();
            if w > room {
                break;
            }
            room -= w;
            text.push_str(&piece);
        }
        spans.push(Span::styled(text, dim()));
        Line::from(spans)
    };
    let line = if state.typing_filter {
        prompt("/", &state.filter_input, &["Enter apply", "Esc clear", "address port cc process limited container"])
    } else if state.typing_kernel_filter {
        prompt(
            "trace only:",
            &format!(" {}", state.kernel_filter_input),
            &["container=NAME cgroup=PATH netns=NAME", "empty: all", "Enter apply", "Esc cancel"],
        )
    } else if state.typing_seek {
        prompt("go to:", &format!(" {}", state.seek_input), &["90 · 1:30 · 1m30s", "Enter go", "Esc cancel"])
    } else if let Some(status) = &state.status {
        Line::styled(status.replace(['\n', '\r'], " "), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
    } else {
        // (priority, hint): what does not fit is left out, least needed first (help lists all).
        let hints: Vec<(u8, Vec<Span>)> = match state.screen {
            Screen::Table if state.replay => vec![
                (0, hint("q", "quit")),
                (0, hint("?", "help")),
                (0, hint("space", if state.playback.is_some_and(|p| p.paused) { "play" } else { "pause" })),
                (1, hint("n", "step")),
                (1, hint("←→", "±10 s")),
                (1, hint("+/-", "speed")),
                (2, hint("t", "go to")),
                (2, hint("⏎", "detail")),
                (3, hint("/", "filter")),
                (3, hint("g", if state.grouped { "ungroup" } else { "group" })),
                (4, hint("s/S", "sort")),
            ],
            Screen::Table => vec![
                (0, hint("q", "quit")),
                (0, hint("?", "help")),
                (4, hint("↑↓", "move")),
                (1, hint("⏎", "detail")),
                (1, hint("/", "filter")),
                (2, hint("F", "trace filter")),
                (2, hint("g", if state.grouped { "ungroup" } else { "group" })),
                (2, hint("s/S", "sort")),
                (2, hint("a", if state.show_all { "heavy" } else { "all" })),
                (if state.can_fix && state.flagged_count > 0 { 1 } else { 5 }, hint("f", "fix")),
                // Paused, the way out stays in sight.
                (if state.paused { 1 } else { 3 }, hint("space", if state.paused { "resume" } else { "pause" })),
            ],
            Screen::Detail => vec![
                (0, hint("Esc", "back")),
                (1, hint("↑↓", "scroll")),
                (1, hint("space", if state.paused { "resume" } else { "pause" })),
                (2, hint("F", "trace filter")),
                (if state.can_fix { 1 } else { 5 }, hint("f", "fix")),
                (if state.can_fix && state.fixed_any() { 2 } else { 5 }, hint("u", "undo fix")),
                (0, hint("?", "help")),
                (0, hint("q", "quit")),
            ],
        };
        let width = |h: &[(u8, Vec<Span>)]| -> usize { h.iter().flat_map(|(_, s)| s.iter()).map(Span::width).sum() };
        let mut hints = hints;
        // One at a time, the last of the least needed first (a hint's trailing gap may go).
        while width(&hints) > usize::from(area.width) + 2 {
            let Some(drop) =
                hints.iter().enumerate().filter(|(_, h)| h.0 > 0).max_by_key(|(i, h)| (h.0, *i)).map(|(i, _)| i)
            else {
                break;
            };
            hints.remove(drop);
        }
        Line::from(hints.into_iter().flat_map(|(_, s)| s).collect::<Vec<_>>())
    };
    line.render(area, buf);
}

fn table_title(state: &AppState) -> Line<'static> {
    let total = state.snapshot.len();
    let shown = state.visible.len();
    let flows = if total == 1 { "flow" } else { "flows" };
    let filter = &state.filter;
    // The typed filter is named here too: on a narrow screen the header may cut it off.
    let mut what = match (state.show_all, filter.is_empty()) {
        (true, true) => format!(" all {total} {flows}"),
        (true, false) => format!(" {shown} of {total} {flows} match /{filter}"),
        (false, true) => format!(" {shown} heavy of {total} {flows}"),
        (false, false) => format!(" {shown} heavy of {total} {flows} match /{filter}"),
    };
    if state.grouped {
        let n = state.groups.len();
        what.push_str(&format!(" in {n} {}", if n == 1 { "group" } else { "groups" }));
    }
    what.push(' ');
    // The cells carry no units (to fit more columns): the title line names them.
    Line::from(vec![
        Span::styled(what, Style::new().add_modifier(Modifier::BOLD)),
        Span::styled(format!("· sort {} {} · rates bit/s, rtt ms ", state.sort.title(), state.sort_dir.arrow()), dim()),
    ])
}

fn cell_text(row: &FlowRow, col: Column, narrow: bool) -> String {
    match col {
        Column::Flag => {
            if row.flagged {
                FLAG_MARK.into()
            } else if row.closed {
                CLOSED_MARK.into()
            } else {
                String::new()
            }
        }
        // Narrow: the name alone, so the column can stay.
        Column::Container if narrow => format::truncate(&row.origin.name, 16),
        Column::Container => {
            let full = row.origin.full();
            if full.chars().count() <= 28 {
                full
            } else {
                format::truncate(&row.origin.name, 28)
            }
        }
        Column::Process => format::truncate(row.comm.as_deref().unwrap_or("-"), 15),
        Column::Local => format::truncate_middle(&row.local.to_string(), 28),
        Column::Remote => format::truncate_middle(&row.remote.to_string(), 28),
        Column::Cc => format::truncate(&row.cc, 10),
        Column::CaState => row.ca_state.name().into(),
        Column::Cwnd => row.cwnd.to_string(),
        Column::Ssthresh => format::ssthresh(row.ssthresh),
        Column::Rtt => format::ms(row.srtt_us),
        Column::MinRtt => format::ms(row.min_rtt_us),
        Column::Delivery => format::rate_compact(row.delivery_bps as f64),
        Column::Throughput => format::rate_compact(row.throughput_bps),
        Column::Retrans => format::pct(row.retrans_ratio),
        // A relayed hop names its relay: its own verdict is not the path's.
        Column::LimitedBy => match &row.relayed_by {
            Some(relay) => format!("↪{}", format::truncate(relay, 14)),
            None => row.limited_by.name().into(),
        },
    }
}

fn cell_style(row: &FlowRow, col: Column) -> Style {
    match col {
        Column::Flag if row.flagged => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        Column::CaState if !row.flagged && !row.closed => Style::new().fg(ca_color(row.ca_state)),
        // A flow filling the path loses at its bottleneck: expected, not a warning.
        Column::Retrans
            if !row.flagged && !row.closed && row.limited_by != LimitedBy::Path && row.retrans_ratio >= 0.002 =>
        {
            Style::new().fg(Color::Yellow)
        }
        Column::LimitedBy if row.relayed_by.is_some() => Style::new().fg(Color::Magenta),
        Column::LimitedBy if row.limited_by == LimitedBy::Path && !row.closed => Style::new().fg(Color::Green),
        _ => Style::new(),
    }
}

fn row_style(row: &FlowRow) -> Style {
    if row.flagged {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else if row.closed {
        dim()
    } else {
        Style::new()
    }
}

/// Pick the columns that fit in `width`, by priority, keeping display order.
fn choose_columns(widths: &[u16; 15], width: u16, skip: Option<Column>) -> Vec<usize> {
    let mut take = [false; 15];
    let mut used: u16 = 0;
    for col in PRIORITY {
        if Some(col) == skip {
            continue;
        }
        let i = Column::ALL.iter().position(|c| *c == col).unwrap_or(0);
        let need = widths[i].saturating_add(u16::from(used > 0));
        if used.saturating_add(need) <= width {
            take[i] = true;
            used += need;
        }
    }
    (0..15).filter(|&i| take[i]).collect()
}

/// The findings strip under the table: one line per flagged flow, most held back first, so
/// the answer is on screen without opening anything.
fn findings(state: &AppState) -> Vec<&FlowRow> {
    let mut flagged: Vec<&FlowRow> = state.snapshot.iter().filter(|r| r.flagged && r.finding.is_some()).collect();
    flagged.sort_by(|a, b| b.throughput_bps.total_cmp(&a.throughput_bps).then(a.cookie.cmp(&b.cookie)));
    flagged
}

fn finding_line(row: &FlowRow, width: usize, can_fix: bool) -> Line<'static> {
    let Some(f) = row.finding else { return Line::default() };
    let who = row.comm.clone().unwrap_or_else(|| row.local.to_string());
    let mut text = format!(
        "{who} → {} ({}): {} held back at {} by {} non-congestive loss",
        row.remote,
        row.origin.name,
        row.cc.to_uppercase(),
        format::rate(f.goodput_bps),
        format::pct(f.loss_ratio),
    );
    if let Some(path) = f.available_bps {
        text.push_str(&format!("; the path carried {} without a queue", format::rate(path)));
    }
    // The key that acts on it stays in sight: the description gives way to it.
    let key = if can_fix { "  f: fix" } else { "" };
    Line::from(vec![
        Span::styled(format!("{FLAG_MARK} "), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
        Span::raw(format::truncate(&text, width.saturating_sub(2 + key.len()))),
        Span::styled(key, Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
    ])
}

/// The UDP strip's lines: each heavy UDP flow, then the TCP hops it relays, so the pair is read
/// together.
fn udp_lines(state: &AppState, width: usize) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for row in &state.udp_rows {
        // What to do first, the endpoints last: a narrow terminal cuts the least useful part.
        let mut text = format!(
            "{:<9} {} ({}) out {} in {}: {} · {} → {}",
            row.carries,
            row.owner,
            row.origin.name,
            format::rate(row.tx_bps),
            format::rate(row.rx_bps),
            if row.userspace_vpn {
                "its own TCP stack crosses the path: give it a TUN device"
            } else {
                "its own congestion control decides"
            },
            row.local,
            row.remote,
        );
        text = format::truncate(&text, width.saturating_sub(2));
        lines.push(Line::from(vec![Span::styled("⇅ ", Style::new().fg(Color::Magenta)), Span::raw(text)]));
        for (local, remote, comm) in &row.relays {
            let hop = format!("  ↪ relays TCP {local} → {remote} ({})", comm.as_deref().unwrap_or("-"));
            lines.push(Line::styled(format::truncate(&hop, width), Style::new().fg(Color::Magenta)));
        }
    }
    lines
}

fn render_table(state: &AppState, area: Rect, buf: &mut Buffer) {
    // Heavy UDP flows take the bottom (at most four lines and a rule) unless hidden.
    let udp = if state.show_udp && area.height >= 14 { udp_lines(state, usize::from(area.width)) } else { Vec::new() };
    let udp_height = if udp.is_empty() { 0 } else { udp.len().min(4) as u16 + 1 };
    let [area, udp_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(udp_height)]).areas(area);
    if udp_height > 0 {
        let block = Block::new().borders(Borders::TOP).border_style(dim()).title(Span::styled(
            format!(" UDP: {} heavy, congestion control not the kernel's · U hides ", state.udp_rows.len()),
            Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        ));
        let inner = block.inner(udp_area);
        block.render(udp_area, buf);
        Paragraph::new(udp.into_iter().take(usize::from(udp_height - 1)).collect::<Vec<_>>()).render(inner, buf);
    }
    // The findings take the bottom (at most three lines and a rule), when the table leaves room.
    let found = findings(state);
    let strip = if found.is_empty() || area.height < 12 { 0 } else { found.len().min(3) as u16 + 1 };
    let [area, strip_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(strip)]).areas(area);
    if strip > 0 {
        let block = Block::new().borders(Borders::TOP).border_style(dim()).title(Span::styled(
            format!(" findings: {} flagged ", found.len()),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
        let inner = block.inner(strip_area);
        block.render(strip_area, buf);
        let width = usize::from(inner.width);
        let mut lines: Vec<Line> =
            found.iter().take(usize::from(strip - 1)).map(|r| finding_line(r, width, state.can_fix)).collect();
        if found.len() > 3 {
            if let Some(last) = lines.last_mut() {
                *last =
                    Line::styled(format!("… and {} more flagged flows: ⏎ on a ⚑ row for each", found.len() - 2), dim());
            }
        }
        Paragraph::new(lines).render(inner, buf);
    }
    let block = Block::new().borders(Borders::TOP).title(table_title(state)).border_style(dim());
    let inner = block.inner(area);
    block.render(area, buf);
    if state.visible.is_empty() {
        render_empty(state, inner, buf);
        return;
    }
    let body_rows = usize::from(inner.height.saturating_sub(1));
    if body_rows == 0 {
        return;
    }
    state.page_rows.set(body_rows);

    // Scroll only as far as needed to keep the selection on screen (with its group's header
    // when it is the group's first flow).
    let len = state.lines.len();
    let sel = state.selected_line().min(len - 1);
    let top = match sel.checked_sub(1).map(|p| state.lines[p]) {
        Some(TableLine::Group(_)) => sel - 1,
        _ => sel,
    };
    let mut offset = state.table_offset.get();
    if top < offset {
        offset = top;
    } else if sel >= offset + body_rows {
        offset = sel + 1 - body_rows;
    }
    offset = offset.min(len.saturating_sub(body_rows));
    state.table_offset.set(offset);
    let end = (offset + body_rows).min(len);
    let lines = &state.lines[offset..end];
    // The flows on screen, one stretch of the order: only it is put in order.
    let mut positions = lines.iter().filter_map(|l| if let TableLine::Flow(pos) = l { Some(*pos) } else { None });
    let first = positions.next().unwrap_or(0);
    let last = positions.next_back().unwrap_or(first);
    let on_screen = state.visible.slice(first, last + 1);
    let row_of = |pos: usize| &state.snapshot[on_screen[pos - first]];

    let titles: Vec<String> = Column::ALL
        .iter()
        .map(|&c| if c == state.sort { format!("{}{}", c.title(), state.sort_dir.arrow()) } else { c.title().into() })
        .collect();
    // Grouped, the group's header names the container: its column would only repeat it.
    let skip = state.grouped.then_some(Column::Container);
    let measure = |narrow: bool| {
        let cells: Vec<Option<Vec<String>>> = lines
            .iter()
            .map(|l| match l {
                TableLine::Flow(pos) => Some(Column::ALL.iter().map(|&c| cell_text(row_of(*pos), c, narrow)).collect()),
                TableLine::Group(_) => None,
            })
            .collect();
        let mut widths = [0u16; 15];
        for (i, w) in widths.iter_mut().enumerate() {
            let content = cells.iter().flatten().map(|r| Span::raw(r[i].as_str()).width()).max().unwrap_or(0);
            *w = u16::try_from(content.max(Span::raw(titles[i].as_str()).width())).unwrap_or(u16::MAX);
        }
        let chosen = choose_columns(&widths, inner.width, skip);
        (cells, widths, chosen)
    };
    let container = Column::ALL.iter().position(|c| *c == Column::Container).unwrap_or(0);
    let (mut cells, mut widths, mut chosen) = measure(false);
    if !state.grouped && !chosen.contains(&container) {
        (cells, widths, chosen) = measure(true);
    }

    let header = Row::new(chosen.iter().map(|&i| Cell::from(titles[i].clone())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let selected = state.selected;
    let table_rows = lines.iter().zip(cells).map(|(line, texts)| {
        let (TableLine::Flow(pos), Some(texts)) = (line, texts) else {
            // A group's header: drawn over its blank row below, across the whole width.
            return Row::new(chosen.iter().map(|_| Cell::from("")));
        };
        let row = row_of(*pos);
        let mut style = row_style(row);
        if Some(row.cookie) == selected {
            style = style.add_modifier(Modifier::REVERSED);
        }
        let mut texts: Vec<Option<String>> = texts.into_iter().map(Some).collect();
        Row::new(chosen.iter().map(|&i| {
            let text = texts[i].take().unwrap_or_default();
            Cell::from(text).style(cell_style(row, Column::ALL[i]))
        }))
        .style(style)
    });
    let constraints: Vec<Constraint> = chosen.iter().map(|&i| Constraint::Length(widths[i])).collect();
    Table::new(table_rows, constraints).header(header).column_spacing(1).render(inner, buf);
    for (k, line) in lines.iter().enumerate() {
        if let TableLine::Group(g) = line {
            let y = inner.y + 1 + u16::try_from(k).unwrap_or(u16::MAX);
            group_line(&state.groups[*g]).render(Rect { y, height: 1, ..inner }, buf);
        }
    }
}

/// A group's header: its name and its flows' totals.
fn group_line(g: &Group) -> Line<'static> {
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut spans = vec![
        Span::styled(format!("▾ {}", g.origin.full()), Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
        Span::styled(format!("  {} · {} heavy", plural(g.flows, "flow", "flows"), g.heavy), dim()),
    ];
    if g.flagged > 0 {
        spans.push(Span::styled(" · ", dim()));
        spans.push(Span::styled(
            format!("{} {FLAG_MARK}", g.flagged),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    spans.push(Span::styled(
        format!(" · thpt {} · retr {}", format::rate_compact(g.throughput_bps), format::pct(g.retrans_ratio())),
        dim(),
    ));
    Line::from(spans)
}

fn render_empty(state: &AppState, area: Rect, buf: &mut Buffer) {
    let total = state.snapshot.len();
    let msg = if total == 0 {
        if state.source_ended() {
            "the source ended without any TCP flow".to_string()
        } else {
            "no flows yet: waiting for TCP traffic".to_string()
        }
    } else if !state.filter.is_empty() {
        let scope = if state.show_all { "" } else { " among heavy flows (press a to search all)" };
        format!("no flows match \"{}\"{scope}; Esc clears the filter", state.filter)
    } else {
        format!("no heavy flows (press a to show all {total})")
    };
    let top = area.height / 3;
    let area = Rect { y: area.y.saturating_add(top), height: area.height.saturating_sub(top), ..area };
    Paragraph::new(msg).style(dim()).centered().wrap(Wrap { trim: true }).render(area, buf);
}

const HELP: &[(&str, &str)] = &[
    ("q  Ctrl-C", "quit"),
    ("?", "this help (any key closes it)"),
    ("↑ ↓  j k", "select a flow; PgUp PgDn page"),
    ("Home  End G", "first / last flow"),
    ("Enter", "flow detail: charts, verdict, fix"),
    ("Esc  Backspace", "back to the table"),
    ("/", "filter: address, port, cc, process,"),
    ("", "limited, container (name, id, cgroup"),
    ("", "path); Enter applies, Esc clears"),
    ("g", "group flows by container, with totals"),
    ("F", "trace only container=NAME cgroup=PATH"),
    ("", "netns=NAME (kernel filter; empty: all)"),
    ("s   S  r", "next sort column / reverse order"),
    ("a   U", "heavy/all flows; UDP strip (QUIC, VPNs)"),
    ("f  u", "switch the flow's namespace to bbr (asks"),
    ("", "first, lists every change) / undo it"),
    ("space", "pause the display (tracing goes on)"),
];

fn render_help(state: &AppState, area: Rect, buf: &mut Buffer) {
    let key = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| Line::from(vec![Span::styled(format!(" {k:<15}"), key), Span::raw(*what)]))
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(format!(" {FLAG_MARK}"), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
        Span::raw(" flagged: loss-based cc held back by random loss"),
    ]));
    lines.push(Line::raw(format!(" {CLOSED_MARK} closed flow")));
    lines.push(Line::raw(format!(" {}, listed first", state.heavy_rule)));
    lines.push(Line::raw(" units: rates bit/s (k M G); rtt ms; cwnd segments"));
    let width = area.width.min(62);
    let height = area.height.min(u16::try_from(lines.len() + 2).unwrap_or(u16::MAX));
    let popup = Rect { x: area.x + (area.width - width) / 2, y: area.y + (area.height - height) / 2, width, height };
    Clear.render(popup, buf);
    Paragraph::new(lines)
        .block(Block::bordered().title(" help · any key closes ").border_style(Style::new().fg(Color::Cyan)))
        .render(popup, buf);
}
