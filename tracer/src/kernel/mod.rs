//! The live kernel event source: load the embedded eBPF object, attach each hook (BTF tracepoint
//! first, classic tracepoint as fallback), and drain the ring buffer through tokio's `AsyncFd`.
//!
//! Dropping [`KernelSource`] detaches every program and frees every map: nothing is pinned.

pub mod caps;
pub mod deep;
pub mod filter;
pub mod fs_kind;
pub mod hz;
pub mod listing;
pub mod offsets;
pub mod owners;
pub mod switch;
pub mod tracefs;
pub mod udp;
pub mod udp_owner;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use tokio::io::unix::AsyncFd;
use tracer_common::{counter, ClassicTracepointOffsets, Config, HookId, ABSENT};

use crate::analysis::decisions::{Decision, TwinAlgo};
use crate::analysis::event::{decode, DecodeContext, Sample};
use crate::kernel::listing::{ListingError, ListingReport};
use crate::source::{BoxFuture, EventSource, SourceCounters, SourceItem};

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
    /// A UDP socket moving this many bytes in a second is tracked as a heavy flow.
    pub udp_heavy_bytes_per_sec: u64,
    /// Attach the UDP accounting (`cgroup_skb`) programs, which every packet of the host runs
    /// through (a TCP packet only for the check that it is not UDP).
    pub udp: bool,
}

pub use tracer_common::DEFAULT_RING_BYTES;

/// How often the heavy UDP sockets are read.
const UDP_POLL: Duration = Duration::from_secs(1);

impl Default for KernelOptions {
    fn default() -> Self {
        Self {
            sample_interval: Duration::from_nanos(tracer_common::DEFAULT_SAMPLE_INTERVAL_NS),
            hook_mode: HookMode::Auto,
            ring_bytes: DEFAULT_RING_BYTES,
            filter: crate::analysis::filter::ResolvedFilter::default(),
            udp_heavy_bytes_per_sec: tracer_common::udp::DEFAULT_UDP_HEAVY_BYTES,
            udp: true,
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
        without: "owners of accepted connections are looked up in /proc as `ss -p` does",
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
    #[error("this kernel's tracefs record of {0} has no skaddr field")]
    NoSkaddr(String),
    #[error("this kernel has no {0} tracepoint")]
    NoEvent(String),
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
/// An attached hook's program (see [`KernelSource::hook_programs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookProgram {
    /// `group:event`, as in [`HookReport::name`].
    pub hook: String,
    pub prog_id: u32,
    pub fd: std::os::fd::RawFd,
}

#[derive(Clone, Debug)]
pub struct KernelInfo {
    pub hooks: Vec<HookReport>,
    /// Optional kernel fields this kernel lacks (their values read as 0).
    pub missing_fields: Vec<offsets::MissingField>,
    pub hz: u32,
    /// The start-up listing of existing sockets: what it walked and skipped, or why it did not run.
    pub snapshot: Result<ListingReport, ListingError>,
    /// Why heavy UDP flows are not tracked, when they are not.
    pub udp_unavailable: Option<String>,
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

/// Deep mode's part of the live source: the twins' session and their decisions ring buffer.
struct DeepFeed {
    ring: AsyncFd<RingBuf<MapData>>,
    // After the ring: dropping the session moves flows back and unregisters the twins.
    session: crate::kernel::deep::session::DeepSession,
    next_rescan: tokio::time::Instant,
    last_rescan: tokio::time::Instant,
    received: u64,
    decode_errors: u64,
    /// The twins' own counts (written, lost), read before they were unregistered.
    final_kernel_counts: Option<(u64, u64)>,
}

impl DeepFeed {
    /// A flow of a deep namespace still on an original algorithm (new since the last scan):
    /// move it soon rather than at the next periodic scan, so little of its start is missed.
    fn rescan_soon_for(&mut self, batch: &[Sample]) {
        let namespaces = self.session.namespaces();
        let waiting = batch.iter().any(|s| {
            TwinAlgo::ALL.iter().any(|a| a.original() == s.cc) && namespaces.iter().any(|n| n.netns == s.netns)
        });
        if waiting {
            let soon = self.last_rescan + DEEP_RESCAN_SOON;
            self.next_rescan = self.next_rescan.min(soon.max(tokio::time::Instant::now()));
        }
    }
}

/// Deep mode's decision counts: written and lost by the twins, received and undecodable here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeepCounters {
    pub written: u64,
    pub lost: u64,
    pub received: u64,
    pub decode_errors: u64,
}

/// How often deep mode looks for new flows to move onto the twins...
const DEEP_RESCAN: Duration = Duration::from_secs(1);
/// ...and how soon after a sample shows one (a new connection), at most this often.
const DEEP_RESCAN_SOON: Duration = Duration::from_millis(100);

pub struct KernelSource {
    // Field order matters for Drop: the ring buffer and counter maps go before the programs.
    ring: AsyncFd<RingBuf<MapData>>,
    deep: Option<DeepFeed>,
    counters: PerCpuArray<MapData, u64>,
    /// Until a front end takes it to change the filter while running.
    filter: Option<filter::KernelFilter>,
    /// Names owners the kernel side cannot (no `tcp:tcp_sendmsg_locked`): `None` when it can.
    owners: Option<owners::OwnerLookup>,
    ebpf: Ebpf,
    info: KernelInfo,
    /// UDP accounting, read once a second (None when it could not attach).
    udp: Option<udp::UdpAccounting>,
    udp_tick: tokio::time::Interval,
    /// When to read the ring buffer without a wake-up.
    ring_poll: tokio::time::Interval,
    /// The start-up listing's samples while its walk goes on.
    listing: Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>,
    /// Samples of the start-up listing read so far (they never pass through the ring).
    listed: u64,
    received: u64,
    decoding: Decoding,
}

/// Decoding the ring's records: what failed, and how many samples the last read held (the next
/// batch is allocated at that size once, rather than grown by doubling: growing 4,096 samples a
/// few at a time was a tenth of cctrace's time under churn).
#[derive(Debug)]
struct Decoding {
    ctx: DecodeContext,
    errors: u64,
    /// First decode error, kept for the summary.
    first_error: Option<String>,
    last_batch: usize,
}

impl Decoding {
    fn new(ctx: DecodeContext) -> Self {
        Self { ctx, errors: 0, first_error: None, last_batch: 0 }
    }
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
        let name = format!("{}:{}", h.group, h.event);
        let exists = tracefs::tracefs_root().is_ok_and(|root| tracefs::event_format(&root, h.group, h.event).is_ok());
        return Err(if exists { AttachError::NoSkaddr(name) } else { AttachError::NoEvent(name) });
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
        let udp_config = udp::config(&btf_resolver, &resolved.offsets, opts.udp_heavy_bytes_per_sec);
        // A socket small enough is copied whole when a sample is written: one read, not forty.
        let sock_span = btf_resolver
            .struct_size("tcp_sock")
            .ok()
            .filter(|&n| n <= tracer_common::SOCK_COPY_MAX)
            .map_or(0, |n| n as u32);
        drop(btf_resolver);
        let known_hz = hz::kernel_hz();
        let hz = known_hz.unwrap_or(250);
        let (classic, _tracefs_err) = classic_offsets();
        // Loaded in every mode: the start-up listing (an iter/tcp program) needs it too.
        let kernel_btf = Btf::from_sys_fs().ok();
        // Classic tracepoints cannot ask for socket cookies: when they are the hooks in use,
        // every program keys flows by socket address instead (see tracer-ebpf's flow_key).
        let key_by_socket = opts.hook_mode == HookMode::Classic || kernel_btf.is_none();
        let config = Config {
            sample_interval_ns: u64::try_from(opts.sample_interval.as_nanos()).unwrap_or(u64::MAX).max(1),
            // Every hook that attaches runs; the bits let one be switched off without a detach.
            hooks: HookId::ALL_BITS,
            key_by_socket: u32::from(key_by_socket),
            sock_span,
            // Only from a HZ found, never the guess: a jiffy taken too short would hold samples
            // back (see tracer-ebpf's due_memo).
            jiffy_ns: known_hz.map_or(0, |hz| 1_000_000_000 / hz.max(1)),
            ring_bytes: opts.ring_bytes,
            _pad: 0,
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
            .override_global("SKB_CONFIG", &udp_config, true)
            .load(EBPF_OBJECT)
            .map_err(|e| anyhow!("loading the eBPF object into the kernel failed: {}", error_chain(&e)))?;

        // The filter is in force before any program runs, the start-up listing included.
        let mut filter = filter::KernelFilter::take(&mut ebpf, &resolved.offsets)?;
        filter.apply(&opts.filter)?;

        let aya_btf = kernel_btf;
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

        let (udp, udp_unavailable) = if !opts.udp {
            (None, Some("switched off by --no-udp".to_string()))
        } else {
            match udp::UdpAccounting::attach(&mut ebpf) {
                Ok(u) => (Some(u), None),
                Err(e) => (None, Some(e.to_string())),
            }
        };
        let mut udp_tick = tokio::time::interval(UDP_POLL);
        udp_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").ok_or_else(|| anyhow!("EVENTS map missing"))?)
            .context("opening the EVENTS ring buffer")?;
        // SAFETY: the RingBuf owns its map fd and keeps it open until the AsyncFd (which owns
        // the RingBuf) is dropped; the fd is never replaced or closed behind tokio's back.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .context("registering the ring buffer with tokio")?;
        let counters = PerCpuArray::try_from(ebpf.take_map("COUNTERS").ok_or_else(|| anyhow!("COUNTERS map missing"))?)
            .context("opening the COUNTERS map")?;
        let sendmsg_off = matches!(reports[HookId::SendMsg.index()].status, HookStatus::Disabled(_));
        Ok(Self {
            ring,
            deep: None,
            counters,
            filter: Some(filter),
            owners: sendmsg_off.then(owners::OwnerLookup::default),
            ebpf,
            info: KernelInfo { hooks: reports, missing_fields: resolved.missing, hz, snapshot, udp_unavailable },
            udp,
            udp_tick,
            ring_poll: {
                let mut poll = tokio::time::interval(RING_POLL);
                poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                poll
            },
            listing,
            listed: 0,
            received: 0,
            decoding: Decoding::new(ctx),
        })
    }

    /// Read the decision events of deep mode's twins too, and keep moving the session's new
    /// flows onto them; the session ends (flows back, twins unregistered) when this source
    /// stops producing or is dropped.
    pub fn attach_deep(&mut self, session: crate::kernel::deep::session::DeepSession) -> Result<()> {
        let twins = session.twins().context("the deep-mode twins are not registered")?;
        let fd = twins.decisions_fd().context("the twins' decisions ring buffer")?;
        let map = aya::maps::Map::from_map_data(MapData::from_fd(fd).context("opening the decisions ring buffer")?)
            .context("the decisions map")?;
        let ring = RingBuf::try_from(map).context("the decisions map is not a ring buffer")?;
        // SAFETY: as for the samples ring: the RingBuf owns its fd until the AsyncFd drops it.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .context("registering the decisions ring buffer with tokio")?;
        self.deep = Some(DeepFeed {
            ring,
            session,
            next_rescan: tokio::time::Instant::now() + DEEP_RESCAN,
            last_rescan: tokio::time::Instant::now(),
            received: 0,
            decode_errors: 0,
            final_kernel_counts: None,
        });
        Ok(())
    }

    /// Decisions written and lost by the twins, and received and undecodable here.
    pub fn deep_counters(&self) -> Option<DeepCounters> {
        let deep = self.deep.as_ref()?;
        let (written, lost) = deep
            .session
            .twins()
            .map(crate::kernel::deep::Twins::counters)
            .or(deep.final_kernel_counts)
            .unwrap_or_default();
        Some(DeepCounters { written, lost, received: deep.received, decode_errors: deep.decode_errors })
    }

    pub fn info(&self) -> &KernelInfo {
        &self.info
    }

    /// Each attached hook's program: its hook name, program id and fd, for reading its run
    /// statistics (valid while this source lives).
    pub fn hook_programs(&self) -> Vec<HookProgram> {
        use std::os::fd::{AsFd, AsRawFd};
        HOOKS
            .iter()
            .zip(&self.info.hooks)
            .filter_map(|(h, report)| {
                let name = match report.status {
                    HookStatus::Btf => h.btf_prog,
                    HookStatus::Classic => h.classic_prog,
                    HookStatus::Disabled(_) => return None,
                };
                let program = self.ebpf.program(name)?;
                let prog_id = program.info().ok()?.id();
                let fd = program.fd().ok()?.as_fd().as_raw_fd();
                Some(HookProgram { hook: report.name.clone(), prog_id, fd })
            })
            .collect()
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
                aya::programs::Program::CgroupSkb(p) => p.unload(),
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

    /// Kernel-side counters by name (lost, emitted, read errors, map full, UDP accounting).
    pub fn kernel_counters(&self) -> HashMap<&'static str, u64> {
        let udp = self.udp.as_ref().map(udp::UdpAccounting::kernel_counters).unwrap_or_default();
        let mut all = HashMap::from([
            ("ringbuf_lost", self.counter(counter::RINGBUF_LOST)),
            ("emitted", self.counter(counter::EMITTED)),
            ("read_errors", self.counter(counter::READ_ERRORS)),
            ("flow_map_full", self.counter(counter::FLOW_MAP_FULL)),
            ("filtered", self.counter(counter::FILTERED)),
        ]);
        all.extend(udp);
        all
    }

    /// Whether heavy UDP flows are tracked.
    pub fn tracks_udp(&self) -> bool {
        self.udp.is_some()
    }

    async fn read_batch(&mut self) -> Result<Vec<Sample>> {
        let batch = read_samples(SampleReader {
            ring: &mut self.ring,
            ring_poll: &mut self.ring_poll,
            listing: &mut self.listing,
            listed: &mut self.listed,
            decoding: &mut self.decoding,
            owners: &mut self.owners,
        })
        .await?;
        self.received += batch.len() as u64;
        Ok(batch)
    }
}

/// What reading samples needs, borrowed apart from the rest of the source, so that the UDP and
/// deep-mode readers can wait beside it.
struct SampleReader<'a> {
    ring: &'a mut AsyncFd<RingBuf<MapData>>,
    ring_poll: &'a mut tokio::time::Interval,
    listing: &'a mut Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>,
    listed: &'a mut u64,
    decoding: &'a mut Decoding,
    owners: &'a mut Option<owners::OwnerLookup>,
}

/// The next samples (at least one): from the ring first (it is what overflows when not read),
/// then the start-up listing's. The programs wake the reader only when the ring is half full
/// (a wake-up per sample was most of a hook's cost), so the ring is also read on a short timer.
/// With unnamed flows waiting for an owner scan, the reader wakes for it even if no sample
/// comes. Cancel-safe: records are taken only in the turn that returns them.
async fn read_samples(r: SampleReader<'_>) -> Result<Vec<Sample>> {
    let SampleReader { ring, ring_poll, listing, listed, decoding, owners } = r;
    loop {
        let scan_at = owners.as_ref().and_then(owners::OwnerLookup::due_at);
        let scan_due = async {
            match scan_at {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        let mut batch = tokio::select! {
            biased;
            guard = ring.readable_mut() => {
                drain_ring(guard.context("waiting on the ring buffer")?, decoding)
            }
            _ = ring_poll.tick() => {
                let batch = drain(ring.get_mut(), decoding);
                if batch.len() == MAX_BATCH {
                    // More is waiting: the next call reads on without waiting for a tick.
                    ring_poll.reset_immediately();
                }
                batch
            }
            from_listing = next_listed(listing), if listing.is_some() => match from_listing {
                Some(batch) => {
                    *listed += batch.len() as u64;
                    batch
                }
                None => {
                    *listing = None;
                    continue;
                }
            },
            () = scan_due => {
                if let Some(owners) = owners.as_mut() {
                    owners.scan_if_due();
                }
                continue;
            }
        };
        if !batch.is_empty() {
            if let Some(owners) = owners.as_mut() {
                owners.fill(&mut batch);
            }
            return Ok(batch);
        }
    }
}

/// Up to one batch of what the ring buffer holds; readiness is cleared once it is dry.
fn drain_ring(
    mut guard: tokio::io::unix::AsyncFdReadyMutGuard<'_, RingBuf<MapData>>,
    decoding: &mut Decoding,
) -> Vec<Sample> {
    let batch = drain(guard.get_inner_mut(), decoding);
    if batch.len() < MAX_BATCH {
        // Drained: wait for the next wake-up. A full batch leaves readiness set.
        guard.clear_ready();
    }
    batch
}

/// The next decisions from the twins; between reads, new flows are moved onto them.
async fn read_decisions(deep: &mut DeepFeed) -> Result<Vec<Decision>> {
    const MAX_BATCH: usize = 4096;
    loop {
        let mut guard = tokio::select! {
            guard = deep.ring.readable_mut() => guard.context("waiting on the decisions ring buffer")?,
            () = tokio::time::sleep_until(deep.next_rescan) => {
                deep.last_rescan = tokio::time::Instant::now();
                deep.next_rescan = deep.last_rescan + DEEP_RESCAN;
                match deep.session.rescan() {
                    Ok(moved) if moved.switched > 0 => log::info!("deep: moved {} new flows onto the twins", moved.switched),
                    Ok(_) => {}
                    Err(e) => log::warn!("deep: {e:#}"),
                }
                continue;
            }
        };
        let ring = guard.get_inner_mut();
        let mut batch = Vec::new();
        while batch.len() < MAX_BATCH {
            let Some(item) = ring.next() else { break };
            match crate::analysis::decisions::decode(&item) {
                Ok(d) => batch.push(d),
                Err(e) => {
                    deep.decode_errors += 1;
                    log::warn!("deep: {e}");
                }
            }
        }
        if batch.len() < MAX_BATCH {
            guard.clear_ready();
        }
        if !batch.is_empty() {
            deep.received += batch.len() as u64;
            return Ok(batch);
        }
    }
}

/// Detaching a tracepoint program does not wait for runs already under way on other CPUs: one
/// can still write a sample (and count it as emitted) after the detach returns. Those runs
/// hold the RCU read lock, so an RCU grace period, which `membarrier(MEMBARRIER_CMD_GLOBAL)`
/// waits for, sees them all finished; where that command is refused (nohz_full CPUs), a pause
/// far longer than any program run stands in for it.
fn wait_for_running_programs() {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let waited = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0 as libc::c_long) } == 0;
    if !waited {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Samples read from the ring buffer per batch at most.
const MAX_BATCH: usize = 4096;

/// How often the ring buffer is read without a wake-up: the programs wake the reader only when
/// it is half full. At the default 8 MiB (32,768 samples) that is 1.6 million samples a second
/// before a wake-up is needed.
const RING_POLL: Duration = Duration::from_millis(20);

/// Up to [`MAX_BATCH`] samples from `ring`, decoded; what does not decode is counted.
fn drain(ring: &mut RingBuf<MapData>, decoding: &mut Decoding) -> Vec<Sample> {
    let mut batch = Vec::new();
    while batch.len() < MAX_BATCH {
        let Some(item) = ring.next() else { break };
        if batch.capacity() == 0 {
            // Sized once, at about what the last read held (nothing is allocated while idle).
            batch.reserve_exact(decoding.last_batch.clamp(16, MAX_BATCH));
        }
        match decode(&item, &decoding.ctx) {
            Ok(s) => batch.push(s),
            Err(e) => {
                decoding.errors += 1;
                if decoding.first_error.is_none() {
                    decoding.first_error = Some(e.to_string());
                }
            }
        }
    }
    if !batch.is_empty() {
        decoding.last_batch = batch.len();
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

    /// Samples, heavy UDP readings when due, or in deep mode decisions: whichever is ready
    /// first. Cancel-safe: each reader takes records only in the turn it completes in, and the
    /// UDP poll is an interval tick.
    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        Box::pin(async move {
            let Self { ring, ring_poll, listing, listed, deep, decoding, received, udp, udp_tick, owners, .. } = self;
            let samples = read_samples(SampleReader { ring, ring_poll, listing, listed, decoding, owners });
            let udp_due = async {
                match udp.as_mut() {
                    Some(udp) => {
                        udp_tick.tick().await;
                        udp.poll(crate::clock::monotonic_now_ns())
                    }
                    None => std::future::pending().await,
                }
            };
            let decisions = async {
                match deep.as_mut() {
                    Some(deep) => read_decisions(deep).await,
                    None => std::future::pending().await,
                }
            };
            let item = tokio::select! {
                biased;
                readings = udp_due => Ok(SourceItem::Sockets(readings)),
                batch = samples => batch.map(SourceItem::Batch),
                decisions = decisions => decisions.map(SourceItem::Decisions),
            };
            if let Ok(SourceItem::Batch(b)) = &item {
                *received += b.len() as u64;
                if let Some(deep) = deep {
                    deep.rescan_soon_for(b);
                }
            }
            item.map(Some)
        })
    }

    fn counters(&self) -> SourceCounters {
        SourceCounters {
            received: self.received,
            lost: self.counter(counter::RINGBUF_LOST),
            decode_errors: self.decoding.errors,
            kernel_read_errors: self.counter(counter::READ_ERRORS),
            flow_map_full: self.counter(counter::FLOW_MAP_FULL),
            filtered: self.counter(counter::FILTERED),
            kernel_emitted: Some(self.emitted()),
            udp: self.udp.as_ref().map(udp::UdpAccounting::totals),
        }
    }

    fn stop_producing(&mut self) -> Result<()> {
        self.detach_programs();
        // The listing reads no further; what it already queued is still delivered.
        if let Some(listing) = &mut self.listing {
            listing.close();
        }
        wait_for_running_programs();
        // Deep mode ends with the run: flows back to their algorithm, then the twins go.
        if let Some(deep) = &mut self.deep {
            if let Some(twins) = deep.session.twins() {
                deep.final_kernel_counts = Some(twins.counters());
            }
            let moved = deep.session.finish().context("putting flows back from the deep-mode twins")?;
            log::info!("deep: moved {} flows back from the twins", moved.switched);
        }
        Ok(())
    }

    fn drained(&self) -> bool {
        // Every record read was either decoded or counted as a decode error. Lost samples are
        // no part of it: `emitted` counts only the samples the ring took, so counting the lost
        // ones as read would end the drain with records still in the ring.
        self.received + self.decoding.errors >= self.emitted()
    }

    fn describe(&self) -> String {
        let attached = self.info.hooks.iter().filter(|h| !matches!(h.status, HookStatus::Disabled(_))).count();
        format!("live kernel ({attached}/{} hooks)", self.info.hooks.len())
    }
}
