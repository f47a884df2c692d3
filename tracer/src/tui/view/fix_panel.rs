//! The fix on screen: the confirmation panel listing exactly what will happen, with its
//! checkboxes, and, in a switched flow's detail view, its numbers before and after the fix.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget, Wrap};

use super::dim;
use crate::analysis::compare::Window;
use crate::tui::format;
use crate::tui::panels::FixComparison;
use crate::tui::state::FixPanel;
use tracer_common::NS_PER_SEC;

/// The panel, drawn over the middle of `area`.
pub(super) fn render(panel: &FixPanel, area: Rect, buf: &mut Buffer) {
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
                .title(format!(" fix: {} · confirm ", what(&panel.plan)))
                .border_style(Style::new().fg(Color::Yellow)),
        )
        .render(popup, buf);
}

/// What the plan does, for the panel's title.
fn what(plan: &crate::analysis::fix_plan::Plan) -> String {
    let switches = plan.current_default != plan.cc || !plan.to_switch.is_empty();
    match (switches, plan.buffers.is_empty()) {
        (_, true) => format!("switch to {}", plan.cc),
        (false, false) => "raise buffer limits".to_string(),
        (true, false) => format!("switch to {}, raise buffer limits", plan.cc),
    }
}

/// Before and after the latest fix that switched a flow (its history's points `step_ns` apart):
/// a small table for the top of the verdict panel; empty when nothing switched it.
pub(super) fn before_after_lines(compared: Option<FixComparison<'_>>, step_ns: u64) -> Vec<Line<'static>> {
    let Some(FixComparison { switched, ago_secs: ago, undone, windows: ba }) = compared else {
        return Vec::new();
    };
    let head = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    let secs = |w: Option<Window>| {
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
    let row = |name: &str, f: &dyn Fn(&Window) -> String, extra: String| {
        let cell = |w: Option<Window>| w.as_ref().map_or("measuring".to_string(), f);
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

#[cfg(test)]
mod tests {
    use super::what;
    use crate::analysis::environment::BufferLimits;
    use crate::analysis::fix_plan::{Plan, SysctlStep, Target};

    #[test]
    fn the_title_says_what_the_plan_changes() {
        let target = Target {
            netns: 7,
            path: "/run/netns/x".into(),
            reached: "ip netns x".into(),
            host: false,
            ip_netns: true,
            runtime_sysctl: None,
        };
        let plan = |default: &str| Plan::new(target.clone(), "bbr", default, &[], false, &[], false, &|_| false);
        assert_eq!(what(&plan("cubic")), "switch to bbr");
        let wmem = BufferLimits { min: 4096, default: 16384, max: 4 << 20 };
        let step = SysctlStep {
            target: target.clone(),
            key: "tcp_wmem".into(),
            from: wmem,
            to: wmem.with_max(16 << 20),
            why: String::new(),
        };
        let with = |p: Plan| p.with_buffers(vec![step.clone()], Vec::new(), &|_| false);
        assert_eq!(what(&with(plan("bbr"))), "raise buffer limits");
        assert_eq!(what(&with(plan("cubic"))), "switch to bbr, raise buffer limits");
    }
}
