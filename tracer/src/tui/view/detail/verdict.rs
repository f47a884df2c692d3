//! The verdict panel: what limits the flow in words, the evidence, deep mode's decisions and
//! the fix commands, scrolled when longer than the panel.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Widget};

use crate::analysis::diagnosis::{Evidence, RemoteSenderEvidence, Verdict};
use crate::tui::format;
use crate::tui::state::AppState;
use crate::tui::view::{dim, FLAG_MARK};

/// The verdict panel's lines, wrapped to `width`; `lead` (where the flow lives, when the view
/// had no room for it above) follows the verdict's text.
/// `decisions`: the flow's deep-mode timeline, oldest first, as (seconds since the flow was
/// first seen, what was decided).
fn verdict_lines(
    verdict: Option<&Verdict>,
    decisions: &[(f64, String)],
    lead: Vec<Line<'static>>,
    width: u16,
) -> Vec<Line<'static>> {
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
        let mut out = with_lead(out);
        decision_lines(decisions, width, &mut out);
        return out;
    };
    // An unflagged verdict's text already opens with the description; a receiving end's speaks
    // of its remote sender in words of its own (the description speaks from a sender's socket).
    let remote = v.evidence.as_ref().is_some_and(|e| e.remote_sender.is_some());
    if !v.text.starts_with(v.limited_by.describe()) && !remote {
        para(v.limited_by.describe(), Style::new().add_modifier(Modifier::BOLD), 0, &mut out);
    }
    para(&v.text, Style::new(), 0, &mut out);
    let mut out = with_lead(out);
    if let Some(e) = &v.evidence {
        out.push(Line::raw(""));
        match &e.remote_sender {
            Some(r) => para(&remote_evidence_text(r), Style::new().fg(Color::Gray), 0, &mut out),
            None => para(&evidence_text(e), Style::new().fg(Color::Gray), 0, &mut out),
        }
    }
    decision_lines(decisions, width, &mut out);
    fix_lines(&v.fix, width, &mut out);
    if let Some(r) = v.evidence.as_ref().and_then(|e| e.remote_sender.as_ref()) {
        commands(&r.advice, "on the sender's host (as root; cctrace changes nothing there):", width, &mut out);
    }
    out
}

/// A receiving end's evidence in one paragraph: its sender's losses, cuts, RTT and window.
fn remote_evidence_text(r: &RemoteSenderEvidence) -> String {
    let mut e = format!(
        "evidence from the receiving end: goodput {} · {} loss episodes in {:.0} s ({:.2}/s, {} per segment) · holes {} \
         ({} filled late, {} early) · {} of segments lost",
        format::rate(r.goodput_bps),
        r.loss_episodes,
        r.span_s,
        r.episodes_per_s,
        format::pct(r.loss_event_rate),
        r.holes,
        r.loss_holes,
        r.reorder_holes,
        format::pct(r.lost_per_segment),
    );
    if let Some(cut) = r.median_cut {
        e.push_str(&format!(" · rate after/before each episode: median {cut:.2} of {}", r.cuts.len()));
        if let Some(c) = r.cuts.last() {
            e.push_str(&format!(" (latest {} → {})", format::rate(c.before_bps), format::rate(c.after_bps)));
        }
    }
    e.push_str(&format!(" · RTT {:.1} ms (handshake {:.1} ms", r.rtt_ms, r.handshake_rtt_ms));
    if let Some(rcv) = r.rcv_rtt_ms {
        e.push_str(&format!(", receiver's estimate {rcv:.1} ms"));
    }
    e.push(')');
    if let Some(q) = r.queue_ms {
        e.push_str(&format!(" · one-way delay {q:.1} ms above its floor"));
    }
    if r.mathis_bps.is_finite() {
        e.push_str(&format!(" · Mathis bound {}", format::rate(r.mathis_bps)));
    }
    e.push_str(&format!(
        " · window {} ({:.0}% used per RTT) · unread {}",
        format::bytes(r.rcv_wnd as u64),
        r.window_share * 100.0,
        format::bytes(r.unread_bytes as u64)
    ));
    if !r.decided_by.is_empty() {
        e.push_str(&format!(" · decided by: {}", r.decided_by));
    }
    e
}

/// The evidence in one paragraph: the figures the verdict was judged on.
fn evidence_text(e: &Evidence) -> String {
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
    // Retransmissions the kernel took back are not losses: say how many there were.
    if e.dsack_dups > 0 || e.spurious_episodes > 0 {
        evidence.push_str(&format!(
            " · spurious: {} of {} retransmissions (DSACK), {} episodes taken back",
            e.dsack_dups, e.retrans_segments, e.spurious_episodes
        ));
    }
    if let Some(p) = &e.policer {
        evidence.push_str(&format!(" · policer {} ({:?})", format::rate(p.rate_bps), p.sign));
    }
    // The signals that decided (loss episodes, the queue at them, the standing queue).
    if !e.decided_by.is_empty() {
        evidence.push_str(&format!(" · decided by: {}", e.decided_by));
    }
    evidence
}

/// The fix commands, wrapped so that each row pasted alone still means what the line means: a
/// comment's tail is a comment, a command's tail follows a backslash (never a command of its
/// own).
fn fix_lines(fix: &[String], width: usize, out: &mut Vec<Line<'static>>) {
    commands(fix, "fix (as root):", width, out);
}

/// Commands under `heading`, wrapped as [`fix_lines`] says.
fn commands(fix: &[String], heading: &'static str, width: usize, out: &mut Vec<Line<'static>>) {
    if fix.is_empty() {
        return;
    }
    out.push(Line::raw(""));
    out.push(Line::styled(heading, Style::new().add_modifier(Modifier::BOLD)));
    for cmd in fix {
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

/// Deep mode's timeline, newest first; a run of the same decision reads as one line with its
/// count and its latest time.
fn decision_lines(decisions: &[(f64, String)], width: usize, out: &mut Vec<Line<'static>>) {
    if decisions.is_empty() {
        return;
    }
    out.push(Line::raw(""));
    out.push(Line::styled(
        "decisions of its congestion control (deep mode), newest first:",
        Style::new().add_modifier(Modifier::BOLD),
    ));
    let mut newest_first = decisions.iter().rev().peekable();
    while let Some((at_s, text)) = newest_first.next() {
        let mut repeats = 1;
        while newest_first.next_if(|(_, t)| t == text).is_some() {
            repeats += 1;
        }
        let times = if repeats > 1 { format!(" (×{repeats})") } else { String::new() };
        // The times stay a column: only the text wraps, under itself.
        let at = format!("{at_s:>7.1} s  ");
        let body = format::wrap(&format!("{text}{times}"), width.saturating_sub(2 + at.len()).max(1));
        for (i, l) in body.iter().enumerate() {
            let lead = if i == 0 { at.clone() } else { " ".repeat(at.len()) };
            out.push(Line::styled(format!("  {lead}{l}"), Style::new().fg(Color::Cyan)));
        }
    }
}

pub(super) fn render(
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
    let decisions = state.detail_copy().map_or(&[][..], |d| &d.decisions[..]);
    let mut lines = compared;
    lines.extend(verdict_lines(verdict, decisions, lead, inner.width));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn the_decision_timeline_is_newest_first_with_repeats_folded() {
        let decisions = vec![
            (12.4, "loss: ssthresh 46, cwnd 68 → 46".to_string()),
            (12.5, "sending starts after idle".to_string()),
            (12.9, "sending starts after idle".to_string()),
            (13.0, "sending starts after idle".to_string()),
        ];
        let lines = text(&verdict_lines(None, &decisions, Vec::new(), 80));
        let at = lines.iter().position(|l| l.starts_with("decisions of its congestion control")).expect("a timeline");
        assert_eq!(
            &lines[at + 1..],
            ["     13.0 s  sending starts after idle (×3)", "     12.4 s  loss: ssthresh 46, cwnd 68 → 46"]
        );
    }
}
