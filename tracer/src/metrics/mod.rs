//! The metrics service (what Prometheus calls an exporter; the after-the-fact files are
//! `crate::export`): `cctrace serve` (headless), and `--listen` or `--otlp` beside any other
//! front end, fed by the same pipeline.
//!
//! [`model`] computes what is exposed from the analysis (pure, tested on feeds); [`families`]
//! lists it as metric families; [`exposition`] encodes those with the Prometheus client and
//! [`server`] serves them over HTTP; [`otlp`] pushes the same families, and the events worth
//! telling at once, to an OpenTelemetry collector.
//! [`WithMetrics`] wraps a front end the way [`crate::recording::Recording`] does, so the TUI or
//! JSON output and the exporter see the same samples and ticks.

pub mod exposition;
pub mod families;
pub mod model;
pub mod otlp;
pub mod server;

use std::net::SocketAddr;

use anyhow::Result;

use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::Analysis;
use crate::pipeline::Status;
use crate::side_job::{Beside, SideJob};
use crate::source::HookCostReader;

pub use exposition::{Exposition, Format, SharedSnapshot};
pub use model::{MetricsConfig, MetricsModel, Snapshot};
pub use otlp::{OtlpExport, OtlpSettings, OtlpStatus};
pub use server::{check_listen, MetricsServer, ServeError};

/// The snapshot is recomputed at most this often (the analysis judges flows once a second);
/// ticks in between only count bytes.
const SNAPSHOT_EVERY_NS: u64 = 1_000_000_000;
/// While nothing it is made from changes (an idle host), the snapshot is recomputed only this
/// often: well within `/health`'s [`server::STALE_AFTER`], and the hooks' costs (which move
/// without samples while the kernel counts runs) stay this fresh.
const UNCHANGED_SNAPSHOT_EVERY_NS: u64 = 10_000_000_000;

/// What a snapshot is made from, as far as it can change between ticks: the source's
/// counters, the verdicts, and the flows there are.
#[derive(Clone, Copy, Debug, PartialEq)]
struct SnapshotInputs {
    counters: crate::source::SourceCounters,
    verdicts: u64,
    flows: usize,
    departed: u64,
    udp_flows: usize,
}

/// The exporter's state: the model, what scrapes read, the HTTP server, the OTLP export.
pub struct MetricsService {
    model: MetricsModel,
    shared: SharedSnapshot,
    /// Each kernel hook and whether it is attached.
    hooks: Vec<(String, bool)>,
    /// Reads the attached hooks' run statistics.
    hook_costs: Option<HookCostReader>,
    server: Option<MetricsServer>,
    otlp: Option<OtlpExport>,
    snapshot_at_ns: Option<u64>,
    /// What the last snapshot was made from; `None` once a batch of samples came since.
    snapshot_from: Option<SnapshotInputs>,
}

impl MetricsService {
    /// Serve on `addr` (already checked with [`check_listen`]).
    pub async fn start(addr: SocketAddr, cfg: MetricsConfig, hooks: Vec<(String, bool)>) -> Result<Self, ServeError> {
        let mut service = Self::without_server(cfg, hooks);
        service.server = Some(MetricsServer::bind(addr, service.shared.clone()).await?);
        Ok(service)
    }

    /// No HTTP endpoint (an OTLP export alone).
    pub fn without_server(cfg: MetricsConfig, hooks: Vec<(String, bool)>) -> Self {
        Self {
            model: MetricsModel::new(cfg),
            shared: SharedSnapshot::default(),
            hooks,
            hook_costs: None,
            server: None,
            otlp: None,
            snapshot_at_ns: None,
            snapshot_from: None,
        }
    }

    /// Also push the metrics, and the events, to an OpenTelemetry collector.
    pub fn set_otlp(&mut self, otlp: OtlpExport) {
        self.otlp = Some(otlp);
    }

    /// The kernel hooks, whether each is attached, and how to read the attached ones' costs
    /// (known once the source started).
    pub fn set_hooks(&mut self, hooks: Vec<(String, bool)>, hook_costs: HookCostReader) {
        self.hooks = hooks;
        self.hook_costs = Some(hook_costs);
    }

    /// Where it listens.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(MetricsServer::local_addr)
    }

    /// A new snapshot for scrapes, and for the OTLP export when its interval is up (or
    /// `last`, at the end).
    fn publish(&mut self, analysis: &Analysis, counters: crate::source::SourceCounters, last: bool) {
        let mut snapshot = self.model.snapshot(analysis, counters, &self.hooks);
        snapshot.health.hook_costs = self.hook_costs.as_ref().map(|read| read()).unwrap_or_default();
        snapshot.health.otlp = self.otlp.as_ref().map(OtlpExport::counts);
        if let Some(otlp) = &mut self.otlp {
            otlp.on_snapshot(&snapshot, analysis.last_tick_ns(), last);
        }
        self.shared.set(snapshot);
        self.snapshot_at_ns = Some(analysis.last_tick_ns());
    }
}

/// A front end that also exports metrics (when the exporter is set).
pub type WithMetrics<F> = Beside<F, MetricsService>;

impl SideJob for MetricsService {
    fn on_batch(&mut self, analysis: &Analysis, batch: &[Sample]) -> Result<()> {
        self.model.observe(&analysis.env, analysis.env_generation(), batch);
        self.snapshot_from = None;
        Ok(())
    }

    fn on_sockets(&mut self, _analysis: &Analysis, _readings: &crate::analysis::udp::SocketReadings) -> Result<()> {
        self.snapshot_from = None;
        Ok(())
    }

    fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<()> {
        let inputs = SnapshotInputs {
            counters: status.counters,
            verdicts: analysis.diagnoser.generation(),
            flows: analysis.table.len(),
            departed: analysis.table.departed(),
            udp_flows: analysis.udp.len(),
        };
        let every = if self.snapshot_from == Some(inputs) { UNCHANGED_SNAPSHOT_EVERY_NS } else { SNAPSHOT_EVERY_NS };
        let due = self.snapshot_at_ns.is_none_or(|at| analysis.last_tick_ns().saturating_sub(at) >= every);
        if due {
            self.publish(analysis, status.counters, false);
            self.snapshot_from = Some(inputs);
        }
        if let Some(otlp) = &mut self.otlp {
            otlp.on_tick(analysis);
        }
        Ok(())
    }

    fn on_actions(&mut self, actions: &[ActionRecord]) -> Result<()> {
        if let Some(otlp) = &mut self.otlp {
            otlp.on_actions(actions);
        }
        Ok(())
    }

    /// The final totals, then the server stops (a scrape from here on is refused) and the
    /// OTLP export delivers what it still holds.
    async fn finish(&mut self, analysis: &Analysis, summary: &SummaryRecord) -> Result<()> {
        if let Some(otlp) = &mut self.otlp {
            otlp.on_tick(analysis);
        }
        self.publish(analysis, summary.counters(), true);
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
        if let Some(otlp) = &mut self.otlp {
            otlp.finish().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::DiagnosisConfig;
    use crate::analysis::flow_table::TableConfig;
    use crate::pipeline::{Control, FrontEnd, NoStop, PipelineOptions, TimeBase};
    use crate::source::FeedSource;
    use crate::test_support::feed;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn scrape(addr: SocketAddr) -> std::io::Result<String> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// The front end the exporter wraps: it scrapes the exporter at every tick.
    struct Scraper {
        addr: SocketAddr,
        scrapes: Vec<String>,
    }

    impl FrontEnd for Scraper {
        /// A millisecond per batch (a tenth of a second of the feed): the pipeline's 10 ms
        /// ticks then come about once per second of sample time, as live.
        async fn on_batch(&mut self, _analysis: &Analysis, _batch: &[Sample]) -> Result<Control> {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            Ok(Control::Continue)
        }

        async fn on_tick(&mut self, _analysis: &Analysis, _status: &Status) -> Result<Control> {
            self.scrapes.push(scrape(self.addr).await?);
            Ok(Control::Continue)
        }

        async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
            Ok(())
        }
    }

    fn value(scrape: &str, prefix: &str) -> Option<f64> {
        scrape.lines().find_map(|l| l.strip_prefix(prefix)?.rsplit(' ').next()?.parse().ok())
    }

    #[tokio::test]
    async fn the_pipeline_feeds_the_exporter_beside_another_front_end_and_stops_its_server() {
        let batches: Vec<Vec<Sample>> = (0..400).map(feed::batch).collect();
        let mut source = FeedSource::new(batches);
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), feed::env());
        let exporter =
            MetricsService::start("127.0.0.1:0".parse().expect("addr"), MetricsConfig::default(), Vec::new())
                .await
                .expect("binds");
        let addr = exporter.local_addr().expect("listening");
        let mut front = WithMetrics::new(Scraper { addr, scrapes: Vec::new() }, Some(exporter));
        let opts = PipelineOptions {
            tick: std::time::Duration::from_millis(10),
            max_samples_per_turn: 5,
            time_base: TimeBase::Samples,
            final_drain: std::time::Duration::ZERO,
            ..PipelineOptions::default()
        };
        let summary =
            crate::pipeline::run(&mut source, &mut analysis, &mut front, &opts, || 0, &mut NoStop).await.expect("runs");
        assert_eq!(summary.events_received, (0..400).map(|t| feed::batch(t).len() as u64).sum::<u64>());
        let scrapes = &front.inner.scrapes;
        assert!(scrapes.len() > 10, "{} scrapes", scrapes.len());
        let flagged = r#"cctrace_flagged_flows{container="jellyfin",netns="4026531840",cc="cubic"}"#;
        assert!(scrapes.iter().any(|s| value(s, flagged) == Some(1.0)), "the upload is flagged in some scrape");
        let sent = r#"cctrace_sent_bytes_total{container="jellyfin",netns="4026531840",cc="cubic"}"#;
        let counted: Vec<f64> = scrapes.iter().filter_map(|s| value(s, sent)).collect();
        assert!(counted.windows(2).all(|w| w[1] >= w[0]), "never backwards: {counted:?}");
        assert!(counted.last().is_some_and(|v| *v > 0.0));
        assert!(scrape(addr).await.is_err(), "the server is gone once the run finished");
    }
}
