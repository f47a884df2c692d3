use super::events::EventKind;
use super::*;
use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::sample::{SampleReason, TcpState};
use crate::analysis::schema::{ActionKind, SwitchedFlow};
use crate::metrics::{Exposition, Format, MetricsConfig, MetricsModel, SharedSnapshot};
use crate::source::{HookCost, SourceCounters};
use crate::test_support::feed;

fn clock() -> WallClock {
    WallClock::fixed(1_700_000_000_000_000_000 - 1_000_000_000_000_000)
}

/// The UI tests' host fed for `secs` seconds (with `change` applied to each batch), with the
/// events taken after every tick.
fn events_of(secs: u64, change: impl Fn(u64, &mut Vec<crate::analysis::sample::Sample>)) -> Vec<events::Event> {
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), feed::env());
    let mut found = FlowEvents::default();
    let mut out = Vec::new();
    for tick in 0..secs * 10 {
        let mut batch = feed::batch(tick);
        change(tick, &mut batch);
        for s in &batch {
            analysis.ingest(s);
        }
        analysis.tick(feed::ts_ns(tick));
        out.extend(found.take(&analysis, &clock()));
    }
    out
}

#[test]
fn the_lossy_upload_is_flagged_once_with_its_verdict_and_fix_and_cleared_when_it_closes() {
    // The upload closes at 30 s.
    let events = events_of(40, |tick, batch| {
        batch.retain(|s| s.cookie != feed::CUBIC || tick <= 300);
        if tick == 300 {
            for s in batch.iter_mut().filter(|s| s.cookie == feed::CUBIC) {
                s.reason = SampleReason::Destroy;
                s.tcp_state = TcpState::Close;
            }
        }
    });
    let of =
        |kind| events.iter().filter(move |e| e.kind == kind && e.record["cookie"] == feed::CUBIC).collect::<Vec<_>>();
    let flagged = of(EventKind::Flagged);
    assert_eq!(flagged.len(), 1, "{events:#?}");
    let f = flagged[0];
    assert_eq!(f.record["container"]["name"], "jellyfin");
    assert_eq!(f.record["limited_by"], "cwnd");
    assert!(f.record["flagged"].as_bool() == Some(true) && f.record["evidence"]["loss_ratio"].as_f64() > Some(0.005));
    assert!(f.record["fix"].as_array().is_some_and(|lines| !lines.is_empty()), "{:#}", f.record);
    assert_eq!(f.body, f.record["verdict"].as_str().expect("words"), "the body is the verdict's words");
    let cleared = of(EventKind::Cleared);
    assert_eq!(cleared.len(), 1, "{events:#?}");
    assert!(cleared[0].ts_ns > f.ts_ns);
    assert_eq!(cleared[0].extra, vec![("cctrace.cleared_because", "closed".into())]);
    // Nothing else flags on this host, and nothing flaps.
    assert!(events.iter().all(|e| e.record["cookie"] == feed::CUBIC), "{events:#?}");
}

#[test]
fn a_fix_is_told_with_the_flows_it_switched() {
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), feed::env());
    for tick in 0..30 {
        for s in &feed::batch(tick) {
            analysis.ingest(s);
        }
        analysis.tick(feed::ts_ns(tick));
    }
    let mut found = FlowEvents::default();
    found.take(&analysis, &clock());
    let fix = ActionRecord {
        ts_ns: feed::ts_ns(29),
        action: ActionKind::Fix,
        netns: feed::HOST_NETNS,
        target: "container jellyfin (pid 42)".into(),
        cc: "bbr".into(),
        default_before: "cubic".into(),
        default_after: "bbr".into(),
        switched: vec![SwitchedFlow { cookie: feed::CUBIC, from: "cubic".into(), to: "bbr".into() }],
        sysctls: Vec::new(),
        messages: vec!["switched connection :40000 -> :5201 (cookie 101) from cubic to bbr".into()],
    };
    let undo = ActionRecord { action: ActionKind::Undo, switched: Vec::new(), ..fix.clone() };
    found.push_actions(&[fix.clone(), undo]);
    let events = found.take(&analysis, &clock());
    assert_eq!(events.len(), 2, "{events:#?}");
    let (applied, undone) = (&events[0], &events[1]);
    assert_eq!((applied.kind, undone.kind), (EventKind::FixApplied, EventKind::FixUndone));
    assert_eq!(applied.body, fix.headline());
    let upload = feed::batch(0).into_iter().find(|s| s.cookie == feed::CUBIC).expect("upload");
    assert_eq!(applied.record["switched"][0]["dport"], upload.remote.port(), "{:#}", applied.record);
    assert_eq!(applied.record["dst"], upload.remote.ip().to_string(), "one flow switched: its identity on the event");
    assert_eq!(applied.record["container"]["name"], "jellyfin");
    assert_eq!(applied.record["messages"][0], fix.messages[0]);
    assert!(undone.record.get("dst").is_none());
}

#[test]
fn ten_thousand_flows_give_the_expositions_bounded_series_as_data_points() {
    let cfg = MetricsConfig::default();
    let table = TableConfig { max_flows: 20_000, ..TableConfig::default() };
    let mut analysis = Analysis::new(table, DiagnosisConfig::default(), Default::default());
    let mut model = MetricsModel::new(cfg.clone());
    for second in 1..=3u64 {
        let batch: Vec<_> = (0..10_000u64)
            .map(|cookie| {
                let mut s = crate::analysis::flow_table::tests::sample(cookie + 1, 1_000_000 + second * 1000);
                s.netns = 4_026_531_840 + (cookie % 5_000) as u32;
                s.bytes_sent = second * 1_000_000 * (cookie % 7 + 1);
                s
            })
            .collect();
        for s in &batch {
            analysis.ingest(s);
        }
        model.observe(&analysis.env, analysis.env_generation(), &batch);
        analysis.tick((1_000_000 + second * 1000) * 1_000_000);
    }
    let hooks: Vec<(String, bool)> = (0..6).map(|i| (format!("tcp:hook{i}"), true)).collect();
    let mut snap = model.snapshot(&analysis, SourceCounters::default(), &hooks);
    snap.health.hook_costs = vec![HookCost { hook: "tcp:hook0".into(), runs: 5, run_ns: 50 }];
    snap.health.otlp = Some(ExportCounts::default());
    assert_eq!(snap.groups.len(), cfg.max_groups + 1, "the group bound is reached");

    let shared = SharedSnapshot::default();
    shared.set(snap.clone());
    let text = Exposition::new(shared).render(Format::Text).expect("renders");
    let prometheus_series = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
    let (request, points) = encode::metrics_request(&families(&snap), &encode::resource(&Host::default()), 1, 2);
    let encoded = prost::Message::encode_to_vec(&request);
    println!(
        "10,000 flows: {prometheus_series} Prometheus series, {points} OTLP data points ({} bytes), bound {}",
        encoded.len(),
        cfg.series_bound()
    );
    assert_eq!(points as usize, prometheus_series);
    assert_eq!(points as usize, snap.series_count());
    assert!(prometheus_series <= cfg.series_bound());
    assert!(encoded.len() < QUEUE_BYTES_FOR_TEST, "one export fits the queue many times over");
}

const QUEUE_BYTES_FOR_TEST: usize = sender::QUEUE_BYTES / 8;

#[test]
fn a_heavy_flows_new_limit_is_told_once_it_holds_and_a_young_flows_first_is_not() {
    // From 20 s on, the BBR stream is held by its peer's receive window, not its application.
    let events = events_of(30, |tick, batch| {
        if tick >= 200 {
            for s in batch.iter_mut().filter(|s| s.cookie == feed::BBR) {
                s.app_limited = false;
                s.rwnd_limited_us = s.busy_us;
            }
        }
    });
    let changes: Vec<_> = events.iter().filter(|e| e.kind == EventKind::LimitedByChanged).collect();
    let first = changes.first().unwrap_or_else(|| panic!("no change told: {events:#?}"));
    assert_eq!(first.record["cookie"], feed::BBR);
    assert_eq!(first.record["limited_by"], "rwnd");
    assert_eq!(first.extra, vec![("cctrace.previous_limited_by", "application".into())]);
    assert!(first.ts_ns >= feed::ts_ns(210), "two evaluations saw it: {}", first.ts_ns);
    assert!(changes.iter().all(|e| e.ts_ns >= feed::ts_ns(200)), "none from the flows' first verdicts: {changes:#?}");
}

#[test]
fn headers_from_the_environment_are_pairs_with_percent_encoded_values() {
    assert_eq!(
        headers_from_env(" api-key = s3cr%3Dt%2C1 ,x-tenant=ops,, broken"),
        vec!["api-key=s3cr=t,1".to_string(), "x-tenant=ops".into(), "broken".into()]
    );
    assert!(headers_from_env("").is_empty());
    assert_eq!(headers_from_env("k=100%"), vec!["k=100%".to_string()], "a stray % is kept");
}
