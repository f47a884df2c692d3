//! The footer: the keys that work here, as many as fit (least needed dropped first), a prompt
//! while one is open, or the status line's message.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::dim;
use crate::tui::state::{AppState, Screen};

/// A hint's or prompt's key, as a key cap.
fn key() -> Style {
    Style::new().fg(Color::Black).bg(Color::Gray)
}

/// A key and what it does.
fn hint(k: &'static str, what: &'static str) -> Vec<Span<'static>> {
    vec![Span::styled(k, key()), Span::raw(format!(" {what}  "))]
}

pub(super) fn render(state: &AppState, area: Rect, buf: &mut Buffer) {
    let width = usize::from(area.width);
    let line = if state.typing_row_filter {
        prompt(
            "/",
            &state.row_filter_input,
            &["Enter apply", "Esc clear", "address port cc process limited container"],
            width,
        )
    } else if state.typing_kernel_filter {
        prompt(
            "trace only:",
            &format!(" {}", state.kernel_filter_input),
            &["container=NAME cgroup=PATH netns=NAME", "empty: all", "Enter apply", "Esc cancel"],
            width,
        )
    } else if state.typing_seek {
        prompt("go to:", &format!(" {}", state.seek_input), &["90 · 1:30 · 1m30s", "Enter go", "Esc cancel"], width)
    } else if let Some(status) = &state.status {
        Line::styled(status.replace(['\n', '\r'], " "), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
    } else {
        Line::from(fit(hints(state), width).into_iter().flat_map(|(_, s)| s).collect::<Vec<_>>())
    };
    line.render(area, buf);
}

/// A prompt: its label, the input so far, a cursor, then as much of `help` as fits in
/// `width`, never cut in a word.
fn prompt(label: &'static str, input: &str, help: &[&str], width: usize) -> Line<'static> {
    let mut spans = vec![
        Span::styled(label, key()),
        Span::raw(input.to_string()),
        Span::styled("▏", Style::new().fg(Color::Yellow)),
    ];
    let mut room = width.saturating_sub(spans.iter().map(Span::width).sum());
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
}

/// (priority, hint) for the screen: what does not fit is left out, least needed first (help
/// lists all).
fn hints(state: &AppState) -> Vec<(u8, Vec<Span<'static>>)> {
    match state.screen {
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
    }
}

/// `hints` dropped one at a time, the last of the least needed first, until they fit in
/// `width` (a hint's trailing gap may go).
fn fit(mut hints: Vec<(u8, Vec<Span<'static>>)>, width: usize) -> Vec<(u8, Vec<Span<'static>>)> {
    let used = |h: &[(u8, Vec<Span>)]| -> usize { h.iter().flat_map(|(_, s)| s.iter()).map(Span::width).sum() };
    while used(&hints) > width + 2 {
        let Some(drop) =
            hints.iter().enumerate().filter(|(_, h)| h.0 > 0).max_by_key(|(i, h)| (h.0, *i)).map(|(i, _)| i)
        else {
            break;
        };
        hints.remove(drop);
    }
    hints
}
