//! The live kernel event source: load the embedded eBPF object, attach each hook (BTF tracepoint
//! first, classic tracepoint as fallback), and drain the ring buffer through tokio's `AsyncFd`.
//!
//! Dropping [`KernelSource`] detaches every program and frees every map: nothing is pinned.

pub mod caps;
pub mod filter;
pub mod hz;
pub mod listing;
pub mod offsets;
pub mod switch;
pub mod tracefs;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use tokio::io::unix::AsyncFd;
use tracer_common::{counter, ClassicTracepointOffsets, Config, HookId, ABSENT};

use crate::analysis::event::{decode, DecodeContext, Sample};
use crate::kernel::listing::{ListingError, ListingReport};
use crate::source::{BoxFuture, EventSource, SourceCounters};

/// The eBPF object built by `build.rs`; empty when the build machine lacked the eBPF toolchain.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));
/// Why the object is empty, if it is.
const EBPF_UNAVAILABLE: &str = env!("CCTRACE_EBPF_UNAVAILABLE");

/// Which tracepoint flavour to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HookMode {
    /// BTF tracepoints where they load, classic tracepoints otherwise.
    Auto,
    /// BTF tracepoints only.
    Btf,
    /// Classic tracefs tracepoints only.
    Classic,
}

#[derive(Clone, Debug)]
pub struct KernelOptions {
    pub sample_interval: Duration,
    pub hook_mode: HookMode,
    /// Ring-buffer size in bytes: a power of two, at least one page.
    pub ring_bytes: u32,
    /// Flows to keep (open: all), in force from the first program run.
    pub filter: crate::analysis::filter::ResolvedFilter,
}

pub use tracer_common::DEFAULT_RING_BYTES;

impl Default for KernelOptions {
    fn default() -> Self {
        Self {
            sample_interval: Duration::from_nanos(tracer_common::DEFAULT_SAMPLE_INTERVAL_NS),
            hook_mode: HookMode::Auto,
            ring_bytes: DEFAULT_RING_BYTES,
            filter: crate::analysis::filter::ResolvedFilter::default(),
        }
    }
}

struct Hook {
    id: HookId,
    group: &'static str,
    event: &'static str,
    btf_prog: &'static str,
    classic_prog: &'static str,
    /// What is lost when this hook is unavailable.
    without: &'static str,
}

/// One entry per [`HookId`], at its index (checked below).
const HOOKS: [Hook; HookId::COUNT] = [
    Hook {
        id: HookId::TcpProbe,
        group: "tcp",
        event: "tcp_probe",
        btf_prog: "cct_probe",
        classic_prog: "cct_tp_probe",
        without: "no periodic samples; flows update only on retransmissions and state changes",
    },
    Hook {
        id: HookId::Retransmit,
        group: "tcp",
        event: "tcp_retransmit_skb",
        btf_prog: "cct_retrans",
        classic_prog: "cct_tp_retrans",
        without: "retransmissions show only in the counters of later samples",
    },
    Hook {
        id: HookId::CongState,
        group: "tcp",
        event: "tcp_cong_state_set",
        btf_prog: "cct_cong_state",
        classic_prog: "cct_tp_cong",
        without: "CA state changes show only in periodic samples",
    },
    Hook {
        id: HookId::SetState,
        group: "sock",
        event: "inet_sock_set_state",
        btf_prog: "cct_set_state",
        classic_prog: "cct_tp_setstate",
        without: "opens are seen at the first ACK and closes only at destroy",
    },
    Hook {
        id: HookId::Destroy,
        group: "tcp",
        event: "tcp_destroy_sock",
        btf_prog: "cct_destroy",
        classic_prog: "cct_tp_destroy",
        without: "closes are seen only through state changes",
    },
    Hook {
        id: HookId::SendMsg,
        group: "tcp",
        event: "tcp_sendmsg_locked",
        btf_prog: "cct_sendmsg",
        classic_prog: "",
        without: "owners of accepted connections stay unknown",
    },
];

// The table covers every hook once, in index order: `HOOKS[id.index()].id == id`.
const _: () = {
    let mut i = 0;
    while i < HookId::COUNT {
        assert!(HOOKS[i].id.index() == i);
        i += 1;
    }
};

/// How one hook ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookStatus {
    Btf,
    Classic,
    Disabled(HookDisabled),
}

/// Why one flavour of a hook could not be attached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    #[error("kernel BTF unavailable")]
    NoKernelBtf,
    #[error("program {0} missing from the object")]
    ProgramMissing(&'static str),
    #[error("tracefs has no {0} with an skaddr field")]
    NoSkaddr(String),
    #[error("load: {0}")]
    Load(String),
    #[error("attach: {0}")]
    Attach(String),
}

/// A hook that is off: why each flavour tried failed, and what is lost without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookDisabled {
    pub btf: Option<AttachError>,
    pub classic: Option<AttachError>,
    pub without: &'static str,
}

impl std::fmt::Display for HookDisabled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(e) = &self.btf {
            write!(f, "BTF tracepoint: {e}; ")?;
        }
        if let Some(e) = &self.classic {
            write!(f, "classic tracepoint: {e}; ")?;
        }
        f.write_str(self.without)
    }
}

#[derive(Clone, Debug)]
pub struct HookReport {
    pub name: String,
    pub status: HookStatus,
}

impl HookReport {
    /// One line for start-up output.
    pub fn line(&self) -> String {
        match &self.status {
            HookStatus::Btf => format!("{}: BTF tracepoint", self.name),
            HookStatus::Classic => format!("{}: classic tracepoint", self.name),
            HookStatus::Disabled(why) => format!("{}: disabled ({why})", self.name),
        }
    }
}

/// Everything start-up learned about the kernel.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    pub hooks: Vec<HookReport>,
    /// Optional kernel fields this kernel lacks (their values read as 0).
    pub missing_fields: Vec<offsets::MissingField>,
    pub hz: u32,
    /// The start-up listing of existing sockets: what it walked and skipped, or why it did not run.
    pub snapshot: Result<ListingReport, ListingError>,
}

impl KernelInfo {
    /// One line (without the `cctrace: ` prefix) when the start-up listing of existing sockets
    /// did not run or skipped some network namespaces (without CAP_SYS_ADMIN, `setns` into them
    /// is refused), so idle flows there appear only when they next send. `None` when it walked
    /// every namespace.
    pub fn start_up_listing_line(&self) -> Option<String> {
        match &self.snapshot {
            Ok(report) => report.skipped_line(),
            Err(why) => {
                Some(format!("no start-up listing of existing sockets ({why}); idle flows appear when they next send"))
            }
        }
    }
}

pub struct KernelSource {
    // Field order matters for Drop: the ring buffer and counter maps go before the programs.
    ring: AsyncFd<RingBuf<MapData>>,
    counters: PerCpuArray<MapData, u64>,
    /// Until a front end takes it to change the filter while running.
    filter: Option<filter::KernelFilter>,
    ebpf: Ebpf,
    info: KernelInfo,
    ctx: DecodeContext,
    /// When to read the ring buffer without a wake-up.
    ring_poll: tokio::time::Interval,
    /// The start-up listing's samples while its walk goes on.
    listing: Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>,
    /// Samples of the start-up listing read so far (they never pass through the ring).
    listed: u64,
    received: u64,
    decode_errors: u64,
    /// First decode error, kept for the summary.
    pub last_decode_error: Option<String>,
}

/// Offsets of the fields the classic programs read, from tracefs; absent where unreadable.
fn classic_offsets() -> (ClassicTracepointOffsets, Option<String>) {
    let mut out = ClassicTracepointOffsets::unresolved();
    let root = match tracefs::tracefs_root() {
        Ok(r) => r,
        Err(e) => return (out, Some(e.to_string())),
    };
    for h in &HOOKS {
        let Ok(fields) = tracefs::event_format(&root, h.group, h.event) else { continue };
        let at = |name: &str| fields.get(name).map_or(ABSENT, |f| f.offset);
        out.skaddr[h.id.index()] = at("skaddr");
        if h.id == HookId::SetState {
            out.set_state_oldstate = at("oldstate");
            out.set_state_newstate = at("newstate");
            out.set_state_protocol = at("protocol");
        }
        if h.id == HookId::CongState {
            out.cong_state = at("cong_state");
        }
    }
    (out, None)
}

fn short(e: &dyn std::fmt::Display) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or("").chars().take(160).collect()
}

fn attach_btf(ebpf: &mut Ebpf, h: &Hook, btf: &Btf) -> Result<(), AttachError> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(h.btf_prog)
        .ok_or(AttachError::ProgramMissing(h.btf_prog))?
        .try_into()
        .map_err(|e| AttachError::Load(short(&e)))?;
    prog.load(h.event, btf).map_err(|e| AttachError::Load(short(&error_chain(&e))))?;
    if let Err(e) = prog.attach() {
        let _ = prog.unload();
        return Err(AttachError::Attach(short(&error_chain(&e))));
    }
    Ok(())
}

fn attach_classic(ebpf: &mut Ebpf, h: &Hook, classic: &ClassicTracepointOffsets) -> Result<(), AttachError> {
    if h.classic_prog.is_empty() || classic.skaddr[h.id.index()] == ABSENT {
        return Err(AttachError::NoSkaddr(format!("{}:{}", h.group, h.event)));
    }
    let prog: &mut TracePoint = ebpf
        .program_mut(h.classic_prog)
        .ok_or(AttachError::ProgramMissing(h.classic_prog))?
        .try_into()
        .map_err(|e| AttachError::Load(short(&e)))?;
    prog.load().map_err(|e| AttachError::Load(short(&error_chain(&e))))?;
    if let Err(e) = prog.attach(h.group, h.event) {
        let _ = prog.unload();
        return Err(AttachError::Attach(short(&error_chain(&e))));
    }
    Ok(())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

impl KernelSource {
    /// Check privileges, resolve offsets, load and attach. Must run inside a tokio runtime.
    pub fn start(opts: &KernelOptions) -> Result<Self> {
        if EBPF_OBJECT.is_empty() {
            bail!(
                "this cctrace was built without its eBPF programs ({EBPF_UNAVAILABLE}); run `cargo xtask setup` \
                 (installs bpf-linker and the nightly rust-src component) and rebuild"
            );
        }
        caps::check()?;
        let btf_resolver = offsets::BtfResolver::from_sys_fs()?;
        let resolved = offsets::resolve(&btf_resolver).context("resolving kernel struct offsets from BTF")?;
        // A socket small enough is copied whole when a sample is written: one read, not forty.
        let sock_span = btf_resolver
            .struct_size("tcp_sock")
            .ok()
            .filter(|&n| n <= tracer_common::SOCK_COPY_MAX)
            .map_or(0, |n| n as u32);
        drop(btf_resolver);
        let hz = hz::kernel_hz().unwrap_or(250);
        let (classic, _tracefs_err) = classic_offsets();
        let config = Config {
            sample_interval_ns: u64::try_from(opts.sample_interval.as_nanos()).unwrap_or(u64::MAX).max(1),
            // Every hook that attaches runs; the bits let one be switched off without a detach.
            hooks: HookId::ALL_BITS,
            sock_span,
        };
        // Locked memory is charged to the memory cgroup since 5.11; raise the old limit anyway
        // so older kernels do not fail map creation.
        raise_memlock();

        let page = 4096u32;
        if opts.ring_bytes < page || !opts.ring_bytes.is_power_of_two() {
            bail!("the ring buffer size must be a power of two of at least {page} bytes, got {}", opts.ring_bytes);
        }
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("EVENTS", opts.ring_bytes)
            .override_global("OFFSETS", &resolved.offsets, true)
            .override_global("CLASSIC", &classic, true)
            .override_global("CONFIG", &config, true)
            .load(EBPF_OBJECT)
            .map_err(|e| anyhow!("loading the eBPF object into the kernel failed: {}", error_chain(&e)))?;

        // The filter is in force before any program runs, the start-up listing included.
        let mut filter = filter::KernelFilter::take(&mut ebpf, &resolved.offsets)?;
        filter.apply(&opts.filter)?;

        let aya_btf = match opts.hook_mode {
            HookMode::Classic => None,
            _ => Btf::from_sys_fs().ok(),
        };
        let mut reports = Vec::new();
        for h in &HOOKS {
            let name = format!("{}:{}", h.group, h.event);
            let mut disabled = HookDisabled { btf: None, classic: None, without: h.without };
            let mut status = None;
            if opts.hook_mode != HookMode::Classic {
                let attached =
                    aya_btf.as_ref().ok_or(AttachError::NoKernelBtf).and_then(|b| attach_btf(&mut ebpf, h, b));
                match attached {
                    Ok(()) => status = Some(HookStatus::Btf),
                    Err(e) => disabled.btf = Some(e),
                }
            }
            if status.is_none() && opts.hook_mode != HookMode::Btf {
                match attach_classic(&mut ebpf, h, &classic) {
                    Ok(()) => status = Some(HookStatus::Classic),
                    Err(e) => disabled.classic = Some(e),
                }
            }
            let status = status.unwrap_or(HookStatus::Disabled(disabled));
            reports.push(HookReport { name, status });
        }
        if reports.iter().all(|r| matches!(r.status, HookStatus::Disabled(_))) {
            let why: Vec<String> = reports.iter().map(HookReport::line).collect();
            bail!("no TCP tracepoint could be attached:\n  {}", why.join("\n  "));
        }

        // With the hooks attached, list the sockets that already exist, so idle flows show too.
        let ctx = DecodeContext { hz };
        let walk = match aya_btf.as_ref() {
            Some(btf) => listing::start_listing(&mut ebpf, btf, ctx),
            None => Err(ListingError::BtfUnavailable),
        };
        let (snapshot, listing) = match walk {
            Ok(walk) => (Ok(walk.report), Some(walk.batches)),
            Err(e) => (Err(e), None),
        };

        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").ok_or_else(|| anyhow!("EVENTS map missing"))?)
            .context("opening the EVENTS ring buffer")?;
        // SAFETY: the RingBuf owns its map fd and keeps it open until the AsyncFd (which owns
        // the RingBuf) is dropped; the fd is never replaced or closed behind tokio's back.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .context("registering the ring buffer with tokio")?;
        let counters = PerCpuArray::try_from(ebpf.take_map("COUNTERS").ok_or_else(|| anyhow!("COUNTERS map missing"))?)
            .context("opening the COUNTERS map")?;
        Ok(Self {
            ring,
            counters,
            filter: Some(filter),
            ebpf,
            info: KernelInfo { hooks: reports, missing_fields: resolved.missing, hz, snapshot },
            ctx,
            ring_poll: {
                let mut poll = tokio::time::interval(RING_POLL);
                poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                poll
            },
            listing,
            listed: 0,
            received: 0,
            decode_errors: 0,
            last_decode_error: None,
        })
    }

    pub fn info(&self) -> &KernelInfo {
        &self.info
    }

    /// The filter maps, to change the filter while the programs run (once).
    pub fn take_filter(&mut self) -> Option<filter::KernelFilter> {
        self.filter.take()
    }

    /// Detach every program: no sample is written after this, so the ring buffer drains dry
    /// and the samples received plus lost account for all the kernel emitted, even while
    /// traffic goes on. The maps stay open for the final drain and counters.
    fn detach_programs(&mut self) {
        for (_, program) in self.ebpf.programs_mut() {
            // A program that never loaded (its hook was disabled) has nothing to detach.
            let _ = match program {
                aya::programs::Program::BtfTracePoint(p) => p.unload(),
                aya::programs::Program::TracePoint(p) => p.unload(),
                aya::programs::Program::Iter(p) => p.unload(),
                _ => Ok(()),
            };
        }
    }

    fn counter(&self, index: u32) -> u64 {
        self.counters.get(&index, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Samples the kernel handed over so far: written into the ring buffer, or read from the
    /// start-up listing's iterators.
    pub fn emitted(&self) -> u64 {
        self.counter(counter::EMITTED) + self.listed
    }

    /// Kernel-side counters by name (lost, emitted, read errors, map full).
    pub fn kernel_counters(&self) -> HashMap<&'static str, u64> {
        HashMap::from([
            ("ringbuf_lost", self.counter(counter::RINGBUF_LOST)),
            ("emitted", self.counter(counter::EMITTED)),
            ("read_errors", self.counter(counter::READ_ERRORS)),
            ("flow_map_full", self.counter(counter::FLOW_MAP_FULL)),
            ("filtered", self.counter(counter::FILTERED)),
        ])
    }

    async fn read_batch(&mut self) -> Result<Vec<Sample>> {
        loop {
            // The ring first: it is what overflows when not read. The listing fills the gaps.
            // The programs wake the reader only when the ring is half full (a wake-up per
            // sample is most of a hook's cost), so the ring is also read on a short timer.
            let batch = tokio::select! {
                biased;
                guard = self.ring.readable_mut() => {
                    Self::drain_ring(guard.context("waiting on the ring buffer")?, &self.ctx, &mut self.decode_errors, &mut self.last_decode_error)
                }
                _ = self.ring_poll.tick() => {
                    let batch = drain(self.ring.get_mut(), &self.ctx, &mut self.decode_errors, &mut self.last_decode_error);
                    if batch.len() == MAX_BATCH {
                        // More is waiting: the next call reads on without waiting for a tick.
                        self.ring_poll.reset_immediately();
                    }
                    batch
                }
                listed = next_listed(&mut self.listing), if self.listing.is_some() => match listed {
                    Some(batch) => {
                        self.listed += batch.len() as u64;
                        batch
                    }
                    None => {
                        self.listing = None;
                        continue;
                    }
                },
            };
            if !batch.is_empty() {
                self.received += batch.len() as u64;
                return Ok(batch);
            }
        }
    }

    /// Up to one batch of what the ring buffer holds; readiness is cleared once it is dry.
    fn drain_ring(
        mut guard: tokio::io::unix::AsyncFdReadyMutGuard<'_, RingBuf<MapData>>,
        ctx: &DecodeContext,
        decode_errors: &mut u64,
        last_decode_error: &mut Option<String>,
    ) -> Vec<Sample> {
        let batch = drain(guard.get_inner_mut(), ctx, decode_errors, last_decode_error);
        if batch.len() < MAX_BATCH {
            // Drained: wait for the next wake-up. A full batch leaves readiness set.
            guard.clear_ready();
        }
        batch
    }
}

/// Samples read from the ring buffer per batch at most.
const MAX_BATCH: usize = 4096;

/// How often the ring buffer is read without a wake-up: the programs wake the reader only when
/// it is half full. At the default 8 MiB (32,768 samples) that is 1.6 million samples a second
/// before a wake-up is needed.
const RING_POLL: Duration = Duration::from_millis(20);

/// Up to [`MAX_BATCH`] samples from `ring`, decoded; what does not decode is counted.
fn drain(
    ring: &mut RingBuf<MapData>,
    ctx: &DecodeContext,
    decode_errors: &mut u64,
    last_decode_error: &mut Option<String>,
) -> Vec<Sample> {
    let mut batch = Vec::new();
    while batch.len() < MAX_BATCH {
        let Some(item) = ring.next() else { break };
        match decode(&item, ctx) {
            Ok(s) => batch.push(s),
            Err(e) => {
                *decode_errors += 1;
                if last_decode_error.is_none() {
                    *last_decode_error = Some(e.to_string());
                }
            }
        }
    }
    batch
}

/// The next batch of the start-up listing; `None` once it is read to the end.
async fn next_listed(listing: &mut Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>) -> Option<Vec<Sample>> {
    match listing {
        Some(rx) => rx.recv().await,
        None => None,
    }
}

fn raise_memlock() {
    let lim = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads a valid rlimit struct; failure is harmless on current kernels.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}

impl EventSource for KernelSource {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        Box::pin(async move { self.read_batch().await.map(Some) })
    }

    fn counters(&self) -> SourceCounters {
        SourceCounters {
            received: self.received,
            lost: self.counter(counter::RINGBUF_LOST),
            decode_errors: self.decode_errors,
            kernel_read_errors: self.counter(counter::READ_ERRORS),
            flow_map_full: self.counter(counter::FLOW_MAP_FULL),
            filtered: self.counter(counter::FILTERED),
            kernel_emitted: Some(self.emitted()),
        }
    }

    fn stop_producing(&mut self) {
        self.detach_programs();
        // The listing reads no further; what it already queued is still delivered.
        if let Some(listing) = &mut self.listing {
            listing.close();
        }
    }

    fn describe(&self) -> String {
        let attached = self.info.hooks.iter().filter(|h| !matches!(h.status, HookStatus::Disabled(_))).count();
        format!("live kernel ({attached}/{} hooks)", self.info.hooks.len())
    }
}
