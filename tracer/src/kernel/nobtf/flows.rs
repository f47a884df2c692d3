//! Which flows the records of an interval name, and what to ask sock_diag about them.
//!
//! A record names its socket by addresses, and by its address in the kernel (`skaddr`) or its
//! cookie where the record has them; it never names the network namespace. A flow is known by
//! its cookie once sock_diag found it in a namespace (the start-up listing, or a search of every
//! namespace for addresses not seen before); its records then map to it by cookie, socket
//! address, or addresses alone where only one known flow has them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

use tracer_common::{tcp_state, HookId};

use super::record::TraceEvent;
use crate::analysis::sample::{Owner, Sample};
use crate::host::sock_diag::Lookup;

/// A flow sock_diag found: where it lives and what it looked like last.
#[derive(Clone, Debug)]
pub(super) struct Flow {
    pub netns: u32,
    pub family: u8,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The latest sample, to say how it ended when sock_diag no longer finds it.
    pub last: Option<Sample>,
    /// Retransmission records handed over for it (at most one a sample interval).
    pub retrans_events: u32,
    /// The process that called `connect()`, when the records named it.
    pub owner: Option<Owner>,
}

impl Flow {
    /// A flow of namespace `netns` as sock_diag found it, not yet sampled.
    pub(super) fn found(info: &crate::host::sock_diag::SocketInfo, netns: u32, owner: Option<Owner>) -> Self {
        Self {
            netns,
            family: info.family,
            local: info.local,
            remote: info.remote,
            last: None,
            retrans_events: 0,
            owner,
        }
    }

    pub(super) fn lookup(&self, cookie: u64) -> Lookup {
        Lookup { family: self.family, local: self.local, remote: self.remote, cookie: Some(cookie) }
    }
}

/// A state change or a close of a known flow, to be sampled with the interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Change {
    pub cookie: u64,
    pub ts_ns: u64,
    pub hook: HookId,
    pub old_state: u8,
    pub new_state: u8,
}

impl Change {
    /// The socket is gone after it: sampled from what was last seen if sock_diag has no more.
    pub(super) fn closes(&self) -> bool {
        self.hook == HookId::Destroy || self.new_state == tcp_state::CLOSE
    }
}

/// Addresses not yet seen, to be looked for in every namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unresolved {
    pub lookup: Lookup,
    pub skaddr: Option<u64>,
    pub owner: Option<Owner>,
}

#[derive(Default)]
pub(super) struct Book {
    flows: HashMap<u64, Flow>,
    by_skaddr: HashMap<u64, u64>,
    by_tuple: HashMap<(SocketAddr, SocketAddr), Vec<u64>>,
    /// Known flows with records this interval.
    busy: BTreeSet<u64>,
    /// Those of the last interval, looked up once more in this one, records or not: a flow
    /// hands over one record an interval, so what it did after that record (its last bytes
    /// acked, its last retransmissions, before it idles or closes) shows only to a look one
    /// interval on.
    last_busy: BTreeSet<u64>,
    changes: Vec<Change>,
    /// Addresses with records this interval and no known flow, by addresses.
    unknown: BTreeMap<(SocketAddr, SocketAddr), Unresolved>,
    /// Owners named by `connect()`'s move to SYN_SENT, by socket address: the local port is
    /// chosen after that move, so the record's addresses are not yet the flow's.
    connecting: HashMap<u64, Owner>,
}

/// Most owners kept for sockets not yet found (connects that fail leave theirs).
const MAX_CONNECTING: usize = 65_536;

impl Book {
    pub(super) fn get(&self, cookie: u64) -> Option<&Flow> {
        self.flows.get(&cookie)
    }

    pub(super) fn get_mut(&mut self, cookie: u64) -> Option<&mut Flow> {
        self.flows.get_mut(&cookie)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.flows.len()
    }

    /// A flow sock_diag found in `netns`.
    pub(super) fn learn(&mut self, cookie: u64, mut flow: Flow, skaddr: Option<u64>) {
        if let Some(a) = skaddr {
            self.by_skaddr.insert(a, cookie);
            if let Some(owner) = self.connecting.remove(&a) {
                flow.owner.get_or_insert(owner);
            }
        }
        let tuple = (flow.local, flow.remote);
        if self.flows.insert(cookie, flow).is_none() {
            self.by_tuple.entry(tuple).or_default().push(cookie);
        }
    }

    /// The flow is gone.
    pub(super) fn forget(&mut self, cookie: u64) {
        let Some(flow) = self.flows.remove(&cookie) else { return };
        let tuple = (flow.local, flow.remote);
        if let Some(cookies) = self.by_tuple.get_mut(&tuple) {
            cookies.retain(|&c| c != cookie);
            if cookies.is_empty() {
                self.by_tuple.remove(&tuple);
            }
        }
        self.by_skaddr.retain(|_, c| *c != cookie);
    }

    /// The known flow a record names, if one.
    fn find(&self, e: &TraceEvent) -> Option<u64> {
        if let Some(c) = e.cookie.filter(|c| self.flows.contains_key(c)) {
            return Some(c);
        }
        if let Some(&c) = e.skaddr.and_then(|a| self.by_skaddr.get(&a)) {
            return Some(c);
        }
        match self.by_tuple.get(&(e.local, e.remote)).map(Vec::as_slice) {
            // With a cookie or an address of its own the record is of another socket at the
            // same addresses (in another namespace, or the next connection after a close).
            Some(&[c]) if e.cookie.is_none_or(|own| own == c) => Some(c),
            _ => None,
        }
    }

    /// Take one record into the interval's plan.
    pub(super) fn note(&mut self, e: &TraceEvent) {
        if let (Some(owner), Some(a)) = (&e.owner, e.skaddr) {
            if self.connecting.len() >= MAX_CONNECTING {
                self.connecting.clear();
            }
            self.connecting.insert(a, owner.clone());
        }
        let Some(cookie) = self.find(e) else {
            self.note_unknown(e);
            return;
        };
        if let Some(a) = e.skaddr {
            self.by_skaddr.insert(a, cookie);
        }
        if let Some(f) = self.flows.get_mut(&cookie) {
            if f.owner.is_none() {
                f.owner = e.skaddr.and_then(|a| self.connecting.remove(&a)).or_else(|| e.owner.clone());
            }
        }
        match e.hook {
            HookId::SetState | HookId::Destroy => {
                let new_state = e.new_state.unwrap_or(tcp_state::CLOSE);
                self.changes.push(Change {
                    cookie,
                    ts_ns: e.ts_ns,
                    hook: e.hook,
                    old_state: e.old_state.unwrap_or(0),
                    new_state,
                });
            }
            HookId::Retransmit => {
                if let Some(f) = self.flows.get_mut(&cookie) {
                    f.retrans_events += 1;
                }
                self.busy.insert(cookie);
            }
            _ => {
                self.busy.insert(cookie);
            }
        }
    }

    /// A record of addresses no known flow has: looked for unless it closes the socket (one
    /// never seen open is not worth a search of every namespace).
    fn note_unknown(&mut self, e: &TraceEvent) {
        let closing = e.hook == HookId::Destroy || e.new_state == Some(tcp_state::CLOSE);
        let key = (e.local, e.remote);
        if closing || e.remote.port() == 0 || e.local.port() == 0 {
            self.unknown.remove(&key);
            return;
        }
        let family = u8::try_from(e.family).unwrap_or(0);
        let lookup = Lookup { family, local: e.local, remote: e.remote, cookie: e.cookie };
        let owner = e.owner.clone().or_else(|| self.unknown.get(&key).and_then(|u| u.owner.clone()));
        self.unknown.insert(key, Unresolved { lookup, skaddr: e.skaddr, owner });
    }

    /// The interval's work, leaving the book ready for the next: known flows to ask about (in
    /// order), their state changes and closes (in order), and addresses to look for.
    pub(super) fn take_interval(&mut self) -> (Vec<u64>, Vec<Change>, Vec<Unresolved>) {
        let now = std::mem::take(&mut self.busy);
        let busy = now.union(&self.last_busy).filter(|c| self.flows.contains_key(c)).copied().collect();
        self.last_busy = now;
        let changes = std::mem::take(&mut self.changes);
        let unknown = std::mem::take(&mut self.unknown).into_values().collect();
        (busy, changes, unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn event(hook: HookId, cookie: Option<u64>, skaddr: Option<u64>) -> TraceEvent {
        TraceEvent {
            hook,
            ts_ns: 1,
            skaddr,
            cookie,
            family: tracer_common::family::AF_INET,
            local: addr("198.18.0.1:5201"),
            remote: addr("198.18.0.2:40000"),
            old_state: None,
            new_state: None,
            owner: None,
        }
    }

    fn flow(netns: u32) -> Flow {
        Flow {
            netns,
            family: 2,
            local: addr("198.18.0.1:5201"),
            remote: addr("198.18.0.2:40000"),
            last: None,
            retrans_events: 0,
            owner: None,
        }
    }

    #[test]
    fn records_of_a_known_flow_find_it_by_cookie_address_or_addresses() {
        let mut book = Book::default();
        book.learn(7, flow(1), None);
        book.note(&event(HookId::TcpProbe, Some(7), Some(0xa000)));
        // The socket's address was learnt from the record with the cookie.
        let mut retrans = event(HookId::Retransmit, None, Some(0xa000));
        retrans.local = addr("198.18.0.9:1");
        book.note(&retrans);
        book.note(&event(HookId::CongState, None, None));
        let (busy, changes, unknown) = book.take_interval();
        assert_eq!(busy, [7]);
        assert!(changes.is_empty() && unknown.is_empty());
        assert_eq!(book.get(7).unwrap().retrans_events, 1);
    }

    #[test]
    fn a_busy_flow_is_looked_up_once_more_an_interval_after_its_last_record() {
        let mut book = Book::default();
        book.learn(7, flow(1), None);
        book.note(&event(HookId::TcpProbe, Some(7), None));
        assert_eq!(book.take_interval().0, [7]);
        assert_eq!(book.take_interval().0, [7], "what it did after its last record");
        assert!(book.take_interval().0.is_empty(), "then not until its next record");
        book.note(&event(HookId::TcpProbe, Some(7), None));
        assert_eq!(book.take_interval().0, [7]);
        book.forget(7);
        assert!(book.take_interval().0.is_empty(), "a flow gone is not looked up");
    }

    #[test]
    fn the_same_addresses_in_two_namespaces_are_told_apart_by_cookie_or_searched() {
        let mut book = Book::default();
        book.learn(7, flow(1), None);
        book.learn(8, flow(2), None);
        book.note(&event(HookId::TcpProbe, Some(8), None));
        // Addresses alone name two flows: searched, not guessed.
        book.note(&event(HookId::Retransmit, None, None));
        let (busy, _, unknown) = book.take_interval();
        assert_eq!(busy, [8]);
        assert_eq!(unknown.len(), 1);
    }

    #[test]
    fn the_owner_named_at_connect_follows_the_socket_to_its_flow() {
        let mut book = Book::default();
        let mut connect = event(HookId::SetState, None, Some(0xc000));
        connect.new_state = Some(tcp_state::SYN_SENT);
        connect.local = addr("198.18.0.1:0");
        connect.owner = Some(Owner { pid: 7, comm: "curl".into() });
        book.note(&connect);
        assert!(book.take_interval().2.is_empty(), "no port yet: nothing to look for");
        book.learn(9, flow(1), Some(0xc000));
        assert_eq!(book.get(9).and_then(|f| f.owner.clone()).map(|o| o.pid), Some(7));
    }

    #[test]
    fn closes_of_flows_never_seen_are_not_searched_for() {
        let mut book = Book::default();
        let mut open = event(HookId::SetState, None, Some(0xb000));
        open.new_state = Some(tcp_state::ESTABLISHED);
        book.note(&open);
        let mut close = open.clone();
        close.new_state = Some(tcp_state::CLOSE);
        book.note(&close);
        let (busy, changes, unknown) = book.take_interval();
        assert!(busy.is_empty() && changes.is_empty() && unknown.is_empty());
    }

    #[test]
    fn a_close_of_a_known_flow_is_a_change_and_forgetting_it_frees_its_addresses() {
        let mut book = Book::default();
        book.learn(7, flow(1), Some(0xa000));
        book.note(&event(HookId::Destroy, Some(7), Some(0xa000)));
        let (_, changes, _) = book.take_interval();
        assert_eq!(changes.len(), 1);
        assert!(changes[0].closes());
        book.forget(7);
        assert_eq!(book.len(), 0);
        book.note(&event(HookId::TcpProbe, None, Some(0xa000)));
        assert_eq!(book.take_interval().2.len(), 1, "a new socket at the same address is looked for");
    }
}
