//! A deterministic, realistic feed for the UI tests: the flows a media/bulk host shows.
//!
//! - 101: iperf3 CUBIC bulk upload on a lossy 30 ms path: 2 % of bytes retransmitted, srtt near
//!   min_rtt (no queue), cwnd-limited and busy. The real `Diagnoser` flags it.
//! - 202: nginx BBR video stream, application-limited at 2.5 Mbit/s.
//! - 303: curl in a container receiving 50 Mbit/s.
//! - 404: python3 upload that closes at 4 s.
//! - 505: an interactive ssh session, light (hidden in heavy-only mode).
//!
//! Where they run (`Environment::cgroups`): 101 and 404 in the docker container `jellyfin` (on
//! the host's network), 202 in `nginx.service`, 303 in the Proxmox container 102 `proxy` (its
//! own network namespace, defaulting to cubic), 505 in the root cgroup (the host). The host
//! offers bbr but allows namespaces reno and cubic only (Debian's default).
//!
//! One sample per flow every 100 ms from monotonic second 1000.

use std::collections::HashMap;

use crate::analysis::container::{CgroupInfo, Container, Runtime};
use crate::analysis::environment::Environment;
use crate::analysis::filter::{FilterControl, FilterSpec};
use crate::analysis::fix_plan::{FixControl, Plan, Switched, Target};
use crate::analysis::flow_table::tests::sample;
use crate::analysis::sample::{CaState, Owner, Sample, SampleReason, TcpState};
use crate::analysis::schema::{ActionKind, ActionRecord, SwitchedFlow};

pub(crate) const HOST_NETNS: u32 = 4026531840;
pub(crate) const CONTAINER_NETNS: u32 = 4026532561;
pub(crate) const CUBIC: u64 = 101;
pub(crate) const BBR: u64 = 202;
pub(crate) const RECEIVER: u64 = 303;
pub(crate) const CLOSED: u64 = 404;
pub(crate) const SSH: u64 = 505;
pub(crate) const JELLYFIN_CGROUP: u64 = 7321;
pub(crate) const NGINX_CGROUP: u64 = 5120;
pub(crate) const PROXY_CGROUP: u64 = 9001;
pub(crate) const ROOT_CGROUP: u64 = 1;
pub(crate) const JELLYFIN_ID: &str = "4c1f0e9a7b2d83c5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9";
const BASE_MS: u64 = 1_000_000;
use tracer_common::TCP_INFINITE_SSTHRESH as INFINITE;

pub(crate) fn ts_ns(tick: u64) -> u64 {
    (BASE_MS + tick * 100) * 1_000_000
}

pub(crate) fn env() -> Environment {
    let container = |runtime, id: &str, name: Option<&str>| {
        Some(Container { runtime, id: id.into(), name: name.map(Into::into), pod: None, lxc_path: None })
    };
    let cgroups = HashMap::from([
        (
            JELLYFIN_CGROUP,
            CgroupInfo {
                path: format!("/system.slice/docker-{JELLYFIN_ID}.scope"),
                container: container(Runtime::Docker, JELLYFIN_ID, Some("jellyfin")),
            },
        ),
        (
            NGINX_CGROUP,
            CgroupInfo {
                path: "/system.slice/nginx.service".into(),
                container: container(Runtime::Systemd, "nginx.service", None),
            },
        ),
        (
            PROXY_CGROUP,
            CgroupInfo {
                path: "/lxc/102/ns/system.slice/cron.service".into(),
                container: container(Runtime::Proxmox, "102", Some("proxy")),
            },
        ),
        (ROOT_CGROUP, CgroupInfo { path: "/".into(), container: None }),
    ]);
    let words = |s: &str| s.split(' ').map(String::from).collect();
    Environment {
        bbr_available: true,
        host_netns: HOST_NETNS,
        netns_pids: HashMap::from([(CONTAINER_NETNS, 31337)]),
        cgroups,
        netns_cc: HashMap::from([(HOST_NETNS, "cubic".into()), (CONTAINER_NETNS, "cubic".into())]),
        available_cc: words("reno cubic bbr"),
        allowed_cc: words("reno cubic"),
        ..Default::default()
    }
}

/// A kernel filter that resolves against the host facts as the real one would and remembers
/// what it applied: unknown containers, cgroups and namespaces are errors.
#[derive(Debug, Default)]
pub(crate) struct FakeFilter {
    pub spec: FilterSpec,
    pub applied: usize,
}

impl FilterControl for FakeFilter {
    fn apply(&mut self, spec: &FilterSpec, env: &Environment) -> Result<Vec<String>, String> {
        let containers = || env.cgroups.values().filter_map(|c| c.container.as_ref());
        if let Some(c) = spec
            .containers
            .iter()
            .find(|n| !containers().any(|c| c.name.as_deref() == Some(n.as_str()) || c.id.starts_with(n.as_str())))
        {
            return Err(format!("no container named {c} on this host"));
        }
        if let Some(p) =
            spec.cgroups.iter().find(|p| !env.cgroups.values().any(|c| c.path.starts_with(p.trim_end_matches('/'))))
        {
            return Err(format!("no cgroup {p}"));
        }
        if let Some(n) = spec.netns.iter().find(|n| {
            !env.netns_names.values().any(|v| v == *n)
                && n.parse::<u32>().map_or(true, |i| !env.netns_cc.contains_key(&i))
        }) {
            return Err(format!("no network namespace {n}"));
        }
        self.spec = spec.clone();
        self.applied += 1;
        Ok(spec.describe())
    }

    fn current(&self) -> FilterSpec {
        self.spec.clone()
    }
}

/// The host side of a fix, faked: plans over the connections it is told the namespace has,
/// "applies" by remembering what it was asked, stamps actions with `now_ns`.
#[derive(Debug, Default)]
pub(crate) struct FakeFixer {
    /// The namespace's established connections, as the plan's listing would find them.
    pub established: Vec<(u64, &'static str)>,
    pub now_ns: u64,
    pub applied: Vec<Plan>,
    pub undone: Vec<u32>,
}

impl FakeFixer {
    fn target(env: &Environment, netns: u32) -> Target {
        Target {
            netns,
            path: "/proc/4242/ns/net".into(),
            reached: format!(
                "container jellyfin (pid 4242){}",
                if netns == env.host_netns { ", the host's own namespace" } else { "" }
            ),
            host: netns == env.host_netns,
            ip_netns: false,
            runtime_sysctl: None,
        }
    }
}

impl FixControl for FakeFixer {
    fn plan(&mut self, env: &Environment, netns: u32, cc: &str) -> Result<Plan, String> {
        let established: Vec<Switched> = self
            .established
            .iter()
            .map(|&(cookie, cc)| Switched {
                cookie,
                old_cc: cc.into(),
                new_cc: cc.into(),
                result: 0,
                sport: 41234,
                dport: 5201,
            })
            .collect();
        let current = env.netns_cc.get(&netns).cloned().unwrap_or_else(|| "cubic".into());
        Ok(Plan::new(Self::target(env, netns), cc, &current, &env.available_cc, true, &established, false, &|_| false))
    }

    fn apply(&mut self, _env: &Environment, plan: &Plan) -> Result<ActionRecord, String> {
        self.applied.push(plan.clone());
        let switched = if plan.live {
            plan.to_switch
                .iter()
                .map(|c| SwitchedFlow { cookie: c.cookie, from: c.cc.clone(), to: plan.cc.clone() })
                .collect()
        } else {
            Vec::new()
        };
        Ok(ActionRecord {
            ts_ns: self.now_ns,
            action: ActionKind::Fix,
            netns: plan.target.netns,
            target: plan.target.reached.clone(),
            cc: plan.cc.clone(),
            default_before: plan.current_default.clone(),
            default_after: plan.cc.clone(),
            switched,
            messages: vec![format!("{} fixed", plan.target.reached)],
            sysctls: Vec::new(),
        })
    }

    fn undo(&mut self, env: &Environment, netns: u32) -> Result<ActionRecord, String> {
        let Some(plan) = self.applied.iter().rev().find(|p| p.target.netns == netns) else {
            return Err(format!("nothing to undo for network namespace {netns}: no state in /run/cctrace"));
        };
        if self.undone.contains(&netns) {
            return Err(format!("nothing to undo for network namespace {netns}: no state in /run/cctrace"));
        }
        self.undone.push(netns);
        Ok(ActionRecord {
            ts_ns: self.now_ns,
            action: ActionKind::Undo,
            netns,
            target: Self::target(env, netns).reached,
            cc: plan.cc.clone(),
            default_before: plan.cc.clone(),
            default_after: plan.current_default.clone(),
            switched: plan
                .to_switch
                .iter()
                .map(|c| SwitchedFlow { cookie: c.cookie, from: plan.cc.clone(), to: c.cc.clone() })
                .collect(),
            messages: Vec::new(),
            sysctls: Vec::new(),
        })
    }
}

/// The CUBIC flow after a fix switched it to BBR at `from_tick`: the path's rate, no new loss
/// response (what the lab measures: 2-3 to 180-190 Mbit/s).
pub(crate) fn switched_to_bbr(tick: u64, from_tick: u64) -> Sample {
    let mut s = cubic_lossy(from_tick);
    let since = tick - from_tick;
    s.ts_ns = ts_ns(tick);
    s.cc = "bbr".into();
    s.bytes_acked += 2_200_000 * since;
    s.bytes_sent = s.bytes_acked + s.bytes_retrans + 20_000 * since;
    s.bytes_retrans += 20_000 * since;
    s.busy_us = tick * 100_000;
    s.srtt_us = 33_000;
    s.snd_cwnd = 560;
    s.snd_ssthresh = INFINITE;
    s.packets_out = 560;
    s.delivery_rate_bps = 176_000_000;
    s.ca_state = CaState::Open;
    s
}

fn base(cookie: u64, tick: u64, local: &str, remote: &str, comm: &str, pid: u32) -> Sample {
    let mut s = sample(cookie, BASE_MS + tick * 100);
    s.netns = HOST_NETNS;
    s.local = local.parse().expect("addr");
    s.remote = remote.parse().expect("addr");
    s.owner = Some(Owner { pid, comm: comm.into() });
    s
}

/// CUBIC on a 30 ms path losing 2 % at random: cwnd saws between 8 and 14 segments (about
/// 4 Mbit/s, near the Mathis bound), a loss episode every 2 s.
fn cubic_lossy(tick: u64) -> Sample {
    let mut s = base(CUBIC, tick, "198.18.0.1:41234", "203.0.113.10:5201", "iperf3", 4242);
    s.cgroup_id = JELLYFIN_CGROUP;
    let phase = tick % 20;
    s.bytes_acked = 50_000 * tick;
    s.bytes_sent = (s.bytes_acked as f64 / 0.98) as u64;
    s.bytes_retrans = s.bytes_sent - s.bytes_acked;
    s.total_retrans = (s.bytes_retrans / 1448) as u32;
    s.retrans_events = (tick / 20) as u32;
    s.busy_us = tick * 100_000;
    s.srtt_us = 31_000 + (tick % 3) as u32 * 300;
    s.rttvar_us = 1_500;
    s.min_rtt_us = 30_000;
    s.snd_cwnd = 8 + (phase / 3) as u32;
    s.snd_ssthresh = if tick < 20 { INFINITE } else { 8 };
    s.packets_out = s.snd_cwnd;
    s.cwnd_limited = true;
    s.delivery_rate_bps = 4_100_000 - (tick % 5) * 20_000;
    s.pacing_rate_bps = 4_900_000;
    s.ca_state = match phase {
        19 => CaState::Disorder,
        0 | 1 if tick > 0 => CaState::Recovery,
        _ => CaState::Open,
    };
    s
}

/// BBR serving video in 2.5 Mbit/s bursts: busy 15 % of the time, application-limited.
fn bbr_app_limited(tick: u64) -> Sample {
    let mut s = base(BBR, tick, "198.18.0.1:443", "198.51.100.23:52814", "nginx", 1830);
    s.cc = "bbr".into();
    s.cgroup_id = NGINX_CGROUP;
    s.bytes_acked = 31_250 * tick;
    s.bytes_sent = s.bytes_acked;
    s.busy_us = tick * 15_000;
    s.app_limited = true;
    s.cwnd_limited = false;
    s.srtt_us = 12_400;
    s.min_rtt_us = 11_800;
    s.snd_cwnd = 40;
    s.snd_ssthresh = INFINITE;
    s.packets_out = 6;
    s.delivery_rate_bps = 2_500_000;
    s.pacing_rate_bps = 15_200_000;
    s
}

/// curl in a container downloading at 50 Mbit/s.
fn receiver(tick: u64) -> Sample {
    let mut s = base(RECEIVER, tick, "10.88.0.5:48820", "192.0.2.80:443", "curl", 9911);
    s.netns = CONTAINER_NETNS;
    s.cgroup_id = PROXY_CGROUP;
    s.bytes_acked = 517 + tick * 40;
    s.bytes_sent = s.bytes_acked;
    s.bytes_received = 625_000 * tick;
    s.srtt_us = 22_000;
    s.min_rtt_us = 21_300;
    s.snd_cwnd = 10;
    s.snd_ssthresh = INFINITE;
    s.cwnd_limited = false;
    s.busy_us = tick * 1_000;
    s
}

/// An 8 Mbit/s upload that ends at 4 s.
fn closing(tick: u64) -> Option<Sample> {
    if tick > 40 {
        return None;
    }
    let mut s = base(CLOSED, tick, "198.18.0.1:39916", "198.18.0.9:8080", "python3", 2200);
    s.cgroup_id = JELLYFIN_CGROUP;
    s.bytes_acked = 100_000 * tick;
    s.bytes_sent = s.bytes_acked;
    s.busy_us = tick * 100_000;
    s.srtt_us = 1_200;
    s.min_rtt_us = 900;
    s.snd_cwnd = 24;
    s.snd_ssthresh = 20;
    if tick == 40 {
        s.reason = SampleReason::Destroy;
        s.old_tcp_state = TcpState::Established;
        s.tcp_state = TcpState::Close;
    }
    Some(s)
}

/// Interactive ssh: about 20 kbit/s.
fn ssh(tick: u64) -> Sample {
    let mut s = base(SSH, tick, "198.18.0.1:51022", "198.18.0.7:22", "ssh", 3100);
    s.cgroup_id = ROOT_CGROUP;
    s.bytes_acked = 250 * tick;
    s.bytes_sent = s.bytes_acked;
    s.bytes_received = 120 * tick;
    s.busy_us = tick * 200;
    s.srtt_us = 400;
    s.min_rtt_us = 310;
    s.app_limited = true;
    s.cwnd_limited = false;
    s
}

/// Every flow's sample at `tick` (0.1 s steps).
pub(crate) fn batch(tick: u64) -> Vec<Sample> {
    let mut b = vec![cubic_lossy(tick), bbr_app_limited(tick), receiver(tick), ssh(tick)];
    b.extend(closing(tick));
    b
}

/// Only the light ssh flow: for the "no heavy flows" state.
pub(crate) fn light_batch(tick: u64) -> Vec<Sample> {
    vec![ssh(tick)]
}

/// An undo cctrace did to namespace 4026532001 (bbr back to cubic), as a recording or the fix
/// journal says.
pub(crate) fn undo_action() -> ActionRecord {
    ActionRecord {
        ts_ns: 5,
        action: ActionKind::Undo,
        netns: 4026532001,
        target: "ip netns cct-1".into(),
        cc: "bbr".into(),
        default_before: "bbr".into(),
        default_after: "cubic".into(),
        switched: Vec::new(),
        sysctls: Vec::new(),
        messages: Vec::new(),
    }
}
