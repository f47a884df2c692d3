//! The mode without BTF, for kernels built without `CONFIG_DEBUG_INFO_BTF` (Unraid's, Raspberry
//! Pi OS's, many NAS and router kernels): classic tracepoints whose programs hand over their
//! own record and read nothing else of the kernel, and sock_diag for the socket's state.
//!
//! Each sample interval the records say which flows were busy (a segment, a retransmission, a
//! CA state change), and one sock_diag lookup per busy flow, sent together per namespace, reads
//! what the other modes read from `tcp_sock`: the same [`Sample`], with what sock_diag cannot
//! say marked unknown. State changes and closes are sampled as they come; sockets that existed
//! at start-up are listed by a sock_diag dump of every namespace, once.
//!
//! The filter is applied here, in user space: the programs cannot read a socket's cgroup or
//! namespace, so a flow outside it still costs its records, and a lookup the first time.

mod flows;
mod record;
mod sample;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use aya::maps::{MapData, RingBuf};
use aya::{Ebpf, EbpfLoader};
use tokio::io::unix::AsyncFd;
use tracer_common::{counter, Config, HookId, TraceKeys, ABSENT};

use self::flows::{Book, Change, Flow};
use self::record::{HookLayout, Layouts};
use super::attach::{attach_record_hooks, classic_offsets, Classic, HOOKS};
use super::counters::CounterMap;
use super::filter::{KernelFilter, SharedFilter};
use super::listing::ListingReport;
use super::{hz, load, tracefs, HookProgram, KernelInfo, KernelOptions};
use crate::analysis::filter::ResolvedFilter;
use crate::analysis::sample::{Sample, SampleReason, TcpState};
use crate::host::owners::OwnerLookup;
use crate::host::sock_diag::{DiagNamespaces, Lookup, SocketInfo};
use crate::source::{BoxFuture, EventSource, Ready, SourceCounters, MAX_BATCH};

/// What the mode without BTF cannot say, for the start-up line.
pub const LOSES: &str = "no cwnd_limited, sndbuf_locked, rcvbuf_locked or writer_blocked (null; a writer waiting \
     is read from the send buffer's fill), no undone cuts, no route device, no UDP accounting, no --deep; \
     the filter applies in user space";

/// How long the intervals keep their pace after the last records came.
const KEEP_PACE: Duration = Duration::from_secs(1);

pub struct NoBtfSource {
    // Field order matters for Drop: the ring buffer and counter maps go before the programs.
    ring: AsyncFd<RingBuf<MapData>>,
    counters: CounterMap,
    filter: Option<KernelFilter>,
    ebpf: Ebpf,
    info: KernelInfo,
    layouts: Layouts,
    book: Book,
    namespaces: DiagNamespaces,
    owners: OwnerLookup,
    shared_filter: SharedFilter,
    /// Whether each flow passes the filter, under the filter generation in `.1`.
    passes: (HashMap<u64, bool>, u64),
    interval: Duration,
    /// When the next interval's lookups are due; `None` once records stopped coming (the
    /// pipeline's tick looks for them, and nothing wakes the process at rest).
    next_round: Option<tokio::time::Instant>,
    /// When records last came: intervals keep their pace for [`KEEP_PACE`] after, since a busy
    /// flow's one record an interval may fall just before one interval's read or just after.
    records_at: Option<Instant>,
    /// Samples ready to hand over (the start-up listing's first).
    ready: Vec<Sample>,
    listed: u64,
    records: u64,
    received: u64,
    decode_errors: u64,
    stopped: bool,
}

/// The tracefs layouts of the hooks' records, and the keys the programs space them by.
fn layouts(classic: &Classic) -> (Layouts, TraceKeys) {
    let mut layouts = Layouts::default();
    let mut keys = TraceKeys::unresolved();
    let Ok(root) = &classic.root else { return (layouts, keys) };
    for h in &HOOKS {
        let Ok(fields) = tracefs::event_format(root, h.group, h.event) else { continue };
        let layout = HookLayout::new(fields);
        keys.cookie[h.id.index()] = layout.offset("sock_cookie").unwrap_or(ABSENT);
        keys.ports[h.id.index()] = layout.offset("sport").unwrap_or(ABSENT);
        layouts.hooks[h.id.index()] = Some(layout);
    }
    (layouts, keys)
}

impl NoBtfSource {
    /// Check privileges, read the records' layouts, load and attach, and list the sockets that
    /// exist. Must run inside a tokio runtime.
    pub fn start(opts: &KernelOptions) -> Result<Self> {
        super::check_ring_bytes(opts.ring_bytes)?;
        let prelude = load::prelude_without_btf()?;
        let classic = classic_offsets();
        let (layouts, keys) = layouts(&classic);
        let known_hz = hz::kernel_hz();
        let config = Config {
            sample_interval_ns: u64::try_from(opts.sample_interval.as_nanos()).unwrap_or(u64::MAX).max(1),
            hooks: HookId::ALL_BITS,
            key_by_socket: 1,
            sock_span: 0,
            jiffy_ns: known_hz.map_or(0, |hz| 1_000_000_000 / hz.max(1)),
            ring_bytes: opts.ring_bytes,
            _pad: 0,
        };
        let mut ebpf = prelude.load(
            EbpfLoader::new()
                .map_max_entries("EVENTS", opts.ring_bytes)
                .override_global("CLASSIC", &classic.offsets, true)
                .override_global("TRACE_KEYS", &keys, true)
                .override_global("CONFIG", &config, true),
        )?;
        let shared_filter = SharedFilter::default();
        let mut filter = KernelFilter::user_space(shared_filter.clone());
        filter.apply(&opts.filter)?;
        let attached = attach_record_hooks(&mut ebpf, &classic)?;
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").ok_or_else(|| anyhow!("EVENTS map missing"))?)
            .context("opening the EVENTS ring buffer")?;
        // SAFETY: the RingBuf owns its map fd and keeps it open until the AsyncFd (which owns
        // the RingBuf) is dropped; the fd is never replaced or closed behind tokio's back.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .context("registering the ring buffer with tokio")?;
        let counters = CounterMap::take(&mut ebpf)?;
        let mut source = Self {
            ring,
            counters,
            filter: Some(filter),
            ebpf,
            info: KernelInfo {
                hooks: attached.reports,
                missing_fields: Vec::new(),
                hz: known_hz.unwrap_or(hz::GUESSED_HZ),
                snapshot: Ok(ListingReport::default()),
                udp_unavailable: Some("the mode without BTF accounts no UDP".to_string()),
                udp_per_packet: None,
                udp_unclassified: None,
                no_btf: true,
                btf_file: None,
            },
            layouts,
            book: Book::default(),
            namespaces: DiagNamespaces::new(),
            owners: OwnerLookup::default(),
            shared_filter,
            passes: (HashMap::new(), 0),
            interval: opts.sample_interval,
            next_round: None,
            records_at: None,
            ready: Vec::new(),
            listed: 0,
            records: 0,
            received: 0,
            decode_errors: 0,
            stopped: false,
        };
        source.list_existing();
        Ok(source)
    }

    pub fn info(&self) -> &KernelInfo {
        &self.info
    }

    /// The filter, to change it while running (once).
    pub fn take_filter(&mut self) -> Option<KernelFilter> {
        self.filter.take()
    }

    /// Each attached hook's program, for reading its run statistics.
    pub fn hook_programs(&self) -> Vec<HookProgram> {
        super::hook_programs(&self.ebpf, &self.info.hooks)
    }

    /// Every TCP socket of every namespace, once: flows idle at start-up show too.
    fn list_existing(&mut self) {
        let now_ns = crate::clock::monotonic_now_ns();
        let dumped = self.namespaces.dump_all(Instant::now());
        let mut report = ListingReport { namespaces: dumped.len(), walked: dumped.len(), failures: Vec::new() };
        report.namespaces = report.namespaces.max(self.namespaces.all(Instant::now()).len());
        self.info.snapshot = Ok(report);
        let mut batch = Vec::new();
        for (netns, sockets) in dumped {
            for info in sockets {
                self.book.learn(info.cookie, Flow::found(&info, netns, None), None);
                batch.push(self.sampled(&info, netns, now_ns, SampleReason::Snapshot));
            }
        }
        self.listed = batch.len() as u64;
        self.hand_over(batch);
    }

    /// A sample of a known flow, remembered as its latest.
    fn sampled(&mut self, info: &SocketInfo, netns: u32, ts_ns: u64, reason: SampleReason) -> Sample {
        let mut s = sample::sample_of(info, netns, ts_ns, reason);
        if let Some(flow) = self.book.get_mut(info.cookie) {
            s.retrans_events = flow.retrans_events;
            s.owner.clone_from(&flow.owner);
            flow.last = Some(s.clone());
        }
        s
    }

    /// Keep what passes the filter, name the owners, and queue it.
    fn hand_over(&mut self, mut batch: Vec<Sample>) {
        self.refresh_filter();
        let (passes, _) = &mut self.passes;
        let filter = self.shared_filter.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone();
        batch.retain(|s| *passes.entry(s.cookie).or_insert_with(|| flow_passes(&filter, s.netns, s.cgroup_id)));
        self.owners.fill(&mut batch);
        self.received += batch.len() as u64;
        self.ready.extend(batch);
    }

    /// Forget what was decided under an older filter.
    fn refresh_filter(&mut self) {
        let generation = self.shared_filter.lock().unwrap_or_else(std::sync::PoisonError::into_inner).1;
        if generation != self.passes.1 {
            self.passes = (HashMap::new(), generation);
        }
    }

    /// Take every record the ring holds into the interval's plan; whether there were any.
    fn read_records(&mut self) -> bool {
        let mut any = false;
        let ring = self.ring.get_mut();
        while let Some(item) = ring.next() {
            any = true;
            self.records += 1;
            match self.layouts.decode(&item) {
                Ok(e) => self.book.note(&e),
                Err(e) => {
                    self.decode_errors += 1;
                    log::debug!("undecodable trace record: {e}");
                }
            }
        }
        any
    }

    /// One interval: the records read, new addresses looked for in every namespace, the busy
    /// flows and the changed ones looked up, their samples queued.
    fn round(&mut self) {
        let had_records = self.read_records();
        let now = Instant::now();
        let (mut busy, changes, unknown) = self.book.take_interval();
        if !unknown.is_empty() {
            busy.extend(self.search(&unknown, now));
        }
        let mut wanted: Vec<u64> = busy.clone();
        wanted.extend(changes.iter().map(|c| c.cookie));
        wanted.sort_unstable();
        wanted.dedup();
        let found = self.look_up(&wanted, now);
        let now_ns = crate::clock::monotonic_now_ns();
        let mut batch = Vec::new();
        let changed: std::collections::HashSet<u64> = changes.iter().map(|c| c.cookie).collect();
        for cookie in busy {
            // A flow that changed state is sampled with its change (below), once.
            if changed.contains(&cookie) {
                continue;
            }
            match found.get(&cookie) {
                Some((netns, info)) => batch.push(self.sampled(info, *netns, now_ns, SampleReason::Periodic)),
                // Gone without a close seen (its records lost, or closed between two looks): it
                // ends with what was last seen.
                None if !changed.contains(&cookie) => {
                    batch.extend(self.closed(cookie, now_ns, TcpState::Close));
                    self.book.forget(cookie);
                }
                None => {}
            }
        }
        for change in &changes {
            batch.extend(self.changed(change, found.get(&change.cookie)));
            if change.closes() {
                self.book.forget(change.cookie);
            }
        }
        self.hand_over(batch);
        self.namespaces.close_idle(now);
        if had_records || !wanted.is_empty() {
            self.records_at = Some(now);
        }
        let keep = self.records_at.is_some_and(|at| now.duration_since(at) < KEEP_PACE.max(self.interval * 2));
        self.next_round = keep.then(|| tokio::time::Instant::now() + self.interval);
    }

    /// Look new addresses up in every namespace; the cookies of the flows found.
    fn search(&mut self, unknown: &[flows::Unresolved], now: Instant) -> Vec<u64> {
        let lookups: Vec<Lookup> = unknown.iter().map(|u| u.lookup).collect();
        let mut found = Vec::new();
        for (netns, answers) in self.namespaces.search(&lookups, now) {
            for (u, answer) in unknown.iter().zip(answers) {
                let Some(info) = answer else { continue };
                self.book.learn(info.cookie, Flow::found(&info, netns, u.owner.clone()), u.skaddr);
                found.push(info.cookie);
            }
        }
        found
    }

    /// Look known flows up, each in its namespace: what was found, by cookie.
    fn look_up(&mut self, cookies: &[u64], now: Instant) -> HashMap<u64, (u32, SocketInfo)> {
        let mut by_netns: BTreeMap<u32, Vec<(u64, Lookup)>> = BTreeMap::new();
        for &cookie in cookies {
            if let Some(flow) = self.book.get(cookie) {
                by_netns.entry(flow.netns).or_default().push((cookie, flow.lookup(cookie)));
            }
        }
        let mut out = HashMap::new();
        for (netns, wanted) in by_netns {
            let lookups: Vec<Lookup> = wanted.iter().map(|(_, l)| *l).collect();
            let Some(answers) = self.namespaces.lookup(netns, &lookups, now) else { continue };
            for ((cookie, _), answer) in wanted.into_iter().zip(answers) {
                if let Some(info) = answer {
                    out.insert(cookie, (netns, info));
                }
            }
        }
        out
    }

    /// The sample of a state change or a close: the socket as sock_diag found it, else as it was
    /// last seen, in the state the record names.
    fn changed(&mut self, change: &Change, found: Option<&(u32, SocketInfo)>) -> Option<Sample> {
        let reason = if change.hook == HookId::Destroy { SampleReason::Destroy } else { SampleReason::StateChange };
        let flow = self.book.get_mut(change.cookie)?;
        let last = flow.last.as_ref();
        let mut s = match found {
            // A socket in TIME_WAIT is a minisock: sock_diag has no tcp_info for it, and its
            // counters are those last seen.
            Some((netns, info)) if info.tcp_info.is_some() || last.is_none() => {
                let mut s = sample::sample_of(info, *netns, change.ts_ns, reason);
                s.retrans_events = flow.retrans_events;
                s.owner.clone_from(&flow.owner);
                s
            }
            _ => {
                let mut s = last?.clone();
                s.reason = reason;
                s
            }
        };
        // A record read this interval may predate the flow's sample of the last one (taken
        // after that interval's records were read): the flow's samples stay in order.
        s.ts_ns = change.ts_ns.max(last.map_or(0, |l| l.ts_ns));
        if reason == SampleReason::StateChange {
            s.old_tcp_state = TcpState::from_raw(change.old_state);
            s.tcp_state = TcpState::from_raw(change.new_state);
        }
        flow.last = Some(s.clone());
        Some(s)
    }

    /// A flow gone unseen: its last sample, closed.
    fn closed(&self, cookie: u64, ts_ns: u64, state: TcpState) -> Option<Sample> {
        let mut s = self.book.get(cookie)?.last.clone()?;
        s.reason = SampleReason::StateChange;
        s.old_tcp_state = s.tcp_state;
        s.tcp_state = state;
        s.ts_ns = ts_ns;
        Some(s)
    }

    fn take_batch(&mut self) -> Vec<Sample> {
        let n = self.ready.len().min(MAX_BATCH);
        self.ready.drain(..n).collect()
    }

    async fn read_batch(&mut self) -> Result<Vec<Sample>> {
        loop {
            if !self.ready.is_empty() {
                return Ok(self.take_batch());
            }
            if self.stopped {
                return Ok(Vec::new());
            }
            let round_at = self.next_round;
            let scan_at = self.owners.due_at();
            tokio::select! {
                biased;
                () = async { tokio::time::sleep_until(round_at.unwrap_or_else(tokio::time::Instant::now)).await },
                    if round_at.is_some() => self.round(),
                // The programs wake the reader when the ring is half full: read it now.
                guard = self.ring.readable_mut() => {
                    let mut guard = guard.context("waiting on the ring buffer")?;
                    guard.clear_ready();
                    drop(guard);
                    if self.next_round.is_none() {
                        self.round();
                    }
                }
                () = async {
                    match scan_at {
                        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                        None => std::future::pending().await,
                    }
                } => { self.owners.scan_if_due(); }
            }
        }
    }
}

/// One sample of every TCP socket of each namespace of `namespaces` (inode, path) that can be
/// entered, from sock_diag: what the fix sizes buffers from where no `iter/tcp` can list them.
pub(crate) fn snapshot(namespaces: &[(u32, std::path::PathBuf)]) -> Vec<Sample> {
    let now_ns = crate::clock::monotonic_now_ns();
    let dumped = crate::host::in_each_netns(namespaces, |netns| {
        crate::host::sock_diag::SockDiag::open().and_then(|mut d| d.dump()).ok().map(|s| (netns, s))
    });
    dumped
        .into_iter()
        .flat_map(|(netns, sockets)| {
            sockets.into_iter().map(move |info| sample::sample_of(&info, netns, now_ns, SampleReason::Snapshot))
        })
        .collect()
}

/// Whether a flow of namespace `netns` and cgroup `cgroup_id` passes `filter`: its namespace is
/// one named, and its cgroup or one of its ancestors is one named (as the kernel's filter walks
/// them).
fn flow_passes(filter: &ResolvedFilter, netns: u32, cgroup_id: u64) -> bool {
    if !filter.netns.is_empty() && !filter.netns.contains(&netns) {
        return false;
    }
    if filter.cgroup_ids.is_empty() || filter.cgroup_ids.contains(&cgroup_id) {
        return true;
    }
    crate::cgroups::with_system_resolver(|r| {
        let Some(path) = r.lookup(cgroup_id, Instant::now()).map(|i| i.path.clone()) else { return false };
        let mut at = std::path::Path::new(&path);
        while let Some(parent) = at.parent() {
            if r.id_of(&parent.to_string_lossy()).is_some_and(|id| filter.cgroup_ids.contains(&id)) {
                return true;
            }
            at = parent;
        }
        false
    })
}

impl EventSource for NoBtfSource {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        Box::pin(async move { self.read_batch().await.map(Some) })
    }

    /// What is queued, and an interval's lookups when records came while none was planned.
    fn take_ready(&mut self) -> Ready {
        if self.next_round.is_none() && !self.stopped {
            self.round();
        }
        Ready { samples: self.take_batch(), sockets: None, actions: Vec::new() }
    }

    fn counters(&self) -> SourceCounters {
        SourceCounters {
            received: self.received,
            lost: self.counters.get(counter::RINGBUF_LOST),
            decode_errors: self.decode_errors,
            kernel_read_errors: self.counters.get(counter::READ_ERRORS),
            flow_map_full: self.counters.get(counter::FLOW_MAP_FULL),
            filtered: 0,
            kernel_emitted: None,
            udp: None,
        }
    }

    fn stop_producing(&mut self) -> Result<()> {
        for (_, program) in self.ebpf.programs_mut() {
            if let aya::programs::Program::TracePoint(p) = program {
                let _ = p.unload();
            }
        }
        super::wait_for_running_programs();
        // What the programs wrote before they went is looked up once more.
        self.round();
        self.stopped = true;
        Ok(())
    }

    fn drained(&self) -> bool {
        self.stopped && self.ready.is_empty()
    }

    fn describe(&self) -> String {
        let attached = self.info.hooks.iter().filter(|h| !matches!(h.status, super::HookStatus::Disabled(_))).count();
        format!("live kernel without BTF ({attached}/{} tracepoints, sock_diag)", self.info.hooks.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_space_filter_keeps_the_named_namespaces_and_cgroups() {
        let open = ResolvedFilter::default();
        assert!(flow_passes(&open, 1, 2));
        let netns = ResolvedFilter { netns: [7].into(), ..ResolvedFilter::default() };
        assert!(flow_passes(&netns, 7, 2) && !flow_passes(&netns, 8, 2));
        let cgroup = ResolvedFilter { cgroup_ids: [42].into(), ..ResolvedFilter::default() };
        assert!(flow_passes(&cgroup, 1, 42));
        // A cgroup the host does not know is below none of the named ones.
        assert!(!flow_passes(&cgroup, 1, u64::MAX));
    }
}
