use super::*;
use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::flow_table::TableConfig;
use crate::test_support::feed;

/// The UI tests' host (a lossy CUBIC upload in the `jellyfin` container, a BBR stream, a
/// receiver in a Proxmox container, an upload that closes at 4 s, ssh), fed for `secs`
/// seconds, with a snapshot after every evaluation.
fn run_feed(cfg: MetricsConfig, secs: u64) -> (Analysis, MetricsModel, Vec<Snapshot>) {
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), feed::env());
    let mut model = MetricsModel::new(cfg);
    let mut snapshots = Vec::new();
    for tick in 0..secs * 10 {
        let batch = feed::batch(tick);
        for s in &batch {
            analysis.ingest(s);
        }
        model.observe(&analysis.env, analysis.env_generation(), &batch);
        if tick % 10 == 9 {
            analysis.tick(feed::ts_ns(tick));
            snapshots.push(model.snapshot(&analysis, SourceCounters::default(), &[]));
        }
    }
    (analysis, model, snapshots)
}

fn group<'a>(snap: &'a Snapshot, container: &str, cc: &str) -> &'a GroupSeries {
    snap.groups
        .iter()
        .find(|g| g.key.container == container && g.key.cc == cc)
        .unwrap_or_else(|| panic!("no group {container}/{cc} in {:?}", snap.groups))
}

#[test]
fn the_flagged_upload_shows_under_its_container_and_cc_with_its_evidence() {
    let (_, _, snaps) = run_feed(MetricsConfig::default(), 40);
    let last = snaps.last().expect("snapshots");
    let jellyfin = group(last, "jellyfin", "cubic");
    assert_eq!(jellyfin.key.netns, feed::HOST_NETNS);
    assert_eq!(jellyfin.flagged, 1, "{jellyfin:?}");
    assert_eq!(jellyfin.heavy, 1, "{jellyfin:?}");
    assert!(jellyfin.loss_ratio > 0.005, "{jellyfin:?}");
    assert_eq!(last.flagged.len(), 1);
    let f = &last.flagged[0];
    assert_eq!(f.key, jellyfin.key);
    let upload = feed::batch(0).into_iter().find(|s| s.cookie == feed::CUBIC).expect("the upload");
    assert_eq!(f.flow, format!("{}->{}", upload.local, upload.remote));
    assert!(f.loss_ratio > 0.005 && f.srtt_seconds > 0.01, "{f:?}");
    // No other group has a flagged flow.
    assert_eq!(last.groups.iter().map(|g| g.flagged).sum::<u64>(), 1);
    assert_eq!(last.limited_by.len(), LimitedBy::ALL.len());
}

#[test]
fn counters_never_go_back_and_closed_flows_keep_their_bytes() {
    // 45 s: the upload that closes at 4 s leaves the table after its 30 s linger.
    let (analysis, _, snaps) = run_feed(MetricsConfig::default(), 45);
    assert!(analysis.table.get(feed::CLOSED).is_none(), "the closed flow has left the table");
    for pair in snaps.windows(2) {
        for g in &pair[1].groups {
            if let Some(before) = pair[0].groups.iter().find(|b| b.key == g.key) {
                assert!(g.totals.bytes_sent >= before.totals.bytes_sent, "{before:?} then {g:?}");
                assert!(g.totals.bytes_retransmitted >= before.totals.bytes_retransmitted);
                assert!(g.totals.segments_retransmitted >= before.totals.segments_retransmitted);
            }
        }
        // A group, once exposed, stays.
        assert!(pair[1].groups.len() >= pair[0].groups.len());
    }
    // The container's counter is what its two sockets' kernel counters reached, exactly.
    let last_of = |cookie| {
        (0..450).flat_map(feed::batch).filter(|s| s.cookie == cookie).map(|s| (s.bytes_sent, s.bytes_retrans)).max()
    };
    let (upload, closed) = (last_of(feed::CUBIC).expect("upload"), last_of(feed::CLOSED).expect("closed"));
    let jellyfin = group(snaps.last().expect("snapshots"), "jellyfin", "cubic");
    assert_eq!(jellyfin.totals.bytes_sent, upload.0 + closed.0);
    assert_eq!(jellyfin.totals.bytes_retransmitted, upload.1 + closed.1);
}

#[test]
fn only_the_top_n_flagged_flows_get_series_and_the_rest_are_counted() {
    let (_, _, snaps) = run_feed(MetricsConfig { top_flagged: 0, ..MetricsConfig::default() }, 40);
    let last = snaps.last().expect("snapshots");
    assert!(last.flagged.is_empty());
    assert_eq!(last.flagged_folded, 1);
    assert_eq!(group(last, "jellyfin", "cubic").flagged, 1, "the group still counts it");
}

#[test]
fn groups_beyond_the_limit_fold_into_one_and_the_series_stay_bounded() {
    let cfg = MetricsConfig { max_groups: 10, top_flagged: 3 };
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
    let mut model = MetricsModel::new(cfg.clone());
    let batch: Vec<Sample> = (0..100u32)
        .map(|i| {
            let mut s = crate::analysis::flow_table::tests::sample(u64::from(i) + 1, 1000);
            s.netns = 1000 + i;
            s.bytes_sent = 1000;
            s
        })
        .collect();
    for s in &batch {
        analysis.ingest(s);
    }
    model.observe(&analysis.env, analysis.env_generation(), &batch);
    analysis.tick(2_000_000_000);
    let snap = model.snapshot(&analysis, SourceCounters::default(), &[]);
    assert_eq!(snap.groups.len(), 11, "ten groups of their own and the overflow group");
    assert_eq!(snap.overflow_flows, 90);
    let overflow = snap.groups.iter().find(|g| g.key.container == OVERFLOW_LABEL).expect("overflow group");
    assert_eq!(overflow.totals.bytes_sent, 90 * 1000, "folded flows still count");
    assert_eq!(overflow.flows, 90);
    assert_eq!(snap.groups.iter().map(|g| g.totals.bytes_sent).sum::<u64>(), 100 * 1000);
    assert!(snap.series_count() <= cfg.series_bound(), "{} > {}", snap.series_count(), cfg.series_bound());
}

#[test]
fn a_sample_older_than_one_seen_moves_nothing_back() {
    let mut model = MetricsModel::new(MetricsConfig::default());
    let env = Environment::default();
    let mut s = crate::analysis::flow_table::tests::sample(7, 1000);
    s.bytes_sent = 5000;
    s.bytes_retrans = 100;
    let mut older = s.clone();
    older.bytes_sent = 4000;
    older.bytes_retrans = 50;
    model.observe(&env, 0, &[s.clone(), older, s]);
    let totals = model.groups.first().map(|g| g.1).expect("one group");
    assert_eq!((totals.bytes_sent, totals.bytes_retransmitted), (5000, 100));
}
