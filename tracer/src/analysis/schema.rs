//! The one definition of what cctrace prints and records: JSON Lines records for samples, flows
//! and the run's summary. `--json` prints them, and recordings and exports use the same names.
//! Names and units are the ones `ss -tni` users know (the table in docs/json.md#flow-records).

use std::borrow::Cow;
use std::collections::BTreeMap;

use compact_str::{CompactString, ToCompactString};
use serde::{Deserialize, Serialize};
use tracer_common::{NS_PER_SEC, TCP_INFINITE_SSTHRESH};

use crate::analysis::container::{Container, Pod, Runtime};
use crate::analysis::deep_decisions::Decision;
use crate::analysis::diagnosis::{Change, Evidence, LimitedBy, Verdict};
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::Flow;
use crate::analysis::loss_signals::LossSignals;
use crate::analysis::receive::ReceiveSide;
use crate::analysis::sample::{CaState, Owner, Sample, SampleReason};
use crate::analysis::time::WallClock;
use crate::analysis::tunnel::Tunnel;
use crate::analysis::udp::{AppProto, Process, RelayedBy, UdpFlow, UdpVerdict};

/// One line of output, tagged by `"type"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
// Records are made one at a time and written at once, never kept in bulk: no need to box.
#[allow(clippy::large_enum_variant)]
pub enum Record {
    /// One kernel sample as it arrived (`--events`).
    Sample(SampleRecord),
    /// A flow's latest state with its rates and verdict.
    Flow(FlowRecord),
    /// A heavy UDP flow (`"type":"flow"` too, told apart by `"proto":"udp"`). Records are only
    /// written, never read back as `Record` (deserializing a `"flow"` gives a TCP one).
    #[serde(rename = "flow", skip_deserializing)]
    UdpFlow(UdpRecord),
    /// Something cctrace did to the host: a fix applied or undone.
    Action(ActionRecord),
    /// The run's totals, printed last.
    Summary(SummaryRecord),
    /// A decision of a deep-traced flow's congestion control (`--deep`).
    Decision(DecisionRecord),
}

/// One decision of a deep-mode twin: the typed event and the timeline's line for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Unix time, seconds.
    pub time: f64,
    #[serde(flatten)]
    pub decision: Decision,
    /// In words, as the detail view's timeline shows it.
    pub text: String,
}

impl DecisionRecord {
    pub fn of(d: &Decision, clock: &WallClock) -> Self {
        Self { time: clock.unix_secs(d.ts_ns), decision: d.clone(), text: d.describe() }
    }
}

/// What one socket looked like at one instant: shared by sample and flow records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketFields {
    /// Unix time, seconds.
    pub time: f64,
    /// CLOCK_MONOTONIC nanoseconds of the sample.
    pub ts_ns: u64,
    pub cookie: u64,
    pub netns: u32,
    pub cgroup_id: u64,
    // Short strings held inline and names borrowed: a flow line is formatted without
    // allocating for them (thousands of lines a second under churn).
    pub src: CompactString,
    pub sport: u16,
    pub dst: CompactString,
    pub dport: u16,
    /// TCP state as `ss` names it (`ESTAB`, `FIN-WAIT-1`, ...).
    pub state: Cow<'static, str>,
    pub owner: Option<Owner>,
    pub cc: CompactString,
    /// `Open`, `Disorder`, `CWR`, `Recovery`, `Loss`.
    pub ca_state: Cow<'static, str>,
    /// Segments.
    pub cwnd: u32,
    /// Segments; `null` while unset (infinite), as `ss` leaves it out.
    pub ssthresh: Option<u32>,
    /// Milliseconds.
    pub rtt: f64,
    pub rttvar: f64,
    pub minrtt: f64,
    /// Bytes.
    pub mss: u32,
    /// Segments: in flight, lost, SACKed, retransmitted and in flight, retransmitted in total.
    pub unacked: u32,
    pub lost: u32,
    pub sacked: u32,
    pub retrans_out: u32,
    pub retrans: u32,
    /// Bytes (sequence space: SYN and FIN count one each).
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: u64,
    /// Segments.
    pub delivered: u32,
    /// Bits per second.
    pub delivery_rate: u64,
    pub app_limited: bool,
    /// Null where the source could not know it (the mode without BTF), as the three below.
    pub cwnd_limited: Option<bool>,
    pub pacing_rate: u64,
    /// Bytes: the peer's receive window, written but unsent, send buffer size and fill.
    pub snd_wnd: u32,
    pub notsent: u32,
    pub sndbuf: u32,
    pub wmem_queued: u32,
    /// Milliseconds busy / stalled by the receive window / by the send buffer.
    pub busy: u64,
    pub rwnd_limited: u64,
    pub sndbuf_limited: u64,
    /// Bytes: the receive buffer. Whether the application set the send / receive buffer itself
    /// (`SO_SNDBUF` / `SO_RCVBUF`, which stops the kernel's autotuning of it), and whether a
    /// writer waits for room in the send buffer.
    #[serde(default)]
    pub rcvbuf: u32,
    #[serde(default)]
    pub sndbuf_locked: Option<bool>,
    #[serde(default)]
    pub rcvbuf_locked: Option<bool>,
    #[serde(default)]
    pub writer_blocked: Option<bool>,
    /// The connection negotiated no window scaling (its window stays under 64 KiB).
    #[serde(default)]
    pub window_unscaled: bool,
    /// `dsack_dups`, `reord_seen`, `reordering`, `total_rto`, `total_rto_recoveries`,
    /// `undo_events`: at the top level, as `ss` prints them; null where unknown.
    #[serde(flatten)]
    pub signals: LossSignals,
    /// What the socket receives, and what it shows of its peer's sender: the receiving
    /// `tcp_sock` fields and the per-segment counts (docs/json.md#the-receiving-side); null
    /// where the source could not read them (the mode without BTF).
    #[serde(default)]
    pub receive: Option<ReceiveSide>,
}

/// A flag the source read, or null where it could not.
fn known(value: bool, unknown: bool) -> Option<bool> {
    (!unknown).then_some(value)
}

fn ms(us: u32) -> f64 {
    f64::from(us) / 1000.0
}

impl SocketFields {
    pub fn of(s: &Sample, clock: &WallClock) -> Self {
        Self {
            time: clock.unix_secs(s.ts_ns),
            ts_ns: s.ts_ns,
            cookie: s.cookie,
            netns: s.netns,
            cgroup_id: s.cgroup_id,
            src: s.local.ip().to_compact_string(),
            sport: s.local.port(),
            dst: s.remote.ip().to_compact_string(),
            dport: s.remote.port(),
            state: Cow::Borrowed(s.tcp_state.name()),
            owner: s.owner.clone(),
            cc: s.cc.clone(),
            ca_state: Cow::Borrowed(s.ca_state.name()),
            cwnd: s.snd_cwnd,
            ssthresh: (s.snd_ssthresh < TCP_INFINITE_SSTHRESH).then_some(s.snd_ssthresh),
            rtt: ms(s.srtt_us),
            rttvar: ms(s.rttvar_us),
            minrtt: ms(s.min_rtt_us),
            mss: s.mss,
            unacked: s.packets_out,
            lost: s.lost_out,
            sacked: s.sacked_out,
            retrans_out: s.retrans_out,
            retrans: s.total_retrans,
            bytes_sent: s.bytes_sent,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_retrans: s.bytes_retrans,
            delivered: s.delivered,
            delivery_rate: s.delivery_rate_bps,
            app_limited: s.app_limited,
            cwnd_limited: known(s.cwnd_limited, s.unknown.cwnd_limited),
            pacing_rate: s.pacing_rate_bps,
            snd_wnd: s.snd_wnd,
            notsent: s.notsent_bytes,
            sndbuf: s.sndbuf,
            wmem_queued: s.wmem_queued,
            busy: s.busy_us / 1000,
            rwnd_limited: s.rwnd_limited_us / 1000,
            sndbuf_limited: s.sndbuf_limited_us / 1000,
            rcvbuf: s.rcvbuf,
            sndbuf_locked: known(s.sndbuf_locked, s.unknown.buffer_locks),
            rcvbuf_locked: known(s.rcvbuf_locked, s.unknown.buffer_locks),
            writer_blocked: known(s.writer_blocked, s.unknown.writer_blocked),
            window_unscaled: s.window_unscaled,
            signals: s.signals,
            receive: (!s.unknown.receive).then_some(s.receive),
        }
    }
}

/// Where the flow's socket lives: its cgroup, container and its namespace's default CC, from
/// the host facts (null while unknown).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// cgroup v2 path of the socket, below the v2 mount (`/system.slice/docker-<id>.scope`).
    pub cgroup: Option<String>,
    /// The container (or systemd unit) that cgroup belongs to.
    pub container: Option<Container>,
    /// `net.ipv4.tcp_congestion_control` of the flow's network namespace: what new connections
    /// there get.
    pub netns_cc: Option<String>,
}

impl Placement {
    /// Every optional part present, the values empty: a shape, not a placement.
    pub fn with_every_part() -> Self {
        let pod = Pod { namespace: String::new(), name: String::new(), uid: String::new() };
        Self {
            cgroup: Some(String::new()),
            container: Some(Container {
                runtime: Runtime::Docker,
                id: String::new(),
                name: Some(String::new()),
                pod: Some(pod),
                // A host path for the fix's command, not a column of the exports.
                lxc_path: None,
            }),
            netns_cc: Some(String::new()),
        }
    }

    pub fn of(s: &Sample, env: &Environment) -> Self {
        let info = env.cgroups.get(&s.cgroup_id);
        Self {
            cgroup: info.map(|i| i.path.clone()),
            container: info.and_then(|i| i.container.clone()),
            netns_cc: env.netns_cc.get(&s.netns).cloned(),
        }
    }
}

/// One kernel sample (`--events`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    /// Why the kernel took it: `periodic`, `retransmit`, `ca_state`, `state_change`, `destroy`,
    /// `snapshot` (the start-up listing of sockets that already existed).
    pub reason: SampleReason,
    /// The TCP state before a `state_change`.
    pub old_state: String,
    #[serde(flatten)]
    pub socket: SocketFields,
    #[serde(flatten)]
    pub placement: Placement,
    /// Retransmissions the tracer's own hook counted for the flow.
    pub retrans_events: u32,
}

impl SampleRecord {
    /// Every optional part present, the values empty: the shape the CSV export's columns are
    /// read from (no row is written from it).
    pub fn with_every_part() -> Self {
        let owner = Owner { pid: 0, comm: Default::default() };
        Self {
            reason: SampleReason::Periodic,
            old_state: String::new(),
            socket: SocketFields {
                owner: Some(owner),
                ssthresh: Some(0),
                signals: LossSignals::with_every_part(),
                receive: Some(ReceiveSide::default()),
                ..Default::default()
            },
            placement: Placement::with_every_part(),
            retrans_events: 0,
        }
    }

    pub fn of(s: &Sample, clock: &WallClock, env: &Environment) -> Self {
        Self {
            placement: Placement::of(s, env),
            reason: s.reason,
            old_state: s.old_tcp_state.name().to_string(),
            socket: SocketFields::of(s, clock),
            retrans_events: s.retrans_events,
        }
    }
}

/// A flow: its latest sample, what the flow table derived, and the diagnosis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// `tcp` (UDP flows are [`UdpRecord`]s).
    #[serde(default)]
    pub proto: Proto,
    #[serde(flatten)]
    pub socket: SocketFields,
    #[serde(flatten)]
    pub placement: Placement,
    /// The kernel reported the socket closed.
    pub closed: bool,
    /// Bytes acked plus received over the last second, bits/s (goodput).
    pub throughput_bps: u64,
    /// Bytes put on the wire over the last second, retransmissions included, bits/s.
    pub send_rate_bps: u64,
    /// Retransmitted share of bytes sent over the last second, 0..1.
    pub retrans_ratio: f64,
    /// Milliseconds spent in each CA state.
    pub ca_time_ms: CaTimeMs,
    /// Kernel samples received for the flow.
    pub samples: u64,
    pub limited_by: LimitedBy,
    pub flagged: bool,
    pub verdict: String,
    pub evidence: Option<Evidence>,
    /// For flagged flows: commands to apply the fix, persist it and roll it back.
    pub fix: Option<Vec<String>>,
    /// The flow is the local hop to a process that carries the traffic on over UDP.
    #[serde(default)]
    pub relayed_by: Option<RelayedBy>,
    /// The device its packets leave by and the path MTU, from the socket's cached route
    /// (null until the socket sent while traced).
    #[serde(default)]
    pub dev: Option<String>,
    #[serde(default)]
    pub mtu: Option<u32>,
    /// The tunnel the flow crosses the path in: its TUN device, the process holding it, the
    /// namespace that forwards the flow into it (if not the flow's own) and its UDP flow.
    #[serde(default)]
    pub tunnel: Option<Tunnel>,
    /// The latest change of `limited_by` or `flagged`: `at_s` (seconds into the flow), `from`,
    /// `was_flagged`, `why` (the condition a cleared flag no longer met).
    #[serde(default)]
    pub changed: Option<Change>,
}

impl FlowRecord {
    pub fn of(flow: &Flow, verdict: Option<&Verdict>, clock: &WallClock, env: &Environment) -> Self {
        let ns_per_ms = NS_PER_SEC / 1000;
        Self {
            placement: Placement::of(&flow.latest, env),
            socket: SocketFields::of(&flow.latest, clock),
            closed: flow.is_closed(),
            throughput_bps: flow.rates.throughput_bps.round() as u64,
            send_rate_bps: flow.rates.send_rate_bps.round() as u64,
            retrans_ratio: flow.rates.retrans_ratio,
            ca_time_ms: CaTimeMs(flow.ca_time_ns.map(|ns| ns / ns_per_ms)),
            samples: flow.samples,
            limited_by: verdict.map_or(LimitedBy::Unknown, |v| v.limited_by),
            flagged: verdict.is_some_and(|v| v.flagged),
            verdict: verdict.map_or_else(|| LimitedBy::Unknown.describe().to_string(), |v| v.text.clone()),
            evidence: verdict.and_then(|v| v.evidence.as_deref().cloned()),
            fix: verdict.and_then(|v| (!v.fix.is_empty()).then(|| v.fix.clone())),
            proto: Proto::Tcp,
            relayed_by: verdict.and_then(|v| v.relayed_by.clone()),
            dev: flow.latest.route.map(|r| r.dev.to_string()),
            mtu: flow.latest.route.map(|r| r.mtu()),
            tunnel: verdict.and_then(|v| v.tunnel.clone()),
            changed: verdict.and_then(|v| v.changed.clone()),
        }
    }
}

/// Milliseconds in each CA state, indexed by [`CaState::index`]; in JSON an object keyed by the
/// states' names in sorted order (`{"CWR":0,"Disorder":0,"Loss":0,"Open":12,"Recovery":0}`),
/// written without building a map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaTimeMs(pub [u64; 5]);

impl CaTimeMs {
    /// The states in the order their names sort.
    const SORTED: [CaState; 5] = [CaState::Cwr, CaState::Disorder, CaState::Loss, CaState::Open, CaState::Recovery];

    pub fn of(&self, state: CaState) -> u64 {
        self.0[state.index()]
    }
}

impl Serialize for CaTimeMs {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(Self::SORTED.len()))?;
        for state in Self::SORTED {
            map.serialize_entry(state.name(), &self.of(state))?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for CaTimeMs {
    /// Any object of names and numbers; states it lacks are 0, names that are not states are
    /// ignored.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, u64>::deserialize(deserializer)?;
        let mut out = Self::default();
        for state in CaState::ALL {
            out.0[state.index()] = map.get(state.name()).copied().unwrap_or(0);
        }
        Ok(out)
    }
}

/// Transport protocol of a flow record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    #[default]
    Tcp,
    Udp,
}

/// A heavy UDP flow: who owns it, what it carries, its rates, and who runs its congestion
/// control.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpRecord {
    /// `udp`.
    pub proto: Proto,
    /// Unix time, seconds; CLOCK_MONOTONIC ns of the latest reading.
    pub time: f64,
    pub ts_ns: u64,
    pub cookie: u64,
    pub netns: u32,
    pub cgroup_id: u64,
    #[serde(flatten)]
    pub placement: Placement,
    pub src: String,
    pub sport: u16,
    /// The latest datagram's peer.
    pub dst: String,
    pub dport: u16,
    /// `quic`, `wireguard`, or null for plain UDP.
    pub app_proto: Option<AppProto>,
    /// The owning process: pid, command name and line, whether it holds a TUN device.
    pub owner: Option<Process>,
    /// IP bytes and packets over the socket's life.
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// Bits per second over the last readings.
    pub tx_bps: u64,
    pub rx_bps: u64,
    /// `userspace`: the owning process's congestion control decides, not the kernel's;
    /// `tunnel`: a tunnel process's flow, whose carried TCP flows decide.
    pub limited_by: LimitedBy,
    pub verdict: String,
    /// What to do, in order (configuration lines or commands).
    pub advice: Vec<String>,
    /// A tunnel's flow: the TCP flows (cookies) it carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carries: Vec<u64>,
}

impl UdpRecord {
    pub fn of(flow: &UdpFlow, verdict: Option<&UdpVerdict>, clock: &WallClock, env: &Environment) -> Self {
        let s = &flow.latest;
        let info = env.cgroups.get(&s.cgroup_id);
        Self {
            proto: Proto::Udp,
            time: clock.unix_secs(s.ts_ns),
            ts_ns: s.ts_ns,
            cookie: s.cookie,
            netns: s.netns,
            cgroup_id: s.cgroup_id,
            placement: Placement {
                cgroup: info.map(|i| i.path.clone()),
                container: info.and_then(|i| i.container.clone()),
                netns_cc: None,
            },
            src: s.local.ip().to_string(),
            sport: s.local.port(),
            dst: s.remote.ip().to_string(),
            dport: s.remote.port(),
            app_proto: flow.app_proto,
            owner: s.owner.clone(),
            tx_bytes: s.tx_bytes,
            rx_bytes: s.rx_bytes,
            tx_packets: s.tx_packets,
            rx_packets: s.rx_packets,
            tx_bps: flow.tx_bps.round() as u64,
            rx_bps: flow.rx_bps.round() as u64,
            limited_by: match verdict {
                Some(v) if v.tunnel => LimitedBy::Tunnel,
                Some(_) => LimitedBy::Userspace,
                None => LimitedBy::Unknown,
            },
            verdict: verdict.map_or_else(|| LimitedBy::Unknown.describe().to_string(), |v| v.text.clone()),
            advice: verdict.map(|v| v.advice.clone()).unwrap_or_default(),
            carries: verdict.map(|v| v.carries.clone()).unwrap_or_default(),
        }
    }
}

/// What an action did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// A namespace's default set to the fix's algorithm, connections switched live.
    Fix,
    /// A fix rolled back.
    Undo,
}

/// One connection an action switched, with its cookie (the flow's identity everywhere).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchedFlow {
    pub cookie: u64,
    pub from: String,
    pub to: String,
}

/// Something cctrace did to the host, when and with what outcome: logged, recorded, shown on
/// the charts of the flows it switched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// When it took effect, on the samples' clock (monotonic ns).
    pub ts_ns: u64,
    pub action: ActionKind,
    /// The network namespace (inode) and how it was reached (`ip netns cct-1`, `container
    /// jellyfin (pid 42)`).
    pub netns: u32,
    pub target: String,
    /// The algorithm the fix is to (for an undo, the one it moved away from).
    pub cc: String,
    /// The namespace's default before and after (equal when left as it was).
    pub default_before: String,
    pub default_after: String,
    /// Connections switched, each under its cookie.
    pub switched: Vec<SwitchedFlow>,
    /// What cctrace said while doing it, a line each.
    pub messages: Vec<String>,
    /// Buffer sysctls set, each `net.ipv4.tcp_wmem: 4096 16384 4194304 -> 4096 16384 33554432
    /// in ip netns cct-1` (an undo's the other way).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sysctls: Vec<String>,
}

impl ActionRecord {
    /// The action in one line: `fix of ip netns cct-1: default cubic -> bbr, 2 connections
    /// switched to bbr`.
    pub fn headline(&self) -> String {
        let what = match self.action {
            ActionKind::Fix => "fix",
            ActionKind::Undo => "undo of the fix",
        };
        let default = if self.default_before == self.default_after {
            format!("default {} kept", self.default_after)
        } else {
            format!("default {} -> {}", self.default_before, self.default_after)
        };
        let n = self.switched.len();
        let to = self.switched.first().map_or(self.cc.as_str(), |s| s.to.as_str());
        let buffers = match self.sysctls.len() {
            0 => String::new(),
            n => format!(", {n} buffer limit{} set", if n == 1 { "" } else { "s" }),
        };
        format!(
            "{what} of {}: {default}, {n} connection{} switched to {to}{buffers}",
            self.target,
            if n == 1 { "" } else { "s" }
        )
    }
}

/// The run's totals: every front end ends with them, so nothing is lost silently.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryRecord {
    /// What the samples came from.
    pub source: String,
    /// Samples delivered to the analysis.
    pub events_received: u64,
    /// Samples the kernel could not queue (ring buffer full).
    pub events_lost: u64,
    /// Samples the kernel wrote into the ring buffer (live sources only).
    pub kernel_emitted: Option<u64>,
    /// Records that failed to decode.
    pub decode_errors: u64,
    /// Kernel memory reads that failed (fields read as 0 in those samples).
    pub kernel_read_errors: u64,
    /// Flows the kernel's per-flow map could not hold.
    pub flow_map_full: u64,
    /// Samples the kernel did not write because their flow is outside `--cgroup`,
    /// `--container` or `--netns`.
    #[serde(default)]
    pub events_filtered: u64,
    /// Distinct flows seen, and how many of them the flow table evicted to stay bounded.
    pub flows_seen: u64,
    pub flows_evicted: u64,
    /// The UDP accounting's totals, when the source tracks UDP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpCounters>,
}

/// Totals a source reports about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCounters {
    /// Samples delivered to the consumer.
    pub received: u64,
    /// Samples the producer could not deliver (ring buffer full).
    pub lost: u64,
    /// Records that failed to decode (each is reported, then skipped).
    pub decode_errors: u64,
    /// Kernel reads of socket fields that failed in the eBPF programs: the field read as 0 in
    /// that sample (a kernel whose layout the offsets do not match, or a socket torn down
    /// under the read).
    pub kernel_read_errors: u64,
    /// Per-flow kernel state that could not be stored because the kernel's flow map was full:
    /// those flows lose rate limiting and owner names until entries free up.
    pub flow_map_full: u64,
    /// Samples the kernel did not write because their flow is outside the filter.
    pub filtered: u64,
    /// Samples the kernel wrote into the ring buffer (live sources only): received + lost
    /// accounts for all of them.
    pub kernel_emitted: Option<u64>,
    /// The UDP accounting's totals (live sources that track UDP).
    #[serde(default)]
    pub udp: Option<UdpCounters>,
}

/// What the UDP accounting saw and what its bounded tables could not keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpCounters {
    /// UDP packets the kernel programs saw.
    pub packets: u64,
    /// Sockets entered into the kernel's LRU table (every UDP socket that sent or received).
    pub sockets_seen: u64,
    /// Sockets that crossed the heavy threshold.
    pub heavy: u64,
    /// Heavy sockets the kernel's index had no room for.
    pub heavy_index_full: u64,
    /// Heavy sockets whose state the LRU table evicted before they went quiet.
    pub evicted: u64,
}

impl SummaryRecord {
    /// The summary of a run: what `source` said it is, its counters, and the flow table's
    /// totals.
    pub fn new(source: String, c: SourceCounters, flows_seen: u64, flows_evicted: u64) -> Self {
        Self {
            source,
            events_received: c.received,
            events_lost: c.lost,
            kernel_emitted: c.kernel_emitted,
            decode_errors: c.decode_errors,
            kernel_read_errors: c.kernel_read_errors,
            flow_map_full: c.flow_map_full,
            events_filtered: c.filtered,
            flows_seen,
            flows_evicted,
            udp: c.udp,
        }
    }

    /// The source's counters the summary holds, under their schema names.
    pub fn counters(&self) -> SourceCounters {
        SourceCounters {
            received: self.events_received,
            lost: self.events_lost,
            decode_errors: self.decode_errors,
            kernel_read_errors: self.kernel_read_errors,
            flow_map_full: self.flow_map_full,
            filtered: self.events_filtered,
            kernel_emitted: self.kernel_emitted,
            udp: self.udp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_times_are_written_as_the_sorted_map_they_were_and_read_back() {
        let times = CaTimeMs([12, 3, 0, 7, 1]);
        let as_map: BTreeMap<String, u64> = CaState::ALL.iter().map(|c| (c.name().to_string(), times.of(*c))).collect();
        let json = serde_json::to_string(&times).expect("serializes");
        assert_eq!(json, serde_json::to_string(&as_map).expect("serializes"));
        assert_eq!(json, r#"{"CWR":0,"Disorder":3,"Loss":1,"Open":12,"Recovery":7}"#);
        assert_eq!(serde_json::from_str::<CaTimeMs>(&json).expect("reads"), times);
        assert_eq!(
            serde_json::from_str::<CaTimeMs>(r#"{"Open":5,"Later":9}"#).expect("reads"),
            CaTimeMs([5, 0, 0, 0, 0])
        );
    }
}
