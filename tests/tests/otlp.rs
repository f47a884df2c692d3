//! `cctrace serve --otlp` against a real OpenTelemetry collector (Rotel, installed by `cargo
//! xtask setup`, printing every data point and log record it receives): while a lossy CUBIC flow
//! runs on the emulated path, the collector gets the exposition's families with the values the
//! Prometheus endpoint shows at the same moment, the flow's flag as a log record with its verdict
//! and fix, and a `cctrace fix --live` from another process as an event of its own. Stopped
//! mid-run, the collector costs a bounded queue and counted drops while tracing goes on, and gets
//! exports again once it is back.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, ensure, Context, Result};
use cctrace_lab::child::{send_signal, OutputWithin, Signal, CHILD_DEADLINE};
use cctrace_tests::serve::{free_port, http_get, ContainerOnLossyPath, Serve, TempDir};
use cctrace_tests::{cctrace_bin, require_kernel, run_cctrace, serial};

const PORT: u16 = cctrace_lab::SINK_PORT;
const DOCKER_ID: &str = "0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f0e1f";
const CONTAINER: &str = "streamer";
/// The export interval the test asks for: short, so a run sees many exports.
const INTERVAL: Duration = Duration::from_secs(2);
/// Requests the queue holds in this test (the default is 64): full within seconds. (With 4, one
/// in flight and 4 queued left about two of the outage's seven exports to drop, and a fresh
/// clone's run once dropped none.)
const QUEUE: usize = 2;
/// Longest the flag may take (the Prometheus test's bound).
const FLAGGED_WITHIN: Duration = Duration::from_secs(40);
/// How long the collector stays away.
const OUTAGE: Duration = Duration::from_secs(14);

/// The collector binary `cargo xtask setup` links there.
fn rotel_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/rotel/rotel-agent")
}

/// Rotel on `port`, its debug output (every data point and log record) in a file.
struct Collector {
    child: Child,
    out: PathBuf,
}

impl Collector {
    fn start(dir: &Path, port: u16, run: u32) -> Result<Collector> {
        let agent = rotel_agent();
        ensure!(agent.exists(), "{} is missing: `cargo xtask setup` installs Rotel", agent.display());
        let out = dir.join(format!("rotel-{run}.out"));
        let child = Command::new(&agent)
            .args(["start", "--exporter", "blackhole", "--debug-log-verbosity", "detailed"])
            .args(["--debug-log", "metrics", "--debug-log", "logs"])
            .arg("--otlp-http-endpoint")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--otlp-grpc-endpoint")
            .arg(format!("127.0.0.1:{}", free_port()?))
            .arg("--pid-file")
            .arg(dir.join(format!("rotel-{run}.pid")))
            .arg("--log-file")
            .arg(dir.join(format!("rotel-{run}.log")))
            .stdout(std::fs::File::create(&out)?)
            .stderr(Stdio::null())
            .spawn()
            .context("starting rotel-agent")?;
        let mut c = Collector { child, out };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = c.child.try_wait()? {
                bail!("rotel-agent exited ({status}): {}", c.text());
            }
            ensure!(Instant::now() < deadline, "rotel-agent not listening on {port} within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(c)
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn received(&self) -> Received {
        Received::parse(&self.text())
    }

    /// Wait until what it received satisfies `done`.
    fn wait_for(&self, what: &str, within: Duration, done: impl Fn(&Received) -> bool) -> Result<Received> {
        let deadline = Instant::now() + within;
        loop {
            let r = self.received();
            if done(&r) {
                return Ok(r);
            }
            ensure!(
                Instant::now() < deadline,
                "{what}: not received within {within:?} ({} data points, {} log records: {:#?})",
                r.points.len(),
                r.logs.len(),
                r.logs
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop(mut self) -> Result<()> {
        send_signal(self.child.id(), Signal::TERM)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            ensure!(Instant::now() < deadline, "rotel-agent did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One data point as the collector printed it.
#[derive(Clone, Debug, Default)]
struct Point {
    metric: String,
    unit: String,
    attrs: BTreeMap<String, String>,
    time: u64,
    value: f64,
}

/// One log record as the collector printed it.
#[derive(Clone, Debug, Default)]
struct Log {
    event: String,
    severity: String,
    body: String,
    attrs: BTreeMap<String, String>,
}

impl Log {
    /// An attribute's value without its type (`Str(x)` -> `x`, `Int(5)` -> `5`).
    fn get(&self, key: &str) -> Option<&str> {
        let v = self.attrs.get(key)?;
        let (_, inner) = v.split_once('(')?;
        inner.strip_suffix(')')
    }
}

/// Everything the collector printed, parsed.
#[derive(Debug, Default)]
struct Received {
    points: Vec<Point>,
    logs: Vec<Log>,
    resource: BTreeMap<String, String>,
}

/// `     -> key: value` as (key, value).
fn arrow(line: &str) -> Option<(String, String)> {
    let (k, v) = line.trim_start().strip_prefix("-> ")?.split_once(": ")?;
    Some((k.to_string(), v.to_string()))
}

impl Received {
    fn parse(text: &str) -> Received {
        #[derive(PartialEq)]
        enum In {
            Nothing,
            Resource,
            Descriptor,
            Point,
            Log,
        }
        let mut r = Received::default();
        let mut at = In::Nothing;
        let (mut name, mut unit) = (String::new(), String::new());
        let mut point: Option<Point> = None;
        let mut log: Option<Log> = None;
        for line in text.lines() {
            if let Some((k, v)) = arrow(line) {
                match at {
                    In::Resource => {
                        r.resource.insert(k, v);
                    }
                    In::Descriptor if k == "Name" => name = v,
                    In::Descriptor if k == "Unit" => unit = v,
                    In::Point => {
                        if let Some(p) = &mut point {
                            p.attrs.insert(k, v);
                        }
                    }
                    In::Log => {
                        if let Some(l) = &mut log {
                            l.attrs.insert(k, v);
                        }
                    }
                    _ => {}
                }
                continue;
            }
            if line.starts_with("Resource attributes:") {
                at = In::Resource;
            } else if line.starts_with("Descriptor:") {
                at = In::Descriptor;
            } else if line.starts_with("NumberDataPoints #") {
                at = In::Point;
                point = Some(Point { metric: name.clone(), unit: unit.clone(), ..Point::default() });
            } else if let Some(t) = line.strip_prefix("Timestamp: ") {
                if let Some(p) = &mut point {
                    p.time = t.trim().parse().unwrap_or(0);
                }
            } else if let Some(v) = line.strip_prefix("Value: ") {
                if let Some(mut p) = point.take() {
                    p.value = v.trim().parse().unwrap_or(f64::NAN);
                    r.points.push(p);
                }
            } else if line.starts_with("LogRecord #") {
                r.logs.extend(log.take());
                log = Some(Log::default());
                at = In::Nothing;
            } else if let (Some(l), Some(s)) = (&mut log, line.strip_prefix("SeverityText: ")) {
                l.severity = s.to_string();
            } else if let (Some(l), Some(e)) = (&mut log, line.strip_prefix("EventName: ")) {
                l.event = e.to_string();
            } else if let (Some(l), Some(b)) = (&mut log, line.strip_prefix("Body: ")) {
                l.body = b.strip_prefix("Str(").and_then(|b| b.strip_suffix(')')).unwrap_or(b).to_string();
            } else if line.starts_with("Attributes:") && log.is_some() {
                at = In::Log;
            } else if line.starts_with("ResourceLogs #") || line.starts_with("ResourceMetrics #") {
                r.logs.extend(log.take());
                at = In::Nothing;
            }
        }
        r.logs.extend(log);
        r
    }

    /// The data points of `metric` whose attributes include `labels`, oldest first.
    fn series(&self, metric: &str, labels: &[(&str, &str)]) -> Vec<&Point> {
        let mut out: Vec<&Point> = self
            .points
            .iter()
            .filter(|p| {
                p.metric == metric
                    && labels.iter().all(|(k, v)| p.attrs.get(*k).is_some_and(|a| a == &format!("Str({v})")))
            })
            .collect();
        out.sort_by_key(|p| p.time);
        out
    }

    fn events(&self, name: &str) -> Vec<&Log> {
        self.logs.iter().filter(|l| l.event == name).collect()
    }
}

fn unix_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The OpenMetrics exposition: family names (`# TYPE`) and each sample's value by its line's
/// name and labels.
fn scrape(addr: SocketAddr) -> Result<(BTreeSet<String>, BTreeMap<String, f64>)> {
    let (status, text) =
        http_get(addr, "/metrics", "application/openmetrics-text;version=1.0.0", Duration::from_secs(5))?;
    ensure!(status == 200, "{status}: {text}");
    let families = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect();
    let samples = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect();
    Ok((families, samples))
}

/// The sample of `series` (written as in the exposition) in a scrape.
fn sample(samples: &BTreeMap<String, f64>, series: &str) -> Result<f64> {
    samples.get(series).copied().with_context(|| format!("no {series} in the exposition"))
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix(" kB")?.trim().parse().ok())
        .context("no VmRSS")
}

#[test]
fn a_collector_gets_the_metrics_the_flag_and_the_fix_and_an_outage_costs_only_counted_drops() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let dir = TempDir::new("otlp")?;
    let lab = ContainerOnLossyPath::create(&dir.0, DOCKER_ID, CONTAINER, 0.02)?;
    let path = &lab.path;
    let netns = path.sender().inode().to_string();

    let port = free_port()?;
    let collector = Collector::start(&dir.0, port, 1)?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let serve = Serve::start(
        &dir.0,
        &[
            "--otlp".into(),
            endpoint.clone(),
            "--otlp-interval".into(),
            INTERVAL.as_secs().to_string(),
            "--otlp-queue".into(),
            QUEUE.to_string(),
        ],
    )?;
    let started = Instant::now();
    let (_sink, sender) = lab.cubic_bulk(PORT, Duration::from_secs(45))?;
    let sport = sender.local_port().to_string();
    let group = [("container", CONTAINER), ("netns", netns.as_str()), ("cc", "cubic")];

    // The flag, as a log record with the flow's identity, the verdict's words and numbers, the fix.
    let mine = |l: &Log| l.get("network.local.port") == Some(sport.as_str());
    let got = collector
        .wait_for("the flow's flag", FLAGGED_WITHIN, |r| r.events("cctrace.flow.flagged").into_iter().any(mine))?;
    println!("flag received {:.1} s after the flow started", started.elapsed().as_secs_f64());
    let flag = got.events("cctrace.flow.flagged").into_iter().find(|l| mine(l)).context("the flag")?;
    ensure!(flag.severity == "WARN", "{flag:#?}");
    for (key, value) in [
        ("container.name", CONTAINER),
        ("network.peer.port", &PORT.to_string()),
        ("network.peer.address", &path.receiver_addr().to_string()),
        ("cctrace.netns", &netns),
        ("cctrace.limited_by", "cwnd"),
        ("cctrace.flagged", "true"),
        ("cctrace.cc", "cubic"),
        ("server.port", &PORT.to_string()),
    ] {
        ensure!(flag.get(key) == Some(value), "{key} is {:?}, not {value}: {flag:#?}", flag.get(key));
    }
    ensure!(flag.body.contains("held back by loss-based congestion control"), "the verdict's words: {}", flag.body);
    let loss: f64 = flag.get("cctrace.evidence.loss_ratio").context("the evidence")?.parse()?;
    ensure!(loss > 0.005 && loss < 0.1, "the loss the verdict cites, near the path's 2 %: {loss}");
    let fix = flag.attrs.get("cctrace.fix").context("the fix lines")?;
    ensure!(fix.contains("tcp_congestion_control=bbr"), "{fix}");
    ensure!(got.resource.get("service.name").is_some_and(|v| v == "Str(cctrace)"), "{:?}", got.resource);
    ensure!(got.resource.get("os.type").is_some_and(|v| v == "Str(linux)"), "{:?}", got.resource);

    // The same values at the same moment: each export before a scrape shows at most what the
    // scrape shows, each export after it at least that (the counters only grow).
    let before = unix_ns();
    let (families, samples) = scrape(serve.addr)?;
    let after = unix_ns();
    let sent_series = format!(r#"cctrace_sent_bytes_total{{container="{CONTAINER}",netns="{netns}",cc="cubic"}}"#);
    let scraped = sample(&samples, &sent_series)?;
    let got = collector.wait_for("an export after the scrape", INTERVAL * 3, |r| {
        r.series("cctrace_sent_bytes", &group).last().is_some_and(|p| p.time > after)
    })?;
    let sent = got.series("cctrace_sent_bytes", &group);
    let last_before = sent.iter().rev().find(|p| p.time < before).context("an export before the scrape")?;
    let first_after = sent.iter().find(|p| p.time > after).context("an export after")?;
    println!(
        "sent bytes: OTLP {} at -{:.1} s, Prometheus {scraped}, OTLP {} at +{:.1} s",
        last_before.value,
        (before - last_before.time) as f64 / 1e9,
        first_after.value,
        (first_after.time - after) as f64 / 1e9
    );
    ensure!(last_before.value <= scraped && scraped <= first_after.value, "not bracketed: {sent:#?}");
    ensure!(first_after.time - last_before.time <= (INTERVAL * 2).as_nanos() as u64 + 2_000_000_000);
    ensure!(first_after.unit == "By", "{first_after:?}");
    let flagged = got.series("cctrace_flagged_flows", &group);
    ensure!(flagged.last().is_some_and(|p| p.value == 1.0), "the flag as a gauge: {flagged:?}");
    let names: BTreeSet<String> = got.points.iter().map(|p| p.metric.clone()).collect();
    let with_series: BTreeSet<String> =
        families.iter().filter(|f| samples.keys().any(|s| s.starts_with(f.as_str()))).cloned().collect();
    ensure!(with_series.is_subset(&names), "families the collector lacks: {:?}", with_series.difference(&names));

    // A fix from another process: its own event, with the switched flow.
    let (code, out, err) = run_cctrace(&["fix", "--netns", path.sender().name(), "--live", "--yes"])?;
    ensure!(code == 0, "{out}{err}");
    let got = collector.wait_for("the fix", INTERVAL * 3, |r| !r.events("cctrace.fix.applied").is_empty())?;
    let applied = got.events("cctrace.fix.applied")[0];
    ensure!(
        applied.body.starts_with("fix of ip netns") && applied.body.contains("1 connection switched to bbr"),
        "{applied:#?}"
    );
    ensure!(applied.get("network.local.port") == Some(sport.as_str()), "the switched flow's identity: {applied:#?}");
    ensure!(applied.get("container.name") == Some(CONTAINER), "{applied:#?}");
    ensure!(applied.attrs.get("cctrace.messages").is_some_and(|m| m.contains("from cubic to bbr")), "{applied:#?}");

    // The collector goes away: tracing goes on, the queue fills and drops are counted, memory
    // stays flat.
    let down_events = sample(&scrape(serve.addr)?.1, "cctrace_events_received_total")?;
    collector.stop()?;
    let outage = Instant::now();
    let mut rss = Vec::new();
    while outage.elapsed() < OUTAGE {
        rss.push(rss_kib(serve.child.id())?);
        std::thread::sleep(Duration::from_secs(1));
    }
    let (_, samples) = scrape(serve.addr)?;
    let during_events = sample(&samples, "cctrace_events_received_total")?;
    let dropped = sample(&samples, r#"cctrace_otlp_dropped_total{signal="metrics"}"#)?;
    let rss_growth = rss.iter().max().copied().unwrap_or(0).saturating_sub(rss[rss.len() / 3]);
    println!(
        "collector down {OUTAGE:?}: {} samples traced meanwhile, {dropped} data points dropped; RSS {rss:?} KiB",
        during_events - down_events
    );
    ensure!(during_events > down_events, "tracing went on");
    ensure!(dropped > 0.0, "a queue of {QUEUE} requests fills in {OUTAGE:?} of {INTERVAL:?} exports");
    ensure!(rss_growth < 8 << 10, "memory grew by {rss_growth} KiB once the queue was full: {rss:?}");

    // Back: exports arrive again, and say what was dropped.
    let collector = Collector::start(&dir.0, port, 2)?;
    let back = Instant::now();
    let got = collector.wait_for("exports after the outage", Duration::from_secs(45), |r| {
        r.series("cctrace_otlp_dropped", &[("signal", "metrics")]).iter().any(|p| p.value > 0.0)
    })?;
    println!("delivering again {:.1} s after the collector came back", back.elapsed().as_secs_f64());
    ensure!(!got.series("cctrace_sent_bytes", &group).is_empty());

    // Once the flow has ended, the counters rest: the last export and a scrape agree exactly.
    // (Its 45 s only had to outlast the flag's deadline and the outage: it ends now.)
    sender.stop();
    sender.wait()?;
    std::thread::sleep(Duration::from_secs(2));
    let (_, samples) = scrape(serve.addr)?;
    let after = unix_ns();
    let got = collector.wait_for("an export after the last scrape", INTERVAL * 3, |r| {
        r.series("cctrace_sent_bytes", &group).last().is_some_and(|p| p.time > after)
    })?;
    for (metric, exposed) in [
        ("cctrace_sent_bytes", "cctrace_sent_bytes_total"),
        ("cctrace_retransmitted_bytes", "cctrace_retransmitted_bytes_total"),
        ("cctrace_retransmitted_segments", "cctrace_retransmitted_segments_total"),
    ] {
        let otlp = got.series(metric, &group).last().map(|p| p.value);
        let prom = sample(&samples, &format!(r#"{exposed}{{container="{CONTAINER}",netns="{netns}",cc="cubic"}}"#))?;
        ensure!(otlp == Some(prom), "{metric}: OTLP {otlp:?}, Prometheus {prom}");
    }

    // The undo arrives too; then the run ends with a line saying what was delivered and dropped.
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", path.sender().name(), "--yes"])?;
    ensure!(code == 0, "{out}{err}");
    collector.wait_for("the undo", INTERVAL * 3, |r| !r.events("cctrace.fix.undone").is_empty())?;
    let mut serve = serve;
    send_signal(serve.child.id(), Signal::TERM)?;
    let status = cctrace_lab::child::wait_within(&mut serve.child, CHILD_DEADLINE, "cctrace serve after SIGTERM")?;
    ensure!(status.success(), "{status}: {}", serve.stderr_text());
    let text = serve.stderr_text();
    let line = text.lines().find(|l| l.starts_with(&format!("cctrace: OTLP to {endpoint}: "))).context(text.clone())?;
    println!("{line}");
    ensure!(line.contains("data points and") && line.contains("dropped (collector unreachable"), "{line}");
    ensure!(text.contains("is unreachable") && text.contains("takes exports again"), "the outage was said: {text}");
    drop(collector);
    Ok(())
}

#[test]
fn a_bad_collector_address_is_one_line_before_anything_is_loaded() -> Result<()> {
    for (args, says) in [
        (vec!["--otlp", "collector:4318"], "not an http:// or https:// URL"),
        (vec!["--otlp", "http://collector.invalid:4318"], "cannot resolve collector.invalid"),
        (vec!["--otlp", "http://127.0.0.1:4318", "--otlp-header", "novalue"], "give KEY=VALUE"),
        (vec!["--otlp", "https://127.0.0.1:4318", "--otlp-ca-file", "/nonexistent.pem"], "/nonexistent.pem"),
    ] {
        let out = Command::new(cctrace_bin()).arg("serve").args(&args).output_within(CHILD_DEADLINE)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.code() == Some(1) && err.lines().count() == 1, "{args:?}: {:?} {err}", out.status);
        ensure!(err.contains(says) && !err.contains("tracing TCP"), "{args:?}: {err}");
    }
    Ok(())
}
