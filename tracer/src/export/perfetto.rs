//! A recording as a Chrome trace (the JSON `traceEvents` format ui.perfetto.dev and
//! chrome://tracing open): one process track per flow, named by its endpoints, process and
//! container; counter tracks for cwnd, ssthresh, throughput, srtt and retransmissions; the CA
//! states as slices; retransmissions, closes and verdict changes as instants. Times are
//! microseconds since the recording started.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tracer_common::TCP_INFINITE_SSTHRESH;

use crate::analysis::diagnosis::{DiagnosisConfig, LimitedBy};
use crate::analysis::sample::{CaState, Sample};
use crate::analysis::schema::Placement;
use crate::export::replay::{new_analysis, replay, Step};
use crate::recording::entry::Entry;

/// Threads of a flow's process: its CA-state slices and its instants.
const CA_TID: u64 = 1;
const EVENT_TID: u64 = 2;

/// The counters, as (track name, unit): Perfetto names a counter track `name unit`.
pub const COUNTERS: [(&str, &str); 6] = [
    ("cwnd", "segments"),
    ("ssthresh", "segments"),
    ("throughput", "Mbit/s"),
    ("srtt", "ms"),
    ("min_rtt", "ms"),
    ("retransmissions", "segments"),
];

struct Track {
    pid: u64,
    latest: Sample,
    placement: Placement,
    /// Last value written per counter (only changes are written: counters are steps).
    last: [Option<f64>; COUNTERS.len()],
    ca: CaState,
    ca_since_us: f64,
    verdict: Option<(LimitedBy, bool)>,
}

/// Builds the trace over replay steps.
struct Trace {
    start_ns: u64,
    events: Vec<Value>,
    tracks: HashMap<u64, Track>,
    order: Vec<u64>,
}

impl Trace {
    fn us(&self, ts_ns: u64) -> f64 {
        // Microseconds with nanosecond precision.
        ts_ns.saturating_sub(self.start_ns) as f64 / 1000.0
    }

    fn counter(&mut self, cookie: u64, which: usize, ts_ns: u64, value: f64) {
        let ts = self.us(ts_ns);
        let Some(t) = self.tracks.get_mut(&cookie) else { return };
        if t.last[which] == Some(value) {
            return;
        }
        t.last[which] = Some(value);
        let (name, unit) = COUNTERS[which];
        self.events.push(json!({"ph": "C", "name": name, "pid": t.pid, "ts": ts, "args": {unit: value}}));
    }

    fn instant(&mut self, pid: u64, ts_ns: u64, name: &str, args: Value) {
        let ts = self.us(ts_ns);
        self.events
            .push(json!({"ph": "i", "s": "t", "name": name, "pid": pid, "tid": EVENT_TID, "ts": ts, "args": args}));
    }

    fn ca_slice(&mut self, pid: u64, state: CaState, from_us: f64, to_us: f64) {
        self.events.push(json!({
            "ph": "X", "cat": "ca_state", "name": state.name(), "pid": pid, "tid": CA_TID,
            "ts": from_us, "dur": (to_us - from_us).max(0.0),
        }));
    }

    fn sample(&mut self, s: &Sample, placement: impl FnOnce() -> Placement) {
        let ts = self.us(s.ts_ns);
        let (pid, prev_retrans, prev_ca, ca_since) = match self.tracks.get_mut(&s.cookie) {
            Some(t) => {
                let before = (t.latest.total_retrans, t.ca, t.ca_since_us);
                if s.ts_ns >= t.latest.ts_ns {
                    let (local, remote, owner) = (t.latest.local, t.latest.remote, t.latest.owner.clone());
                    t.latest = s.clone();
                    if s.local.port() == 0 {
                        t.latest.local = local;
                    }
                    if s.remote.port() == 0 {
                        t.latest.remote = remote;
                    }
                    t.latest.owner = s.owner.clone().or(owner);
                }
                (t.pid, Some(before.0), before.1, before.2)
            }
            None => {
                let pid = self.order.len() as u64 + 1;
                self.order.push(s.cookie);
                let track = Track {
                    pid,
                    latest: s.clone(),
                    placement: placement(),
                    last: [None; COUNTERS.len()],
                    ca: s.ca_state,
                    ca_since_us: ts,
                    verdict: None,
                };
                self.tracks.insert(s.cookie, track);
                (pid, None, s.ca_state, ts)
            }
        };
        if s.ca_state != prev_ca {
            self.ca_slice(pid, prev_ca, ca_since, ts);
            if let Some(t) = self.tracks.get_mut(&s.cookie) {
                (t.ca, t.ca_since_us) = (s.ca_state, ts);
            }
        }
        self.counter(s.cookie, 0, s.ts_ns, f64::from(s.snd_cwnd));
        if s.snd_ssthresh < TCP_INFINITE_SSTHRESH {
            self.counter(s.cookie, 1, s.ts_ns, f64::from(s.snd_ssthresh));
        }
        self.counter(s.cookie, 3, s.ts_ns, f64::from(s.srtt_us) / 1000.0);
        if s.min_rtt_us != u32::MAX {
            self.counter(s.cookie, 4, s.ts_ns, f64::from(s.min_rtt_us) / 1000.0);
        }
        self.counter(s.cookie, 5, s.ts_ns, f64::from(s.total_retrans));
        if let Some(prev) = prev_retrans.filter(|&p| s.total_retrans > p) {
            let args = json!({"segments": s.total_retrans - prev, "cwnd": s.snd_cwnd, "ca_state": s.ca_state.name(),
                              "srtt_ms": f64::from(s.srtt_us) / 1000.0});
            self.instant(pid, s.ts_ns, "retransmission", args);
        }
        if s.is_closing() {
            self.instant(pid, s.ts_ns, "closed", json!({"state": s.tcp_state.name()}));
        }
    }

    fn tick(&mut self, a: &crate::analysis::Analysis, now_ns: u64) {
        let mut changes = Vec::new();
        for flow in a.table.flows() {
            let cookie = flow.cookie();
            self.counter(cookie, 2, now_ns, (flow.rates.throughput_bps / 1e4).round() / 100.0);
            let Some(t) = self.tracks.get_mut(&cookie) else { continue };
            t.placement = Placement::of(&flow.latest, &a.env);
            let Some(v) = a.verdict(flow) else { continue };
            let now = (v.limited_by, v.flagged);
            let before = t.verdict.replace(now);
            if before == Some(now) {
                continue;
            }
            let (was_limit, was_flagged) = before.unwrap_or((LimitedBy::Unknown, false));
            if v.flagged != was_flagged {
                let name = if v.flagged { "flagged" } else { "flag cleared" };
                changes.push((t.pid, name.to_string(), json!({"verdict": v.text, "fix": v.fix})));
            }
            if v.limited_by != was_limit {
                let name = format!("limited by {}", v.limited_by.name());
                changes.push((
                    t.pid,
                    name,
                    json!({"from": was_limit.name(), "to": v.limited_by.name(), "verdict": v.text}),
                ));
            }
        }
        for (pid, name, args) in changes {
            self.instant(pid, now_ns, &name, args);
        }
    }

    fn finish(mut self, end_ns: u64) -> Value {
        let end = self.us(end_ns);
        let mut meta = Vec::new();
        for (i, cookie) in self.order.iter().enumerate() {
            let t = &self.tracks[cookie];
            meta.push(
                json!({"ph": "M", "name": "process_name", "pid": t.pid, "tid": 0, "args": {"name": track_name(t)}}),
            );
            meta.push(
                json!({"ph": "M", "name": "process_sort_index", "pid": t.pid, "tid": 0, "args": {"sort_index": i}}),
            );
            meta.push(
                json!({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": CA_TID, "args": {"name": "CA state"}}),
            );
            meta.push(
                json!({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": EVENT_TID, "args": {"name": "events"}}),
            );
        }
        let open: Vec<(u64, CaState, f64)> =
            self.order.iter().map(|c| &self.tracks[c]).map(|t| (t.pid, t.ca, t.ca_since_us)).collect();
        for (pid, state, since) in open {
            self.ca_slice(pid, state, since, end);
        }
        meta.append(&mut self.events);
        json!({"traceEvents": meta, "displayTimeUnit": "ms"})
    }
}

/// `192.0.2.1:443 -> 198.51.100.2:5201 · nginx (pid 12) · jellyfin (docker) · cubic`
fn track_name(t: &Track) -> String {
    let s = &t.latest;
    let mut name = format!("{} -> {}", s.local, s.remote);
    if let Some(o) = &s.owner {
        name.push_str(&format!(" · {} (pid {})", o.comm, o.pid));
    }
    match (&t.placement.container, &t.placement.cgroup) {
        (Some(c), _) => name.push_str(&format!(" · {} ({})", c.label(), c.runtime.name())),
        (None, Some(path)) if path != "/" => name.push_str(&format!(" · {path}")),
        _ => {}
    }
    name.push_str(&format!(" · {}", s.cc));
    name
}

/// The trace of `entries`.
pub fn trace(entries: impl IntoIterator<Item = Entry>, diagnosis: DiagnosisConfig) -> Value {
    let mut trace = Trace { start_ns: 0, events: Vec::new(), tracks: HashMap::new(), order: Vec::new() };
    let mut start_known = false;
    let mut end_ns = 0;
    let mut analysis = new_analysis(diagnosis);
    replay(entries, &mut analysis, |a, step| match step {
        Step::Header(h) => {
            trace.start_ns = h.start_monotonic_ns;
            start_known = true;
        }
        Step::Sample(s) => {
            if !start_known {
                trace.start_ns = s.ts_ns;
                start_known = true;
            }
            end_ns = end_ns.max(s.ts_ns);
            trace.sample(s, || Placement::of(s, &a.env));
        }
        Step::Tick { now_ns, evaluated, .. } => {
            end_ns = end_ns.max(now_ns);
            if evaluated {
                trace.tick(a, now_ns);
            }
        }
        Step::Action(record) => {
            let ts = trace.us(record.ts_ns);
            trace.events.push(json!({"ph": "i", "s": "g", "name": record.headline(), "pid": 0, "tid": 0, "ts": ts}));
        }
        Step::End(_) => {}
    });
    trace.finish(end_ns)
}

pub fn write(entries: impl IntoIterator<Item = Entry>, diagnosis: DiagnosisConfig, out: &mut dyn Write) -> Result<()> {
    let value = trace(entries, diagnosis);
    serde_json::to_writer(&mut *out, &value).context("writing the trace")?;
    out.write_all(b"\n").context("writing the trace")?;
    out.flush().context("writing the trace")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::fixture;

    fn events() -> Vec<Value> {
        let mut out = Vec::new();
        write(fixture::entries(), DiagnosisConfig::default(), &mut out).expect("write");
        let v: Value = serde_json::from_slice(&out).expect("the trace parses");
        v["traceEvents"].as_array().expect("traceEvents").clone()
    }

    #[test]
    fn one_process_per_flow_named_with_endpoints_process_and_container() {
        let ev = events();
        let names: Vec<&str> = ev
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names.len(), 6, "{names:?}");
        let cubic = names.iter().find(|n| n.starts_with("198.18.0.1:41234 -> 203.0.113.10:5201")).expect("cubic");
        assert!(cubic.contains(fixture::EVIL_COMM) && cubic.contains(fixture::EVIL_CONTAINER), "{cubic}");
        let pids: std::collections::HashSet<u64> =
            ev.iter().filter(|e| e["ph"] == "M").map(|e| e["pid"].as_u64().expect("pid")).collect();
        assert_eq!(pids.len(), 6);
        for e in ev.iter().filter(|e| e["ph"] != "M") {
            assert!(e["ts"].as_f64().expect("ts") >= 0.0, "{e}");
        }
    }

    #[test]
    fn counters_slices_and_instants() {
        let ev = events();
        for (name, unit) in COUNTERS {
            assert!(
                ev.iter().any(|e| e["ph"] == "C" && e["name"] == name && e["args"][unit].is_number()),
                "counter {name}"
            );
        }
        let slices: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
        assert!(slices.iter().any(|e| e["name"] == "Recovery" && e["dur"].as_f64().expect("dur") > 0.0));
        let instant = |name: &str| ev.iter().any(|e| e["ph"] == "i" && e["name"] == name);
        assert!(instant("retransmission") && instant("flagged") && instant("limited by cwnd") && instant("closed"));
        // The whole recording is covered: the last slice ends at 15 s.
        let end = slices
            .iter()
            .map(|e| e["ts"].as_f64().unwrap_or(0.0) + e["dur"].as_f64().unwrap_or(0.0))
            .fold(0.0, f64::max);
        assert_eq!(end, fixture::SECS as f64 * 1e6);
    }
}
