//! `cctrace serve` scraped by a real Prometheus server (the distribution's package): a lossy
//! CUBIC bulk flow in a container-like cgroup shows up flagged under its container and cc
//! through PromQL, its retransmission counters agree with the kernel's, the exposition passes
//! `promtool check metrics`, the shipped rules and dashboard name only exposed metrics, and
//! SIGTERM during scrapes ends in errors, not hangs, with nothing left attached.

use cctrace_lab::child::{collect_within, send_signal, OutputWithin, Signal, CHILD_DEADLINE};
use std::collections::BTreeSet;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use cctrace_lab::{Cgroup, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use cctrace_tests::serve::{free_port, http_get, ContainerOnLossyPath, Serve, TempDir};
use cctrace_tests::{bpf_held_by, bpf_ids, cctrace_bin, nstat_in, require_kernel, serial, BpfStats};
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;
const DOCKER_ID: &str = "7e57ab1e7e57ab1e7e57ab1e7e57ab1e7e57ab1e7e57ab1e7e57ab1e7e57ab1e";
const CONTAINER: &str = "mediaserver";
/// The issue's bound: flagged in Prometheus within this long of the flow's start.
const FLAGGED_WITHIN: Duration = Duration::from_secs(30);

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tracer/deploy")
}

/// `promtool`, or a failure: the package is installed by `cargo xtask test`.
fn promtool() -> Result<Command> {
    which("promtool")?;
    Ok(Command::new("promtool"))
}

fn which(tool: &str) -> Result<()> {
    let found =
        std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()));
    ensure!(found, "{tool} is not installed (Debian package prometheus; `cargo xtask test` installs it)");
    Ok(())
}

/// Query-string encoding of a PromQL expression.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server with its own config and data directory, scraping `target` every second.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, target: SocketAddr) -> Result<Prometheus> {
        which("prometheus")?;
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: cctrace\n    static_configs:\n      - targets: ['{target}']\n",
                rules = deploy_dir().join("prometheus/cctrace-rules.yml").display()
            ),
        )?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting prometheus")?;
        let mut p = Prometheus { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = http_get(p.addr, "/-/ready", "*/*", Duration::from_secs(2)) {
                return Ok(p);
            }
            if let Some(status) = p.child.try_wait()? {
                bail!("prometheus exited ({status}): {}", std::fs::read_to_string(&p.log).unwrap_or_default());
            }
            ensure!(Instant::now() < deadline, "prometheus not ready in 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An instant PromQL query: each result's labels and value.
    fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>> {
        let (status, body) =
            http_get(self.addr, &format!("/api/v1/query?query={}", encode(promql)), "*/*", Duration::from_secs(5))?;
        let v: Value = serde_json::from_str(&body).with_context(|| format!("{status}: {body}"))?;
        ensure!(v["status"] == "success", "{promql}: {body}");
        Ok(v["data"]["result"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        let value = r["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
                        (r["metric"].clone(), value)
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The one value `promql` has now, once it has one.
    fn value(&self, promql: &str) -> Result<Option<f64>> {
        let r = self.query(promql)?;
        ensure!(r.len() <= 1, "{promql} has {} series: {r:?}", r.len());
        Ok(r.first().map(|(_, v)| *v))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // Prometheus shuts its TSDB down on SIGTERM.
        let _ = send_signal(self.child.id(), Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Metric names an exposition declares (`# TYPE name type`).
fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// `cctrace_...` names a shipped file uses.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("cctrace_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

#[test]
fn prometheus_shows_the_lossy_cubic_flow_flagged_under_its_container() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let dir = TempDir::new("metrics")?;
    let lab = ContainerOnLossyPath::create(&dir.0, DOCKER_ID, CONTAINER, 0.02)?;
    let path = &lab.path;
    let netns = path.sender().inode();
    // The kernel's BPF run statistics, for as long as this fd is open (closed on any exit): the
    // hooks' cost series appear only while the kernel measures.
    let _stats = BpfStats::enable()?;
    let serve = Serve::start(&dir.0, &[])?;
    let held = bpf_held_by(serve.child.id())?;
    ensure!(!held.programs.is_empty(), "cctrace serve holds no BPF programs");
    let prometheus = Prometheus::start(&dir.0, serve.addr)?;

    let started = Instant::now();
    let (_sink, sender) = lab.cubic_bulk(PORT, Duration::from_secs(40))?;
    let flow = format!("{}->{}:{PORT}", sender.local_addr(), path.receiver_addr());

    // The flagged flow, under its container, namespace and cc, through PromQL.
    let flagged =
        format!(r#"cctrace_flagged_flows{{job="cctrace",container="{CONTAINER}",netns="{netns}",cc="cubic"}} > 0"#);
    let seen_after = loop {
        if prometheus.value(&flagged)?.is_some() {
            break started.elapsed();
        }
        ensure!(
            started.elapsed() < FLAGGED_WITHIN,
            "not flagged in Prometheus within {FLAGGED_WITHIN:?}; {}: {:?}; cctrace: {}",
            "its group",
            prometheus.query(&format!(r#"{{__name__=~"cctrace_.*",netns="{netns}"}}"#))?,
            serve.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("flagged in Prometheus {:.1} s after the flow started", seen_after.as_secs_f64());
    let own = prometheus.query(&format!(
        r#"cctrace_flagged_flow_headroom_bytes_per_second{{container="{CONTAINER}",netns="{netns}",cc="cubic",flow="{flow}"}}"#
    ))?;
    ensure!(own.len() == 1, "the flagged flow's own series {flow}: {own:?}");
    let loss =
        prometheus.value(&format!(r#"cctrace_flagged_flow_loss_ratio{{container="{CONTAINER}",flow="{flow}"}}"#))?;
    ensure!(loss.is_some_and(|l| l > 0.005 && l < 0.1), "its loss ratio near the path's 2 %: {loss:?}");

    // The alert rule shipped in the repository, evaluated by this Prometheus: pending, since the
    // flag is younger than the rule's `for`. Rules are evaluated every second, apart from
    // scrapes: a few evaluations are allowed for it.
    let pending = format!(r#"ALERTS{{alertname="CctraceFlowFlagged",alertstate="pending",container="{CONTAINER}"}}"#);
    let deadline = Instant::now() + Duration::from_secs(5);
    while prometheus.query(&pending)?.is_empty() {
        ensure!(Instant::now() < deadline, "the shipped rule does not see the flag: {:?}", prometheus.query("ALERTS")?);
        std::thread::sleep(Duration::from_millis(250));
    }

    // The exposition as scrapers get it: promtool's checks, and the shipped files' names.
    let (status, text) = http_get(serve.addr, "/metrics", "text/plain;version=0.0.4", Duration::from_secs(5))?;
    ensure!(status == 200, "{status}: {text}");
    check_metrics_with_promtool(&text)?;
    let (status, om) = http_get(
        serve.addr,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        Duration::from_secs(5),
    )?;
    ensure!(status == 200 && om.ends_with("# EOF\n"), "OpenMetrics when asked for: {om}");
    let exposed = exposed_names(&text);
    for file in ["grafana/cctrace-dashboard.json", "prometheus/cctrace-rules.yml"] {
        let used = names_in(&std::fs::read_to_string(deploy_dir().join(file))?);
        ensure!(!used.is_empty(), "{file} names no metric");
        let unknown: Vec<_> = used.difference(&exposed).collect();
        ensure!(unknown.is_empty(), "{file} names metrics the exporter does not expose: {unknown:?}");
    }
    let runs = sample_value(&text, r#"cctrace_hook_runs_total{hook="tcp:tcp_probe"}"#);
    let run_s = sample_value(&text, r#"cctrace_hook_run_seconds_total{hook="tcp:tcp_probe"}"#);
    ensure!(
        runs.is_some_and(|r| r > 0.0) && run_s.is_some_and(|s| s > 0.0),
        "the probe hook's cost: {runs:?} runs, {run_s:?} s"
    );
    println!(
        "tcp:tcp_probe ran {:.0} times, {:.0} ns a run",
        runs.unwrap_or(0.0),
        run_s.unwrap_or(0.0) * 1e9 / runs.unwrap_or(1.0)
    );
    let (status, _) = http_get(serve.addr, "/health", "*/*", Duration::from_secs(5))?;
    ensure!(status == 200, "/health: {status}");

    // The retransmission counters against the kernel's, once the flow has closed and its last
    // sample (taken as the socket is destroyed) has been scraped. The flow's length only had to
    // outlast the flag's deadline: it ends now rather than at its 40 s (which left the test
    // waiting 20-30 s for it).
    sender.stop();
    let report = sender.wait()?;
    let retrans_segs = format!(r#"sum(cctrace_retransmitted_segments_total{{netns="{netns}"}})"#);
    let retrans_bytes = format!(r#"sum(cctrace_retransmitted_bytes_total{{netns="{netns}"}})"#);
    let nstat = nstat_in(path.sender().name(), "TcpRetransSegs")?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let segs = loop {
        let segs = prometheus.value(&retrans_segs)?.unwrap_or(0.0);
        if segs as u64 == nstat || Instant::now() > deadline {
            break segs as u64;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let bytes = prometheus.value(&retrans_bytes)?.unwrap_or(0.0) as u64;
    let sent = prometheus.value(&format!(r#"sum(cctrace_sent_bytes_total{{netns="{netns}"}})"#))?.unwrap_or(0.0);
    println!(
        "retransmitted: cctrace {segs} segments, {bytes} bytes of {sent:.0} sent; nstat TcpRetransSegs {nstat}; \
         the socket's tcpi_total_retrans at close {}",
        report.total_retrans
    );
    // Exact: the kernel adds each retransmitted segment to the socket's total_retrans and to the
    // namespace's TcpRetransSegs at the same place (tcp_retransmit_skb), the only TCP socket
    // sending in that namespace is this flow, and cctrace's last sample is taken as the socket
    // is destroyed, after its last retransmission.
    ensure!(
        segs == nstat && segs == u64::from(report.total_retrans),
        "segments: cctrace {segs}, nstat {nstat}, socket {}",
        report.total_retrans
    );
    ensure!(segs > 0, "a 2 % lossy path retransmits");
    // Bytes: no namespace counter counts retransmitted bytes, but each retransmitted segment
    // carries at most one MSS (1448 bytes here) and, in a bulk flow, nearly always exactly one.
    let mss = 1448;
    ensure!(
        bytes <= segs * mss && bytes * 10 >= segs * mss * 9,
        "{bytes} retransmitted bytes for {segs} segments of at most {mss}"
    );

    // SIGTERM while scrapes run: each answers or fails at once, none hangs; then nothing of
    // what cctrace attached is left, and the port refuses.
    let (answered, first_answer) = std::sync::mpsc::channel();
    let scraper = {
        let addr = serve.addr;
        std::thread::spawn(move || -> Vec<(Duration, Result<u16, String>)> {
            let mut outcomes = Vec::new();
            let until = Instant::now() + Duration::from_secs(4);
            while Instant::now() < until {
                let t = Instant::now();
                let r = http_get(addr, "/metrics", "*/*", Duration::from_secs(10)).map(|(s, _)| s);
                outcomes.push((t.elapsed(), r.map_err(|e| format!("{e:#}"))));
                let _ = answered.send(());
            }
            outcomes
        })
    };
    // The signal comes while the scraper is in its loop: once its first scrape is answered.
    first_answer.recv_timeout(Duration::from_secs(10)).context("the scraper's first scrape")?;
    let mut serve = serve;
    send_signal(serve.child.id(), Signal::TERM)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = serve.child.try_wait()? {
            break s;
        }
        ensure!(Instant::now() < deadline, "cctrace serve did not exit within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    ensure!(status.success(), "exit {status}: {}", serve.stderr_text());
    let outcomes = scraper.join().map_err(|_| anyhow::anyhow!("scraper panicked"))?;
    let slowest = outcomes.iter().map(|(d, _)| *d).max().unwrap_or_default();
    let failed = outcomes.iter().filter(|(_, r)| r.is_err()).count();
    println!("{} scrapes around SIGTERM, {failed} refused, the slowest took {slowest:?}", outcomes.len());
    ensure!(slowest < Duration::from_secs(2), "a scrape hung for {slowest:?}");
    ensure!(failed > 0, "scrapes after exit must fail: {outcomes:?}");
    let now = bpf_ids()?;
    let left: Vec<_> = held.programs.iter().filter(|id| now.programs.contains(id)).collect();
    ensure!(left.is_empty(), "programs still loaded after SIGTERM: {left:?}");
    let links: Vec<_> = held.links.iter().filter(|id| now.links.contains(id)).collect();
    ensure!(links.is_empty(), "links still attached after SIGTERM: {links:?}");
    Ok(())
}

/// The value of the series written exactly as `series` in a text exposition.
fn sample_value(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn check_metrics_with_promtool(exposition: &str) -> Result<()> {
    let mut child = promtool()?
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(exposition.as_bytes())?;
    let out = collect_within(&mut child, CHILD_DEADLINE, "child")?;
    ensure!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{exposition}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn the_shipped_alert_rules_pass_promtool_and_their_unit_tests() -> Result<()> {
    let rules = deploy_dir().join("prometheus");
    for args in [["check", "rules", "cctrace-rules.yml"], ["test", "rules", "cctrace-rules.test.yml"]] {
        let out = promtool()?.args(args).current_dir(&rules).output_within(CHILD_DEADLINE)?;
        ensure!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[test]
fn the_dashboard_is_valid_json_over_prometheus_queries() -> Result<()> {
    let text = std::fs::read_to_string(deploy_dir().join("grafana/cctrace-dashboard.json"))?;
    let v: Value = serde_json::from_str(&text).context("the dashboard is JSON")?;
    let panels = v["panels"].as_array().context("panels")?;
    ensure!(!panels.is_empty());
    for p in panels {
        let targets = p["targets"].as_array().context("targets")?;
        ensure!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().context("expr")?;
            ensure!(expr.contains("cctrace_"), "panel {}: {expr}", p["title"]);
        }
    }
    Ok(())
}

#[test]
fn a_non_loopback_address_or_a_taken_port_is_one_line_before_anything_is_loaded() -> Result<()> {
    let run = |args: &[&str]| -> Result<(i32, String)> {
        let out = Command::new(cctrace_bin()).args(args).stdin(Stdio::null()).output_within(CHILD_DEADLINE)?;
        Ok((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned()))
    };
    let (code, err) = run(&["serve", "--listen", "0.0.0.0:0"])?;
    ensure!(code == 1 && err.lines().count() == 1, "exit {code}: {err}");
    ensure!(err.contains("not a loopback address") && err.contains("--allow-non-loopback"), "{err}");
    let taken = TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    let (code, err) = run(&["serve", "--listen", &addr, "--duration", "5"])?;
    ensure!(code == 1 && err.lines().count() == 1, "exit {code}: {err}");
    ensure!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    ensure!(!err.contains("tracing TCP"), "nothing was attached: {err}");
    Ok(())
}

/// The capabilities the shipped unit grants (`AmbientCapabilities=`), in setpriv's spelling.
fn unit_capabilities() -> Result<Vec<String>> {
    let unit = std::fs::read_to_string(deploy_dir().join("cctrace.service"))?;
    let line = unit.lines().find_map(|l| l.strip_prefix("AmbientCapabilities=")).context("no AmbientCapabilities")?;
    Ok(line.split_whitespace().map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase()).collect())
}

/// `setpriv` running the rest as the unprivileged user `nobody` with exactly `caps`, as the
/// unit's DynamicUser does.
fn as_nobody_with(caps: &[String]) -> Vec<String> {
    let set: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
    let set = set.join(",");
    vec![
        "setpriv".into(),
        "--reuid=65534".into(),
        "--regid=65534".into(),
        "--clear-groups".into(),
        format!("--inh-caps=-all,{set}"),
        format!("--ambient-caps=-all,{set}"),
        format!("--bounding-set=-all,{set}"),
        "--no-new-privs".into(),
    ]
}

/// The container label `serve` gives a CUBIC bulk flow of `cgroup`'s, once its bytes are counted.
fn label_of_a_flow(serve: &Serve, lab: &VethPair, cgroup: &Cgroup) -> Result<String> {
    let sender = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions {
            socket_cgroup: Some(cgroup.path().to_path_buf()),
            ..SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(2))
        },
    )?;
    let port = sender.local_port();
    let report = sender.wait()?;
    let netns = lab.sender().inode();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = http_get(serve.addr, "/metrics", "*/*", Duration::from_secs(5))?;
        let attached = text.lines().filter(|l| l.starts_with("cctrace_hook_attached{") && l.ends_with(" 1")).count();
        ensure!(attached == 6, "every hook attached: {text}");
        // The only flow in this namespace: its group's counter reaches what the peer acked.
        let counted = text.lines().find_map(|l| {
            let rest = l.strip_prefix("cctrace_sent_bytes_total{container=\"")?;
            let (container, rest) = rest.split_once('"')?;
            let value: f64 = rest.strip_prefix(&format!(r#",netns="{netns}",cc="cubic"}} "#))?.parse().ok()?;
            (value >= report.bytes_acked as f64).then(|| container.to_string())
        });
        if let Some(container) = counted {
            return Ok(container);
        }
        ensure!(
            Instant::now() < deadline,
            "the flow from port {port} ({} bytes acked) not counted: {}",
            report.bytes_acked,
            serve.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_units_capabilities_suffice_as_an_unprivileged_user_and_none_is_spare() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    require_kernel!();
    which("setpriv")?;
    let _serial = serial();
    let dir = TempDir::new("metrics-caps")?;
    // Docker's own layout and modes: only root (or CAP_DAC_READ_SEARCH) reads the names.
    let containers = dir.0.join("docker/containers");
    let config = containers.join(DOCKER_ID);
    std::fs::create_dir_all(&config)?;
    std::fs::write(
        config.join("config.v2.json"),
        format!(r#"{{"ID":"{DOCKER_ID}","Name":"/{CONTAINER}","State":{{"Pid":1}}}}"#),
    )?;
    std::fs::set_permissions(config.join("config.v2.json"), std::fs::Permissions::from_mode(0o600))?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(&containers, std::fs::Permissions::from_mode(0o710))?;
    let caps = unit_capabilities()?;
    ensure!(caps.iter().any(|c| c == "bpf") && caps.iter().any(|c| c == "perfmon"), "{caps:?}");
    let top = Cgroup::top()?;
    let cgroup = top.child(&format!("system.slice/docker-{DOCKER_ID}.scope"))?;
    let lab = VethPair::create(VethOptions::default())?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;

    // Exactly the unit's capabilities, as nobody: traced, counted, named.
    let serve = Serve::start_under(&dir.0, &as_nobody_with(&caps), &[])?;
    let label = label_of_a_flow(&serve, &lab, &cgroup)?;
    ensure!(label == CONTAINER, "with {caps:?}: container={label:?}");
    drop(serve);

    for missing in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        match missing.as_str() {
            // Without either of the two that load and attach the programs, it cannot start.
            "bpf" | "perfmon" => match Serve::start_under(&dir.0, &as_nobody_with(&fewer), &[]) {
                Ok(_) => bail!("cctrace serve started without CAP_{}", missing.to_ascii_uppercase()),
                Err(e) => ensure!(format!("{e:#}").contains("CAP_"), "names what is missing: {e:#}"),
            },
            // Without it the flow is still traced, under the container's short id (read from
            // the cgroup path) instead of its name.
            "dac_read_search" => {
                let serve = Serve::start_under(&dir.0, &as_nobody_with(&fewer), &[])?;
                let label = label_of_a_flow(&serve, &lab, &cgroup)?;
                ensure!(label == DOCKER_ID[..12], "without it: container={label:?}");
            }
            other => bail!("the unit grants {other}: this test does not know why it is needed"),
        }
    }
    Ok(())
}
