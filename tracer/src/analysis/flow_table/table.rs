//! The table of flows: ingesting samples, expiring closed and idle flows, evicting the least
//! recently updated when full (through an ordered index, in O(log n)), ranking which flows keep
//! a full chart history, and the changes since the front ends last looked.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::analysis::flow_table::config::TableConfig;
use crate::analysis::flow_table::flow::{EvictionKey, Flow};
use crate::analysis::sample::Sample;

/// What changed in the table since the last [`FlowTable::take_changes`]: the front ends' and
/// the diagnosis' work per tick follows these, not the table's size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableChanges {
    /// Flows that appeared, in arrival order (some may be gone again: see `removed`).
    pub born: Vec<u64>,
    /// Flows dropped: expired or evicted.
    pub removed: Vec<u64>,
    /// Flows that were there before and got a sample, in order of their first one.
    pub updated: Vec<u64>,
}

/// Summary of what the table did with a sample; lets callers react to opens and closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingested {
    NewFlow,
    Updated,
    Closed,
}

#[derive(Debug, Default)]
pub struct FlowTable {
    pub(super) cfg: TableConfig,
    /// Each flow in a box of its own, so that a slot of the map is 16 bytes, not 784. A full
    /// table that keeps evicting and inserting leaves tombstones behind, and the map then
    /// doubles (to 131,072 slots for 50,000 flows) with its old slots beside it while it moves
    /// them: with the flows inline that was 154 MB of the 166 MB peak at start-up with 100,000
    /// sockets; boxed, 3 MB, beside the 40 MB of the flows themselves.
    pub(super) flows: HashMap<u64, Box<Flow>>,
    /// Every flow's [`Flow::indexed`] key: the first one is the victim, once checked current.
    pub(super) eviction_order: BTreeSet<EvictionKey>,
    /// The flow a front end is showing: it keeps its full history whatever its rank.
    pub(super) kept: Option<u64>,
    pub(super) evicted: u64,
    pub(super) changes: TableChanges,
    /// `changes` were not taken since the last expire: a table nobody asks keeps one interval
    /// of them, not all.
    pub(super) changes_untaken: bool,
    /// Counts the sets of changes begun: a flow whose [`Flow::updated_in`] is this one is in
    /// `changes.updated` already.
    pub(super) changes_epoch: u64,
    /// The flows holding the full `history_len`.
    pub(super) charted: HashSet<u64>,
    /// The flows ranked for full history, by (throughput, cookie): the open ones and the
    /// charted closed ones, each under its [`Flow::ranked_as`]. Kept up to date from the
    /// changes, so ranking costs per flow that got samples, not per flow kept: 10,000 idle
    /// connections cost nothing a second.
    pub(super) by_rate: BTreeSet<(u64, u64)>,
    /// The ranking index moved since the flows were last ranked.
    pub(super) rank_moved: bool,
    /// The last [`Flow::text_generation`] given.
    pub(super) text_generations: u64,
    /// Flows that left the table (evicted or expired), ever.
    pub(super) departed: u64,
}

impl FlowTable {
    pub fn new(cfg: TableConfig) -> Self {
        Self {
            cfg,
            flows: HashMap::new(),
            eviction_order: BTreeSet::new(),
            kept: None,
            evicted: 0,
            changes: TableChanges::default(),
            changes_untaken: false,
            changes_epoch: 1,
            charted: HashSet::new(),
            by_rate: BTreeSet::new(),
            rank_moved: false,
            text_generations: 0,
            departed: 0,
        }
    }

    pub fn config(&self) -> &TableConfig {
        &self.cfg
    }

    /// The same table emptied, as new but for the text generations and the departures, which
    /// go on: a copy made from a flow before cannot pass for one of a flow after, and its flows
    /// count as departed.
    pub fn emptied(&self) -> Self {
        Self {
            text_generations: self.text_generations,
            departed: self.departed + self.flows.len() as u64,
            ..Self::new(self.cfg.clone())
        }
    }

    /// How many flows ever left the table (evicted, expired, emptied out): while it stays the
    /// same, every flow seen before is still there.
    pub fn departed(&self) -> u64 {
        self.departed
    }

    pub fn ingest(&mut self, sample: &Sample) -> Ingested {
        if let Some(flow) = self.flows.get_mut(&sample.cookie) {
            if flow.updated_in != self.changes_epoch {
                flow.updated_in = self.changes_epoch;
                self.changes.updated.push(sample.cookie);
            }
            let was_closed = flow.is_closed();
            if flow.update(sample, &self.cfg) {
                self.text_generations += 1;
                flow.text_generation = self.text_generations;
            }
            let closed = flow.is_closed() && !was_closed;
            // An update moves the flow later in the order, which the index may learn when the
            // flow comes up for eviction; closing moves it first, which it must learn now.
            if closed {
                self.eviction_order.remove(&flow.indexed);
                flow.indexed = flow.eviction_key();
                self.eviction_order.insert(flow.indexed);
            }
            return if closed { Ingested::Closed } else { Ingested::Updated };
        }
        if self.flows.len() >= self.cfg.max_flows {
            self.evict_one();
        }
        // Short until ranked (the next expire), unless it is the flow being shown.
        let cap = if self.kept == Some(sample.cookie) {
            self.cfg.history_len
        } else {
            self.cfg.short_history_len.min(self.cfg.history_len)
        };
        self.text_generations += 1;
        let mut flow = Flow::new(sample, cap, self.text_generations);
        flow.updated_in = self.changes_epoch;
        let closed = flow.is_closed();
        self.eviction_order.insert(flow.indexed);
        self.flows.insert(sample.cookie, Box::new(flow));
        self.changes.born.push(sample.cookie);
        if cap > self.cfg.short_history_len {
            self.charted.insert(sample.cookie);
        }
        if closed {
            Ingested::Closed
        } else {
            Ingested::NewFlow
        }
    }

    /// Drop flows closed for longer than the linger time and flows idle past the timeout, and
    /// re-pick the flows that keep full history when any flow changed. Meant to run about once
    /// per second. The
    /// expired flows are the front of the eviction order (closed ones by close time, then open
    /// ones by last update), so the work is per flow dropped, not per flow kept.
    pub fn expire(&mut self, now_ns: u64) -> usize {
        let before = self.flows.len();
        // A flow's rank moves only with its samples: with no flow born, sped up, slowed down or
        // gone since the last ranking, the flows that keep full history stay the same.
        self.index_rates();
        if std::mem::replace(&mut self.changes_untaken, true) {
            self.changes = TableChanges::default();
            self.changes_epoch += 1;
        }
        let (linger, idle) = (self.cfg.closed_linger_ns, self.cfg.idle_timeout_ns);
        // A closed flow is indexed when it closes, and its key no longer changes.
        while let Some(&(open, at, cookie)) = self.eviction_order.first() {
            if open || now_ns.saturating_sub(at) < linger {
                break;
            }
            self.eviction_order.pop_first();
            self.remove(cookie);
        }
        // An open flow is indexed where some earlier sample put it: one that looks idle by
        // its key is checked against where it stands now, and indexed there if it moved on.
        while let Some(&key) = self.eviction_order.range((true, 0, 0)..).next() {
            let (_, at, cookie) = key;
            if now_ns.saturating_sub(at) < idle {
                break;
            }
            self.eviction_order.remove(&key);
            match self.flows.get_mut(&cookie) {
                Some(flow) if flow.eviction_key() != key => {
                    flow.indexed = flow.eviction_key();
                    self.eviction_order.insert(flow.indexed);
                }
                _ => self.remove(cookie),
            }
        }
        let expired = before - self.flows.len();
        if self.rank_moved {
            self.rank_history();
        }
        self.departed += expired as u64;
        expired
    }

    /// Drop a flow whose index entry is already gone.
    fn remove(&mut self, cookie: u64) {
        if let Some(flow) = self.flows.remove(&cookie) {
            if let Some(bits) = flow.ranked_as {
                self.by_rate.remove(&(bits, cookie));
                self.rank_moved = true;
            }
            self.charted.remove(&cookie);
            self.changes.removed.push(cookie);
        }
    }

    /// Flows born, updated and removed since the last call. Meant to be called after each
    /// [`FlowTable::expire`]: what was not taken by the next one is dropped.
    pub fn take_changes(&mut self) -> TableChanges {
        // The ranking index follows the same changes: it learns them before they go.
        self.index_rates();
        self.changes_untaken = false;
        self.changes_epoch += 1;
        std::mem::take(&mut self.changes)
    }

    /// The flows still open, least recently updated first as far as the index knows (it learns
    /// a flow's later place when the flow comes up for eviction or expiry).
    pub fn open_flows(&self) -> impl Iterator<Item = &Flow> {
        self.eviction_order.range((true, 0, 0)..).filter_map(|(_, _, cookie)| self.get(*cookie))
    }

    /// Keep the full history for `cookie` (the flow a front end shows), whatever its rank;
    /// `None` returns it to the ranking.
    pub fn keep_history(&mut self, cookie: Option<u64>) {
        let previous = std::mem::replace(&mut self.kept, cookie);
        if let Some(c) = cookie {
            self.set_history_cap(c, self.cfg.history_len);
            // Charted now, so ranked even if closed.
            self.index_rate(c);
        }
        if previous != cookie {
            // The previous one goes back to its rank at the next expire.
            self.index_rates();
            self.rank_history();
        }
    }

    fn set_history_cap(&mut self, cookie: u64, cap: usize) {
        let Some(flow) = self.flows.get_mut(&cookie) else { return };
        flow.history.set_cap(cap);
        if flow.history.cap >= self.cfg.history_len && self.cfg.history_len > self.cfg.short_history_len {
            self.charted.insert(cookie);
        } else {
            self.charted.remove(&cookie);
        }
    }

    /// Bring the ranking index up to date for the flows born or updated since the changes
    /// were last taken (a flow at rest keeps its throughput, and so its place).
    fn index_rates(&mut self) {
        for i in 0..self.changes.born.len() + self.changes.updated.len() {
            let cookie = match self.changes.born.get(i) {
                Some(c) => *c,
                None => self.changes.updated[i - self.changes.born.len()],
            };
            self.index_rate(cookie);
        }
    }

    /// Put `cookie` where its throughput ranks it, or take it out: a closed flow's history no
    /// longer grows, so one that is not charted stays so and is not ranked.
    fn index_rate(&mut self, cookie: u64) {
        let Some(flow) = self.flows.get_mut(&cookie) else { return };
        let ranked = !flow.is_closed() || self.charted.contains(&cookie);
        let now = ranked.then(|| flow.rank_bits());
        if flow.ranked_as != now {
            if let Some(bits) = flow.ranked_as {
                self.by_rate.remove(&(bits, cookie));
            }
            if let Some(bits) = now {
                self.by_rate.insert((bits, cookie));
            }
            flow.ranked_as = now;
            self.rank_moved = true;
        }
    }

    /// Full history for the `charted_flows` busiest flows by throughput (a flow already charted
    /// keeps it while among twice as many), short history for the rest. Ranked are the open
    /// flows and those that hold a full history (see [`FlowTable::index_rate`]), read from the
    /// top of the ranking index: O(charted), once a second, however many flows rest.
    fn rank_history(&mut self) {
        let (long, short) = (self.cfg.history_len, self.cfg.short_history_len.min(self.cfg.history_len));
        if long <= short {
            return;
        }
        let k = self.cfg.charted_flows;
        let all_in = k > 0 && self.by_rate.len() <= k;
        // The k fastest enter; a charted flow stays while among the 2k fastest.
        let within = if all_in { self.by_rate.len() } else { k.saturating_mul(2) };
        let mut keeps: HashSet<u64> = HashSet::with_capacity(within.min(self.by_rate.len()) + 1);
        let mut entering = Vec::new();
        for (i, &(_, cookie)) in self.by_rate.iter().rev().take(within).enumerate() {
            if all_in || i < k {
                keeps.insert(cookie);
                if !self.charted.contains(&cookie) {
                    entering.push(cookie);
                }
            } else if self.charted.contains(&cookie) {
                keeps.insert(cookie);
            }
        }
        keeps.extend(self.kept);
        let leaving: Vec<u64> = self.charted.iter().copied().filter(|c| !keeps.contains(c)).collect();
        for cookie in leaving {
            self.set_history_cap(cookie, short);
            // A closed flow that lost its full history is ranked no more.
            self.index_rate(cookie);
        }
        for cookie in entering {
            self.set_history_cap(cookie, long);
        }
        self.rank_moved = false;
    }

    fn evict_one(&mut self) {
        // Prefer a closed flow; otherwise the one updated longest ago. The first key indexed
        // is the victim if it is still its flow's place; a flow updated since is indexed anew
        // where it stands now, and the next first key is tried.
        while let Some(key) = self.eviction_order.pop_first() {
            let cookie = key.2;
            let Some(flow) = self.flows.get_mut(&cookie) else { continue };
            let now = flow.eviction_key();
            if now != key {
                flow.indexed = now;
                self.eviction_order.insert(now);
                continue;
            }
            self.remove(cookie);
            self.evicted += 1;
            self.departed += 1;
            return;
        }
    }

    pub fn get(&self, cookie: u64) -> Option<&Flow> {
        self.flows.get(&cookie).map(|f| &**f)
    }

    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.flows.values().map(|f| &**f)
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Flows dropped because the table was full.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}
