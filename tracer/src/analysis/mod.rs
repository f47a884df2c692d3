//! The pure core: decoded samples ([`sample`]), the flow table ([`flow_table`]), the diagnosis
//! ([`diagnosis`]) and the fix's plan and wording ([`fix_plan`]), and [`Analysis`], which drives the flow
//! table and the diagnoser together for every front end (JSON, TUI, replay).
//!
//! Nothing under this module touches aya, tokio, a terminal or the host: time comes in as
//! arguments, host facts as [`Environment`], so all of it runs on recordings and test feeds,
//! without root, and nothing here imports a layer above it; its modules import each other
//! without a cycle. (`tracer/tests/purity.rs` checks both.)
//!
//! At the bottom, importing only each other: [`environment`] (host facts handed in, the
//! tunnels' among them: [`tunnel::facts`]), [`units`] (how a rate, a share, a size is written),
//! [`sample`], [`route`], [`loss_signals`] and [`receive`] (decoded samples), [`container`] (a cgroup path's
//! runtime and id), [`time`] (monotonic to wall clock), [`state_dir`] (where state outlives a
//! process). On them: [`flow_table`], [`deep_decisions`] (deep mode's decision records), [`fix_plan`]
//! (the fix's commands, `cctrace fix`'s plan and state), [`udp`] (heavy UDP flows), [`tunnel`]
//! (the tunnel a flow crosses the path in), [`diagnosis`] (why each flow is as fast as it is),
//! [`compare`] (before/after a fix), [`filter`] (resolving `--cgroup`/`--container`/`--netns`)
//! and [`schema`] (the JSON records).

pub mod compare;
pub mod container;
pub mod deep_decisions;
pub mod diagnosis;
pub mod environment;
pub mod filter;
pub mod fix_plan;
pub mod flow_table;
pub mod loss_signals;
pub mod receive;
pub mod route;
pub mod sample;
pub mod schema;
pub mod state_dir;
pub mod time;
pub mod tunnel;
pub mod udp;
pub mod units;

use std::collections::HashMap;

use crate::analysis::deep_decisions::{Decision, DecisionLog};
use crate::analysis::diagnosis::{Diagnoser, DiagnosisConfig, Verdict};
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::{Flow, FlowTable, Ingested, TableConfig};
use crate::analysis::sample::Sample;
use crate::analysis::tunnel::{RouteQuery, Tunnel, TunnelRoute};
use crate::analysis::udp::{RelayedBy, SocketReadings, UdpFlow, UdpTable, UdpVerdict};

/// Follows flows into the tunnels of other namespaces (a side effect injected by the caller):
/// the routes found for the queries, with the host facts just read.
pub type RouteReader = fn(&Environment, &[RouteQuery]) -> Vec<TunnelRoute>;

const EVALUATE_EVERY_NS: u64 = 1_000_000_000;
/// Namespaces and processes come and go: host facts are re-read this often when a reader is set.
const ENV_REFRESH_NS: u64 = 5_000_000_000;

pub struct Analysis {
    pub table: FlowTable,
    /// Deep mode's decision events, per flow.
    pub decisions: DecisionLog,
    pub diagnoser: Diagnoser,
    pub env: Environment,
    last_evaluation_ns: u64,
    /// Re-reads host facts (a side effect injected by the caller; tests leave it out).
    env_refresh: Option<fn() -> Environment>,
    env_read_ns: u64,
    /// Bumped whenever `env` changes through [`Analysis::set_env`] or a refresh.
    env_generation: u64,
    /// The time the last [`Analysis::tick`] was given.
    last_tick_ns: u64,
    /// Heavy UDP flows, their verdicts, and the TCP flows they relay.
    pub udp: UdpTable,
    udp_verdicts: HashMap<u64, UdpVerdict>,
    relays: HashMap<u64, RelayedBy>,
    /// The tunnel of each flow that crosses the path in one, and who follows flows into them.
    tunnels: HashMap<u64, Tunnel>,
    route_reader: Option<RouteReader>,
}

/// A UDP flow must move this much either way over the last readings to count as a relay's.
const RELAY_MIN_BPS: f64 = 1_000_000.0;

impl Analysis {
    pub fn new(mut table: TableConfig, diagnosis: DiagnosisConfig, env: Environment) -> Self {
        // One rule for "queueing" in the flow table's records and in the diagnosis.
        table.queue_ratio = diagnosis.queue_ratio;
        table.queue_slack_us = diagnosis.queue_slack_us;
        Self {
            table: FlowTable::new(table),
            decisions: DecisionLog::default(),
            diagnoser: Diagnoser::new(diagnosis),
            env,
            last_evaluation_ns: 0,
            env_refresh: None,
            env_read_ns: 0,
            env_generation: 0,
            last_tick_ns: 0,
            udp: UdpTable::default(),
            udp_verdicts: HashMap::new(),
            relays: HashMap::new(),
            tunnels: HashMap::new(),
            route_reader: None,
        }
    }

    /// Re-read host facts with `refresh` every few seconds of `tick` time.
    pub fn with_env_refresh(mut self, refresh: Option<fn() -> Environment>) -> Self {
        self.env_refresh = refresh;
        self
    }

    /// Follow flows into the tunnels of other namespaces with `reader` whenever the host facts
    /// are read again.
    pub fn with_route_reader(mut self, reader: Option<RouteReader>) -> Self {
        self.route_reader = reader;
        self
    }

    /// Start over with no flows and no verdicts, keeping the thresholds and the host facts (a
    /// replay seeking backwards reads the recording again from its start).
    pub fn restart(&mut self) {
        self.table = self.table.emptied();
        self.decisions = DecisionLog::default();
        self.diagnoser.forget();
        self.udp = UdpTable::default();
        self.udp_verdicts.clear();
        self.relays.clear();
        self.tunnels.clear();
        self.last_evaluation_ns = 0;
        self.last_tick_ns = 0;
        self.env_read_ns = 0;
    }

    pub fn set_env(&mut self, env: Environment) {
        self.env = env;
        self.env_generation += 1;
    }

    /// Changes whenever the host facts change: a recorder writes them again then.
    pub fn env_generation(&self) -> u64 {
        self.env_generation
    }

    /// When the flows were last re-judged (0 before the first evaluation).
    pub fn last_evaluation_ns(&self) -> u64 {
        self.last_evaluation_ns
    }

    /// The time the last [`Analysis::tick`] was given (0 before the first).
    pub fn last_tick_ns(&self) -> u64 {
        self.last_tick_ns
    }

    pub fn ingest(&mut self, sample: &Sample) -> Ingested {
        self.table.ingest(sample)
    }

    /// A decision event of deep mode: kept with its flow, for the timeline and the diagnosis.
    pub fn ingest_decision(&mut self, decision: &Decision) {
        self.decisions.push(decision);
    }

    /// Readings of heavy UDP sockets.
    pub fn ingest_sockets(&mut self, readings: &SocketReadings) {
        for s in &readings.udp {
            self.udp.ingest(s);
        }
    }

    /// The verdict on a heavy UDP flow (from the last evaluation).
    pub fn udp_verdict(&self, flow: &UdpFlow) -> Option<&UdpVerdict> {
        self.udp_verdicts.get(&flow.cookie())
    }

    /// The relay a TCP flow's local hop leads to, if any.
    pub fn relayed_by(&self, cookie: u64) -> Option<&RelayedBy> {
        self.relays.get(&cookie)
    }

    /// Every relayed TCP flow (by cookie) with its relay.
    pub fn relays(&self) -> impl Iterator<Item = (&u64, &RelayedBy)> {
        self.relays.iter()
    }

    /// Age out old flows, refresh host facts when due and re-judge every flow, at most once per
    /// second of `now_ns` (monotonic, the samples' clock). Returns whether an evaluation ran.
    pub fn tick(&mut self, now_ns: u64) -> bool {
        self.last_tick_ns = now_ns;
        if self.last_evaluation_ns != 0 && now_ns.saturating_sub(self.last_evaluation_ns) < EVALUATE_EVERY_NS {
            return false;
        }
        self.last_evaluation_ns = now_ns;
        if let Some(refresh) = self.env_refresh {
            // The caller read the environment it passed in: the first tick only starts the clock.
            if self.env_read_ns == 0 {
                self.env_read_ns = now_ns;
            } else if now_ns.saturating_sub(self.env_read_ns) >= ENV_REFRESH_NS {
                let mut env = refresh();
                if let Some(read) = self.route_reader {
                    let queries = tunnel::route_queries(&self.table, &env.tunnels, &self.env.tunnels.routes);
                    env.tunnels.routes = if queries.is_empty() { Vec::new() } else { read(&env, &queries) };
                }
                if env != self.env {
                    self.env = env;
                    self.env_generation += 1;
                }
                self.env_read_ns = now_ns;
            }
        }
        self.table.expire(now_ns);
        // The work from here on follows what changed (flows born, removed, still open), not
        // how many flows the table keeps: under churn it keeps tens of thousands closed ones.
        let changes = self.table.take_changes();
        self.diagnoser.evaluate_changes(&self.table, &changes, &self.env, now_ns);
        self.diagnoser.cite_decisions(&self.table, &self.decisions);
        self.udp.expire(now_ns);
        // A hop found relayed stays so while it lives: the relay pausing does not make the
        // flow's own verdict the whole story.
        let found = udp::find_relays(&self.table, &self.udp, RELAY_MIN_BPS);
        for cookie in &changes.removed {
            self.relays.remove(cookie);
        }
        self.relays.extend(found);
        self.diagnoser.note_relays(&self.relays);
        let mut found = tunnel::find_tunnels(&self.table, &self.env, &self.udp);
        // A closed flow keeps the tunnel it had, as it keeps its verdict.
        for (cookie, t) in &self.tunnels {
            if self.table.get(*cookie).is_some_and(Flow::is_closed) {
                found.entry(*cookie).or_insert_with(|| t.clone());
            }
        }
        let before = std::mem::replace(&mut self.tunnels, found);
        self.diagnoser.note_tunnels(&self.tunnels, &before);
        self.judge_udp();
        true
    }

    /// Every heavy UDP flow's verdict: a tunnel process's flow carrying some of the TCP flows
    /// gets the tunnel's (they decide its rate), any other its owner's.
    fn judge_udp(&mut self) {
        let mut verdicts: HashMap<u64, UdpVerdict> =
            self.udp.flows().into_iter().map(|f| (f.cookie(), udp::judge(f, &self.env))).collect();
        let diagnoser = &self.diagnoser;
        verdicts.extend(tunnel::tunnel_verdicts(&self.table, &self.tunnels, &self.udp, |c| diagnoser.verdict(c)));
        self.udp_verdicts = verdicts;
    }

    pub fn verdict(&self, flow: &Flow) -> Option<&Verdict> {
        self.diagnoser.verdict(flow.cookie())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn later_env() -> Environment {
        Environment { host_netns: 42, ..Environment::default() }
    }

    #[test]
    fn host_facts_are_re_read_every_few_seconds_of_tick_time() {
        let mut a = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default())
            .with_env_refresh(Some(later_env));
        assert!(a.tick(1_000_000_000));
        assert!(!a.tick(1_500_000_000), "at most one evaluation per second");
        assert!(a.tick(5_000_000_000));
        assert_eq!(a.env.host_netns, 0, "not yet five seconds since the first tick");
        assert!(a.tick(6_000_000_000));
        assert_eq!(a.env.host_netns, 42);
    }

    #[test]
    fn a_flow_that_leaves_the_table_takes_its_verdict_along_and_the_others_keep_theirs() {
        use crate::analysis::flow_table::tests::sample;
        use crate::analysis::sample::SampleReason;
        let table = TableConfig { closed_linger_ns: 2_000_000_000, max_flows: 3, ..TableConfig::default() };
        let mut a = Analysis::new(table, DiagnosisConfig::default(), Environment::default());
        let judged = |a: &Analysis| {
            let mut c: Vec<u64> = a.table.flows().filter_map(|f| a.verdict(f).map(|_| f.cookie())).collect();
            c.sort_unstable();
            c
        };
        for second in 1..=4u64 {
            for cookie in 1..=3 {
                a.ingest(&sample(cookie, second * 1000));
            }
            a.tick(second * 1_000_000_000);
        }
        assert_eq!(judged(&a), vec![1, 2, 3]);
        let generation = a.diagnoser.generation();
        // Flow 1 closes and lingers, then expires; flow 5 pushes out flow 2 (the least recent).
        let mut close = sample(1, 4_500);
        close.reason = SampleReason::Destroy;
        a.ingest(&close);
        a.ingest(&sample(3, 4_600));
        a.tick(5_000_000_000);
        assert!(a.diagnoser.generation() > generation, "an evaluation may change verdicts");
        assert_eq!(judged(&a), vec![1, 2, 3], "closed, still listed");
        a.tick(7_000_000_000);
        assert!(a.table.get(1).is_none(), "expired");
        a.ingest(&sample(4, 7_200));
        a.ingest(&sample(5, 7_300));
        assert!(a.table.get(2).is_none(), "evicted");
        a.tick(8_000_000_000);
        assert!(a.diagnoser.verdict(1).is_none() && a.diagnoser.verdict(2).is_none(), "their verdicts went too");
        assert_eq!(judged(&a), vec![3, 4, 5]);
        // With none leaving, every flow keeps its verdict from one evaluation to the next.
        for cookie in 3..=5 {
            a.ingest(&sample(cookie, 8_500));
        }
        a.tick(9_000_000_000);
        assert_eq!(judged(&a), vec![3, 4, 5]);
    }
}
