//! The copy of the flow the detail view shows: the flow, its verdict, where it lives and deep
//! mode's decisions, taken each frame and held while paused.

use crate::analysis::container::CgroupInfo;
use crate::analysis::diagnosis::Verdict;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::Flow;
use crate::analysis::route::Route;
use crate::analysis::tunnel::Tunnel;

/// What the detail view shows of where its flow lives: copied with the flow.
#[derive(Clone, Debug, Default)]
pub(crate) struct Whereabouts {
    pub cgroup: Option<CgroupInfo>,
    /// The flow's namespace's default congestion control, as that namespace sees it.
    pub netns_cc: Option<String>,
    pub host_netns: bool,
    pub available_cc: Vec<String>,
    pub allowed_cc: Vec<String>,
    /// The device its packets leave by and the path MTU, once known, and that device's root
    /// qdisc (`fq`, `fq_codel`, `noqueue`, ...).
    pub route: Option<Route>,
    /// The tunnel it crosses the path in, as its verdict names it.
    pub tunnel: Option<Tunnel>,
    pub qdisc: Option<String>,
    /// The namespace's `tcp_wmem` and `tcp_rmem` maxima: how far autotuning may grow buffers.
    pub wmem_max: Option<u32>,
    pub rmem_max: Option<u32>,
}

impl Whereabouts {
    pub(crate) fn of(flow: &Flow, env: &Environment, verdict: Option<&Verdict>) -> Self {
        let s = &flow.latest;
        Self {
            cgroup: env.cgroups.get(&s.cgroup_id).cloned(),
            netns_cc: env.netns_cc.get(&s.netns).cloned(),
            host_netns: env.host_netns != 0 && env.host_netns == s.netns,
            available_cc: env.available_cc.clone(),
            allowed_cc: env.allowed_cc.clone(),
            route: s.route,
            tunnel: verdict.and_then(|v| v.tunnel.clone()),
            qdisc: s.route.and_then(|r| env.qdisc(s.netns, r.ifindex)).map(String::from),
            wmem_max: env.netns_wmem.get(&s.netns).map(|l| l.max),
            rmem_max: env.netns_rmem.get(&s.netns).map(|l| l.max),
        }
    }
}

/// The flow the detail view shows and its verdict: copied on every frame, held while paused.
#[derive(Debug)]
pub(crate) struct DetailFlow {
    pub flow: Flow,
    pub verdict: Option<Verdict>,
    pub whereabouts: Whereabouts,
    /// Deep mode's decision timeline (newest [`DETAIL_DECISIONS`]): seconds since the flow was
    /// first seen, and the decision in words.
    pub decisions: Vec<(f64, String)>,
}

/// Decisions the detail view lists, at most.
pub(crate) const DETAIL_DECISIONS: usize = 200;
