//! `--otlp URL`: what cctrace sees, pushed to an OpenTelemetry collector over OTLP/HTTP
//! (protobuf): the exposition's [`families`](crate::metrics::families) every `--otlp-interval`
//! as metrics, and the moments that matter ([`events`]: a flow flagged or cleared, a heavy
//! flow's limit changing, a fix applied or undone) as log records as they happen.
//!
//! [`OtlpExport`] runs inside the metrics service, on the snapshots it makes anyway (nothing
//! is counted twice); [`encode`] builds the messages, [`sender`] delivers them from a bounded
//! queue on a thread of its own, so a collector that is down, slow or refusing never holds the
//! pipeline: it costs at most the queue, and what was dropped is counted
//! (`cctrace_otlp_dropped_total`, and the line printed at the end).

pub mod encode;
pub mod events;
mod http;
pub mod sender;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::analysis::schema::ActionRecord;
use crate::analysis::time::WallClock;
use crate::analysis::Analysis;
use crate::metrics::families::families;
use crate::metrics::model::{ExportCounts, Snapshot};
use encode::Host;
use events::FlowEvents;
use sender::{Sender, Signal};

/// The default `--otlp-interval`: the interval Prometheus setups scrape at (Prometheus's own
/// example configuration and this project's docs use 15 s), so the series have the same
/// resolution whichever way they travel and the shipped rules' windows hold.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// How long the end of a run waits for the last exports to be delivered.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);
/// A snapshot this much short of the interval still exports: snapshots come once a second, on
/// ticks whose clock readings wander by microseconds either way, and an export waiting for the
/// next one would come a second late.
const EARLY_NS: u64 = 500_000_000;
/// Log records in one request at most.
const RECORDS_PER_REQUEST: usize = 1000;

/// The environment variable OpenTelemetry's exporters read headers from: `key=value` pairs,
/// comma-separated, values percent-encoded. A secret kept there (a systemd `EnvironmentFile`
/// readable by root only) stays out of the command line, which every user can read.
pub const HEADERS_VARIABLE: &str = "OTEL_EXPORTER_OTLP_HEADERS";

/// The headers `OTEL_EXPORTER_OTLP_HEADERS` holds, as `KEY=VALUE` (values percent-decoded).
pub fn headers_from_env(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => format!("{}={}", k.trim(), percent_decoded(v.trim())),
            // Refused later, with the rest of the header checks.
            None => pair.to_string(),
        })
        .collect()
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the command line says about the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The collector's base URL (`http://collector:4318`).
    pub endpoint: String,
    /// `KEY=VALUE` headers sent with every request (`--otlp-header`, then
    /// [`HEADERS_VARIABLE`]'s).
    pub headers: Vec<String>,
    /// Trust only these roots for an `https://` collector.
    pub ca_file: Option<PathBuf>,
    pub interval: Duration,
    /// Requests the queue holds ([`sender::QUEUE_REQUESTS`] unless a test wants fewer).
    pub queue_requests: usize,
}

/// The export, as the metrics service drives it.
pub struct OtlpExport {
    sender: Sender,
    interval_ns: u64,
    exported_at_ns: Option<u64>,
    events: FlowEvents,
    resource: Resource,
    clock: WallClock,
    start_unix_ns: u64,
}

fn unix_now_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl OtlpExport {
    /// Check the settings (a bad endpoint, header or CA file is one error line) and start the
    /// sender. `clock` and `start_unix_ns` time the events and the counters' start; `say`
    /// tells a person when the collector goes away and comes back.
    pub fn start(
        settings: &OtlpSettings,
        host: &Host,
        clock: WallClock,
        start_unix_ns: u64,
        say: fn(&str),
    ) -> Result<Self> {
        let transport = http::Http::new(&settings.endpoint, &settings.headers, settings.ca_file.as_deref())?;
        let sender = Sender::start(transport, settings.queue_requests, say)?;
        Ok(Self {
            sender,
            interval_ns: u64::try_from(settings.interval.as_nanos()).unwrap_or(u64::MAX),
            exported_at_ns: None,
            events: FlowEvents::default(),
            resource: encode::resource(host),
            clock,
            start_unix_ns,
        })
    }

    /// A handle on what was delivered, for the line printed at the end.
    pub fn status(&self) -> OtlpStatus {
        OtlpStatus(self.sender.clone())
    }

    pub fn counts(&self) -> ExportCounts {
        self.sender.counts()
    }

    /// Actions on the host, sent as events at the next tick (with the flows they switched).
    pub fn on_actions(&mut self, actions: &[ActionRecord]) {
        self.events.push_actions(actions);
    }

    /// Every tick: the events since the last, if any.
    pub fn on_tick(&mut self, analysis: &Analysis) {
        let events = self.events.take(analysis, &self.clock);
        let now = unix_now_ns();
        for chunk in events.chunks(RECORDS_PER_REQUEST) {
            let message = encode::logs_request(chunk, &self.resource, &self.clock, now);
            self.sender.push(sender::request(Signal::Logs, &message, chunk.len() as u64));
        }
    }

    /// A new snapshot made at `now_ns` (monotonic): exported when an interval has passed since
    /// the last export (or `force`, at the end).
    pub fn on_snapshot(&mut self, snapshot: &Snapshot, now_ns: u64, force: bool) {
        let due =
            force || self.exported_at_ns.is_none_or(|at| now_ns.saturating_sub(at) + EARLY_NS >= self.interval_ns);
        if !due {
            return;
        }
        self.exported_at_ns = Some(now_ns);
        let (message, points) =
            encode::metrics_request(&families(snapshot), &self.resource, self.start_unix_ns, unix_now_ns());
        self.sender.push(sender::request(Signal::Metrics, &message, points));
    }

    /// No more exports: deliver what is queued, waiting at most [`FLUSH_AT_EXIT`].
    pub async fn finish(&mut self) {
        self.sender.close();
        let deadline = tokio::time::Instant::now() + FLUSH_AT_EXIT;
        while !self.sender.idle() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What the export delivered, readable after the run.
#[derive(Clone, Debug)]
pub struct OtlpStatus(Sender);

impl OtlpStatus {
    /// One line for stderr at the end: delivered and dropped, by signal.
    pub fn line(&self) -> String {
        let c = self.0.counts();
        let left = self.0.pending();
        let dropped_points = c.metric_points.dropped + left.metric_points.dropped;
        let dropped_records = c.log_records.dropped + left.log_records.dropped;
        let mut line = format!(
            "cctrace: OTLP to {}: {} data points and {} events delivered",
            self.0.describe(),
            c.metric_points.sent,
            c.log_records.sent
        );
        if dropped_points + dropped_records > 0 {
            line.push_str(&format!(
                ", {dropped_points} data points and {dropped_records} events dropped (collector unreachable, refusing or too slow)"
            ));
        } else {
            line.push_str(", none dropped");
        }
        line
    }
}

#[cfg(test)]
mod tests;
