//! `report.html`: one self-contained page (inline CSS, inline SVG drawn here, no script, nothing
//! fetched) on a recording: the session, each heavy flow's verdict, evidence and fix, and its
//! throughput, cwnd/ssthresh, srtt/min_rtt and retransmissions over time. Everything that came
//! from the host (names, paths, verdict text quoting them) is HTML-escaped: it is hostile input, and
//! the page is written only through [`html::Html`], whose templates escape every argument.

use crate::analysis::diagnosis::{DiagnosisConfig, Evidence, PolicerSign, RemoteSenderEvidence, Verdict};
use crate::analysis::units::{self, bytes, pct, rate};
use crate::export::flow_log;
use crate::export::flows::{FlowLog, FlowTrack, Session};
use crate::recording::entry::Entry;

mod charts;
mod html;

use charts::charts;
pub use html::escape;
use html::{html, Html, Raw};

/// A chart axis's figure: [`units::si`] with a space (`1.25 G`, `340 M`, `870`), `-` where
/// there is none.
pub fn si(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    units::si(v, " ").to_string()
}

/// `2023-11-14 22:13:20 UTC` from unix seconds (proleptic Gregorian, no time zone database).
pub fn utc(unix_secs: f64) -> String {
    let secs = unix_secs.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `12.5 s`, `4 min 05 s`, `1 h 02 min`.
fn duration(secs: f64) -> String {
    let s = secs.max(0.0);
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{} min {:02} s", (s / 60.0).floor(), (s % 60.0).floor())
    } else {
        format!("{} h {:02} min", (s / 3600.0).floor(), (s % 3600.0 / 60.0).floor())
    }
}

/// Offset into the recording as the charts' axes show it.
fn at(secs: f64) -> String {
    if secs < 60.0 {
        format!("{secs:.0} s")
    } else {
        format!("{}:{:02}", (secs / 60.0).floor(), (secs % 60.0).floor())
    }
}

/// A receiving end's evidence: its sender's losses, how its rate answered them, the RTT and
/// this host's window.
fn remote_evidence(r: &RemoteSenderEvidence) -> Html {
    let cut = r.median_cut.map_or("not measured".to_string(), |c| format!("median {c:.2} of {}", r.cuts.len()));
    let latest = r.cuts.last().map_or("-".to_string(), |c| format!("{} → {}", rate(c.before_bps), rate(c.after_bps)));
    let rows: Vec<(&str, String)> = vec![
        ("judged from", "the receiving end alone".into()),
        ("goodput", rate(r.goodput_bps).to_string()),
        (
            "loss episodes",
            format!(
                "{} in {:.0} s ({:.2}/s, {} per segment; {} clean, {} queued)",
                r.loss_episodes,
                r.span_s,
                r.episodes_per_s,
                pct(r.loss_event_rate),
                r.clean_episodes,
                r.queued_episodes
            ),
        ),
        ("holes", format!("{} ({} filled late, {} early)", r.holes, r.loss_holes, r.reorder_holes)),
        ("segments lost", pct(r.lost_per_segment).to_string()),
        ("rate after / before", cut),
        ("latest episode", latest),
        ("queue at loss", format!("{:.1} ms (queued above {:.1} ms)", r.queue_at_loss_ms, r.queue_threshold_ms)),
        (
            "RTT",
            format!(
                "{:.1} ms (handshake {:.1} ms{})",
                r.rtt_ms,
                r.handshake_rtt_ms,
                r.rcv_rtt_ms.map_or(String::new(), |v| format!(", receiver's estimate {v:.1} ms"))
            ),
        ),
        ("Mathis bound", rate(r.mathis_bps).to_string()),
        (
            "response function",
            format!("{} ({})", rate(r.response_bps), format!("{:?}", r.response_model).to_lowercase()),
        ),
        ("window used per RTT", format!("{} of {}", pct(r.window_share), bytes(r.rcv_wnd as u64))),
        ("unread", bytes(r.unread_bytes as u64).to_string()),
    ];
    let mut out = Html::new();
    html!(out, r#"<dl class="evidence">"#);
    for (k, v) in rows {
        html!(out, "<div><dt>{}</dt><dd>{}</dd></div>", k, v);
    }
    html!(out, r#"<div class="wide"><dt>decided by</dt><dd>{}</dd></div></dl>"#, r.decided_by);
    out
}

fn evidence(e: &Evidence) -> Html {
    if let Some(r) = &e.remote_sender {
        return remote_evidence(r);
    }
    let mut rows: Vec<(&str, String)> = vec![
        ("goodput", rate(e.goodput_bps).to_string()),
        ("retransmitted", pct(e.loss_ratio).to_string()),
        ("srtt / min_rtt", format!("{:.1} / {:.1} ms", e.srtt_ms, e.min_rtt_ms)),
        ("mean cwnd", format!("{:.0} × {} B", e.mean_cwnd, e.mss)),
        ("loss episodes", format!("{} ({} clean, {} queued)", e.loss_episodes, e.clean_episodes, e.queued_episodes)),
        ("queue at loss", format!("{:.1} ms (queued above {:.1} ms)", e.queue_at_loss_ms, e.queue_threshold_ms)),
        ("cwnd before loss", format!("{:.0}", e.cwnd_before_loss)),
        ("Mathis bound", rate(e.mathis_bps).to_string()),
        (
            "response function",
            format!("{} ({})", rate(e.response_bps), format!("{:?}", e.response_model).to_lowercase()),
        ),
        ("busy / rwnd / sndbuf", format!("{} / {} / {}", pct(e.busy_share), pct(e.rwnd_share), pct(e.sndbuf_share))),
        ("cwnd full", pct(e.cwnd_full_share).to_string()),
        ("standing queue", if e.standing_queue { "yes" } else { "no" }.to_string()),
    ];
    if let Some(p) = &e.policer {
        let sign = match p.sign {
            PolicerSign::Plateau => "burst losses at one rate",
            PolicerSign::CappedStart => "slow start capped by a burst loss",
        };
        rows.push(("policed at", format!("{} ({sign})", rate(p.rate_bps))));
    }
    if let Some(a) = e.available_bps {
        rows.push(("more available", rate(a).to_string()));
    }
    let mut out = Html::new();
    html!(out, r#"<dl class="evidence">"#);
    for (k, v) in rows {
        html!(out, "<div><dt>{}</dt><dd>{}</dd></div>", k, v);
    }
    html!(out, r#"<div class="wide"><dt>decided by</dt><dd>{}</dd></div></dl>"#, e.decided_by);
    out
}

fn fix(lines: &[String]) -> Html {
    commands(lines, "Fix (as root)")
}

/// Commands under `heading`, comments dimmed.
fn commands(lines: &[String], heading: &str) -> Html {
    let mut out = Html::new();
    if lines.is_empty() {
        return out;
    }
    html!(out, r#"<h3>{}</h3><pre class="fix">"#, heading);
    for l in lines {
        let class = if l.trim_start().starts_with('#') { "c" } else { "cmd" };
        html!(out, "<span class=\"{}\">{}</span>\n", class, l);
    }
    html!(out, "</pre>");
    out
}

fn verdict_block(v: &Verdict, label: &str) -> Html {
    let mut out = Html::new();
    html!(out, r#"<h3>{}</h3><p class="verdict">{}</p>"#, label, v.text);
    if let Some(e) = &v.evidence {
        out.push(evidence(e));
    }
    out.push(fix(&v.fix));
    if let Some(r) = v.evidence.as_ref().and_then(|e| e.remote_sender.as_ref()) {
        out.push(commands(&r.advice, "On the sender's host (as root; cctrace changes nothing there)"));
    }
    out
}

fn who(f: &FlowTrack) -> Vec<String> {
    let s = &f.latest;
    let mut parts = vec![s.cc.to_string()];
    if let Some(o) = &s.owner {
        parts.push(format!("{} (pid {})", o.comm, o.pid));
    }
    match (&f.placement.container, &f.placement.cgroup) {
        (Some(c), _) => parts.push(format!("{} ({})", c.label(), c.runtime.name())),
        (None, Some(p)) if p == "/" => parts.push("host".into()),
        (None, Some(p)) => parts.push(p.clone()),
        _ => {}
    }
    parts
}

fn flow_section(f: &FlowTrack, session: &Session) -> Html {
    let start = session.start_ns();
    let at_ns = |ts: u64| at(ts.saturating_sub(start) as f64 / 1e9);
    let flagged = f.flagged();
    let mut out = Html::new();
    flow_heading(&mut out, f);
    let retransmitted =
        if f.latest.bytes_sent > 0 { f.latest.bytes_retrans as f64 / f.latest.bytes_sent as f64 } else { 0.0 };
    html!(
        out,
        r#"<p class="who">{}</p><p class="facts">{} · seen {} to {} ({}) · sent {} · retransmitted {} · mean {}, max {}</p>"#,
        who(f).join(" · "),
        f.placement.cgroup.as_deref().map_or_else(|| "cgroup unknown".to_string(), |c| format!("cgroup {c}")),
        at_ns(f.first.ts_ns),
        at_ns(f.latest.ts_ns),
        duration(f.duration_s()),
        bytes(f.latest.bytes_sent).to_string(),
        pct(retransmitted).to_string(),
        rate(f.mean_throughput_bps()).to_string(),
        rate(f.max_throughput_bps()).to_string(),
    );
    if let Some(t) = f.verdict.as_ref().and_then(|v| v.tunnel.as_ref()) {
        html!(out, r#"<p class="tunnel">tunnel {}</p>"#, t.describe_with_rates());
    }
    if let Some(v) = &f.verdict {
        out.push(verdict_block(v, if flagged { "Verdict" } else { "Verdict at the end" }));
    }
    if let Some(v) = f.flagged_verdict.as_ref().filter(|_| !flagged) {
        out.push(verdict_block(v, "While it was flagged"));
    }
    if f.changes.len() > 1 {
        html!(out, r#"<p class="changes">Verdict changes: "#);
        for (i, c) in f.changes.iter().enumerate() {
            if i > 0 {
                html!(out, " → ");
            }
            html!(
                out,
                "<span>{} limited by {}{}</span>",
                at_ns(c.ts_ns),
                c.limited_by.name(),
                if c.flagged { " ⚑" } else { "" }
            );
        }
        html!(out, "</p>");
    }
    html!(out, r#"<div class="charts">{}</div></article>"#, charts(f, session));
    out
}

/// The flow's article opening and heading: its flag, what limits it, its endpoints.
fn flow_heading(out: &mut Html, f: &FlowTrack) {
    let limited = f.verdict.as_ref().map_or("unknown", |v| v.limited_by.name());
    let (class, badge) = match (f.flagged(), f.ever_flagged) {
        (true, _) => ("flow flagged", "⚑ flagged"),
        (false, true) => ("flow was-flagged", "was flagged"),
        _ => ("flow", ""),
    };
    html!(out, r#"<article class="{}" id="flow-{}">"#, class, f.cookie);
    let mut badge_html = Html::new();
    if !badge.is_empty() {
        html!(badge_html, r#"<span class="badge">{}</span>"#, badge);
    }
    html!(out, r#"<h2>{}<span class="limit">limited by {}</span>{}</h2>"#, badge_html, limited, f.endpoints());
}

/// Heavy UDP flows: what they carry, who owns them, and what to do, since the kernel's
/// congestion control is not the one in charge of them.
fn udp_section(log: &FlowLog) -> Html {
    let mut out = Html::new();
    if log.udp.is_empty() {
        return out;
    }
    html!(out, r#"<h2 class="section">UDP flows: congestion control not the kernel's ({})</h2>"#, log.udp.len());
    for u in &log.udp {
        let owner = u.owner.as_ref().map_or("unknown process".to_string(), |o| format!("{} (pid {})", o.comm, o.pid));
        html!(
            out,
            r#"<section class="flow" id="udp-{}"><h3>{} · {} · {}:{} → {}:{}</h3><p>out {}, in {}</p><p>{}</p>"#,
            u.cookie,
            u.app_proto.map_or("udp", |p| p.name()),
            owner,
            u.src,
            u.sport,
            u.dst,
            u.dport,
            rate(u.tx_bps as f64).to_string(),
            rate(u.rx_bps as f64).to_string(),
            u.verdict,
        );
        if !u.advice.is_empty() {
            html!(out, "<pre>");
            for line in &u.advice {
                html!(out, "{}\n", line);
            }
            html!(out, "</pre>");
        }
        html!(out, "</section>");
    }
    out
}

fn summary_section(log: &FlowLog) -> Html {
    let s = &log.session;
    let h = s.header.as_ref();
    let heavy = log.heavy().count();
    let flagged = log.flows.iter().filter(|f| f.ever_flagged).count();
    let lost = s.lost();
    let mut out = Html::new();
    html!(out, r#"<section class="cards">"#);
    for (label, value, warn) in [
        ("flows", log.flows.len().to_string(), false),
        ("heavy", heavy.to_string(), false),
        ("flagged", flagged.to_string(), flagged > 0),
        ("samples", s.samples.to_string(), false),
        ("lost events", lost.to_string(), lost > 0),
        ("duration", duration(s.duration_s()), false),
    ] {
        html!(
            out,
            r#"<div class="card{}"><div class="v">{}</div><div class="l">{}</div></div>"#,
            if warn { " warn" } else { "" },
            value,
            label
        );
    }
    html!(out, r#"</section><table class="facts-table">"#);
    let filters = h.map(|h| h.filters.join(" ")).filter(|f| !f.is_empty()).unwrap_or_else(|| "none".into());
    let mut rows = vec![
        ("host", h.map_or("unknown".into(), |h| h.host.clone())),
        ("kernel", h.map_or("unknown".into(), |h| h.kernel.clone())),
        ("started", h.map_or("unknown".into(), |h| utc(h.start_unix_ns as f64 / 1e9))),
        ("source", h.map_or("unknown".into(), |h| h.source.clone())),
        ("filters", filters),
    ];
    if let Some(h) = h {
        rows.push(("sampling", format!("every {} ms per flow, judged every {} ms", h.sample_interval_ms, h.tick_ms)));
        rows.push((
            "recorded by",
            format!("cctrace {}{}", h.cctrace_version, if h.anonymized { " (anonymized)" } else { "" }),
        ));
    }
    if let Some(sum) = &s.summary {
        rows.push((
            "kernel counters",
            format!(
                "{} received, {} lost, {} decode errors, {} read errors, {} filtered out, {} flows seen, {} evicted",
                sum.events_received,
                sum.events_lost,
                sum.decode_errors,
                sum.kernel_read_errors,
                sum.events_filtered,
                sum.flows_seen,
                sum.flows_evicted
            ),
        ));
    } else {
        rows.push(("ended", "without its summary (the recording was cut)".into()));
    }
    for (k, v) in rows {
        html!(out, "<tr><th>{}</th><td>{}</td></tr>", k, v);
    }
    html!(out, "</table>");
    out
}

fn flows_table(log: &FlowLog) -> Html {
    const MAX_ROWS: usize = 500;
    let mut flows: Vec<&FlowTrack> = log.flows.iter().collect();
    flows.sort_by(|a, b| {
        (b.ever_flagged, b.heavy)
            .cmp(&(a.ever_flagged, a.heavy))
            .then(b.mean_throughput_bps().total_cmp(&a.mean_throughput_bps()))
    });
    let mut out = Html::new();
    html!(
        out,
        r#"<h2 class="section">All flows ({})</h2><table class="flows"><thead><tr><th></th><th>local</th><th>remote</th><th>process · container</th><th>cc</th><th>duration</th><th>sent</th><th>retr</th><th>mean</th><th>max</th><th>min rtt</th><th>limited by</th></tr></thead><tbody>"#,
        log.flows.len()
    );
    for f in flows.iter().take(MAX_ROWS) {
        let s = &f.latest;
        let mark = if f.ever_flagged {
            "⚑"
        } else if f.heavy {
            "●"
        } else {
            ""
        };
        let retr = if s.bytes_sent > 0 { s.bytes_retrans as f64 / s.bytes_sent as f64 } else { 0.0 };
        html!(
            out,
            "<tr><td class=\"mark\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            mark,
            s.local.to_string(),
            s.remote.to_string(),
            who(f)[1..].join(" · "),
            s.cc,
            duration(f.duration_s()),
            bytes(s.bytes_sent).to_string(),
            pct(retr).to_string(),
            rate(f.mean_throughput_bps()).to_string(),
            rate(f.max_throughput_bps()).to_string(),
            f.min_rtt_ms.map_or("-".into(), |m| format!("{m:.1}")),
            f.verdict.as_ref().map_or("unknown", |v| v.limited_by.name()),
        );
    }
    html!(out, "</tbody></table>");
    if flows.len() > MAX_ROWS {
        html!(
            out,
            r#"<p class="note">{} more flows left out; `cctrace export --summary` lists all.</p>"#,
            flows.len() - MAX_ROWS
        );
    }
    out
}

const STYLE: &str = r#"
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#f8fafc;--card:#fff;--red:#dc2626;--amber:#d97706}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 24px 48px}
header h1{font-size:24px;margin:0}
header p{margin:4px 0 0;color:var(--muted)}
.cards{display:grid;grid-template-columns:repeat(6,1fr);gap:12px;margin:20px 0 12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.card .v{font-size:22px;font-weight:650;font-variant-numeric:tabular-nums}
.card .l{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card.warn .v{color:var(--red)}
table{border-collapse:collapse}
.facts-table{background:var(--card);border:1px solid var(--line);border-radius:10px;width:100%;overflow:hidden}
.facts-table th{text-align:left;color:var(--muted);font-weight:500;width:150px;padding:6px 14px;vertical-align:top}
.facts-table td{padding:6px 14px;word-break:break-word}
.facts-table tr+tr{border-top:1px solid var(--line)}
h2.section{font-size:18px;margin:32px 0 12px}
.flow{background:var(--card);border:1px solid var(--line);border-left:4px solid #94a3b8;border-radius:10px;padding:16px 20px;margin:16px 0}
.flow.flagged{border-left-color:var(--red)}
.flow.was-flagged{border-left-color:var(--amber)}
.flow h2{font-size:16px;margin:0 0 4px;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-weight:600;word-break:break-all}
.badge{font-family:system-ui,sans-serif;background:var(--red);color:#fff;border-radius:999px;padding:1px 9px;font-size:12px;margin-right:8px;vertical-align:2px}
.was-flagged .badge{background:var(--amber)}
.limit{font-family:system-ui,sans-serif;background:#e2e8f0;border-radius:999px;padding:1px 9px;font-size:12px;margin-right:10px;vertical-align:2px;font-weight:500}
.who{margin:2px 0;font-weight:500;word-break:break-word}
.facts,.changes{margin:2px 0;color:var(--muted);font-size:13px;word-break:break-word}
.flow h3{font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin:14px 0 4px}
.verdict{margin:0;max-width:95ch}
.evidence{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:2px 18px;margin:10px 0 0;font-size:13px}
.evidence div{display:flex;gap:8px;border-bottom:1px dotted var(--line);padding:2px 0}
.evidence dt{color:var(--muted);min-width:120px}
.evidence dd{margin:0;font-variant-numeric:tabular-nums}
.evidence .wide{grid-column:1/-1}
pre.fix{background:#0f172a;color:#e2e8f0;border-radius:8px;padding:12px 14px;overflow-x:auto;font-size:12.5px;line-height:1.55;margin:4px 0;white-space:pre-wrap;word-break:break-all}
pre.fix .c{color:#94a3b8}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:8px 20px;margin-top:14px}
svg.chart{width:100%;height:auto;display:block}
svg .ct{font-size:12.5px;font-weight:600;fill:var(--fg)}
svg .lg{font-size:11px;fill:var(--muted)}
svg .ax{font-size:10.5px;fill:var(--muted)}
svg .grid{stroke:var(--line);stroke-width:1}
svg .axis{stroke:#94a3b8;stroke-width:1}
table.flows{width:100%;background:var(--card);border:1px solid var(--line);font-size:12.5px}
table.flows th{text-align:left;color:var(--muted);font-weight:500;border-bottom:1px solid var(--line);padding:6px 8px;white-space:nowrap}
table.flows td{padding:4px 8px;border-top:1px solid var(--line);word-break:break-all}
table.flows td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
table.flows td.mark{color:var(--red);width:18px}
.note,footer{color:var(--muted);font-size:12.5px}
footer{margin-top:32px}
@media (max-width:800px){.cards{grid-template-columns:repeat(3,1fr)}.charts{grid-template-columns:1fr}}
@media print{body{background:#fff}.flow{break-inside:avoid}}
"#;

/// The page for an already replayed recording.
pub fn page(log: &FlowLog) -> String {
    let s = &log.session;
    let host = s.header.as_ref().map_or("unknown host", |h| h.host.as_str());
    let started = s.header.as_ref().map_or(String::new(), |h| format!(" · {}", utc(h.start_unix_ns as f64 / 1e9)));
    let mut heavy: Vec<&FlowTrack> = log.heavy().collect();
    heavy.sort_by(|a, b| {
        (b.flagged(), b.ever_flagged)
            .cmp(&(a.flagged(), a.ever_flagged))
            .then(b.max_throughput_bps().total_cmp(&a.max_throughput_bps()))
    });
    let mut out = Html::new();
    html!(
        out,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"><title>cctrace report · {0}</title><style>{1}</style></head><body><main><header><h1>cctrace report</h1><p>{0}{2} · {3}</p></header>"#,
        host,
        Raw(STYLE),
        started,
        duration(s.duration_s()),
    );
    out.push(summary_section(log));
    html!(out, r#"<h2 class="section">Heavy flows ({})</h2>"#, heavy.len());
    if heavy.is_empty() {
        html!(
            out,
            r#"<p class="note">No flow was heavy (moved 0.5 MB at 1 Mbit/s or more, or kept its congestion window full) during this recording.</p>"#
        );
    }
    for f in heavy {
        out.push(flow_section(f, s));
    }
    out.push(udp_section(log));
    if !s.actions.is_empty() {
        html!(out, r#"<h2 class="section">Actions</h2><ul>"#);
        for (ts, text) in &s.actions {
            html!(out, "<li>{} {}</li>", at(ts.saturating_sub(s.start_ns()) as f64 / 1e9), text);
        }
        html!(out, "</ul>");
    }
    out.push(flows_table(log));
    html!(
        out,
        r#"<footer>Rates are bits per second; charts show one point per second of the replayed analysis. Generated by cctrace {}.</footer></main></body></html>"#,
        env!("CARGO_PKG_VERSION")
    );
    html!(out, "\n");
    out.into_string()
}

/// `cctrace report`: the page for `entries`.
pub fn render(entries: impl IntoIterator<Item = Entry>, diagnosis: DiagnosisConfig) -> String {
    page(&flow_log(entries, diagnosis))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::fixture;

    #[test]
    fn every_heavy_flow_is_in_the_report_with_its_verdict_fix_and_charts() {
        let log = flow_log(fixture::entries(), DiagnosisConfig::default());
        let html = page(&log);
        let heavy: Vec<&FlowTrack> = log.heavy().collect();
        assert!(heavy.len() >= 3, "cubic, named cubic, receiver at least: {}", heavy.len());
        for f in &heavy {
            assert!(html.contains(&format!("id=\"flow-{}\"", f.cookie)), "flow {} in the report", f.cookie);
        }
        assert!(log.get(fixture::CUBIC).expect("cubic").flagged());
        assert!(!log.get(fixture::SSH).expect("ssh").heavy, "light flows are in the table only");
        assert!(html.contains("Fix (as root)") && html.contains("sysctl -w net.ipv4.tcp_congestion_control=bbr"));
        assert_eq!(html.matches("<svg").count(), heavy.len() * 4);
        for title in ["Throughput", "Congestion window", "Round-trip time", "Retransmissions"] {
            assert!(html.contains(title));
        }
        assert!(html.contains("2023-11-14 22:13:20 UTC"), "the header's start time");
        assert!(
            !html.contains("http://") && !html.contains("https://") && !html.contains("<script"),
            "self-contained, no script"
        );
    }

    #[test]
    fn heavy_udp_flows_get_their_own_section_with_the_advice() {
        use crate::analysis::udp::{Head, Process, SocketReadings, UdpSample};
        let mut entries = fixture::entries();
        let (at, now) = entries
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, e)| match e {
                Entry::Tick { now_ns, .. } => Some((i, *now_ns)),
                _ => None,
            })
            .expect("a tick");
        let owner = Process {
            pid: 812,
            comm: "tailscaled<b>".into(),
            cmdline: vec!["tailscaled".into(), "--tun=userspace-networking".into()],
            tun_open: false,
            tcp: Vec::new(),
        };
        let wg = Head { bytes: [4, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0], len: 1440 };
        let reading = |ts_ns: u64, tx_bytes: u64| UdpSample {
            netns: 1,
            first_tx: wg,
            last_tx: wg,
            owner: Some(owner.clone()),
            ..UdpSample::fixture(4242, ts_ns, tx_bytes)
        };
        let readings = |r: UdpSample| Entry::Sockets { readings: SocketReadings { udp: vec![r] } };
        entries.insert(at, readings(reading(now, 2_000_000)));
        entries.insert(at, readings(reading(now.saturating_sub(1_000_000_000), 0)));
        let html = render(entries, DiagnosisConfig::default());
        assert!(html.contains("UDP flows: congestion control not the kernel's (1)"), "the section");
        assert!(html.contains("id=\"udp-4242\"") && html.contains("wireguard"));
        assert!(html.contains("lxc.cgroup2.devices.allow: c 10:200 rwm"), "the TUN advice");
        assert!(html.contains("tailscaled&lt;b&gt;") && !html.contains("tailscaled<b>"), "escaped");
    }

    #[test]
    fn a_flow_through_a_tunnel_names_it_above_its_verdict() {
        use crate::analysis::route::{DeviceName, Route};
        use crate::analysis::tunnel::{TunDevice, TunHolder};
        use crate::analysis::udp::{Head, Process, SocketReadings, UdpSample};
        let netns = fixture::entries()
            .iter()
            .find_map(|e| match e {
                Entry::Samples { samples } => samples.iter().find(|s| s.cookie == fixture::CUBIC).map(|s| s.netns),
                _ => None,
            })
            .expect("the CUBIC flow");
        let engine =
            Process { pid: 812, comm: "wireguard-go".into(), cmdline: Vec::new(), tun_open: true, tcp: Vec::new() };
        let wg = Head { bytes: [4, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0], len: 1440 };
        let mut entries = Vec::new();
        for mut e in fixture::entries() {
            match &mut e {
                Entry::Host { env } => env.tunnels.devices.push(TunDevice {
                    netns,
                    ifindex: 7,
                    name: "wg0".into(),
                    mtu: 1420,
                    holders: vec![TunHolder { pid: 812, comm: "wireguard-go".into() }],
                }),
                Entry::Samples { samples } => {
                    for s in samples.iter_mut().filter(|s| s.cookie == fixture::CUBIC) {
                        s.route = Some(Route { dev: DeviceName::new("wg0"), ifindex: 7, dev_mtu: 1420, pmtu: 1420 });
                    }
                }
                Entry::Tick { now_ns, .. } => {
                    let reading = UdpSample {
                        netns,
                        first_tx: wg,
                        last_tx: wg,
                        owner: Some(engine.clone()),
                        ..UdpSample::fixture(4242, *now_ns, *now_ns / 100)
                    };
                    entries.push(Entry::Sockets { readings: SocketReadings { udp: vec![reading] } });
                }
                _ => {}
            }
            entries.push(e);
        }
        let html = render(entries, DiagnosisConfig::default());
        assert!(
            html.contains("<p class=\"tunnel\">tunnel wg0 (MTU 1420) of wireguard-go (pid 812), over UDP"),
            "{html}"
        );
        assert!(
            html.contains("the losses are in the tunnel&#39;s underlay, outside this host"),
            "the verdict says where"
        );
    }

    #[test]
    fn hostile_names_are_escaped() {
        let html = render(fixture::entries(), DiagnosisConfig::default());
        for hostile in [fixture::EVIL_CONTAINER, fixture::EVIL_COMM, fixture::HOST, fixture::EVIL_NETNS] {
            assert!(!html.contains(hostile), "{hostile} raw in the page");
        }
        assert!(html.contains(&escape(fixture::EVIL_CONTAINER)) && html.contains(&escape(fixture::EVIL_COMM)));
        // The fix quotes the namespace name for the shell; the page escapes that for HTML.
        assert!(html.contains(&escape("ip netns exec 'lab'\\''; rm -rf / #'")), "shell-quoted, then escaped");
        assert_eq!(escape("<a href=\"x\">'&"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(si(12_700_000.0), "12.7 M");
        assert_eq!(si(153_000_000.0), "153 M");
        assert_eq!(si(870.0), "870");
        assert_eq!(si(0.0), "0");
        assert_eq!(si(2.5), "2.50");
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(duration(245.0), "4 min 05 s");
    }
}
