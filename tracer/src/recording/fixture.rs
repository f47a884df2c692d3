//! A realistic recording built in code, for the tests of anonymizing and the exports: the terminal UI's feed (a
//! flagged lossy CUBIC upload in a Docker container, a BBR video stream, a container receiving,
//! an upload that closes, ssh) plus a second lossy CUBIC flow in a named network namespace, on a
//! host whose names are hostile (markup, quotes, shell metacharacters).

use crate::analysis::environment::Environment;
use crate::analysis::sample::{Owner, Sample};
use crate::analysis::schema::{ActionKind, ActionRecord, SummaryRecord, SwitchedFlow};
use crate::recording::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use crate::source::SourceCounters;
use crate::test_support::feed;

pub(crate) use crate::test_support::feed::{CUBIC, SSH};

/// The second lossy CUBIC flow, in the named namespace [`EVIL_NETNS`].
pub(crate) const NAMED: u64 = 606;
pub(crate) const EVIL_NETNS_INODE: u32 = 4026532999;
pub(crate) const EVIL_NETNS: &str = "lab'; rm -rf / #";
pub(crate) const EVIL_CONTAINER: &str = "<script>alert(\"jf\")</script>";
pub(crate) const EVIL_COMM: &str = "<b>ip\"erf'3";
pub(crate) const HOST: &str = "edge-07<i>";
pub(crate) const NAMED_LOCAL: &str = "198.18.7.1:40100";
pub(crate) const NAMED_REMOTE: &str = "203.0.113.77:5201";
/// Seconds of traffic.
pub(crate) const SECS: u64 = 15;
pub(crate) const START_UNIX_NS: u64 = 1_700_000_000_000_000_000;

pub(crate) fn header() -> Header {
    Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        cctrace_version: "0.1.0".into(),
        host: HOST.into(),
        kernel: "6.8.0-45-generic".into(),
        start_unix_ns: START_UNIX_NS,
        start_monotonic_ns: feed::ts_ns(0),
        sample_interval_ms: 100,
        tick_ms: 1000,
        filters: vec![format!("container={EVIL_CONTAINER}")],
        source: "live kernel (6/6 hooks)".into(),
        hooks: vec!["tcp_probe: tp_btf".into()],
        anonymized: false,
        heavy_min_bytes: None,
        heavy_min_bps: None,
    }
}

pub(crate) fn env() -> Environment {
    let mut env = feed::env();
    for info in env.cgroups.values_mut() {
        if let Some(c) = info.container.as_mut().filter(|c| c.name.as_deref() == Some("jellyfin")) {
            c.name = Some(EVIL_CONTAINER.into());
        }
    }
    env.netns_names.insert(EVIL_NETNS_INODE, EVIL_NETNS.into());
    env.netns_cc.insert(EVIL_NETNS_INODE, "cubic".into());
    env
}

fn named(cubic: &Sample) -> Sample {
    let mut s = cubic.clone();
    s.cookie = NAMED;
    s.netns = EVIL_NETNS_INODE;
    s.cgroup_id = 1;
    s.local = NAMED_LOCAL.parse().expect("addr");
    s.remote = NAMED_REMOTE.parse().expect("addr");
    s.owner = Some(Owner { pid: 777, comm: "rsync".into() });
    s
}

fn batch(tick: u64) -> Vec<Sample> {
    let mut b = feed::batch(tick);
    for s in &mut b {
        if s.cookie == CUBIC {
            s.owner = Some(Owner { pid: 4242, comm: EVIL_COMM.into() });
        }
    }
    let extra = named(&b[0]);
    b.push(extra);
    b
}

/// The recording: header, host facts, a batch every 100 ms, a tick every second, an action, end.
pub(crate) fn entries() -> Vec<Entry> {
    let mut out = vec![Entry::Header(header()), Entry::Host { env: env() }];
    let mut received = 0;
    for tick in 0..=SECS * 10 {
        let samples = batch(tick);
        received += samples.len() as u64;
        out.push(Entry::Samples { samples });
        if tick % 10 == 0 {
            let counters = SourceCounters { received, lost: 3, ..SourceCounters::default() };
            out.push(Entry::Tick { now_ns: feed::ts_ns(tick), counters });
        }
        if tick == 120 {
            out.push(Entry::Action(ActionRecord {
                ts_ns: feed::ts_ns(tick),
                action: ActionKind::Fix,
                netns: 4026532999,
                target: format!("container {EVIL_CONTAINER} in {EVIL_NETNS}"),
                cc: "bbr".into(),
                default_before: "cubic".into(),
                default_after: "bbr".into(),
                switched: vec![SwitchedFlow { cookie: 1, from: "cubic".into(), to: "bbr".into() }],
                messages: vec![format!("applied the fix to {EVIL_CONTAINER} in {EVIL_NETNS}")],
                sysctls: Vec::new(),
            }));
        }
    }
    out.push(Entry::End {
        dropped_entries: 0,
        summary: SummaryRecord {
            source: "live kernel (6/6 hooks)".into(),
            events_received: received,
            events_lost: 3,
            flows_seen: 6,
            ..SummaryRecord::default()
        },
    });
    out
}

pub(crate) fn sample_count(entries: &[Entry]) -> usize {
    entries
        .iter()
        .map(|e| match e {
            Entry::Samples { samples } => samples.len(),
            _ => 0,
        })
        .sum()
}

/// Every name and address of the fixture that came from the host: what anonymized output must
/// not contain (ports and kernel ids aside).
pub(crate) fn originals() -> Vec<String> {
    let mut v: Vec<String> = [HOST, EVIL_CONTAINER, EVIL_COMM, EVIL_NETNS, "rsync", "nginx", "curl", "python3", "ssh"]
        .iter()
        .map(|&s| String::from(s))
        .collect();
    v.extend(["jellyfin", "proxy", feed::JELLYFIN_ID, "cron.service"].map(String::from));
    for e in entries() {
        if let Entry::Samples { samples } = e {
            for s in samples {
                v.push(s.local.ip().to_string());
                v.push(s.remote.ip().to_string());
            }
        }
    }
    v.sort();
    v.dedup();
    v
}
