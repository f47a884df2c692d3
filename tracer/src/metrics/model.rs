//! What the exporter exposes, as plain data computed from the [`Analysis`]: no HTTP, no
//! encoding, so every rule here (which series, which labels, the top N, the cardinality bound,
//! counters that never go back) is tested on feeds without a kernel.
//!
//! Series are grouped by a [`GroupKey`]: the container (or the cgroup, when no container owns
//! it) x the network namespace x the congestion control. Byte counters are summed from the
//! samples' per-socket kernel counters as deltas, so a flow that closes (and leaves the flow
//! table) keeps its bytes in its group's totals: a counter never runs backwards within the
//! process. The number of groups is bounded ([`MetricsConfig::max_groups`]); flows of groups
//! beyond it are folded into one overflow group and counted, and flagged flows get series of
//! their own only for the top [`MetricsConfig::top_flagged`].

use std::collections::HashMap;

use crate::analysis::diagnosis::LimitedBy;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::Flow;
use crate::analysis::sample::Sample;
use crate::analysis::schema::Placement;
use crate::analysis::Analysis;
use crate::source::SourceCounters;

/// The label value of the group flows of further groups are folded into.
pub const OVERFLOW_LABEL: &str = "_other";

/// Default of [`MetricsConfig::top_flagged`].
pub const DEFAULT_TOP_FLAGGED: usize = 10;
/// Default of [`MetricsConfig::max_groups`].
pub const DEFAULT_MAX_GROUPS: usize = 500;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Flagged flows with series of their own (the rest are counted as folded).
    pub top_flagged: usize,
    /// Distinct (container, netns, cc) groups with series of their own, over the process's
    /// life; the overflow group is one more.
    pub max_groups: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self { top_flagged: DEFAULT_TOP_FLAGGED, max_groups: DEFAULT_MAX_GROUPS }
    }
}

impl MetricsConfig {
    /// The most series the exposition can hold: a documented bound, whatever the flow count.
    pub fn series_bound(&self) -> usize {
        (self.max_groups + 1) * GROUP_SERIES
            + LimitedBy::ALL.len()
            + self.top_flagged * FLAGGED_SERIES
            + HEALTH_SERIES
            + HOOK_SERIES_MAX * 3
            + OTLP_SERIES
    }
}

/// Series per group: flows, heavy, flagged, flagged from the receiving end, goodput, loss
/// ratio; bytes sent, bytes and segments retransmitted.
pub const GROUP_SERIES: usize = 9;
/// Series per flagged flow shown: goodput, srtt, min rtt, loss ratio, headroom.
pub const FLAGGED_SERIES: usize = 5;
/// Host-wide series: the source's seven counters, flows tracked and evicted, flagged folded,
/// overflow flows, build info.
pub const HEALTH_SERIES: usize = 12;
/// The OTLP export's own series (while it runs): exported and dropped, for metrics and logs.
pub const OTLP_SERIES: usize = 4;
/// Hooks cctrace attaches, with room to grow: each has a `cctrace_hook_attached` series and,
/// when the kernel measures them, two of run statistics.
pub const HOOK_SERIES_MAX: usize = 16;

/// Which series a flow counts in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The container's label (`jellyfin`, `pod/container`), else the cgroup path, else empty
    /// (a socket whose cgroup the host facts do not know yet).
    pub container: String,
    /// The network namespace's inode.
    pub netns: u32,
    pub cc: String,
}

impl GroupKey {
    pub fn of(sample: &Sample, env: &Environment) -> Self {
        let placement = Placement::of(sample, env);
        let container = match (placement.container, placement.cgroup) {
            (Some(c), _) => c.label(),
            (None, Some(path)) => path,
            (None, None) => String::new(),
        };
        Self { container, netns: sample.netns, cc: sample.cc.to_string() }
    }

    fn overflow() -> Self {
        Self { container: OVERFLOW_LABEL.into(), netns: 0, cc: OVERFLOW_LABEL.into() }
    }
}

/// A group's counters: bytes the kernel counted for its sockets, summed over the process's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupTotals {
    pub bytes_sent: u64,
    pub bytes_retransmitted: u64,
    pub segments_retransmitted: u64,
}

/// One group's series at one evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSeries {
    pub key: GroupKey,
    /// Open flows now, heavy ones, flagged ones, and of those the flows this host receives,
    /// flagged from the receiving end (their senders are elsewhere).
    pub flows: u64,
    pub heavy: u64,
    pub flagged: u64,
    pub remote_flagged: u64,
    /// Sum of the open flows' goodput, bits/s.
    pub goodput_bps: f64,
    /// Retransmitted share of the bytes the group sent over the last second, 0..1.
    pub loss_ratio: f64,
    pub totals: GroupTotals,
}

/// A flagged flow shown with its own series.
#[derive(Clone, Debug, PartialEq)]
pub struct FlaggedSeries {
    pub key: GroupKey,
    /// `src:sport->dst:dport`.
    pub flow: String,
    pub goodput_bps: f64,
    pub srtt_seconds: f64,
    pub min_rtt_seconds: f64,
    pub loss_ratio: f64,
    /// Rate the path has shown beyond the current goodput (0 when the data does not show any).
    pub headroom_bps: f64,
}

/// The tracer's own health.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    pub counters: SourceCounters,
    pub flows_tracked: u64,
    pub flows_evicted: u64,
    /// Each hook by name, and whether it is attached.
    pub hooks: Vec<(String, bool)>,
    /// What each hook's program cost, when the kernel measures it (else empty).
    pub hook_costs: Vec<crate::source::HookCost>,
    /// What the OTLP export delivered and dropped (`None` when it does not run).
    pub otlp: Option<ExportCounts>,
}

/// What an exporter delivered and dropped of one kind of item, since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    pub sent: u64,
    pub dropped: u64,
}

/// The OTLP export's totals: data points of metrics, log records of events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportCounts {
    pub metric_points: Delivery,
    pub log_records: Delivery,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// By key.
    pub groups: Vec<GroupSeries>,
    /// Tracked flows per verdict, every verdict listed.
    pub limited_by: Vec<(LimitedBy, u64)>,
    /// The top flagged flows, most headroom first.
    pub flagged: Vec<FlaggedSeries>,
    /// Flagged flows beyond the top N at this evaluation.
    pub flagged_folded: u64,
    /// Flows counted in the overflow group since the start.
    pub overflow_flows: u64,
    pub health: Health,
}

impl Snapshot {
    /// How many series an exposition of this snapshot holds.
    pub fn series_count(&self) -> usize {
        self.groups.len() * GROUP_SERIES
            + self.limited_by.len()
            + self.flagged.len() * FLAGGED_SERIES
            + HEALTH_SERIES
            + self.health.hooks.len()
            + self.health.hook_costs.len() * 2
            + if self.health.otlp.is_some() { OTLP_SERIES } else { 0 }
    }
}

/// A socket's kernel counters as last seen, and the group they were counted in.
#[derive(Clone, Debug)]
struct SocketSeen {
    bytes_sent: u64,
    bytes_retrans: u64,
    segments_retrans: u32,
    last_seen_ns: u64,
    closing: bool,
    /// Index into [`MetricsModel::groups`].
    group: usize,
    /// What the group was derived from: while these stay the same, so does the group, and a
    /// sample costs no label building.
    cgroup_id: u64,
    netns: u32,
    cc: String,
    env_generation: u64,
}

/// Turns samples and the analysis into [`Snapshot`]s; keeps the counters between them.
#[derive(Debug, Default)]
pub struct MetricsModel {
    cfg: MetricsConfig,
    /// Every group ever exposed, in order of appearance (a group never goes away, so its
    /// counters never restart).
    groups: Vec<(GroupKey, GroupTotals)>,
    index: HashMap<GroupKey, usize>,
    overflow: Option<usize>,
    sockets: HashMap<u64, SocketSeen>,
    overflow_flows: u64,
}

impl MetricsModel {
    pub fn new(cfg: MetricsConfig) -> Self {
        Self { cfg, ..Self::default() }
    }

    pub fn config(&self) -> &MetricsConfig {
        &self.cfg
    }

    fn add_group(&mut self, key: GroupKey) -> usize {
        self.groups.push((key.clone(), GroupTotals::default()));
        self.index.insert(key, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// The group `key` counts in: its own while there is room, else the overflow group.
    fn slot(&mut self, key: GroupKey, new_socket: bool) -> usize {
        if let Some(&at) = self.index.get(&key) {
            return at;
        }
        let own = self.groups.len() - usize::from(self.overflow.is_some());
        if own < self.cfg.max_groups {
            return self.add_group(key);
        }
        if new_socket {
            self.overflow_flows += 1;
        }
        match self.overflow {
            Some(at) => at,
            None => {
                let at = self.add_group(GroupKey::overflow());
                self.overflow = Some(at);
                at
            }
        }
    }

    /// Add what `batch` shows each socket sent and retransmitted since it was last seen (all of
    /// it for a socket seen first) to its group's counters. `env_generation` says when the host
    /// facts changed ([`Analysis::env_generation`]): a container found late renames the group.
    pub fn observe(&mut self, env: &Environment, env_generation: u64, batch: &[Sample]) {
        for s in batch {
            let unchanged = self.sockets.get(&s.cookie).and_then(|seen| {
                let same = seen.cgroup_id == s.cgroup_id
                    && seen.netns == s.netns
                    && seen.cc == s.cc
                    && seen.env_generation == env_generation;
                // A flow stays in the overflow group once there, so the overflow count means
                // something.
                (same || Some(seen.group) == self.overflow).then_some(seen.group)
            });
            let group = match unchanged {
                Some(g) => g,
                None => {
                    let new_socket = !self.sockets.contains_key(&s.cookie);
                    self.slot(GroupKey::of(s, env), new_socket)
                }
            };
            let seen = self.sockets.entry(s.cookie).or_insert_with(|| SocketSeen {
                bytes_sent: 0,
                bytes_retrans: 0,
                segments_retrans: 0,
                last_seen_ns: s.ts_ns,
                closing: false,
                group,
                cgroup_id: s.cgroup_id,
                netns: s.netns,
                cc: s.cc.to_string(),
                env_generation,
            });
            if unchanged.is_none() {
                seen.cgroup_id = s.cgroup_id;
                seen.netns = s.netns;
                seen.cc.clear();
                seen.cc.push_str(&s.cc);
                seen.env_generation = env_generation;
            }
            // The kernel's per-socket counters only grow; a lower value (a sample older than
            // one already seen) adds nothing and moves nothing back.
            let sent = s.bytes_sent.saturating_sub(seen.bytes_sent);
            let retrans = s.bytes_retrans.saturating_sub(seen.bytes_retrans);
            let segments = s.total_retrans.saturating_sub(seen.segments_retrans);
            seen.bytes_sent = seen.bytes_sent.max(s.bytes_sent);
            seen.bytes_retrans = seen.bytes_retrans.max(s.bytes_retrans);
            seen.segments_retrans = seen.segments_retrans.max(s.total_retrans);
            seen.last_seen_ns = seen.last_seen_ns.max(s.ts_ns);
            seen.closing |= s.is_closing();
            seen.group = group;
            let totals = &mut self.groups[group].1;
            totals.bytes_sent = totals.bytes_sent.saturating_add(sent);
            totals.bytes_retransmitted = totals.bytes_retransmitted.saturating_add(retrans);
            totals.segments_retransmitted = totals.segments_retransmitted.saturating_add(u64::from(segments));
        }
    }

    /// The series as of the analysis's last evaluation; forgets sockets that are gone for good
    /// (closed, or idle past the flow table's timeout, and out of the table), so memory stays
    /// bounded by the table.
    pub fn snapshot(&mut self, analysis: &Analysis, counters: SourceCounters, hooks: &[(String, bool)]) -> Snapshot {
        let now_ns = analysis.last_tick_ns();
        let idle_ns = analysis.table.config().idle_timeout_ns;
        self.sockets.retain(|cookie, seen| {
            analysis.table.get(*cookie).is_some()
                || !(seen.closing || now_ns.saturating_sub(seen.last_seen_ns) >= idle_ns)
        });

        let mut live = vec![Live::default(); self.groups.len()];
        let mut limited_by = [0u64; LimitedBy::ALL.len()];
        let mut flagged = Vec::new();
        let cfg = analysis.diagnoser.config();
        for flow in analysis.table.flows() {
            let verdict = analysis.verdict(flow);
            let l = verdict.map_or(LimitedBy::Unknown, |v| v.limited_by);
            limited_by[LimitedBy::ALL.iter().position(|x| *x == l).unwrap_or(0)] += 1;
            let Some(group) = self.sockets.get(&flow.cookie()).map(|s| s.group) else { continue };
            if flow.is_closed() {
                continue;
            }
            let l = &mut live[group];
            l.flows += 1;
            l.heavy += u64::from(cfg.flow_is_heavy(flow, verdict));
            l.goodput_bps += flow.rates.throughput_bps.max(0.0);
            l.send_bps += flow.rates.send_rate_bps.max(0.0);
            l.retrans_bps += (flow.rates.send_rate_bps * flow.rates.retrans_ratio).max(0.0);
            if let Some(v) = verdict.filter(|v| v.flagged) {
                l.flagged += 1;
                l.remote_flagged += u64::from(v.evidence.as_ref().is_some_and(|e| e.remote_sender.is_some()));
                flagged.push(flagged_series(flow, v.evidence.as_deref(), self.groups[group].0.clone()));
            }
        }
        let mut groups: Vec<GroupSeries> = self
            .groups
            .iter()
            .zip(&live)
            .map(|((key, totals), l)| GroupSeries {
                key: key.clone(),
                flows: l.flows,
                heavy: l.heavy,
                flagged: l.flagged,
                remote_flagged: l.remote_flagged,
                goodput_bps: l.goodput_bps,
                loss_ratio: if l.send_bps > 0.0 { (l.retrans_bps / l.send_bps).clamp(0.0, 1.0) } else { 0.0 },
                totals: *totals,
            })
            .collect();
        groups.sort_by(|a, b| a.key.cmp(&b.key));
        // Most headroom first, then most goodput, then by flow for a stable order.
        flagged.sort_by(|a, b| {
            b.headroom_bps
                .total_cmp(&a.headroom_bps)
                .then(b.goodput_bps.total_cmp(&a.goodput_bps))
                .then_with(|| a.flow.cmp(&b.flow))
        });
        let flagged_folded = flagged.len().saturating_sub(self.cfg.top_flagged) as u64;
        flagged.truncate(self.cfg.top_flagged);
        Snapshot {
            groups,
            limited_by: LimitedBy::ALL.into_iter().zip(limited_by).collect(),
            flagged,
            flagged_folded,
            overflow_flows: self.overflow_flows,
            health: Health {
                counters,
                flows_tracked: analysis.table.len() as u64,
                flows_evicted: analysis.table.evicted(),
                hooks: hooks.to_vec(),
                hook_costs: Vec::new(),
                otlp: None,
            },
        }
    }
}

/// A group's open flows, summed.
#[derive(Clone, Copy, Debug, Default)]
struct Live {
    flows: u64,
    heavy: u64,
    flagged: u64,
    remote_flagged: u64,
    goodput_bps: f64,
    send_bps: f64,
    retrans_bps: f64,
}

fn flagged_series(
    flow: &Flow,
    evidence: Option<&crate::analysis::diagnosis::Evidence>,
    key: GroupKey,
) -> FlaggedSeries {
    let s = &flow.latest;
    let us = |v: u32| f64::from(v) / 1e6;
    FlaggedSeries {
        key,
        flow: format!("{}->{}", s.local, s.remote),
        goodput_bps: evidence.map_or(flow.rates.throughput_bps, |e| e.goodput_bps),
        srtt_seconds: us(s.srtt_us),
        min_rtt_seconds: us(s.min_rtt_us),
        loss_ratio: evidence.map_or(flow.rates.retrans_ratio, |e| {
            if e.episode_loss_ratio > 0.0 {
                e.episode_loss_ratio
            } else {
                e.loss_ratio
            }
        }),
        headroom_bps: evidence.and_then(|e| e.available_bps).unwrap_or(0.0).max(0.0),
    }
}

#[cfg(test)]
mod tests;
