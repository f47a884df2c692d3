//! The strips under the table: heavy UDP flows with the TCP hops they relay, and the findings
//! (one line per flagged flow), each with a rule and a title, when the screen has room.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget};

use super::{dim, FLAG_MARK};
use crate::tui::format;
use crate::tui::panels;
use crate::tui::state::{AppState, FlowRow};

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
    if let Some(policed) = f.policed_bps {
        text.push_str(&format!("; policed at {}", format::rate_about(policed)));
    } else if let Some(path) = f.available_bps {
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
        let says = if row.userspace_vpn {
            "its own TCP stack crosses the path: give it a TUN device".to_string()
        } else if let Some(n) = row.carried {
            match n {
                0 => "a tunnel: the kernel's TCP flows inside decide, and their fix applies".to_string(),
                1 => "a tunnel: the 1 TCP flow it carries decides, and its fix applies".to_string(),
                n => format!("a tunnel: the {n} TCP flows it carries decide, and their fix applies"),
            }
        } else {
            "its own congestion control decides".to_string()
        };
        let mut text = format!(
            "{:<9} {} ({}) out {} in {}: {says} · {} → {}",
            row.carries,
            row.owner,
            row.origin.name,
            format::rate(row.tx_bps),
            format::rate(row.rx_bps),
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

/// The UDP strip at the bottom of `area`, when there is a heavy UDP flow, room, and it is not
/// hidden (`U`); the area left above it.
pub(super) fn render_udp(state: &AppState, area: Rect, buf: &mut Buffer) -> Rect {
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
    area
}

/// The findings strip at the bottom of `area`, when a flow is flagged and there is room; the
/// area left above it.
pub(super) fn render_findings(state: &AppState, area: Rect, buf: &mut Buffer) -> Rect {
    // The findings take the bottom (at most three lines and a rule), when the table leaves room.
    let found = panels::findings(state);
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
    area
}
