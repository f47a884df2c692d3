//! `--json`: JSON Lines, one object per flow per report interval, named as `ss -tni` names things.

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::analysis::diagnosis::{DiagnosisConfig, Environment, Verdict};
use crate::analysis::event::CaState;
use crate::analysis::model::{Flow, TableConfig};
use crate::analysis::Analysis;
use crate::clock::WallClock;
use crate::source::EventSource;

use tracer_common::TCP_INFINITE_SSTHRESH as INFINITE_SSTHRESH;

fn ms(us: u32) -> f64 {
    f64::from(us) / 1000.0
}

/// The JSON object for one flow. Pure: the schema lives here and in the README.
pub fn flow_object(flow: &Flow, verdict: Option<&Verdict>, clock: &WallClock) -> Value {
    let s = &flow.latest;
    let mut o = Map::new();
    o.insert("type".into(), json!("flow"));
    o.insert("time".into(), json!(clock.unix_secs(s.ts_ns)));
    o.insert("ts_ns".into(), json!(s.ts_ns));
    o.insert("cookie".into(), json!(s.cookie));
    o.insert("netns".into(), json!(s.netns));
    o.insert("cgroup_id".into(), json!(s.cgroup_id));
    o.insert("src".into(), json!(s.local.ip().to_string()));
    o.insert("sport".into(), json!(s.local.port()));
    o.insert("dst".into(), json!(s.remote.ip().to_string()));
    o.insert("dport".into(), json!(s.remote.port()));
    o.insert("state".into(), json!(s.tcp_state.name()));
    o.insert("closed".into(), json!(flow.is_closed()));
    o.insert("owner".into(), s.owner.as_ref().map_or(Value::Null, |w| json!({"pid": w.pid, "comm": w.comm})));
    o.insert("cc".into(), json!(s.cc));
    o.insert("ca_state".into(), json!(s.ca_state.name()));
    o.insert("cwnd".into(), json!(s.snd_cwnd));
    o.insert("ssthresh".into(), if s.snd_ssthresh >= INFINITE_SSTHRESH { Value::Null } else { json!(s.snd_ssthresh) });
    o.insert("rtt".into(), json!(ms(s.srtt_us)));
    o.insert("rttvar".into(), json!(ms(s.rttvar_us)));
    o.insert("minrtt".into(), json!(ms(s.min_rtt_us)));
    o.insert("mss".into(), json!(s.mss));
    o.insert("unacked".into(), json!(s.packets_out));
    o.insert("lost".into(), json!(s.lost_out));
    o.insert("sacked".into(), json!(s.sacked_out));
    o.insert("retrans_out".into(), json!(s.retrans_out));
    o.insert("retrans".into(), json!(s.total_retrans));
    o.insert("bytes_sent".into(), json!(s.bytes_sent));
    o.insert("bytes_acked".into(), json!(s.bytes_acked));
    o.insert("bytes_received".into(), json!(s.bytes_received));
    o.insert("bytes_retrans".into(), json!(s.bytes_retrans));
    o.insert("delivered".into(), json!(s.delivered));
    o.insert("delivery_rate".into(), json!(s.delivery_rate_bps));
    o.insert("app_limited".into(), json!(s.app_limited));
    o.insert("cwnd_limited".into(), json!(s.cwnd_limited));
    o.insert("pacing_rate".into(), json!(s.pacing_rate_bps));
    o.insert("snd_wnd".into(), json!(s.snd_wnd));
    o.insert("notsent".into(), json!(s.notsent_bytes));
    o.insert("busy".into(), json!(s.busy_us / 1000));
    o.insert("rwnd_limited".into(), json!(s.rwnd_limited_us / 1000));
    o.insert("sndbuf_limited".into(), json!(s.sndbuf_limited_us / 1000));
    o.insert("throughput_bps".into(), json!(flow.rates.throughput_bps.round() as u64));
    o.insert("send_rate_bps".into(), json!(flow.rates.send_rate_bps.round() as u64));
    o.insert("retrans_ratio".into(), json!(flow.rates.retrans_ratio));
    let ca_time: Map<String, Value> =
        CaState::ALL.iter().map(|c| (c.name().to_string(), json!(flow.ca_time_ns[c.index()] / 1_000_000))).collect();
    o.insert("ca_time_ms".into(), Value::Object(ca_time));
    o.insert("samples".into(), json!(flow.samples));
    o.insert("limited_by".into(), json!(verdict.map_or("unknown", |v| v.limited_by.name())));
    o.insert("flagged".into(), json!(verdict.is_some_and(|v| v.flagged)));
    o.insert("verdict".into(), json!(verdict.map_or("not enough data yet", |v| v.text.as_str())));
    o.insert("evidence".into(), verdict.and_then(|v| v.evidence.as_ref()).map_or(Value::Null, |e| json!(e)));
    o.insert("fix".into(), verdict.map_or(Value::Null, |v| if v.fix.is_empty() { Value::Null } else { json!(v.fix) }));
    Value::Object(o)
}

#[derive(Clone, Debug)]
pub struct JsonOptions {
    pub interval: Duration,
    pub diagnosis: DiagnosisConfig,
    pub duration: Option<Duration>,
    /// Also print every kernel sample as it arrives (`"type":"sample"`), for debugging and tests.
    pub events: bool,
    /// Re-reads host facts (namespaces come and go), when given; see [`Analysis::with_env_refresh`].
    pub env_refresh: Option<fn() -> Environment>,
}

/// Consume `source` until it ends, `duration` passes or `stop` resolves; print as we go.
pub async fn run<W: Write>(
    source: &mut dyn EventSource,
    env: Environment,
    opts: &JsonOptions,
    out: &mut W,
    stop: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let clock = WallClock::now();
    let mut analysis =
        Analysis::new(TableConfig::default(), opts.diagnosis.clone(), env).with_env_refresh(opts.env_refresh);
    let mut latest_ns = 0u64;
    let mut dirty: HashSet<u64> = HashSet::new();
    let mut tick = tokio::time::interval(opts.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let deadline = async {
        match opts.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    tokio::pin!(stop);
    let mut ended = false;
    while !ended {
        tokio::select! {
            batch = source.next_batch() => match batch? {
                Some(batch) => for s in &batch {
                    if opts.events {
                        let mut v = serde_json::to_value(s).context("encoding sample")?;
                        v["type"] = json!("sample");
                        writeln!(out, "{v}").context("writing output")?;
                    }
                    latest_ns = latest_ns.max(s.ts_ns);
                    analysis.ingest(s);
                    dirty.insert(s.cookie);
                },
                None => ended = true,
            },
            _ = tick.tick() => {
                // Judge on the samples' clock when it runs ahead (replays), else on real time.
                analysis.tick(clock.monotonic_now_ns().max(latest_ns));
                report(&analysis, &mut dirty, &clock, out)?;
            }
            _ = &mut deadline => ended = true,
            _ = &mut stop => ended = true,
        }
    }
    // Drain what is already queued so the summary accounts for every sample the kernel wrote
    // (bounded: under live traffic the queue never runs dry).
    let drain_until = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Ok(Some(batch))) = tokio::time::timeout_at(drain_until, source.next_batch()).await {
        for s in &batch {
            analysis.ingest(s);
            dirty.insert(s.cookie);
        }
    }
    report(&analysis, &mut dirty, &clock, out)?;
    let c = source.counters();
    let summary = json!({
        "type": "summary",
        "source": source.describe(),
        "events_received": c.received,
        "events_lost": c.lost,
        "decode_errors": c.decode_errors,
        "kernel_emitted": source.kernel_emitted(),
        "flows_seen": analysis.table.len() as u64 + analysis.table.evicted(),
    });
    writeln!(out, "{summary}").context("writing output")?;
    out.flush().context("writing output")?;
    Ok(())
}

fn report<W: Write>(analysis: &Analysis, dirty: &mut HashSet<u64>, clock: &WallClock, out: &mut W) -> Result<()> {
    let mut cookies: Vec<u64> = dirty.drain().collect();
    cookies.sort_unstable();
    for cookie in cookies {
        if let Some(flow) = analysis.table.get(cookie) {
            writeln!(out, "{}", flow_object(flow, analysis.verdict(flow), clock)).context("writing output")?;
        }
    }
    out.flush().context("writing output")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::event::SampleReason;
    use crate::analysis::model::tests::sample;
    use crate::source::FeedSource;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn prints_flows_and_a_summary_with_lost_events() {
        let mut a = sample(7, 0);
        a.snd_ssthresh = 42;
        let mut b = sample(7, 500);
        b.bytes_acked = 625_000;
        b.reason = SampleReason::Destroy;
        b.snd_ssthresh = 42;
        let mut src = FeedSource::new(vec![vec![a], vec![b]]).with_lost(3);
        let opts = JsonOptions {
            interval: Duration::from_millis(100),
            diagnosis: DiagnosisConfig::default(),
            duration: None,
            events: false,
            env_refresh: None,
        };
        let mut out = Vec::new();
        run(&mut src, Environment::default(), &opts, &mut out, std::future::pending()).await.expect("runs");
        let lines: Vec<Value> =
            String::from_utf8(out).expect("utf8").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        let last = lines.last().expect("summary");
        assert_eq!(last["type"], "summary");
        assert_eq!(last["events_received"], 2);
        assert_eq!(last["events_lost"], 3);
        let flow = &lines[lines.len() - 2];
        assert_eq!(flow["cookie"], 7);
        assert_eq!(flow["closed"], true);
        assert_eq!(flow["ssthresh"], 42);
        assert_eq!(flow["rtt"], 30.0);
        assert_eq!(flow["throughput_bps"], 10_000_000);
        assert_eq!(flow["src"], "198.18.0.1");
        assert_eq!(flow["dport"], 5201);
    }

    #[test]
    fn infinite_ssthresh_is_null() {
        let mut t = crate::analysis::model::FlowTable::new(TableConfig::default());
        t.ingest(&sample(1, 0));
        let v = flow_object(t.get(1).expect("flow"), None, &WallClock::now());
        assert!(v["ssthresh"].is_null());
        assert_eq!(v["limited_by"], "unknown");
        assert_eq!(v["flagged"], false);
        assert_eq!(v["ca_state"], "Open");
    }
}
