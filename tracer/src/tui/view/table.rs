//! The flow table: the lines on screen (flows, and group headers when grouped), the columns
//! that fit, the selection highlighted, and the empty table's message.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget, Wrap};

use super::{ca_color, dim, strips, CLOSED_MARK, FLAG_MARK};
use crate::analysis::diagnosis::LimitedBy;
use crate::tui::format;
use crate::tui::state::{AppState, Column, FlowRow, Group, TableLine};

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

fn table_title(state: &AppState) -> Line<'static> {
    let total = state.snapshot.len();
    let shown = state.visible.len();
    let flows = if total == 1 { "flow" } else { "flows" };
    let filter = &state.row_filter;
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

/// The table with the strips under it.
pub(super) fn render(state: &AppState, area: Rect, buf: &mut Buffer) {
    let area = strips::render_udp(state, area, buf);
    let area = strips::render_findings(state, area, buf);
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

    let lines = &state.lines[window(state, body_rows)];
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
    let Measured { cells, widths, chosen } = measure(state, lines, &row_of, &titles, inner.width);

    let header = Row::new(chosen.iter().map(|&i| Cell::from(titles[i].clone())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    // The selection, among the lines on screen.
    let selected =
        lines.iter().position(|l| matches!(l, TableLine::Flow(pos) if Some(row_of(*pos).cookie) == state.selected));
    let table_rows = lines.iter().zip(cells).map(|(line, texts)| {
        let (TableLine::Flow(pos), Some(texts)) = (line, texts) else {
            // A group's header: drawn over its blank row below, across the whole width.
            return Row::new(chosen.iter().map(|_| Cell::from("")));
        };
        let row = row_of(*pos);
        let mut texts: Vec<Option<String>> = texts.into_iter().map(Some).collect();
        Row::new(chosen.iter().map(|&i| {
            let text = texts[i].take().unwrap_or_default();
            Cell::from(text).style(cell_style(row, Column::ALL[i]))
        }))
        .style(row_style(row))
    });
    let constraints: Vec<Constraint> = chosen.iter().map(|&i| Constraint::Length(widths[i])).collect();
    let table = Table::new(table_rows, constraints)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    StatefulWidget::render(table, inner, buf, &mut TableState::new().with_selected(selected));
    for (k, line) in lines.iter().enumerate() {
        if let TableLine::Group(g) = line {
            let y = inner.y + 1 + u16::try_from(k).unwrap_or(u16::MAX);
            group_line(&state.groups[*g]).render(Rect { y, height: 1, ..inner }, buf);
        }
    }
}

/// The lines on screen: scrolled only as far as needed to keep the selection there (with its
/// group's header when it is the group's first flow). Worked out here rather than by the
/// `TableState`'s offset, because a `Table` is handed every row it may show: only the lines
/// on screen are built, so a frame costs the same with 40 flows or 100,000.
fn window(state: &AppState, body_rows: usize) -> std::ops::Range<usize> {
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
    offset..(offset + body_rows).min(len)
}

/// The cells of the lines on screen (`None` for a group's header), each column's width, and
/// the columns that fit.
struct Measured {
    cells: Vec<Option<Vec<String>>>,
    widths: [u16; 15],
    chosen: Vec<usize>,
}

/// The columns that fit in `width`: grouped, without the container (the group's header names
/// it); else with the container's name alone when its full origin would not let it stay.
fn measure<'s>(
    state: &AppState,
    lines: &[TableLine],
    row_of: &impl Fn(usize) -> &'s FlowRow,
    titles: &[String],
    width: u16,
) -> Measured {
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
        let chosen = choose_columns(&widths, width, skip);
        Measured { cells, widths, chosen }
    };
    let container = Column::ALL.iter().position(|c| *c == Column::Container).unwrap_or(0);
    let measured = measure(false);
    if !state.grouped && !measured.chosen.contains(&container) {
        return measure(true);
    }
    measured
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
    } else if !state.row_filter.is_empty() {
        let scope = if state.show_all { "" } else { " among heavy flows (press a to search all)" };
        format!("no flows match \"{}\"{scope}; Esc clears the filter", state.row_filter)
    } else {
        format!("no heavy flows (press a to show all {total})")
    };
    let top = area.height / 3;
    let area = Rect { y: area.y.saturating_add(top), height: area.height.saturating_sub(top), ..area };
    Paragraph::new(msg).style(dim()).centered().wrap(Wrap { trim: true }).render(area, buf);
}
