//! Applying the fix from the terminal UI. `f` on a flow asks the host side for a plan and opens
//! a confirmation panel listing exactly what will happen, with a checkbox for switching the
//! namespace's loss-based connections now (on for a flagged flow) and, for the host's own
//! namespace, a second confirmation; Enter applies, Esc cancels, `u` undoes. Afterwards the
//! detail view of a switched flow compares its numbers before and after and marks the instants
//! on its charts.
//!
//! The panel's state and keys are pure; the host side is a [`FixControl`] the front end holds.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget, Wrap};

use super::format;
use super::state::AppState;
use super::update::Action;
use super::view::dim;
use crate::analysis::compare::{before_after, WINDOW_NS};
use crate::analysis::live_fix::Plan;
use crate::analysis::model::HistoryPoint;
use crate::analysis::schema::{ActionKind, ActionRecord};
use tracer_common::NS_PER_SEC;

/// The confirmation panel: nothing changes on the host until Enter.
#[derive(Clone, Debug)]
pub(crate) struct FixPanel {
    /// The flow `f` was pressed on (the detail view opens on it once applied).
    pub cookie: u64,
    /// What the host side said it would do; `plan.live` is the checkbox.
    pub plan: Plan,
    /// The host's own namespace needs this second confirmation (`h`).
    pub host_confirmed: bool,
}

impl FixPanel {
    /// The checkbox starts on for a flagged flow only: for the others the user opts in.
    pub(crate) fn new(cookie: u64, mut plan: Plan, flagged: bool) -> Self {
        plan.live = flagged;
        Self { cookie, plan, host_confirmed: false }
    }

    fn blocked(&self) -> Option<&'static str> {
        (self.plan.target.host && !self.host_confirmed)
            .then_some("this is the host's own namespace: press h to confirm that first")
    }
}

/// A key while the panel is open: it takes every key (but Ctrl-C, handled before).
pub(crate) fn panel_key(state: &mut AppState, key: KeyEvent) -> Action {
    let Some(panel) = state.fix_panel.as_mut() else { return Action::None };
    // Only a plain Enter confirms: a terminal reads Esc followed quickly by Enter as Alt-Enter,
    // and a cancel must never turn into a confirmation.
    if key.modifiers != KeyModifiers::NONE && key.code == KeyCode::Enter {
        return Action::None;
    }
    match key.code {
        KeyCode::Enter => match panel.blocked() {
            Some(why) => state.status = Some(why.into()),
            None => return Action::ApplyFix,
        },
        KeyCode::Esc | KeyCode::Char('q' | 'n') => {
            state.fix_panel = None;
            state.status = Some("fix cancelled: nothing changed".into());
        }
        KeyCode::Char(' ' | 'x') => panel.plan.live = !panel.plan.live,
        KeyCode::Char('h') if panel.plan.target.host => panel.host_confirmed = !panel.host_confirmed,
        _ => {}
    }
    Action::None
}

/// The panel, drawn over the middle of `area`.
pub(crate) fn render_panel(panel: &FixPanel, area: Rect, buf: &mut Buffer) {
    let key = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let check = |on: bool| if on { "[x]" } else { "[ ]" };
    let mut lines: Vec<Line> = Vec::new();
    let steps = panel.plan.steps();
    // The first step names the namespace: the panel's first line.
    for step in &steps {
        lines.push(Line::raw(step.clone()));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(format!(" {} ", check(panel.plan.live)), key),
        Span::raw(format!(
            "switch the {} loss-based connection{} listed to {} now",
            panel.plan.to_switch.len(),
            if panel.plan.to_switch.len() == 1 { "" } else { "s" },
            panel.plan.cc
        )),
        Span::styled("  (space)", dim()),
    ]));
    if panel.plan.target.host {
        lines.push(Line::from(vec![
            Span::styled(format!(" {} ", check(panel.host_confirmed)), Style::new().fg(Color::Red).bold()),
            Span::raw("yes, change the host's own namespace"),
            Span::styled("  (h)", dim()),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(" Enter ", Style::new().fg(Color::Black).bg(Color::Green)),
        Span::raw(" apply   "),
        Span::styled(" Esc ", Style::new().fg(Color::Black).bg(Color::Gray)),
        Span::raw(" cancel   nothing changes before Enter; u undoes it later"),
    ]));
    let width = area.width.saturating_sub(4).min(110);
    let inner_width = usize::from(width.saturating_sub(2)).max(1);
    // Wrapped lines take more rows: count them so nothing is cut off at the bottom.
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(inner_width).max(1)).sum();
    let height = area.height.min(u16::try_from(rows + 2).unwrap_or(u16::MAX));
    let popup = Rect { x: area.x + (area.width - width) / 2, y: area.y + (area.height - height) / 2, width, height };
    Clear.render(popup, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(
            Block::bordered()
                .title(format!(" fix: switch to {} · confirm ", panel.plan.cc))
                .border_style(Style::new().fg(Color::Yellow)),
        )
        .render(popup, buf);
}

/// The actions that switched `cookie`, oldest first.
pub(crate) fn actions_on(actions: &[ActionRecord], cookie: u64) -> impl Iterator<Item = &ActionRecord> {
    actions.iter().filter(move |a| a.switched.iter().any(|s| s.cookie == cookie))
}

/// A vertical mark on the charts: where (ns) and what.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Mark {
    pub ts_ns: u64,
    pub undo: bool,
}

pub(crate) fn marks(actions: &[ActionRecord], cookie: u64) -> Vec<Mark> {
    actions_on(actions, cookie).map(|a| Mark { ts_ns: a.ts_ns, undo: a.action == ActionKind::Undo }).collect()
}

/// Before and after the latest fix that switched `cookie`: a small table for the top of the
/// verdict panel; empty when nothing switched it.
pub(crate) fn before_after_lines(
    actions: &[ActionRecord],
    cookie: u64,
    history: &[&HistoryPoint],
    step_ns: u64,
) -> Vec<Line<'static>> {
    let Some(fix) = actions_on(actions, cookie).filter(|a| a.action == ActionKind::Fix).last() else {
        return Vec::new();
    };
    let switched = fix.switched.iter().find(|s| s.cookie == cookie).expect("filtered on it");
    let newest = history.last().map_or(fix.ts_ns, |h| h.ts_ns + step_ns);
    let ago = newest.saturating_sub(fix.ts_ns) / NS_PER_SEC;
    let undone = actions_on(actions, cookie).any(|a| a.action == ActionKind::Undo && a.ts_ns > fix.ts_ns);
    let ba = before_after(history, fix.ts_ns, step_ns, WINDOW_NS);
    let head = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    let secs = |w: Option<crate::analysis::compare::Window>| {
        w.map_or("—".to_string(), |w| format!("{} s", (w.buckets as u64 * step_ns).div_ceil(NS_PER_SEC)))
    };
    let mut out = vec![Line::from(vec![
        Span::styled(format!("switched {} → {} {ago} s ago by cctrace", switched.from, switched.to), head),
        Span::styled(if undone { " (since undone)" } else { "" }, dim()),
    ])];
    out.push(Line::styled(
        format!(
            "{:<16}{:>14}{:>14}",
            "",
            format!("before ({})", secs(ba.before)),
            format!("after ({})", secs(ba.after))
        ),
        dim(),
    ));
    let row = |name: &str, f: &dyn Fn(&crate::analysis::compare::Window) -> String, extra: String| {
        let cell = |w: Option<crate::analysis::compare::Window>| w.as_ref().map_or("measuring".to_string(), f);
        Line::raw(format!("{name:<16}{:>14}{:>14}{extra}", cell(ba.before), cell(ba.after)))
    };
    let ratio = ba.goodput_ratio().map_or(String::new(), |r| format!("   ×{r:.1}"));
    out.push(row("goodput", &|w| format::rate(w.goodput_bps), ratio));
    out.push(row("cwnd", &|w| format!("{:.0}", w.cwnd), String::new()));
    out.push(row("srtt", &|w| format!("{} ms", format::ms(w.srtt_us as u32)), String::new()));
    out.push(row("retransmitted", &|w| format!("{:.1} seg/s", w.retrans_per_sec), String::new()));
    out.push(Line::raw(""));
    out
}
