//! The one list of what is exported: every metric family of a [`Snapshot`] with its name, help,
//! unit, type and series, as plain data. The Prometheus exposition
//! ([`crate::metrics::exposition`]) and the OTLP export ([`crate::metrics::otlp`]) both encode
//! this list, so a family added here reaches both with the same name, labels and values, and
//! nothing is computed twice.

use std::borrow::Cow;

use crate::metrics::model::{Delivery, ExportCounts, FlaggedSeries, GroupKey, Health, Snapshot};

/// How a family's values behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Monotonic, cumulative since the process started.
    Counter,
}

/// A family's unit: the suffix Prometheus names carry, and the UCUM unit OTLP carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count of things, in OTLP the UCUM annotation that says of what (`{flow}`).
    Count(&'static str),
    Bytes,
    Seconds,
    /// A share, 0..1.
    Ratio,
    BytesPerSecond,
    /// A series that is always 1 and says something in its labels.
    Info,
}

impl Unit {
    /// The suffix of the family's name (`cctrace_sent` + `bytes`), none for a count.
    pub fn suffix(self) -> Option<&'static str> {
        match self {
            Self::Count(_) => None,
            Self::Bytes => Some("bytes"),
            Self::Seconds => Some("seconds"),
            Self::Ratio => Some("ratio"),
            Self::BytesPerSecond => Some("bytes_per_second"),
            Self::Info => Some("info"),
        }
    }

    /// The unit as OpenTelemetry writes it (UCUM).
    pub fn ucum(self) -> &'static str {
        match self {
            Self::Count(what) => what,
            Self::Bytes => "By",
            Self::Seconds => "s",
            Self::Ratio => "1",
            // No unit: "1" on a gauge reads as a ratio to the Prometheus translation (`_ratio`).
            Self::Info => "",
            Self::BytesPerSecond => "By/s",
        }
    }
}

/// A series' value: counts as integers, measures as floats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl Value {
    pub fn as_f64(self) -> f64 {
        match self {
            Self::Int(v) => v as f64,
            Self::Float(v) => v,
        }
    }
}

/// One series: its labels and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Point<'a> {
    pub labels: Vec<(&'static str, Cow<'a, str>)>,
    pub value: Value,
}

/// One metric family.
#[derive(Clone, Debug, PartialEq)]
pub struct Family<'a> {
    /// The name without its unit suffix (`cctrace_sent`).
    pub base: &'static str,
    pub help: &'static str,
    pub unit: Unit,
    pub kind: Kind,
    pub points: Vec<Point<'a>>,
}

impl Family<'_> {
    /// The family's name as OpenMetrics declares it (`cctrace_sent_bytes`; a counter's
    /// samples add `_total`): the name of the OTLP metric too.
    pub fn name(&self) -> String {
        match self.unit.suffix() {
            Some(suffix) => format!("{}_{suffix}", self.base),
            None => self.base.to_string(),
        }
    }
}

fn family<'a>(base: &'static str, help: &'static str, unit: Unit, kind: Kind, points: Vec<Point<'a>>) -> Family<'a> {
    Family { base, help, unit, kind, points }
}

/// A family of one series without labels.
fn single(base: &'static str, help: &'static str, unit: Unit, kind: Kind, value: Value) -> Family<'static> {
    family(base, help, unit, kind, vec![Point { labels: Vec::new(), value }])
}

fn group_labels<'a>(key: &'a GroupKey) -> Vec<(&'static str, Cow<'a, str>)> {
    vec![
        ("container", Cow::Borrowed(key.container.as_str())),
        ("netns", Cow::Owned(key.netns.to_string())),
        ("cc", Cow::Borrowed(key.cc.as_str())),
    ]
}

/// Which count of a [`Delivery`] a family shows.
type Count = fn(&Delivery) -> u64;

/// A flagged flow's gauge: name, help, unit and how to read it.
type FlowGauge = (&'static str, &'static str, Unit, fn(&FlaggedSeries) -> f64);

fn hook_label(name: &str) -> Vec<(&'static str, Cow<'_, str>)> {
    vec![("hook", Cow::Borrowed(name))]
}

/// Every family of `snap`, in the order the exposition lists them.
pub fn families(snap: &Snapshot) -> Vec<Family<'_>> {
    let flows = Unit::Count("{flow}");
    let mut out = group_families(snap);
    out.extend(flagged_flow_families(snap));
    out.push(single(
        "cctrace_flagged_flows_folded",
        "Flagged flows beyond the top N, without series of their own",
        flows,
        Kind::Gauge,
        Value::Int(snap.flagged_folded),
    ));
    out.push(single(
        "cctrace_overflow_flows",
        "Flows counted in the overflow group (container=\"_other\") because the group limit was reached",
        flows,
        Kind::Counter,
        Value::Int(snap.overflow_flows),
    ));
    out.extend(health(snap));
    out
}

/// The families with a series per group (container, namespace, congestion control), and the
/// flows by what limits them.
fn group_families(snap: &Snapshot) -> Vec<Family<'_>> {
    let flows = Unit::Count("{flow}");
    let per_group = |f: &dyn Fn(&crate::metrics::model::GroupSeries) -> Value| -> Vec<Point<'_>> {
        snap.groups.iter().map(|g| Point { labels: group_labels(&g.key), value: f(g) }).collect()
    };
    vec![
        family("cctrace_flows", "Open TCP flows", flows, Kind::Gauge, per_group(&|g| Value::Int(g.flows))),
        family(
            "cctrace_heavy_flows",
            "Open heavy flows (bulk or high-rate)",
            flows,
            Kind::Gauge,
            per_group(&|g| Value::Int(g.heavy)),
        ),
        family(
            "cctrace_flagged_flows",
            "Open flows flagged as held back by loss-based congestion control on non-congestive loss",
            flows,
            Kind::Gauge,
            per_group(&|g| Value::Int(g.flagged)),
        ),
        family(
            "cctrace_remote_flagged_flows",
            "Of the flagged flows, those this host receives, judged from the receiving end: their senders, and the fix, are on other hosts",
            flows,
            Kind::Gauge,
            per_group(&|g| Value::Int(g.remote_flagged)),
        ),
        family(
            "cctrace_goodput",
            "Goodput of the open flows (acked plus received)",
            Unit::BytesPerSecond,
            Kind::Gauge,
            per_group(&|g| Value::Float(g.goodput_bps / 8.0)),
        ),
        family(
            "cctrace_loss",
            "Retransmitted share of the bytes sent over the last second",
            Unit::Ratio,
            Kind::Gauge,
            per_group(&|g| Value::Float(g.loss_ratio)),
        ),
        family(
            "cctrace_sent",
            "Bytes sent, retransmissions included (the sockets' tcpi_bytes_sent)",
            Unit::Bytes,
            Kind::Counter,
            per_group(&|g| Value::Int(g.totals.bytes_sent)),
        ),
        family(
            "cctrace_retransmitted",
            "Bytes retransmitted (the sockets' tcpi_bytes_retrans)",
            Unit::Bytes,
            Kind::Counter,
            per_group(&|g| Value::Int(g.totals.bytes_retransmitted)),
        ),
        family(
            "cctrace_retransmitted_segments",
            "Segments retransmitted (the sockets' tcpi_total_retrans; nstat's TcpRetransSegs)",
            Unit::Count("{segment}"),
            Kind::Counter,
            per_group(&|g| Value::Int(g.totals.segments_retransmitted)),
        ),
        family(
            "cctrace_flows_limited_by",
            "Tracked flows by what limits them (the verdict)",
            flows,
            Kind::Gauge,
            snap.limited_by
                .iter()
                .map(|(l, n)| Point { labels: vec![("limited_by", Cow::Borrowed(l.name()))], value: Value::Int(*n) })
                .collect(),
        ),
    ]
}

/// The gauges of the top flagged flows, a series per flow.
fn flagged_flow_families(snap: &Snapshot) -> Vec<Family<'_>> {
    let per_flow: [FlowGauge; 5] = [
        ("cctrace_flagged_flow_goodput", "A top flagged flow's goodput", Unit::BytesPerSecond, |f| f.goodput_bps / 8.0),
        ("cctrace_flagged_flow_rtt", "A top flagged flow's smoothed RTT", Unit::Seconds, |f| f.srtt_seconds),
        ("cctrace_flagged_flow_min_rtt", "A top flagged flow's minimum RTT", Unit::Seconds, |f| f.min_rtt_seconds),
        (
            "cctrace_flagged_flow_loss",
            "A top flagged flow's retransmitted share over its loss episodes",
            Unit::Ratio,
            |f| f.loss_ratio,
        ),
        (
            "cctrace_flagged_flow_headroom",
            "Rate a top flagged flow's path has shown beyond its goodput",
            Unit::BytesPerSecond,
            |f| f.headroom_bps / 8.0,
        ),
    ];
    per_flow
        .into_iter()
        .map(|(base, help, unit, value)| {
            let points = snap
                .flagged
                .iter()
                .map(|f| {
                    let mut labels = group_labels(&f.key);
                    labels.push(("flow", Cow::Borrowed(f.flow.as_str())));
                    Point { labels, value: Value::Float(value(f)) }
                })
                .collect();
            family(base, help, unit, Kind::Gauge, points)
        })
        .collect()
}

/// The tracer's own health: the source's counters, the flow table, the hooks, the OTLP export.
fn health(snap: &Snapshot) -> Vec<Family<'_>> {
    let h = &snap.health;
    let mut out = source_families(h);
    out.push(single(
        "cctrace_flows_tracked",
        "Flows in the flow table, open and lingering closed",
        Unit::Count("{flow}"),
        Kind::Gauge,
        Value::Int(h.flows_tracked),
    ));
    out.extend(hook_families(h));
    if let Some(otlp) = &h.otlp {
        out.extend(otlp_families(otlp));
    }
    out.push(family(
        "cctrace_build",
        "The running cctrace",
        Unit::Info,
        Kind::Gauge,
        vec![Point { labels: vec![("version", Cow::Borrowed(env!("CARGO_PKG_VERSION")))], value: Value::Int(1) }],
    ));
    out
}

/// The source's counters and the flow table's evictions, one series each.
fn source_families(h: &Health) -> Vec<Family<'static>> {
    let c = &h.counters;
    let samples = Unit::Count("{sample}");
    [
        ("cctrace_events_received", "Kernel samples delivered to the analysis", samples, c.received),
        ("cctrace_events_lost", "Kernel samples lost because the ring buffer was full", samples, c.lost),
        (
            "cctrace_events_filtered",
            "Kernel samples not written because their flow is outside the filter",
            samples,
            c.filtered,
        ),
        ("cctrace_decode_errors", "Kernel samples that failed to decode", samples, c.decode_errors),
        (
            "cctrace_kernel_read_errors",
            "Socket field reads that failed in the eBPF programs",
            Unit::Count("{read}"),
            c.kernel_read_errors,
        ),
        (
            "cctrace_flow_map_full",
            "Flows the kernel's per-flow map could not hold",
            Unit::Count("{flow}"),
            c.flow_map_full,
        ),
        (
            "cctrace_kernel_emitted",
            "Kernel samples written into the ring buffer",
            samples,
            c.kernel_emitted.unwrap_or(c.received + c.lost),
        ),
        (
            "cctrace_flows_evicted",
            "Flows evicted from the flow table to keep it bounded",
            Unit::Count("{flow}"),
            h.flows_evicted,
        ),
    ]
    .into_iter()
    .map(|(base, help, unit, value)| single(base, help, unit, Kind::Counter, Value::Int(value)))
    .collect()
}

/// Each kernel hook: attached or not, its program's runs and their time.
fn hook_families(h: &Health) -> Vec<Family<'_>> {
    vec![
        family(
            "cctrace_hook_attached",
            "Whether each kernel hook is attached (1) or disabled (0)",
            Unit::Count("{hook}"),
            Kind::Gauge,
            h.hooks
                .iter()
                .map(|(name, on)| Point { labels: hook_label(name), value: Value::Int(u64::from(*on)) })
                .collect(),
        ),
        family(
            "cctrace_hook_runs",
            "Runs of each hook's program (counted while kernel.bpf_stats_enabled is on)",
            Unit::Count("{run}"),
            Kind::Counter,
            h.hook_costs.iter().map(|c| Point { labels: hook_label(&c.hook), value: Value::Int(c.runs) }).collect(),
        ),
        family(
            "cctrace_hook_run",
            "Time spent in each hook's program (counted while kernel.bpf_stats_enabled is on)",
            Unit::Seconds,
            Kind::Counter,
            h.hook_costs
                .iter()
                .map(|c| Point { labels: hook_label(&c.hook), value: Value::Float(c.run_ns as f64 / 1e9) })
                .collect(),
        ),
    ]
}

/// What the OTLP collector accepted and what was not delivered, per signal.
fn otlp_families(otlp: &ExportCounts) -> Vec<Family<'static>> {
    let what: [(&str, &str, Count); 2] = [
        ("cctrace_otlp_exported", "Data points (metrics) and log records (events) the OTLP collector accepted", |d| {
            d.sent
        }),
        (
            "cctrace_otlp_dropped",
            "Data points and log records not delivered to the OTLP collector (queue full, too old, refused)",
            |d| d.dropped,
        ),
    ];
    what.into_iter()
        .map(|(base, help, count)| {
            let points = [("metrics", &otlp.metric_points), ("logs", &otlp.log_records)]
                .into_iter()
                .map(|(signal, d)| Point {
                    labels: vec![("signal", Cow::Borrowed(signal))],
                    value: Value::Int(count(d)),
                })
                .collect();
            family(base, help, Unit::Count("{item}"), Kind::Counter, points)
        })
        .collect()
}
