//! Why is each flow as fast as it is? A `limited_by` verdict per flow from what the kernel
//! reports, and a flag on heavy bulk flows held back by loss-based congestion control on a path
//! whose losses are not congestive, with the evidence in numbers and the fix.
//!
//! Pure code: it sees flows through [`FlowTable`] and the host through [`Environment`], so it
//! judges live data, recordings and test feeds alike. Verdicts are computed over a sliding
//! window of snapshots and change only after they persist (hysteresis), so they do not flap.
//!
//! Each file answers one question, and the [`Diagnoser`] here only keeps each flow's memory and
//! asks them in turn:
//! - `window`: what the flow's counters did over the last evaluations;
//! - `losses`: its loss episodes and the queue at each (new loss kinds go here);
//! - `policer`: whether those losses show a token-bucket policer, and its rate;
//! - `limits`: what limits it ([`LimitedBy`]), the path included;
//! - `response`: what its congestion control's loss response allows (Mathis, CUBIC);
//! - `heavy`: whether it is heavy; `flag`: whether it is flagged, and why (not);
//! - `hysteresis`: when a verdict may change; `evidence`: the numbers it rests on;
//! - `deep`: what a deep-traced algorithm decided; `words`: the verdict's text;
//! - `reordering`: whether the flow's retransmissions were mostly spurious (a note, no flag);
//! - `buffers`: what the send and receive buffers allow, what BBR would meet next, and the
//!   maxima the fix sets;
//! - `remote/`: for a flow this host receives, the receiving end's verdict on its sender (one
//!   question per file there too);
//! - `config`: the thresholds; `verdict`: the types the front ends see.
//!
//! A new kind of loss (a policer, reordering, spurious retransmissions) is counted in `losses`
//! (a field of its `LossView`), read in `limits` (does it mean the path is full?) and `flag`
//! (does it hold the flow back, or excuse it?), carried in `verdict::Evidence` by `evidence`,
//! and worded in `words` and `flag::decided_by`.

mod buffers;
mod config;
mod deep;
mod evidence;
mod flag;
mod heavy;
mod homes;
mod hysteresis;
mod limits;
mod losses;
mod open_flows;
mod peers;
mod policer;
mod remote;
mod reordering;
mod response;
#[cfg(test)]
mod test_feed;
mod verdict;
mod window;
mod words;

use compact_str::CompactString;
use std::collections::{HashMap, HashSet, VecDeque};

use crate::analysis::deep_decisions::{algorithm_of, DecisionLog};
pub use crate::analysis::diagnosis::buffers::{buffer_rate, buffer_size_for, sizing_words, Side};
pub use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::deep::deep_evidence;
use crate::analysis::diagnosis::evidence::evidence_of;
use crate::analysis::diagnosis::flag::{flag_condition, GETS_POLICED_RATE, TOO_FEW_LOSSES};
use crate::analysis::diagnosis::hysteresis::Hysteresis;
use crate::analysis::diagnosis::limits::classify;
pub use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::losses::loss_view;
use crate::analysis::diagnosis::policer::{carried, Policing};
use crate::analysis::diagnosis::remote::RemoteMemory;
pub use crate::analysis::diagnosis::response::{cubic_bps, is_loss_based, mathis_bps, ResponseModel, LOSS_BASED};
pub use crate::analysis::diagnosis::verdict::{
    BufferEvidence, Change, DeepEvidence, Evidence, LossNote, PolicerEvidence, PolicerSign, ReceiverEvidence, SetBy,
    Verdict,
};
pub use crate::analysis::diagnosis::verdict::{CutEvidence, RemoteSenderEvidence};
use crate::analysis::diagnosis::window::{window_of, Snapshot};
use crate::analysis::environment::{Environment, FactsChanged};
use crate::analysis::fix_plan::commands::{fix_commands, FixNeeds};
use crate::analysis::flow_table::{Flow, FlowTable, TableChanges};
use crate::analysis::tunnel::place::Tunnel;
use crate::analysis::udp::RelayedBy;

/// Per-flow memory of the diagnoser: snapshots, the verdict shown and its hysteresis.
#[derive(Debug, Default)]
struct FlowMemory {
    snapshots: VecDeque<Snapshot>,
    shown: Option<Verdict>,
    hysteresis: Hysteresis,
    /// The policer the flow's losses last showed (its first sign may leave the episode memory).
    policing: Option<Policing>,
    /// When the flag's condition last held (ns): a flagged flow's verdict stands through a
    /// pause only while this is within the loss horizon.
    last_met_ns: u64,
    /// A flagged flow's latest verdict from a busy window: what a pause shows.
    busy: Option<Box<Verdict>>,
    /// When the current pause of a flagged flow began (ns).
    paused_at_ns: Option<u64>,
    /// The latest change of the class or the flag shown.
    change: Option<Change>,
    /// Set while the flow is at rest: judging it again would change nothing.
    settled: Option<Settled>,
    /// For a flow that receives: the receiving end's own verdict memory (see `remote`).
    remote: Option<Box<RemoteMemory>>,
    /// The congestion control the window was gathered under, and when it was first seen (ns).
    cc: CompactString,
    cc_since_ns: u64,
}

impl FlowMemory {
    /// After a switch of the flow's congestion control (a live fix): everything gathered under
    /// the old one is forgotten, so no verdict of CUBIC's losses is shown for BBR, and the
    /// change says so. The shown verdict stays until the new window can be judged.
    fn switched_cc(&mut self, flow: &Flow, now_ns: u64) {
        let from = std::mem::replace(&mut self.cc, flow.latest.cc.clone());
        self.cc_since_ns = now_ns;
        self.snapshots.clear();
        self.hysteresis = Hysteresis::default();
        self.policing = None;
        self.busy = None;
        self.paused_at_ns = None;
        self.last_met_ns = 0;
        let shown = self.shown.as_ref().filter(|v| v.limited_by != LimitedBy::Unknown);
        self.change = shown.map(|v| Change {
            at_s: flow.age_secs(),
            from: v.limited_by,
            was_flagged: v.flagged,
            why: String::new(),
            cc_from: Some(from.to_string()),
        });
    }
}

/// A flow at rest: nothing arrived since it was judged, every snapshot in its window holds the
/// same counters (or it is too young for them to count), no loss episode is within the loss horizon, its verdict came out the same
/// twice in a row and its hysteresis can no longer move. Judging it again would push another
/// snapshot of the same counters and give the same verdict, so it is not judged (an idle
/// connection costs nothing a second) until a sample arrives or the host facts change; then
/// [`catch_up`] gives its memory what the skipped evaluations would have, and it is judged as
/// if it never rested. (One thing is not replayed: the window's length in the verdict's words
/// stays the one it rested with, where re-judging would follow the evaluations' jitter.)
#[derive(Clone, Copy, Debug)]
struct Settled {
    /// The flow's sample count and last sample time when it settled: a new sample wakes it.
    samples: u64,
    last_seen_ns: u64,
    /// The host facts when it settled.
    env_epoch: u64,
    /// Its namespace's or cgroup's facts changed since.
    woken: bool,
}

impl Settled {
    fn still(&self, flow: &Flow, env_epoch: u64) -> bool {
        self.samples == flow.counts.samples
            && self.last_seen_ns == flow.last_seen_ns
            && self.env_epoch == env_epoch
            && !self.woken
    }
}

#[derive(Debug, Default)]
pub struct Diagnoser {
    cfg: DiagnosisConfig,
    /// Boxed, as the flow table's flows are: the map's doubling moves 16 bytes a flow.
    flows: HashMap<u64, Box<FlowMemory>>,
    /// Bumped by every call that may change a verdict: see [`Diagnoser::generation`].
    generation: u64,
    /// The table's departures when its flows were last judged: while they stay the same, no
    /// flow's memory is to be dropped.
    departed: Option<u64>,
    /// The times of the last few evaluations (a rested flow's catch-up needs them).
    evaluation_times: VecDeque<u64>,
    /// The host facts of the last evaluation, and a count of their changes.
    env_seen: Option<Environment>,
    env_epoch: u64,
    /// Open flows not at rest: with the flows that got samples, all that
    /// [`Diagnoser::evaluate_changes`] judges.
    restless: HashSet<u64>,
    /// Every open flow is to be judged at the next evaluation (at the start, after
    /// [`Diagnoser::forget`], when the host facts changed).
    judge_all: bool,
    /// A buffer for the restless flows' cookies during an evaluation.
    to_judge: Vec<u64>,
    /// Open flows by address, to find the receiving end of a flow held by its peer's window on
    /// this host.
    peers: peers::PeerIndex,
    /// Each open flow's namespace and cgroup, to wake those whose facts changed.
    homes: homes::Homes,
    /// Judge every flow every time (tests compare the two ways).
    #[cfg(test)]
    never_settle: bool,
}

impl Diagnoser {
    pub fn new(cfg: DiagnosisConfig) -> Self {
        Self { cfg, judge_all: true, ..Self::default() }
    }

    /// Count an evaluation at `now_ns` with `env`: a change of a host-wide fact wakes every
    /// flow; one of some namespaces' or cgroups' facts, the open flows there.
    fn begin_evaluation(&mut self, table: &FlowTable, env: &Environment, now_ns: u64) {
        self.evaluation_times.push_back(now_ns);
        while self.evaluation_times.len() > self.cfg.window + 2 {
            self.evaluation_times.pop_front();
        }
        let changed = match &self.env_seen {
            None => Some(FactsChanged::Everywhere),
            Some(seen) => FactsChanged::between(seen, env),
        };
        let Some(changed) = changed else { return };
        self.env_seen = Some(env.clone());
        match changed {
            FactsChanged::Everywhere => {
                self.env_epoch += 1;
                self.judge_all = true;
            }
            FactsChanged::In { netns, cgroups } => {
                for cookie in self.homes.living_in(table, &netns, &cgroups) {
                    if let Some(settled) = self.flows.get_mut(&cookie).and_then(|m| m.settled.as_mut()) {
                        settled.woken = true;
                    }
                    self.restless.insert(cookie);
                }
            }
        }
    }

    /// Changes whenever a verdict may have changed (an evaluation that judged a flow or lost
    /// one, a citation, a relay noted, everything forgotten): a front end that copies verdicts
    /// need not look them up again, nor draw again, on a frame where it did not.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Forget every flow's verdict and memory, keeping the thresholds.
    pub fn forget(&mut self) {
        self.generation += 1;
        self.flows.clear();
        self.departed = None;
        self.restless.clear();
        self.peers.forget();
        self.homes.forget();
        self.judge_all = true;
    }

    /// Take a snapshot of every flow not at rest and re-judge it. Call at a steady rate (e.g. once a second);
    /// `now_ns` is the samples' clock (monotonic), so a flow without new samples is seen idle.
    pub fn evaluate(&mut self, table: &FlowTable, env: &Environment, now_ns: u64) {
        self.generation += 1;
        // Without the changes, the indexes of peers and homes cannot be kept up to date.
        self.peers.forget();
        self.homes.forget();
        self.begin_evaluation(table, env, now_ns);
        // A look-up per flow (a cache miss each) only when some flow left the table.
        if self.departed != Some(table.departed()) {
            self.flows.retain(|cookie, _| table.get(*cookie).is_some());
            self.departed = Some(table.departed());
        }
        for flow in table.flows() {
            self.judge_flow(table, flow, env, now_ns);
        }
        self.restless.retain(|cookie| table.get(*cookie).is_some());
        self.judge_all = false;
    }

    /// The same as [`Diagnoser::evaluate`], with `changes` the table's changes since the last
    /// evaluation, at a cost per flow that is new, got samples or is not at rest, rather than
    /// per flow kept: a closed flow's verdict never changes once given, so of the closed flows
    /// only those born since the last evaluation (which have none yet) are judged; a flow at
    /// rest is judged again only when a sample arrives (or the host facts change); and the
    /// memories of removed flows go.
    pub fn evaluate_changes(&mut self, table: &FlowTable, changes: &TableChanges, env: &Environment, now_ns: u64) {
        self.homes.follow(table, changes);
        self.begin_evaluation(table, env, now_ns);
        let judges_any = self.judge_all
            || !self.restless.is_empty()
            || !changes.born.is_empty()
            || !changes.updated.is_empty()
            || !changes.removed.is_empty();
        if judges_any {
            self.generation += 1;
        }
        for cookie in &changes.removed {
            self.flows.remove(cookie);
            self.restless.remove(cookie);
        }
        self.peers.follow(table, changes);
        let born = changes.born.iter().filter_map(|c| table.get(*c));
        if std::mem::take(&mut self.judge_all) {
            for flow in table.open_flows().chain(born.filter(|f| f.is_closed())) {
                self.judge_flow(table, flow, env, now_ns);
            }
            return;
        }
        // Each flow once: a busy flow is restless and updated both, and a born one neither.
        let mut to_judge = std::mem::take(&mut self.to_judge);
        to_judge.extend(self.restless.iter().copied());
        to_judge.extend(changes.updated.iter().copied().filter(|c| !self.restless.contains(c)));
        to_judge.extend(born.map(Flow::cookie));
        for flow in to_judge.drain(..).filter_map(|c| table.get(c)) {
            self.judge_flow(table, flow, env, now_ns);
        }
        self.to_judge = to_judge;
    }

    /// Judge `flow`, and keep it among the restless flows unless it is at rest or closed.
    fn judge_flow(&mut self, table: &FlowTable, flow: &Flow, env: &Environment, now_ns: u64) {
        if self.judge_one(table, flow, env, now_ns) || flow.is_closed() {
            self.restless.remove(&flow.cookie());
        } else {
            self.restless.insert(flow.cookie());
        }
    }

    /// Judge `flow` unless it is at rest; whether it is at rest.
    fn judge_one(&mut self, table: &FlowTable, flow: &Flow, env: &Environment, now_ns: u64) -> bool {
        #[cfg(test)]
        let may_rest = !self.never_settle;
        #[cfg(not(test))]
        let may_rest = true;
        let mem = self.flows.entry(flow.cookie()).or_default();
        if flow.is_closed() && mem.shown.is_some() {
            // Keep the last verdict of a closed flow as it was.
            return false;
        }
        if let Some(settled) = mem.settled.take() {
            if settled.still(flow, self.env_epoch) {
                mem.settled = Some(settled);
                return true;
            }
            catch_up(mem, &self.evaluation_times, now_ns, self.cfg.window);
        }
        if mem.cc != flow.latest.cc {
            // Deep mode's twin (`cct_cubic`) runs its original's code: no switch of algorithm.
            if mem.cc.is_empty() || algorithm_of(&mem.cc) == algorithm_of(&flow.latest.cc) {
                mem.cc = flow.latest.cc.clone();
            } else {
                mem.switched_cc(flow, now_ns);
            }
        }
        let mut snap = Snapshot::of(flow);
        snap.ts_ns = snap.ts_ns.max(now_ns);
        if mem.snapshots.back().is_some_and(|s| s.ts_ns >= snap.ts_ns) {
            return mem.settled.is_some();
        }
        if mem.snapshots.len() < self.cfg.window + 1 && mem.snapshots.len() == mem.snapshots.capacity() {
            // Grown one snapshot at a time up to the window (a few times in a flow's life):
            // most flows are judged once or twice (connections listed at start-up, short ones
            // under churn), and room for four of 120 bytes was most of what they kept here.
            mem.snapshots.reserve_exact(1);
        }
        mem.snapshots.push_back(snap);
        while mem.snapshots.len() > self.cfg.window + 1 {
            mem.snapshots.pop_front();
        }
        // A flow that may be at rest keeps its last verdict and hysteresis to compare with.
        let at_rest = may_rest && may_settle(&self.cfg, flow, mem, now_ns);
        let before = at_rest.then(|| (mem.shown.clone(), mem.hysteresis.clone(), mem.policing));
        let peers = &mut self.peers;
        let mut peer_of = |f: &Flow| peers.peer(table, f);
        let verdict = judge(flow, mem, &self.cfg, env, now_ns, &mut peer_of);
        if let Some((shown, hysteresis, policing)) = before {
            if shown.as_ref() == Some(&verdict)
                && policing == mem.policing
                && mem.hysteresis.at_rest(&hysteresis, &self.cfg)
            {
                mem.settled = Some(Settled {
                    samples: flow.counts.samples,
                    last_seen_ns: flow.last_seen_ns,
                    env_epoch: self.env_epoch,
                    woken: false,
                });
            }
        }
        mem.shown = Some(verdict);
        if flow.is_closed() {
            // Never judged again: only the verdict stays (a short connection's snapshot
            // memory was most of what the diagnosis kept per flow).
            mem.snapshots = VecDeque::new();
        }
        mem.settled.is_some()
    }

    /// Cite what deep-traced flows' algorithms decided in their verdicts' evidence (and, for a
    /// flagged flow, in its text): the loss responses the flag is about, from the algorithm.
    pub fn cite_decisions(&mut self, table: &FlowTable, decisions: &DecisionLog) {
        if decisions.cookies().next().is_none() {
            return;
        }
        self.generation += 1;
        // Deep-traced flows are few; the flows judged may be tens of thousands.
        for cookie in decisions.cookies() {
            let Some(verdict) = self.flows.get_mut(&cookie).and_then(|m| m.shown.as_mut()) else { continue };
            let Some(flow) = table.get(cookie) else { continue };
            let Some(evidence) = verdict.evidence.as_mut() else { continue };
            // A closed flow's verdict is kept as it was, citation included.
            if evidence.deep.is_some() {
                continue;
            }
            let Some(deep) = deep_evidence(cookie, flow.first_seen_ns, decisions) else { continue };
            if verdict.flagged && deep.loss_responses > 0 {
                words::cite_deep(&mut verdict.text, &deep);
            }
            evidence.deep = Some(deep);
        }
    }

    pub fn config(&self) -> &DiagnosisConfig {
        &self.cfg
    }

    pub fn verdict(&self, cookie: u64) -> Option<&Verdict> {
        self.flows.get(&cookie).and_then(|m| m.shown.as_ref())
    }

    /// Mark the verdicts of relayed flows: the note goes first, so such a flow never reads as
    /// simply healthy, application- or rwnd-limited.
    pub fn note_relays(&mut self, relays: &HashMap<u64, RelayedBy>) {
        // No relay, nothing to note: every verdict stays as it is.
        if relays.is_empty() {
            return;
        }
        self.generation += 1;
        for (cookie, r) in relays {
            let Some(v) = self.flows.get_mut(cookie).and_then(|m| m.shown.as_mut()) else { continue };
            if v.relayed_by.as_ref() == Some(r) {
                continue;
            }
            let old = v.relayed_by.take();
            words::note_relay(&mut v.text, old.as_ref(), r);
            v.relayed_by = Some(r.clone());
        }
    }

    /// Mark the verdicts of flows that cross the path in a tunnel: its note ends the text (a
    /// flagged flow's says its losses are in the tunnel's underlay and the fix applies to it).
    /// A flow no longer in one loses the note.
    pub fn note_tunnels(&mut self, tunnels: &HashMap<u64, Tunnel>, before: &HashMap<u64, Tunnel>) {
        if tunnels.is_empty() && before.is_empty() {
            return;
        }
        self.generation += 1;
        let gone = before.keys().filter(|c| !tunnels.contains_key(c));
        for cookie in tunnels.keys().chain(gone) {
            let Some(v) = self.flows.get_mut(cookie).and_then(|m| m.shown.as_mut()) else { continue };
            words::note_tunnel(v, tunnels.get(cookie));
        }
    }

    pub fn flagged(&self) -> impl Iterator<Item = u64> + '_ {
        self.flows.iter().filter(|(_, m)| m.hysteresis.flagged()).map(|(c, _)| *c)
    }
}

/// Whether `flow` may be at rest once judged now: open, judged before, nothing new in its
/// window (it holds one set of counters throughout) or too young for its window to count (its
/// age moves only with its samples: a connection listed at start-up and idle since is judged
/// unknown until it sends), and no loss episode left within the loss horizon (the only part of
/// a judgment that follows the clock).
fn may_settle(cfg: &DiagnosisConfig, flow: &Flow, mem: &FlowMemory, now_ns: u64) -> bool {
    let horizon_ns = (cfg.loss_horizon_secs * tracer_common::NS_PER_SEC as f64) as u64;
    let since = now_ns.saturating_sub(horizon_ns);
    let young = flow.age_secs() < cfg.min_observed_secs;
    let still =
        mem.snapshots.len() == cfg.window + 1 && mem.snapshots.iter().all(|s| s.same_counters(&mem.snapshots[0]));
    !flow.is_closed()
        && mem.shown.is_some()
        && (young || still)
        && flow.loss_episodes().next_back().is_none_or(|e| e.ts_ns < since)
}

/// What the evaluations a rested flow skipped would have left in `mem`: a snapshot of the same
/// counters at each of them (the last `window` are all a window can hold). Its hysteresis
/// rested past its thresholds, where more runs of the same condition change nothing.
fn catch_up(mem: &mut FlowMemory, evaluation_times: &VecDeque<u64>, now_ns: u64, window: usize) {
    let Some(last) = mem.snapshots.back().copied() else { return };
    for &ts_ns in evaluation_times.iter().filter(|&&t| t > last.ts_ns && t < now_ns) {
        mem.snapshots.push_back(Snapshot { ts_ns, ..last });
        while mem.snapshots.len() > window + 1 {
            mem.snapshots.pop_front();
        }
    }
}

/// One flow's verdict from its snapshots: its window and loss episodes, its class and flag
/// through the hysteresis, the evidence, the words and the fix. `peer_of` finds the receiving
/// socket of a flow on this host.
fn judge<'t>(
    flow: &Flow,
    mem: &mut FlowMemory,
    cfg: &DiagnosisConfig,
    env: &Environment,
    now_ns: u64,
    peer_of: &mut dyn FnMut(&Flow) -> Option<&'t Flow>,
) -> Verdict {
    let observed = flow.age_secs();
    let Some(w) = window_of(&mem.snapshots) else { return Verdict::unknown(observed) };
    if observed < cfg.min_observed_secs || mem.snapshots.len() < 3 {
        return Verdict::unknown(observed);
    }
    let mut lv = loss_view(flow, cfg, now_ns, mem.cc_since_ns);
    let best_clean_bps = flow.loss.as_ref().map_or(0.0, |l| l.best_clean_bps[0] as f64);
    lv.policing = carried(lv.policing, mem.policing, best_clean_bps, cfg);
    mem.policing = lv.policing;
    let raw = classify(&w, &lv, cfg, &flow.latest.cc);
    let previous = mem.shown.as_ref().map(|v| v.limited_by).filter(|l| *l != LimitedBy::Unknown);
    let was_flagged = mem.hysteresis.flagged();
    let stale = match through_pause(mem, cfg, raw, now_ns) {
        Pause::Holds(v) => return *v,
        Pause::Stale => true,
        Pause::None => false,
    };
    if raw == LimitedBy::Receiving && !was_flagged {
        // The peer's sender sets the pace: judged from this end (its sender's own socket, when
        // on this host, is judged as a sender and keeps that verdict). A flow flagged as a
        // sender that now only receives is paused, as above.
        let sender = peer_of(flow).map(Flow::cookie);
        let remote = mem.remote.get_or_insert_with(Box::default);
        if let Some(v) = remote::judge(flow, remote, cfg, env, w.secs, now_ns, sender) {
            return v;
        }
    }
    mem.paused_at_ns = None;

    let mut evidence_for = |class: LimitedBy| {
        // Only a flow held by its peer's window needs the receiving end.
        let peer = if class == LimitedBy::ReceiveWindow { peer_of(flow) } else { None };
        evidence_of(flow, &w, &lv, cfg, class, env, peer)
    };
    let d = if stale {
        mem.hysteresis.unflag_now(cfg);
        mem.hysteresis.hold_class();
        let ev = evidence_for(raw);
        Decided { limited: raw, flagged: false, ev, condition: Err(PAUSED_PAST_HORIZON), clears_in: None }
    } else if was_flagged {
        decide_flagged(flow, mem, cfg, &w, &lv, previous.unwrap_or(raw), raw, now_ns, &mut evidence_for)
    } else {
        let limited = mem.hysteresis.limited_by(previous, raw, cfg);
        let ev = evidence_for(limited);
        let condition = flag_condition(flow, &w, &lv, &ev, limited, cfg);
        let flagged = if condition == Err(GETS_POLICED_RATE) {
            mem.hysteresis.unflag_now(cfg)
        } else {
            mem.hysteresis.flag(condition.is_ok(), cfg)
        };
        Decided { limited, flagged, ev, condition, clears_in: None }
    };
    if d.condition.is_ok() {
        mem.last_met_ns = now_ns;
    }
    if let Some(from) = previous.filter(|p| *p != d.limited || was_flagged != d.flagged) {
        let why = if was_flagged && !d.flagged { d.condition.err().unwrap_or_default() } else { "" };
        mem.change = Some(Change { at_s: flow.age_secs(), from, was_flagged, why: why.to_string(), cc_from: None });
    }

    // The last verdict's text makes room for this one.
    let mut text = mem.shown.as_mut().map(|v| std::mem::take(&mut v.text)).unwrap_or_default();
    text.clear();
    let Decided { limited, flagged, ev, condition, clears_in } = d;
    match (limited, ev.buffers.as_ref()) {
        (LimitedBy::SendBuffer, Some(b)) => {
            buffers::write_sndbuf(&mut text, flow, &w, b, env);
            reordering::write_note(&mut text, &ev);
        }
        (LimitedBy::ReceiveWindow, Some(b)) => {
            buffers::write_rwnd(&mut text, flow, &w, b, env);
            reordering::write_note(&mut text, &ev);
        }
        _ if flagged => {
            words::write_flagged(&mut text, flow, &ev);
            if let Some(b) = &ev.buffers {
                buffers::write_next_limit(&mut text, b, w.min_rtt_us / 1e6);
            }
        }
        _ => words::write_unflagged(&mut text, flow, &w, &lv, &ev, limited, condition),
    }
    if let (Some(n), Err(why)) = (clears_in, condition) {
        words::write_pending_clear(&mut text, why, n);
    }
    if let Some(c) = &mem.change {
        words::write_change(&mut text, c, flagged);
    }
    let fix = fix_of(flow, env, &ev, limited, flagged);
    let verdict = Verdict {
        limited_by: limited,
        flagged,
        text,
        evidence: Some(Box::new(ev)),
        fix,
        relayed_by: None,
        tunnel: None,
        changed: mem.change.clone(),
    };
    mem.busy = flagged.then(|| Box::new(verdict.clone()));
    verdict
}

/// The class, flag and evidence of one evaluation, and the flag's condition on it.
struct Decided {
    limited: LimitedBy,
    flagged: bool,
    ev: Evidence,
    condition: Result<(), &'static str>,
    /// For a flag held while its condition fails: evaluations like this one until it clears.
    clears_in: Option<u32>,
}

/// A flagged flow judged on what its window shows now (`raw`): its flag holds while the
/// condition does, and for `release` evaluations that do not meet it, with the class it was
/// flagged under (`flagged_as`), its words and its fix; when the flag clears, the class is the
/// window's at once. A policer's rate clears it at once.
#[allow(clippy::too_many_arguments)]
fn decide_flagged(
    flow: &Flow,
    mem: &mut FlowMemory,
    cfg: &DiagnosisConfig,
    w: &window::Window,
    lv: &losses::LossView,
    flagged_as: LimitedBy,
    raw: LimitedBy,
    now_ns: u64,
    evidence_for: &mut dyn FnMut(LimitedBy) -> Evidence,
) -> Decided {
    let ev_raw = evidence_for(raw);
    let condition = flag_condition(flow, w, lv, &ev_raw, raw, cfg);
    if condition.is_ok() {
        let flagged = mem.hysteresis.flag(true, cfg);
        // Another class the flag holds under (a policer's losses showing) still waits its turn.
        let limited = mem.hysteresis.limited_by(Some(flagged_as), raw, cfg);
        let ev = if limited == raw { ev_raw } else { evidence_for(limited) };
        return Decided { limited, flagged, ev, condition, clears_in: None };
    }
    // A flow flagged under one class that another now holds, whose losses are still too few to
    // judge, has shown nothing against a flag yet (CUBIC on a long fat path: held by its send
    // buffer in slow start, then by its first losses, a loss every second or two at 240 ms).
    // The flag and its class stand while that evidence gathers, within the loss horizon.
    let horizon_ns = (cfg.loss_horizon_secs * tracer_common::NS_PER_SEC as f64) as u64;
    if condition == Err(TOO_FEW_LOSSES) && raw != flagged_as && now_ns.saturating_sub(mem.last_met_ns) <= horizon_ns {
        mem.hysteresis.hold_class();
        let ev = evidence_for(flagged_as);
        return Decided { limited: flagged_as, flagged: true, ev, condition, clears_in: None };
    }
    let flagged = if condition == Err(GETS_POLICED_RATE) {
        mem.hysteresis.unflag_now(cfg)
    } else {
        mem.hysteresis.flag(false, cfg)
    };
    mem.hysteresis.hold_class();
    if flagged {
        let ev = evidence_for(flagged_as);
        Decided { limited: flagged_as, flagged, ev, condition, clears_in: Some(mem.hysteresis.clears_in(cfg)) }
    } else {
        Decided { limited: raw, flagged, ev: ev_raw, condition, clears_in: None }
    }
}

/// Why a flag cleared at once: the flow paused past the loss horizon.
const PAUSED_PAST_HORIZON: &str = "it paused until its losses left the loss horizon";

/// What a pause does to a flagged flow's verdict.
enum Pause {
    /// The verdict of its busy seconds stands (boxed: a verdict is large, and this is rare).
    Holds(Box<Verdict>),
    /// It paused past the loss horizon: the flag clears.
    Stale,
    /// Not a flagged flow's pause.
    None,
}

/// A flagged flow whose window shows a pause (`raw`: its receiver held it, or it moved nothing)
/// while the flag's evidence is within the loss horizon: the verdict of its busy seconds, with
/// how long the pause has lasted. Its hysteresis does not move.
fn through_pause(mem: &mut FlowMemory, cfg: &DiagnosisConfig, raw: LimitedBy, now_ns: u64) -> Pause {
    let horizon_ns = (cfg.loss_horizon_secs * tracer_common::NS_PER_SEC as f64) as u64;
    if !mem.hysteresis.flagged() || !raw.pauses() {
        return Pause::None;
    }
    let Some(busy) = mem.busy.as_ref().filter(|_| now_ns.saturating_sub(mem.last_met_ns) <= horizon_ns) else {
        return Pause::Stale;
    };
    let mut v = (**busy).clone();
    let since = *mem.paused_at_ns.get_or_insert(now_ns);
    words::write_pause(&mut v.text, raw, now_ns.saturating_sub(since) as f64 / tracer_common::NS_PER_SEC as f64);
    Pause::Holds(Box::new(v))
}

/// The fix's commands: switching a flagged loss-based flow's namespace to BBR, and raising the
/// buffer maxima the evidence found short (this namespace's `tcp_wmem`, a receiving
/// namespace's `tcp_rmem`), together.
fn fix_of(flow: &Flow, env: &Environment, ev: &Evidence, limited: LimitedBy, flagged: bool) -> Vec<String> {
    let b = ev.buffers.as_ref();
    let needs = FixNeeds {
        cc: flagged && limited != LimitedBy::SendBuffer,
        wmem: b.and_then(|b| b.raise_wmem).filter(|_| flagged || limited == LimitedBy::SendBuffer),
        rmem: b.and_then(|b| Some((b.receiver.as_ref()?.netns, b.raise_rmem?))),
    };
    if needs.is_empty() {
        return Vec::new();
    }
    fix_commands(flow, env, &needs)
}

#[cfg(test)]
mod tests {
    use tracer_common::NS_PER_SEC;

    use super::*;
    use crate::analysis::diagnosis::test_feed::{bulk, run_feed, run_in, test_env};
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::flow_table::TableConfig;
    use crate::analysis::sample::SampleReason;

    #[test]
    fn judging_what_changed_gives_the_verdicts_judging_every_flow_gives() {
        use crate::analysis::sample::TcpState;
        let cfg = TableConfig {
            max_flows: 400,
            closed_linger_ns: 4 * NS_PER_SEC,
            idle_timeout_ns: 9 * NS_PER_SEC,
            ..TableConfig::default()
        };
        let (mut full_table, mut table) = (FlowTable::new(cfg.clone()), FlowTable::new(cfg));
        let (mut full, mut incremental) = (Diagnoser::default(), Diagnoser::default());
        let env = test_env();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut judged = 0;
        for tick in 0..600u64 {
            // Bulk flows 0..8 (some lossy, some closing late), and short connections that open
            // and close within a tick or two, some idle for a while first.
            let mut batch = Vec::new();
            for cookie in 0..8u64 {
                if cookie == 7 && tick > 300 {
                    continue; // goes idle
                }
                let mut s = sample(cookie, tick * 100);
                bulk(8_000_000 * (cookie + 1), if cookie % 2 == 0 { 0.01 } else { 0.0 }, 30_000)(tick, &mut s);
                if cookie == 5 && tick == 450 {
                    s.reason = SampleReason::Destroy;
                }
                batch.push(s);
            }
            for _ in 0..6 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut s = sample(100 + x % 3_000, tick * 100 + x % 97);
                s.bytes_acked = x % 5_000;
                match x % 5 {
                    0 => s.reason = SampleReason::Destroy,
                    1 => {
                        s.reason = SampleReason::StateChange;
                        s.tcp_state = TcpState::Close;
                    }
                    _ => {}
                }
                batch.push(s);
            }
            for s in &batch {
                full_table.ingest(s);
                table.ingest(s);
            }
            if tick % 10 == 9 {
                let now = (tick + 1) * 100 * 1_000_000;
                full_table.expire(now);
                table.expire(now);
                full.evaluate(&full_table, &env, now);
                let changes = table.take_changes();
                incremental.evaluate_changes(&table, &changes, &env, now);
                assert_eq!(full.flows.len(), incremental.flows.len(), "the same flows remembered");
                for f in full_table.flows() {
                    assert_eq!(full.verdict(f.cookie()), incremental.verdict(f.cookie()), "flow {}", f.cookie());
                    judged += usize::from(full.verdict(f.cookie()).is_some_and(|v| v.limited_by != LimitedBy::Unknown));
                }
            }
        }
        assert!(judged > 100, "the bulk flows got real verdicts ({judged})");
        assert!(full.flagged().count() > 0, "and some were flagged");
    }

    #[test]
    fn a_tunnels_note_ends_a_flagged_verdict_once_and_goes_with_the_tunnel() {
        use crate::analysis::diagnosis::test_feed::episodic;
        use crate::analysis::tunnel::{TunHolder, TunnelUdp};
        let feed = episodic("cubic", 16_000_000, 7, 0, 0);
        let (mut d, _) = run_feed(30, feed);
        let plain = d.verdict(1).expect("verdict").clone();
        assert!(plain.flagged, "{}", plain.text);
        let udp = TunnelUdp {
            cookie: 9,
            src: "198.19.0.1".into(),
            sport: 51820,
            dst: "198.19.1.1".into(),
            dport: 51820,
            tx_bps: 40_000_000,
            rx_bps: 1_000_000,
            app_proto: None,
        };
        let process = TunHolder { pid: 812, comm: "wireguard-go".into() };
        let t = Tunnel { dev: "wg0".into(), mtu: 1420, netns: 1, process, via: None, udp };
        let tunnels = HashMap::from([(1, t.clone())]);
        d.note_tunnels(&tunnels, &HashMap::new());
        let noted = d.verdict(1).expect("verdict").clone();
        assert_eq!(noted.tunnel.as_ref(), Some(&t));
        assert!(noted.text.starts_with(&plain.text) && noted.text.contains("tunnel's underlay"), "{}", noted.text);
        // New rates: the same words, the new numbers.
        let faster = Tunnel { udp: TunnelUdp { tx_bps: 80_000_000, ..t.udp.clone() }, ..t.clone() };
        d.note_tunnels(&HashMap::from([(1, faster.clone())]), &tunnels);
        let v = d.verdict(1).expect("verdict");
        assert_eq!((v.text.as_str(), v.tunnel.as_ref()), (noted.text.as_str(), Some(&faster)));
        // Another device: one note, the new one.
        let other = Tunnel { dev: "wg1".into(), ..faster.clone() };
        d.note_tunnels(&HashMap::from([(1, other)]), &HashMap::from([(1, faster.clone())]));
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.text.matches("Through tunnel").count(), 1, "{}", v.text);
        assert!(v.text.contains("Through tunnel wg1"), "{}", v.text);
        // Out of the tunnel: the verdict as it was.
        d.note_tunnels(&HashMap::new(), &HashMap::from([(1, faster.clone())]));
        assert_eq!(d.verdict(1).expect("verdict"), &plain);
        // A flow not flagged knows its tunnel, and its words stay its own.
        let (mut calm, _) = run_feed(30, episodic("bbr", 16_000_000, 7, 0, 0));
        let before = calm.verdict(1).expect("verdict").clone();
        assert!(!before.flagged, "{}", before.text);
        calm.note_tunnels(&HashMap::from([(1, faster.clone())]), &HashMap::new());
        let v = calm.verdict(1).expect("verdict");
        assert_eq!((v.text.as_str(), v.tunnel.as_ref()), (before.text.as_str(), Some(&faster)));
    }

    #[test]
    fn fix_loads_bbr_when_missing_and_names_the_netns() {
        let mut env = test_env();
        env.bbr_available = false;
        env.netns_names.insert(4026531840, "video".into());
        let (d, _) = run_in(&env, "cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged);
        assert!(v.fix[0].starts_with("modprobe tcp_bbr"), "{:?}", v.fix);
        assert_eq!(v.fix[1], "ip netns exec video sysctl -w net.ipv4.tcp_congestion_control=bbr");
        // The host's own namespace needs no prefix.
        env.host_netns = 4026531840;
        let (d, _) = run_in(&env, "cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.fix[1], "sysctl -w net.ipv4.tcp_congestion_control=bbr");
    }

    #[test]
    fn new_facts_of_one_namespace_wake_only_its_flows() {
        // One clean bulk flow for 10 s, then idle until it rests.
        let mut table = FlowTable::new(TableConfig::default());
        let (mut d, mut env) = (Diagnoser::new(DiagnosisConfig::default()), test_env());
        let clean = bulk(40_000_000, 0.0, 31_000);
        // Whether the evaluation at `tick` judged the flow (a judgment takes a snapshot).
        let judged_at = |table: &mut FlowTable, d: &mut Diagnoser, env: &Environment, tick: u64| {
            let now = tick * 100_000_000;
            table.expire(now);
            let changes = table.take_changes();
            d.evaluate_changes(table, &changes, env, now);
            d.flows[&1].snapshots.back().is_some_and(|s| s.ts_ns == now)
        };
        for tick in 0..=400u64 {
            if tick < 100 {
                let mut s = sample(1, tick * 100);
                clean(tick, &mut s);
                table.ingest(&s);
            }
            if tick % 10 == 0 {
                judged_at(&mut table, &mut d, &env, tick);
            }
        }
        assert!(!judged_at(&mut table, &mut d, &env, 410), "the flow rests");
        let netns = table.get(1).expect("flow").latest.netns;
        // A process started in another namespace: nothing to judge again.
        env.netns_pids.insert(netns + 1, 4242);
        assert!(!judged_at(&mut table, &mut d, &env, 420), "woken by another namespace's facts");
        // One in the flow's own: it is judged again, once.
        env.netns_pids.insert(netns, 4243);
        assert!(judged_at(&mut table, &mut d, &env, 430), "not woken by its namespace's facts");
        assert!(!judged_at(&mut table, &mut d, &env, 440), "rests again");
        // A host-wide fact wakes every flow.
        env.allowed_cc.push("cubic".into());
        assert!(judged_at(&mut table, &mut d, &env, 450), "not woken by a host-wide fact");
    }

    #[test]
    fn a_flow_at_rest_is_not_judged_again_and_wakes_to_the_verdicts_judging_it_would_give() {
        use crate::analysis::diagnosis::test_feed::episodic;
        // Judged three ways: every flow every time; every flow but those at rest; and only the
        // flows that are new, got samples or are not at rest (what the pipeline does).
        let (mut table, mut changed_table) =
            (FlowTable::new(TableConfig::default()), FlowTable::new(TableConfig::default()));
        let (mut settling, mut every, mut changed) = (Diagnoser::default(), Diagnoser::default(), Diagnoser::default());
        every.never_settle = true;
        let mut env = test_env();
        // Per flow: whether it sends at a 100 ms tick, and its samples at its `n`th busy tick.
        type Feed = Box<dyn Fn(u64) -> Vec<crate::analysis::sample::Sample>>;
        type FlowFeed = (u64, fn(u64) -> bool, Feed);
        let lossy = episodic("cubic", 16_000_000, 7, 0, 0);
        let clean = bulk(40_000_000, 0.0, 31_000);
        let feeds: Vec<FlowFeed> = vec![
            // Flagged, rests past the loss horizon, sends again, rests, closes.
            (1, |t| t < 200 || (700..900).contains(&t) || t == 1200, Box::new(lossy)),
            // Clean, rests at once, sends again for 10 s.
            (
                2,
                |t| t < 150 || (500..600).contains(&t),
                Box::new(move |n| {
                    let mut s = sample(2, 0);
                    clean(n, &mut s);
                    vec![s]
                }),
            ),
            // One sample, then nothing: too young for a verdict, for ever.
            (3, |t| t == 5, Box::new(|_| vec![sample(3, 0)])),
        ];
        let mut busy = [0u64; 3];
        let (mut skipped, mut flagged, mut judged) = (0, 0, 0);
        for tick in 0..=1300u64 {
            for (i, (cookie, sends, feed)) in feeds.iter().enumerate() {
                if !sends(tick) {
                    continue;
                }
                for mut s in feed(busy[i]) {
                    // The feed's clock is its busy time; the table's is the wall clock (the
                    // feeds' samples within a tick keep their offsets).
                    s.ts_ns = tick * 100_000_000 + s.ts_ns % 100_000_000;
                    s.cookie = *cookie;
                    if *cookie == 1 && tick == 1200 {
                        s.reason = SampleReason::Destroy;
                    }
                    table.ingest(&s);
                    changed_table.ingest(&s);
                }
                busy[i] += 1;
            }
            if tick == 800 {
                // New host facts wake every flow.
                env.netns_names.insert(4026531840, "video".into());
            }
            if tick % 10 == 0 {
                let now = tick * 100_000_000;
                table.expire(now);
                changed_table.expire(now);
                settling.evaluate(&table, &env, now);
                every.evaluate(&table, &env, now);
                let changes = changed_table.take_changes();
                changed.evaluate_changes(&changed_table, &changes, &env, now);
                assert_eq!(table.flows().count(), changed_table.flows().count());
                for f in table.flows() {
                    let v = every.verdict(f.cookie());
                    assert_eq!(settling.verdict(f.cookie()), v, "flow {} at {} s", f.cookie(), tick / 10);
                    assert_eq!(
                        changed.verdict(f.cookie()),
                        v,
                        "flow {} at {} s, judged by changes",
                        f.cookie(),
                        tick / 10
                    );
                    flagged += usize::from(v.is_some_and(|v| v.flagged));
                    judged += usize::from(v.is_some_and(|v| v.limited_by != LimitedBy::Unknown));
                }
                skipped += settling.flows.values().filter(|m| m.settled.is_some()).count();
                assert_eq!(
                    changed.restless.len(),
                    table.open_flows().filter(|f| settling.flows[&f.cookie()].settled.is_none()).count(),
                    "only the flows not at rest are restless"
                );
            }
        }
        assert!(flagged > 20 && judged > 100, "real verdicts: {flagged} flagged, {judged} judged");
        // At rest, past its loss horizon, with a full window of one set of counters: flow 1 from
        // about 50 s to 70 s (its last loss at 20 s; it closes within its next horizon), flow 2
        // from 21 to 50 s and from 66 to 130 s (one more judgment at 80 s, the new host facts),
        // flow 3 (too young for a window) from 2 s on: about 235 flow-seconds, each rest taking a
        // judgment or two to confirm.
        assert!(skipped > 225, "{skipped} judgments skipped");
    }
}
