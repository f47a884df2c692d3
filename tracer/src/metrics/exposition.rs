//! The [`Snapshot`] in the Prometheus exposition formats, through the Prometheus project's own
//! Rust client: a [`Collector`] that encodes the latest snapshot at each scrape, and the choice
//! between the text format (0.0.4) and OpenMetrics by the scraper's `Accept` header.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::model::{FlaggedSeries, GroupKey, GroupSeries, Snapshot};
use crate::source::HookCost;

/// The latest snapshot, shared between the pipeline (which replaces it) and scrapes (which read
/// it): a scrape never waits for an evaluation, only for a pointer swap.
#[derive(Clone, Debug, Default)]
pub struct SharedSnapshot(Arc<Mutex<Published>>);

#[derive(Debug, Default)]
struct Published {
    snapshot: Arc<Snapshot>,
    at: Option<Instant>,
}

impl SharedSnapshot {
    pub fn set(&self, snapshot: Snapshot) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) =
            Published { snapshot: Arc::new(snapshot), at: Some(Instant::now()) };
    }

    pub fn get(&self) -> Arc<Snapshot> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).snapshot.clone()
    }

    /// How long ago the snapshot was replaced (`None`: never yet).
    pub fn age(&self) -> Option<Duration> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).at.map(|t| t.elapsed())
    }
}

/// Which exposition format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4.
    Text,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the scraper lists it as acceptable (Prometheus does, first), else text.
    pub fn negotiate(accept: Option<&str>) -> Self {
        // A media range with `q=0` is refused; any other weight accepts it.
        let wants_openmetrics = accept.is_some_and(|a| {
            a.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                let q = parts.find_map(|p| p.strip_prefix("q=")).map_or(1.0, |q| q.parse::<f64>().unwrap_or(0.0));
                media.eq_ignore_ascii_case("application/openmetrics-text") && q > 0.0
            })
        });
        if wants_openmetrics {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A registry holding the exporter's collector.
#[derive(Debug)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    pub fn new(snapshot: SharedSnapshot) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SnapshotCollector(snapshot)));
        Self { registry }
    }

    /// The whole exposition in `format`.
    pub fn render(&self, format: Format) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        match format {
            Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?,
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &self.registry)?,
        }
        Ok(out)
    }
}

#[derive(Debug)]
struct SnapshotCollector(SharedSnapshot);

/// A flagged flow's gauge: name, help, unit and how to read it.
type FlowGauge<'u> = (&'static str, &'static str, &'u Unit, fn(&FlaggedSeries) -> f64);

type Labels<'a> = [(&'static str, &'a str); 3];

fn group_labels<'a>(key: &'a GroupKey, netns: &'a str) -> Labels<'a> {
    [("container", key.container.as_str()), ("netns", netns), ("cc", key.cc.as_str())]
}

/// One metric family: its descriptor, then its series.
fn family<'l, L: EncodeLabelSet + 'l, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric_type: MetricType,
    series: impl IntoIterator<Item = (&'l L, M)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for (labels, metric) in series {
        metric.encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

fn single<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: M,
) -> Result<(), std::fmt::Error> {
    let t = metric.metric_type();
    metric.encode(encoder.encode_descriptor(name, help, unit, t)?)
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.0.get();
        let bytes = Unit::Bytes;
        let seconds = Unit::Seconds;
        let ratio = Unit::Other("ratio".into());
        let bytes_per_second = Unit::Other("bytes_per_second".into());
        // The namespace inode as a label value, kept alongside each group for the closures.
        let netns: Vec<String> = snap.groups.iter().map(|g| g.key.netns.to_string()).collect();
        let groups: Vec<(&GroupSeries, Labels)> =
            snap.groups.iter().zip(&netns).map(|(g, n)| (g, group_labels(&g.key, n))).collect();
        let gauge_u = |v: u64| ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
        let e = &mut encoder;

        family(
            e,
            "cctrace_flows",
            "Open TCP flows",
            None,
            MetricType::Gauge,
            groups.iter().map(|(g, l)| (l, gauge_u(g.flows))),
        )?;
        family(
            e,
            "cctrace_heavy_flows",
            "Open heavy flows (bulk or high-rate)",
            None,
            MetricType::Gauge,
            groups.iter().map(|(g, l)| (l, gauge_u(g.heavy))),
        )?;
        family(
            e,
            "cctrace_flagged_flows",
            "Open flows flagged as held back by loss-based congestion control on non-congestive loss",
            None,
            MetricType::Gauge,
            groups.iter().map(|(g, l)| (l, gauge_u(g.flagged))),
        )?;
        family(
            e,
            "cctrace_goodput",
            "Goodput of the open flows (acked plus received)",
            Some(&bytes_per_second),
            MetricType::Gauge,
            groups.iter().map(|(g, l)| (l, ConstGauge::new(g.goodput_bps / 8.0))),
        )?;
        family(
            e,
            "cctrace_loss",
            "Retransmitted share of the bytes sent over the last second",
            Some(&ratio),
            MetricType::Gauge,
            groups.iter().map(|(g, l)| (l, ConstGauge::new(g.loss_ratio))),
        )?;
        family(
            e,
            "cctrace_sent",
            "Bytes sent, retransmissions included (the sockets' tcpi_bytes_sent)",
            Some(&bytes),
            MetricType::Counter,
            groups.iter().map(|(g, l)| (l, ConstCounter::new(g.totals.bytes_sent))),
        )?;
        family(
            e,
            "cctrace_retransmitted",
            "Bytes retransmitted (the sockets' tcpi_bytes_retrans)",
            Some(&bytes),
            MetricType::Counter,
            groups.iter().map(|(g, l)| (l, ConstCounter::new(g.totals.bytes_retransmitted))),
        )?;
        family(
            e,
            "cctrace_retransmitted_segments",
            "Segments retransmitted (the sockets' tcpi_total_retrans; nstat's TcpRetransSegs)",
            None,
            MetricType::Counter,
            groups.iter().map(|(g, l)| (l, ConstCounter::new(g.totals.segments_retransmitted))),
        )?;
        let verdicts: Vec<([(&str, &str); 1], u64)> =
            snap.limited_by.iter().map(|(l, n)| ([("limited_by", l.name())], *n)).collect();
        family(
            e,
            "cctrace_flows_limited_by",
            "Tracked flows by what limits them (the verdict)",
            None,
            MetricType::Gauge,
            verdicts.iter().map(|(l, n)| (l, gauge_u(*n))),
        )?;

        let flagged_netns: Vec<String> = snap.flagged.iter().map(|f| f.key.netns.to_string()).collect();
        let flagged: Vec<(&FlaggedSeries, [(&str, &str); 4])> = snap
            .flagged
            .iter()
            .zip(&flagged_netns)
            .map(|(f, n)| {
                let [c, n, cc] = group_labels(&f.key, n);
                (f, [c, n, cc, ("flow", f.flow.as_str())])
            })
            .collect();
        let per_flow: [FlowGauge; 5] = [
            ("cctrace_flagged_flow_goodput", "A top flagged flow's goodput", &bytes_per_second, |f| {
                f.goodput_bps / 8.0
            }),
            ("cctrace_flagged_flow_rtt", "A top flagged flow's smoothed RTT", &seconds, |f| f.srtt_seconds),
            ("cctrace_flagged_flow_min_rtt", "A top flagged flow's minimum RTT", &seconds, |f| f.min_rtt_seconds),
            (
                "cctrace_flagged_flow_loss",
                "A top flagged flow's retransmitted share over its loss episodes",
                &ratio,
                |f| f.loss_ratio,
            ),
            (
                "cctrace_flagged_flow_headroom",
                "Rate a top flagged flow's path has shown beyond its goodput",
                &bytes_per_second,
                |f| f.headroom_bps / 8.0,
            ),
        ];
        for (name, help, unit, value) in per_flow {
            family(
                e,
                name,
                help,
                Some(unit),
                MetricType::Gauge,
                flagged.iter().map(|(f, l)| (l, ConstGauge::new(value(f)))),
            )?;
        }
        single(
            e,
            "cctrace_flagged_flows_folded",
            "Flagged flows beyond the top N, without series of their own",
            None,
            gauge_u(snap.flagged_folded),
        )?;
        single(
            e,
            "cctrace_overflow_flows",
            "Flows counted in the overflow group (container=\"_other\") because the group limit was reached",
            None,
            ConstCounter::new(snap.overflow_flows),
        )?;

        let h = &snap.health;
        let c = &h.counters;
        for (name, help, value) in [
            ("cctrace_events_received", "Kernel samples delivered to the analysis", c.received),
            ("cctrace_events_lost", "Kernel samples lost because the ring buffer was full", c.lost),
            (
                "cctrace_events_filtered",
                "Kernel samples not written because their flow is outside the filter",
                c.filtered,
            ),
            ("cctrace_decode_errors", "Kernel samples that failed to decode", c.decode_errors),
            ("cctrace_kernel_read_errors", "Socket field reads that failed in the eBPF programs", c.kernel_read_errors),
            ("cctrace_flow_map_full", "Flows the kernel's per-flow map could not hold", c.flow_map_full),
            (
                "cctrace_kernel_emitted",
                "Kernel samples written into the ring buffer",
                c.kernel_emitted.unwrap_or(c.received + c.lost),
            ),
            ("cctrace_flows_evicted", "Flows evicted from the flow table to keep it bounded", h.flows_evicted),
        ] {
            single(e, name, help, None, ConstCounter::new(value))?;
        }
        single(
            e,
            "cctrace_flows_tracked",
            "Flows in the flow table, open and lingering closed",
            None,
            gauge_u(h.flows_tracked),
        )?;
        let hooks: Vec<([(&str, &str); 1], bool)> =
            h.hooks.iter().map(|(name, on)| ([("hook", name.as_str())], *on)).collect();
        family(
            e,
            "cctrace_hook_attached",
            "Whether each kernel hook is attached (1) or disabled (0)",
            None,
            MetricType::Gauge,
            hooks.iter().map(|(l, on)| (l, ConstGauge::new(i64::from(*on)))),
        )?;
        let costs: Vec<([(&str, &str); 1], &HookCost)> =
            h.hook_costs.iter().map(|c| ([("hook", c.hook.as_str())], c)).collect();
        family(
            e,
            "cctrace_hook_runs",
            "Runs of each hook's program (counted while kernel.bpf_stats_enabled is on)",
            None,
            MetricType::Counter,
            costs.iter().map(|(l, c)| (l, ConstCounter::new(c.runs))),
        )?;
        family(
            e,
            "cctrace_hook_run",
            "Time spent in each hook's program (counted while kernel.bpf_stats_enabled is on)",
            Some(&seconds),
            MetricType::Counter,
            costs.iter().map(|(l, c)| (l, ConstCounter::new(c.run_ns as f64 / 1e9))),
        )?;
        let build = [("version", env!("CARGO_PKG_VERSION"))];
        family(
            e,
            "cctrace_build",
            "The running cctrace",
            Some(&Unit::Other("info".into())),
            MetricType::Gauge,
            [(&build, ConstGauge::new(1i64))],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
