//! The help popup: every key, the marks and the units.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget};

use super::{CLOSED_MARK, FLAG_MARK};
use crate::tui::state::AppState;

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

pub(super) fn render(state: &AppState, area: Rect, buf: &mut Buffer) {
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
