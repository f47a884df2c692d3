//! The detail view of one flow: who it is, its numbers now, its history (charts when there is
//! room, one-line sparklines when not; [`charts`]), a CA-state timeline, and the verdict with
//! evidence and the exact fix commands ([`verdict`]).

mod charts;
mod verdict;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget};

use super::{dim, fix_panel, CLOSED_MARK, FLAG_MARK};
use crate::analysis::container::Runtime;
use crate::analysis::diagnosis::{is_loss_based, Verdict};
use crate::analysis::flow_table::{Flow, HistoryPoint};
use crate::analysis::loss_signals::LossSignals;
use crate::tui::format;
use crate::tui::origin::Origin;
use crate::tui::panels;
use crate::tui::state::{AppState, Whereabouts};

/// Full charts need this much room; below it the history is drawn as sparklines.
const CHARTS_MIN_WIDTH: u16 = 100;
const CHARTS_MIN_HEIGHT: u16 = 32;

pub(super) fn render(state: &AppState, area: Rect, buf: &mut Buffer) {
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
    let retrans = charts::retrans_series(flow, &history, step);
    // A fix that switched this flow: its numbers either side, and where on the charts.
    let compared =
        fix_panel::before_after_lines(panels::fix_comparison(&state.actions, flow.cookie(), &history, step), step);
    let marks = panels::marks(&state.actions, flow.cookie());
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
        charts::render_charts(&history, &retrans, &marks, charts, buf);
        let block = Block::bordered().title(" congestion-avoidance state, 1 cell = 1 s ").border_style(dim());
        let inner = block.inner(ca);
        block.render(ca, buf);
        let [timeline, legend] = Layout::vertical([Constraint::Length(1); 2]).areas(inner);
        charts::ca_timeline(&history, timeline, buf);
        charts::ca_legend(flow).render(legend, buf);
        verdict::render(state, verdict, compared, lead, verdict_area, buf);
    } else {
        let [id, hist, verdict_area] =
            Layout::vertical([Constraint::Length(ident_height), Constraint::Length(8), Constraint::Min(0)]).areas(area);
        Paragraph::new(ident).render(id, buf);
        charts::render_sparklines(flow, &history, &retrans, hist, buf);
        verdict::render(state, verdict, compared, lead, verdict_area, buf);
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
    let mut numbers = vec![
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
    numbers.extend(loss_signals(&s.signals).into_iter().map(|(k, v)| kv(k, v)));
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
    let mut cc = vec![kv("netns", format!("{}{host}, default cc {default}", s.netns))];
    if let Some(r) = &w.route {
        let qdisc = w.qdisc.as_deref().map_or(String::new(), |q| format!(" qdisc {q}"));
        cc.push(kv("dev", format!("{} mtu {}{qdisc}", r.dev, r.mtu())));
    }
    if let (Some(wmem), Some(rmem)) = (w.wmem_max, w.rmem_max) {
        let max = |b: u32| crate::analysis::units::bytes(u64::from(b)).to_string();
        cc.push(kv("buffers", format!("tcp_wmem max {}, tcp_rmem max {}", max(wmem), max(rmem))));
    }
    cc.push(kv(
        "host cc:",
        format!("available {}, allowed in namespaces {}", list(&w.available_cc), list(&w.allowed_cc)),
    ));
    pack(cc, width, &mut lines);
    if let Some(t) = &w.tunnel {
        for (i, l) in format::wrap(&t.describe_with_rates(), room.max(1)).into_iter().enumerate() {
            let key = if i == 0 { "tunnel " } else { "       " };
            lines.push(Line::from(vec![Span::styled(key, dim()), Span::raw(l)]));
        }
    }

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

/// The kernel's loss signals the sample carries, by their `ss` names: none of those the kernel
/// (or an older recording) lacks, and no reordering figures while the flow saw none.
fn loss_signals(sig: &LossSignals) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(d) = sig.dsack_dups {
        out.push(("dsack_dups", d.to_string()));
    }
    if let Some(n) = sig.reord_seen.filter(|&n| n > 0) {
        out.push(("reord_seen", n.to_string()));
        if let Some(r) = sig.reordering {
            out.push(("reordering", r.to_string()));
        }
    }
    if let Some(rto) = sig.total_rto {
        out.push(("rto", rto.to_string()));
    }
    if let Some(u) = sig.undo_events {
        out.push(("undone", u.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_signals_show_what_the_kernel_has_by_ss_names() {
        assert!(loss_signals(&LossSignals::default()).is_empty(), "an old recording shows none");
        let live = LossSignals {
            dsack_dups: Some(7),
            reord_seen: Some(16_318),
            reordering: Some(43),
            total_rto: None,
            total_rto_recoveries: None,
            undo_events: Some(3),
        };
        let shown: Vec<String> = loss_signals(&live).into_iter().map(|(k, v)| format!("{k} {v}")).collect();
        assert_eq!(shown, ["dsack_dups 7", "reord_seen 16318", "reordering 43", "undone 3"]);
        let calm = LossSignals { reord_seen: Some(0), reordering: Some(3), total_rto: Some(1), ..live };
        let shown: Vec<String> = loss_signals(&calm).into_iter().map(|(k, v)| format!("{k} {v}")).collect();
        assert_eq!(shown, ["dsack_dups 7", "rto 1", "undone 3"]);
    }

    #[test]
    fn where_a_flow_leaves_shows_the_devices_root_qdisc_and_the_namespaces_buffers() {
        use crate::analysis::environment::{BufferLimits, Environment};
        use crate::analysis::flow_table::{FlowTable, TableConfig};
        use crate::analysis::route::Route;
        let mut s = crate::analysis::flow_table::tests::sample(1, 0);
        s.route = Route::from_raw(3, 1500, 1500, *b"tun-snd\0\0\0\0\0\0\0\0\0");
        let mut table = FlowTable::new(TableConfig::default());
        table.ingest(&s);
        let flow = table.get(1).expect("flow");
        let mut env = Environment::default();
        env.qdiscs.entry(s.netns).or_default().insert(3, "fq".into());
        env.netns_wmem.insert(s.netns, BufferLimits { min: 4096, default: 16384, max: 4_194_304 });
        env.netns_rmem.insert(s.netns, BufferLimits { min: 4096, default: 131_072, max: 6_291_456 });
        let text =
            |w: &Whereabouts| where_lines(flow, w, 120).iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        let shown = text(&Whereabouts::of(flow, &env, None));
        assert!(shown.contains("dev tun-snd mtu 1500 qdisc fq"), "{shown}");
        assert!(shown.contains("buffers tcp_wmem max 4.0 MiB, tcp_rmem max 6.0 MiB"), "{shown}");
        // Not read (a recording made before): the device alone.
        let shown = text(&Whereabouts::of(flow, &Environment::default(), None));
        assert!(
            shown.contains("dev tun-snd mtu 1500") && !shown.contains("qdisc") && !shown.contains("buffers"),
            "{shown}"
        );
    }
}
