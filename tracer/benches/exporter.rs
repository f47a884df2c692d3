//! The exporter's cost and cardinality against the number of flows: 1k, 10k and 100k synthetic
//! flows (spread over 5,000 network namespaces, so the group bound is reached) fed through the
//! real `Analysis`, then the model's snapshot (once per evaluation) and a scrape over real HTTP.
//! Times are printed as ratios to the 1k run of the same process; the series count against the
//! documented bound. Asserts nothing but the bound.
//!
//! `cargo bench -p tracer --bench exporter`

mod synthetic;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracer::analysis::diagnosis::DiagnosisConfig;
use tracer::analysis::environment::Environment;
use tracer::analysis::flow_table::TableConfig;
use tracer::analysis::sample::Sample;
use tracer::analysis::Analysis;
use tracer::metrics::{MetricsConfig, MetricsModel, MetricsServer, SharedSnapshot};
use tracer::source::SourceCounters;

const MS: u64 = 1_000_000;
const NAMESPACES: u64 = 5_000;
const SCRAPES: u32 = 20;

struct Run {
    flows: u64,
    tracked: usize,
    snapshot: Duration,
    /// Per sample, counting its bytes into its group.
    observe_ns: f64,
    scrape: Duration,
    series: usize,
    bytes: usize,
}

fn sample(cookie: u64, ts_ns: u64) -> Sample {
    let mut s = synthetic::sample(cookie, ts_ns, ts_ns / 1000 * (cookie % 7 + 1));
    s.netns = 4_026_531_840 + (cookie % NAMESPACES) as u32;
    s
}

fn run(flows: u64, cfg: &MetricsConfig, rt: &tokio::runtime::Runtime) -> Run {
    // Room for every flow: the worst case is a table that holds them all.
    let table = TableConfig { max_flows: flows as usize, ..TableConfig::default() };
    let mut analysis = Analysis::new(table, DiagnosisConfig::default(), Environment::default());
    let mut model = MetricsModel::new(cfg.clone());
    // Three seconds of samples, ten a second per flow, evaluated every second.
    let mut observing = Duration::ZERO;
    for tick in 0..30u64 {
        let now = 1_000_000 * MS + tick * 100 * MS;
        let batch: Vec<Sample> = (0..flows).map(|c| sample(c, now)).collect();
        for s in &batch {
            analysis.ingest(s);
        }
        let t = Instant::now();
        model.observe(&analysis.env, analysis.env_generation(), &batch);
        observing += t.elapsed();
        if tick % 10 == 9 {
            analysis.tick(now);
        }
    }
    let hooks: Vec<(String, bool)> = (0..6).map(|i| (format!("hook{i}"), true)).collect();
    let started = Instant::now();
    let snapshot = model.snapshot(&analysis, SourceCounters::default(), &hooks);
    let snapshot_took = started.elapsed();
    let series = snapshot.series_count();
    let shared = SharedSnapshot::default();
    shared.set(snapshot);
    let (scrape, bytes) = rt.block_on(async {
        let server = MetricsServer::bind("127.0.0.1:0".parse().expect("addr"), shared).await.expect("binds");
        let addr = server.local_addr();
        let mut best = Duration::MAX;
        let mut bytes = 0;
        for _ in 0..SCRAPES {
            let t = Instant::now();
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects");
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await.expect("writes");
            let mut out = Vec::new();
            stream.read_to_end(&mut out).await.expect("reads");
            best = best.min(t.elapsed());
            bytes = out.len();
        }
        server.shutdown().await;
        (best, bytes)
    });
    let observe_ns = observing.as_nanos() as f64 / (30 * flows) as f64;
    Run { flows, tracked: analysis.table.len(), snapshot: snapshot_took, observe_ns, scrape, series, bytes }
}

fn main() -> anyhow::Result<()> {
    use cctrace_lab::figures::{number, Row, Section};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let cfg = MetricsConfig::default();
    let mut section = Section::new("exporter", "The Prometheus exporter").about(&format!(
        "`cargo bench -p tracer --bench exporter`: synthetic flows in {NAMESPACES} network namespaces through \
         the real analysis and the exporter; a scrape is the best of {SCRAPES} over loopback; the series are \
         bounded at {}.",
        number(cfg.series_bound() as f64)
    ));
    let runs: Vec<Run> = [1_000, 10_000, 100_000].into_iter().map(|n| run(n, &cfg, &rt)).collect();
    let base = &runs[0];
    println!("exporter, {NAMESPACES} network namespaces, bound {} series", cfg.series_bound());
    for r in &runs {
        println!(
            "{:>7} flows ({:>6} tracked): per sample {:>5.0} ns ({:>4.1}x), snapshot {:>8.3} ms ({:>5.1}x), \
             scrape {:>6.3} ms ({:>4.1}x), {:>5} series, {:>7} bytes",
            r.flows,
            r.tracked,
            r.observe_ns,
            r.observe_ns / base.observe_ns,
            r.snapshot.as_secs_f64() * 1e3,
            r.snapshot.as_secs_f64() / base.snapshot.as_secs_f64(),
            r.scrape.as_secs_f64() * 1e3,
            r.scrape.as_secs_f64() / base.scrape.as_secs_f64(),
            r.series,
            r.bytes,
        );
        assert!(r.series <= cfg.series_bound(), "{} series over the bound {}", r.series, cfg.series_bound());
        section.row(Row::new(
            format!("{} flows", number(r.flows as f64)),
            format!(
                "a scrape {:.1} ms ({} series, {} kB); the snapshot once a second {:.1} ms; a sample counted {:.0} ns",
                r.scrape.as_secs_f64() * 1e3,
                number(r.series as f64),
                number((r.bytes / 1000) as f64),
                r.snapshot.as_secs_f64() * 1e3,
                r.observe_ns
            ),
        ));
    }
    section.write().map(drop)
}
