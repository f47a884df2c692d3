//! The live kernel event source: its options and what start-up learned, and [`KernelSource`],
//! which loads the embedded eBPF object, attaches the hooks (see `attach`), hands out the
//! samples (`ring`), UDP readings (`udp`) and deep mode's decisions (`deep::feed`) as they come,
//! and detaches everything at the end.
//!
//! Dropping [`KernelSource`] detaches every program and frees every map: nothing is pinned.

mod attach;
pub mod btf_file;
pub mod caps;
mod counters;
pub mod deep;
pub mod filter;
mod held_sockets;
pub mod hook_cost;
pub mod hz;
pub mod listing;
mod load;
pub mod nobtf;
pub mod offsets;
pub mod preflight;
mod probe_window;
mod receiver_hold;
mod ring;
pub mod switch;
pub mod tracefs;
pub mod udp;
mod udp_recv;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{MapData, RingBuf};
use aya::{Btf, Ebpf, EbpfLoader};
use tokio::io::unix::AsyncFd;
use tracer_common::{counter, Config, HookId};

use crate::analysis::sample::{DecodeContext, Sample};
use crate::host::owners;
use crate::kernel::attach::{attach_hooks, classic_offsets, error_chain, HOOKS};
use crate::kernel::counters::CounterMap;
use crate::kernel::deep::feed::{read_decisions, DeepCounters, DeepFeed};
use crate::kernel::listing::{ListingError, ListingReport};
use crate::kernel::probe_window::ProbeWindow;
use crate::kernel::ring::{read_samples, take_queued, Decoding, SampleReader};
use crate::source::{BoxFuture, EventSource, Ready, SourceCounters, SourceItem};

/// Which tracepoint flavour to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HookMode {
    /// BTF tracepoints where they load, classic tracepoints otherwise.
    Auto,
    /// BTF tracepoints only.
    Btf,
    /// Classic tracefs tracepoints only.
    Classic,
    /// Without BTF: classic tracepoints that hand over their own record, and sock_diag for the
    /// rest (chosen by itself on a kernel without BTF).
    NoBtf,
}

#[derive(Clone, Debug)]
pub struct KernelOptions {
    pub sample_interval: Duration,
    pub hook_mode: HookMode,
    /// Ring-buffer size in bytes: a power of two (the CLI's `--ring-kib` checks it), at least one
    /// page (checked at start).
    pub ring_bytes: u32,
    /// Flows to keep (open: all), in force from the first program run.
    pub filter: crate::analysis::filter::ResolvedFilter,
    /// A UDP socket moving this many bytes in a second is tracked as a heavy flow.
    pub udp_heavy_bytes_per_sec: u64,
    /// Attach the UDP accounting programs, which every socket send and receive call of the host
    /// runs through (every packet, on kernels before 6.3): anything not UDP for one check.
    pub udp: bool,
    /// Keep `tcp_probe`'s program attached between sample windows.
    pub probe_always_attached: bool,
    /// Follow its windows whether or not they pay (tests of the windows).
    pub probe_windows_always: bool,
    /// The kernel's BTF in this file (`--btf`), where the kernel has none of its own.
    pub btf_file: Option<std::path::PathBuf>,
}

pub use tracer_common::DEFAULT_RING_BYTES;

/// How often the heavy UDP sockets are read (at the first tick this long after the last read).
const UDP_POLL_NS: u64 = 1_000_000_000;

impl Default for KernelOptions {
    fn default() -> Self {
        Self {
            sample_interval: Duration::from_nanos(tracer_common::DEFAULT_SAMPLE_INTERVAL_NS),
            hook_mode: HookMode::Auto,
            ring_bytes: DEFAULT_RING_BYTES,
            filter: crate::analysis::filter::ResolvedFilter::default(),
            udp_heavy_bytes_per_sec: tracer_common::udp::DEFAULT_UDP_HEAVY_BYTES,
            udp: true,
            probe_always_attached: false,
            probe_windows_always: false,
            btf_file: None,
        }
    }
}

/// How one hook ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookStatus {
    Btf,
    Classic,
    /// A classic tracepoint whose program hands its record over whole (the mode without BTF).
    Record,
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
    #[error("tracefs unavailable: {0}")]
    NoTracefs(String),
    #[error("{0} has no classic twin (BTF only)")]
    BtfOnly(String),
    #[error("load: {0}")]
    Load(String),
    #[error("attach: {0}")]
    Attach(String),
    #[error("attach: perf_event_open refused: {0}")]
    PerfRefused(String),
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
            HookStatus::Record => format!("{}: classic tracepoint, its record only", self.name),
            HookStatus::Disabled(why) => format!("{}: disabled ({why})", self.name),
        }
    }
}

/// An attached hook's program (see [`KernelSource::hook_programs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookProgram {
    /// `group:event`, as in [`HookReport::name`].
    pub hook: String,
    /// The kernel's id of its program, by which its run statistics are read.
    pub prog_id: u32,
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
    /// Why heavy UDP flows are not tracked, when they are not.
    pub udp_unavailable: Option<String>,
    /// Why UDP is accounted on every packet (`cgroup_skb`) rather than per syscall, when it is.
    pub udp_per_packet: Option<String>,
    /// Why UDP counted per syscall is not classified (the caller's buffer cannot be found on
    /// this architecture or kernel), when it is counted so and is not.
    pub udp_unclassified: Option<String>,
    /// The mode without BTF runs: tracepoint records and sock_diag.
    pub no_btf: bool,
    /// Where the kernel's BTF came from when not from the kernel itself (`--btf`, or where
    /// libbpf looks).
    pub btf_file: Option<String>,
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
    deep: Option<DeepFeed>,
    counters: CounterMap,
    /// Until a front end takes it to change the filter while running.
    filter: Option<filter::KernelFilter>,
    /// Names owners the kernel side cannot (no `tcp:tcp_sendmsg_locked`): `None` when it can.
    owners: Option<owners::OwnerLookup>,
    ebpf: Ebpf,
    info: KernelInfo,
    /// UDP accounting, read once a second at a tick (None when it could not attach).
    udp: Option<udp::UdpAccounting>,
    /// When the heavy UDP sockets were last read (CLOCK_MONOTONIC ns).
    udp_read_ns: u64,
    /// The ring holds more than the last read took: see `ring::SampleReader::more_queued`.
    more_queued: bool,
    /// The start-up listing's samples while its walk goes on.
    listing: Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>,
    /// Samples of the start-up listing read so far (they never pass through the ring).
    listed: u64,
    received: u64,
    decoding: Decoding,
    /// `tcp:tcp_probe` attached only while periodic samples are due.
    probe_window: ProbeWindow,
}

impl KernelSource {
    /// Check the options and privileges, resolve offsets, load and attach. Must run inside a
    /// tokio runtime.
    pub fn start(opts: &KernelOptions, kernel_btf: &btf_file::KernelBtf) -> Result<Self> {
        check_ring_bytes(opts.ring_bytes)?;
        let (prelude, btf_resolver) = load::prelude(kernel_btf)?;
        let facts = BtfFacts::read(&btf_resolver, &prelude.resolved, opts);
        drop(btf_resolver);
        let known_hz = hz::kernel_hz();
        let hz = known_hz.unwrap_or(hz::GUESSED_HZ);
        let classic = classic_offsets();
        // Loaded in every mode: the start-up listing (an iter/tcp program) needs it too. A
        // file's BTF gives the type ids BTF-typed programs are loaded against; on a kernel
        // without BTF of its own the kernel refuses them and the classic programs attach.
        let aya_btf = match kernel_btf {
            btf_file::KernelBtf::Kernel => Btf::from_sys_fs().ok(),
            btf_file::KernelBtf::File { raw, .. } => Btf::parse(raw, aya::Endianness::default()).ok(),
        };
        let config = kernel_config(opts, &facts, known_hz, aya_btf.is_some());
        let mut ebpf = prelude.load(
            EbpfLoader::new()
                .map_max_entries("EVENTS", opts.ring_bytes)
                .override_global("CLASSIC", &classic.offsets, true)
                .override_global("CONFIG", &config, true)
                .override_global("SKB_CONFIG", &facts.udp_config, true)
                .override_global("UDP_SYSCALL_CONFIG", &facts.udp_syscall_config, true),
        )?;

        // The filter is in force before any program runs, the start-up listing included.
        let mut filter = filter::KernelFilter::take(&mut ebpf, &prelude.resolved.offsets)?;
        filter.apply(&opts.filter)?;

        let attached = attach_hooks(&mut ebpf, opts.hook_mode, aya_btf.as_ref(), &classic)?;
        let probe_window = probe_window(attached.probe_link, &config, opts);
        let reports = attached.reports;

        // With the hooks attached, list the sockets that already exist, so idle flows show too.
        let ctx = DecodeContext { hz };
        let (snapshot, listing) = match aya_btf.as_ref() {
            Some(btf) => listing::start_listing(&mut ebpf, btf, ctx),
            None => Err(ListingError::BtfUnavailable),
        }
        .map_or_else(|e| (Err(e), None), |walk| (Ok(walk.report), Some(walk.batches)));
        let udp =
            UdpStart::attach(&mut ebpf, aya_btf.as_ref(), &reports, opts, &facts.udp_config, facts.udp_unclassified);
        let ring = open_ring(&mut ebpf)?;
        let counters = CounterMap::take(&mut ebpf)?;
        let send_call_off = matches!(reports[HookId::SendCall.index()].status, HookStatus::Disabled(_));
        Ok(Self {
            ring,
            deep: None,
            counters,
            filter: Some(filter),
            owners: send_call_off.then(owners::OwnerLookup::default),
            ebpf,
            info: KernelInfo {
                hooks: reports,
                missing_fields: prelude.resolved.missing,
                hz,
                snapshot,
                udp_unavailable: udp.unavailable,
                udp_per_packet: udp.per_packet,
                udp_unclassified: udp.unclassified,
                no_btf: false,
                btf_file: match kernel_btf {
                    btf_file::KernelBtf::Kernel => None,
                    btf_file::KernelBtf::File { .. } => Some(kernel_btf.origin()),
                },
            },
            udp: udp.accounting,
            udp_read_ns: 0,
            more_queued: false,
            listing,
            listed: 0,
            received: 0,
            probe_window,
            decoding: Decoding::new(ctx),
        })
    }

    /// Read the decision events of deep mode's twins too, and keep moving the session's new
    /// flows onto them; the session ends (flows back, twins unregistered) when this source
    /// stops producing or is dropped.
    pub fn attach_deep(&mut self, session: deep::session::DeepSession) -> Result<()> {
        self.deep = Some(DeepFeed::open(session)?);
        Ok(())
    }

    /// Decisions written and lost by the twins, and received and undecodable here.
    pub fn deep_counters(&self) -> Option<DeepCounters> {
        self.deep.as_ref().map(DeepFeed::counters)
    }

    pub fn info(&self) -> &KernelInfo {
        &self.info
    }

    /// Each attached hook's program: its hook name and program id, for reading its run
    /// statistics (found while this source lives).
    pub fn hook_programs(&self) -> Vec<HookProgram> {
        let mut programs = hook_programs(&self.ebpf, &self.info.hooks);
        let udp = self
            .udp
            .iter()
            .flat_map(udp::UdpAccounting::program_names)
            .filter_map(|name| program_of(&self.ebpf, format!("udp:{name}"), name));
        programs.extend(udp);
        programs
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

    /// Samples the kernel handed over so far: written into the ring buffer, or read from the
    /// start-up listing's iterators.
    pub fn emitted(&self) -> u64 {
        self.counters.get(counter::EMITTED) + self.listed
    }

    /// Kernel-side counters by name (lost, emitted, read errors, map full, UDP accounting).
    pub fn kernel_counters(&self) -> HashMap<&'static str, u64> {
        let mut all = self.counters.by_name();
        all.extend(self.udp.as_ref().map(udp::UdpAccounting::kernel_counters).unwrap_or_default());
        all.insert("probe_windows", self.probe_window.windows);
        all.insert("probe_windows_kept_attached", self.probe_window.kept);
        all.insert("probe_window_attach_failed", self.probe_window.attach_failures);
        all
    }

    /// Whether heavy UDP flows are tracked.
    pub fn tracks_udp(&self) -> bool {
        self.udp.is_some()
    }

    async fn read_batch(&mut self) -> Result<Vec<Sample>> {
        let batch = read_samples(self.sample_reader()).await?;
        self.received += batch.len() as u64;
        Ok(batch)
    }

    /// What reading samples needs (see [`ring::SampleReader`]).
    fn sample_reader(&mut self) -> SampleReader<'_> {
        SampleReader {
            ring: &mut self.ring,
            more_queued: &mut self.more_queued,
            listing: &mut self.listing,
            listed: &mut self.listed,
            decoding: &mut self.decoding,
            owners: &mut self.owners,
            probe_window: &mut self.probe_window,
            ebpf: &mut self.ebpf,
            counters: &self.counters,
        }
    }
}

/// Where the running kernel's BTF is, when the kernel has it.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The live kernel source, with BTF or without.
pub enum LiveSource {
    Btf(Box<KernelSource>),
    NoBtf(Box<nobtf::NoBtfSource>),
}

impl LiveSource {
    /// Start the mode `opts` asks for: without BTF where asked, or where `Auto` finds none.
    pub fn start(opts: &KernelOptions) -> Result<Self> {
        if opts.hook_mode == HookMode::NoBtf {
            return Ok(Self::NoBtf(Box::new(nobtf::NoBtfSource::start(opts)?)));
        }
        match btf_file::find(opts.btf_file.as_deref())? {
            btf_file::Found::Btf(kernel_btf) => Ok(Self::Btf(Box::new(KernelSource::start(opts, &kernel_btf)?))),
            btf_file::Found::None(_) if opts.hook_mode == HookMode::Auto => {
                Ok(Self::NoBtf(Box::new(nobtf::NoBtfSource::start(opts)?)))
            }
            btf_file::Found::None(tried) => bail!("{}", no_btf_refusal(opts.hook_mode, &tried)),
        }
    }

    fn source(&self) -> &dyn EventSource {
        match self {
            Self::Btf(s) => s.as_ref(),
            Self::NoBtf(s) => s.as_ref(),
        }
    }

    fn source_mut(&mut self) -> &mut dyn EventSource {
        match self {
            Self::Btf(s) => s.as_mut(),
            Self::NoBtf(s) => s.as_mut(),
        }
    }

    pub fn info(&self) -> &KernelInfo {
        match self {
            Self::Btf(s) => s.info(),
            Self::NoBtf(s) => s.info(),
        }
    }

    pub fn hook_programs(&self) -> Vec<HookProgram> {
        match self {
            Self::Btf(s) => s.hook_programs(),
            Self::NoBtf(s) => s.hook_programs(),
        }
    }

    pub fn take_filter(&mut self) -> Option<filter::KernelFilter> {
        match self {
            Self::Btf(s) => s.take_filter(),
            Self::NoBtf(s) => s.take_filter(),
        }
    }

    pub fn deep_counters(&self) -> Option<DeepCounters> {
        match self {
            Self::Btf(s) => s.deep_counters(),
            Self::NoBtf(_) => None,
        }
    }

    /// Deep mode's twins beside the tracing: struct_ops programs, which need the kernel's BTF.
    pub fn attach_deep(&mut self, session: deep::session::DeepSession) -> Result<()> {
        match self {
            Self::Btf(s) => s.attach_deep(session),
            Self::NoBtf(_) => bail!("--deep needs kernel BTF ({KERNEL_BTF}): its twins are struct_ops programs"),
        }
    }
}

impl EventSource for LiveSource {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        self.source_mut().next_batch()
    }

    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        self.source_mut().next_item()
    }

    fn take_ready(&mut self) -> Ready {
        self.source_mut().take_ready()
    }

    fn counters(&self) -> SourceCounters {
        self.source().counters()
    }

    fn describe(&self) -> String {
        self.source().describe()
    }

    fn stop_producing(&mut self) -> Result<()> {
        self.source_mut().stop_producing()
    }

    fn drained(&self) -> bool {
        self.source().drained()
    }
}

/// Why `--hooks btf` or `classic` cannot run here, in one line: they read the socket at the
/// offsets BTF gives.
fn no_btf_refusal(mode: HookMode, tried: &[(std::path::PathBuf, String)]) -> String {
    let mode = if mode == HookMode::Btf { "btf" } else { "classic" };
    let mut line = format!(
        "--hooks {mode} reads sockets at offsets from the kernel's BTF, and there is none: {KERNEL_BTF} is absent"
    );
    for (path, why) in tried {
        line.push_str(&format!(", {} {why}", path.display()));
    }
    line.push_str("; give one with --btf FILE, or run without BTF (--hooks auto or no-btf)");
    line
}

/// A loaded program's hook and id, if it loaded.
fn program_of(ebpf: &Ebpf, hook: String, name: &str) -> Option<HookProgram> {
    let prog_id = ebpf.program(name)?.info().ok()?.id();
    Some(HookProgram { hook, prog_id })
}

/// The program of each TCP hook that attached.
fn hook_programs(ebpf: &Ebpf, reports: &[HookReport]) -> Vec<HookProgram> {
    HOOKS
        .iter()
        .zip(reports)
        .filter_map(|(h, report)| {
            let name = match report.status {
                HookStatus::Btf => h.btf_prog,
                HookStatus::Classic => h.classic_prog,
                HookStatus::Record => h.record_prog,
                HookStatus::Disabled(_) => return None,
            };
            program_of(ebpf, report.name.clone(), name)
        })
        .collect()
}

/// The ring buffer must span at least one of the kernel's pages, which only the running kernel
/// knows (16 KiB on a Raspberry Pi 5, 64 KiB on some arm64 servers): checked here, before
/// anything loads. That it is a power of two is the CLI's check (`--ring-kib`), not repeated.
pub(super) fn check_ring_bytes(ring_bytes: u32) -> Result<()> {
    let page = crate::host::page_size();
    if ring_bytes < page {
        bail!("the ring buffer size must be at least one page ({page} bytes here), got {ring_bytes}");
    }
    Ok(())
}

/// What the programs are told about this kernel beyond the offsets, read from its BTF.
struct BtfFacts {
    udp_config: tracer_common::udp::SkbConfig,
    udp_syscall_config: tracer_common::udp::UdpSyscallConfig,
    /// Why UDP counted per syscall would not be classified, when it would not.
    udp_unclassified: Option<String>,
    /// Bytes of a `tcp_sock` copied whole when a sample is written (0: read field by field).
    sock_span: u32,
    /// Whether tracing programs may ask for a socket's cookie.
    cookies_in_tracing: bool,
}

impl BtfFacts {
    fn read(btf: &offsets::BtfResolver, resolved: &offsets::Resolved, opts: &KernelOptions) -> Self {
        let udp_config = udp::config(btf, &resolved.offsets, opts.udp_heavy_bytes_per_sec);
        let (udp_syscall_config, udp_unclassified) = udp::syscall_config(btf);
        // A socket small enough is copied whole when a sample is written: one read, not forty.
        let sock_span =
            btf.struct_size("tcp_sock").ok().filter(|&n| n <= tracer_common::SOCK_COPY_MAX).map_or(0, |n| n as u32);
        // Tracing programs may ask for a socket's cookie through the helper this function
        // implements (Linux 5.12); before it, every program keys flows by socket address.
        let cookies_in_tracing = btf.has_function("bpf_get_socket_ptr_cookie");
        Self { udp_config, udp_syscall_config, udp_unclassified, sock_span, cookies_in_tracing }
    }
}

/// The programs' `CONFIG`, from the options and what this kernel offers (`known_hz`: its HZ if
/// found; `kernel_btf`: whether aya read its BTF).
fn kernel_config(opts: &KernelOptions, facts: &BtfFacts, known_hz: Option<u32>, kernel_btf: bool) -> Config {
    // Classic tracepoints cannot ask for socket cookies, nor can BTF ones before 5.12: then
    // every program keys flows by socket address instead (see tracer-ebpf's flow_key).
    let key_by_socket = opts.hook_mode == HookMode::Classic || !kernel_btf || !facts.cookies_in_tracing;
    Config {
        sample_interval_ns: u64::try_from(opts.sample_interval.as_nanos()).unwrap_or(u64::MAX).max(1),
        // Every hook that attaches runs; the bits let one be switched off without a detach.
        hooks: HookId::ALL_BITS,
        key_by_socket: u32::from(key_by_socket),
        sock_span: facts.sock_span,
        // Only from a HZ found, never the guess: a jiffy taken too short would hold samples
        // back (see tracer-ebpf's due_memo).
        jiffy_ns: known_hz.map_or(0, |hz| 1_000_000_000 / hz.max(1)),
        ring_bytes: opts.ring_bytes,
        _pad: 0,
    }
}

/// `tcp:tcp_probe`'s windows, over its program's link if it attached.
fn probe_window(link: Option<attach::HookLink>, config: &Config, opts: &KernelOptions) -> ProbeWindow {
    let mut window = ProbeWindow::new(
        link,
        config.sample_interval_ns,
        crate::clock::monotonic_now_ns(),
        !opts.probe_always_attached,
    );
    if opts.probe_windows_always {
        window.follow_windows_always();
    }
    window
}

/// The UDP accounting as start-up left it, and why it does not do what it does not.
struct UdpStart {
    accounting: Option<udp::UdpAccounting>,
    unavailable: Option<String>,
    per_packet: Option<String>,
    unclassified: Option<String>,
}

impl UdpStart {
    /// Attach the UDP accounting unless the options switch it off; `unclassified` (why UDP
    /// counted per syscall would not be classified) is kept only where it is counted so.
    fn attach(
        ebpf: &mut Ebpf,
        btf: Option<&Btf>,
        reports: &[HookReport],
        opts: &KernelOptions,
        config: &tracer_common::udp::SkbConfig,
        unclassified: Option<String>,
    ) -> Self {
        let (accounting, unavailable) = if !opts.udp {
            (None, Some("switched off by --no-udp".to_string()))
        } else {
            let send_hook = reports[HookId::SendCall.index()].status == HookStatus::Btf;
            match udp::UdpAccounting::attach(ebpf, btf, send_hook, config, crate::clock::monotonic_now_ns()) {
                Ok(u) => (Some(u), None),
                Err(e) => (None, Some(e.to_string())),
            }
        };
        let per_packet = accounting.as_ref().and_then(|u| match &u.way {
            udp::UdpWay::PerSyscall => None,
            udp::UdpWay::PerPacket(why) => Some(why.clone()),
        });
        // Per packet, the payload is read from the packet itself: the registers play no part.
        let per_syscall = accounting.as_ref().is_some_and(|u| u.way == udp::UdpWay::PerSyscall);
        Self { accounting, unavailable, per_packet, unclassified: unclassified.filter(|_| per_syscall) }
    }
}

/// The `EVENTS` ring buffer, registered with tokio.
fn open_ring(ebpf: &mut Ebpf) -> Result<AsyncFd<RingBuf<MapData>>> {
    let ring = RingBuf::try_from(ebpf.take_map("EVENTS").ok_or_else(|| anyhow!("EVENTS map missing"))?)
        .context("opening the EVENTS ring buffer")?;
    // SAFETY: the RingBuf owns its map fd and keeps it open until the AsyncFd (which owns
    // the RingBuf) is dropped; the fd is never replaced or closed behind tokio's back.
    unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .context("registering the ring buffer with tokio")
}

/// Detaching a tracepoint program does not wait for runs already under way on other CPUs: one
/// can still write a sample (and count it as emitted) after the detach returns. Those runs
/// hold the RCU read lock, so an RCU grace period, which `membarrier(MEMBARRIER_CMD_GLOBAL)`
/// waits for, sees them all finished; where that command is refused (nohz_full CPUs), a pause
/// far longer than any program run stands in for it.
pub(super) fn wait_for_running_programs() {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let waited = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0 as libc::c_long) } == 0;
    if !waited {
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl EventSource for KernelSource {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        Box::pin(async move { self.read_batch().await.map(Some) })
    }

    /// Samples, or in deep mode decisions: whichever is ready first. Cancel-safe: each reader
    /// takes records only in the turn it completes in.
    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        Box::pin(async move {
            let Self {
                ring,
                more_queued,
                listing,
                listed,
                deep,
                decoding,
                received,
                owners,
                probe_window,
                ebpf,
                counters,
                ..
            } = self;
            let samples = read_samples(SampleReader {
                ring,
                more_queued,
                listing,
                listed,
                decoding,
                owners,
                probe_window,
                ebpf,
                counters,
            });
            let decisions = async {
                match deep.as_mut() {
                    Some(deep) => read_decisions(deep).await,
                    None => std::future::pending().await,
                }
            };
            let item = tokio::select! {
                biased;
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

    /// What the ring holds now, and the heavy UDP sockets once a second.
    fn take_ready(&mut self) -> Ready {
        let samples = take_queued(self.sample_reader());
        self.received += samples.len() as u64;
        if let Some(deep) = &mut self.deep {
            deep.rescan_soon_for(&samples);
        }
        let now_ns = crate::clock::monotonic_now_ns();
        let sockets = match &mut self.udp {
            Some(udp) if now_ns.saturating_sub(self.udp_read_ns) >= UDP_POLL_NS => {
                self.udp_read_ns = now_ns;
                Some(udp.poll(&mut self.ebpf, now_ns))
            }
            _ => None,
        };
        Ready { samples, sockets, actions: Vec::new() }
    }

    fn counters(&self) -> SourceCounters {
        SourceCounters {
            received: self.received,
            lost: self.counters.get(counter::RINGBUF_LOST),
            decode_errors: self.decoding.errors,
            kernel_read_errors: self.counters.get(counter::READ_ERRORS),
            flow_map_full: self.counters.get(counter::FLOW_MAP_FULL),
            filtered: self.counters.get(counter::FILTERED),
            kernel_emitted: Some(self.emitted()),
            udp: self.udp.as_ref().map(udp::UdpAccounting::totals),
        }
    }

    fn stop_producing(&mut self) -> Result<()> {
        self.probe_window.stop();
        if let Some(udp) = &mut self.udp {
            udp.stop();
        }
        self.detach_programs();
        // The listing reads no further; what it already queued is still delivered.
        if let Some(listing) = &mut self.listing {
            listing.close();
        }
        wait_for_running_programs();
        // What they wrote is read at once by the final drain, not at a wake-up that never comes.
        self.more_queued = true;
        // Deep mode ends with the run: flows back to their algorithm, then the twins go.
        if let Some(deep) = &mut self.deep {
            deep.finish()?;
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
