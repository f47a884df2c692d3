use super::*;
use crate::metrics::model::{FlaggedSeries, GroupKey, GroupSeries, GroupTotals, Health};

/// A snapshot of one group with a flagged flow (its container name needs escaping).
pub(crate) fn snapshot() -> Snapshot {
    let key = GroupKey { container: "jelly\"fin\n".into(), netns: 4026531840, cc: "cubic".into() };
    Snapshot {
        groups: vec![GroupSeries {
            key: key.clone(),
            flows: 2,
            heavy: 1,
            flagged: 1,
            remote_flagged: 0,
            goodput_bps: 8e6,
            loss_ratio: 0.02,
            totals: GroupTotals { bytes_sent: 123_456, bytes_retransmitted: 2_469, segments_retransmitted: 17 },
        }],
        limited_by: vec![(crate::analysis::diagnosis::LimitedBy::CongestionWindow, 1)],
        flagged: vec![FlaggedSeries {
            key,
            flow: "198.18.0.1:40000->198.18.1.1:5201".into(),
            goodput_bps: 8e6,
            srtt_seconds: 0.031,
            min_rtt_seconds: 0.030,
            loss_ratio: 0.02,
            headroom_bps: 1.6e8,
        }],
        flagged_folded: 3,
        overflow_flows: 0,
        health: Health { hooks: vec![("tcp:tcp_probe".into(), true)], ..Health::default() },
    }
}

fn render(format: Format) -> String {
    let shared = SharedSnapshot::default();
    shared.set(snapshot());
    Exposition::new(shared).render(format).expect("encodes")
}

#[test]
fn the_text_format_names_counters_with_total_and_escapes_label_values() {
    let text = render(Format::Text);
    assert!(
        text.contains(r#"cctrace_sent_bytes_total{container="jelly\"fin\n",netns="4026531840",cc="cubic"} 123456"#),
        "{text}"
    );
    assert!(text.contains("# TYPE cctrace_retransmitted_bytes_total counter"), "{text}");
    assert!(
        text.contains(
            r#"cctrace_goodput_bytes_per_second{container="jelly\"fin\n",netns="4026531840",cc="cubic"} 1000000"#
        ),
        "{text}"
    );
    assert!(text.contains(r#",flow="198.18.0.1:40000->198.18.1.1:5201"} 20000000"#), "headroom in bytes/s: {text}");
    assert!(text.contains("cctrace_flagged_flows_folded 3"));
    assert!(!text.contains("# EOF"), "the 0.0.4 text format has no EOF marker");
}

#[test]
fn openmetrics_ends_with_eof_and_declares_units() {
    let text = render(Format::OpenMetrics);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# UNIT cctrace_flagged_flow_rtt_seconds seconds"), "{text}");
}

#[test]
fn the_scraper_gets_openmetrics_when_it_asks_for_it() {
    // What Prometheus 2.42 sends.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::negotiate(Some("text/plain;version=0.0.4")), Format::Text);
    assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0")), Format::Text);
    assert_eq!(Format::negotiate(None), Format::Text);
}
