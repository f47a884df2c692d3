//! The UDP accounting programs: where the kernel has the `sock:sock_send_length` and
//! `sock:sock_recv_length` tracepoints (Linux 6.3), `cct_send_call` (also the TCP owner hook)
//! and `cct_udp_recv` count where UDP is sent and received, one run per syscall and none per
//! packet; elsewhere `cct_udp_egress` and
//! `cct_udp_ingress` are attached as `cgroup_skb` at the cgroup v2 root and run on every packet
//! of the host. Either way they fill one table, read once a second from the heavy-socket index
//! into [`UdpSample`]s with their owners.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::programs::cgroup_skb::CgroupSkbAttachType;
use aya::programs::{BtfTracePoint, CgroupAttachMode, CgroupSkb};
use aya::{Btf, Ebpf};
use tracer_common::udp::{udp_counter, udp_syscall, SkbConfig, UdpSocketState, UdpSyscallConfig};
use tracer_common::{family, Offsets};

use crate::analysis::udp::{Head, Process, SocketReadings, UdpSample};
use crate::host::udp_owner::owner_of_socket;
use crate::kernel::offsets::BtfResolver;
use crate::kernel::udp_recv::{self, RecvHook, RecvPlan};

/// A heavy socket without a packet for this long leaves the index (and the LRU table, so a
/// later burst is judged afresh).
const QUIET_NS: u64 = 30_000_000_000;
/// How often an owner nobody was found for is looked for again (a walk of `/proc`).
const OWNER_RETRY_NS: u64 = 10_000_000_000;
/// How long what was read of a found owner (command line, TUN, TCP connections) is kept.
const OWNER_REFRESH_NS: u64 = 5_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    #[error("no cgroup v2 mount found in /proc/self/mountinfo")]
    NoCgroup2,
    #[error("opening the cgroup v2 root {0}: {1}")]
    OpenRoot(String, std::io::Error),
    #[error("program {0} missing from the object")]
    ProgramMissing(&'static str),
    #[error("{0}: {1}")]
    Program(&'static str, String),
    #[error("map {0}: {1}")]
    Map(&'static str, String),
}

/// The settings and struct offsets the programs need, from the kernel's BTF.
pub fn config(btf: &BtfResolver, offsets: &Offsets, heavy_bytes_per_window: u64) -> SkbConfig {
    let at = |strukt: &str, path: &str| btf.field(strukt, path).map_or(tracer_common::ABSENT, |f| f.bit_offset / 8);
    SkbConfig {
        heavy_bytes_per_window,
        sk_socket: at("sock", "sk_socket"),
        socket_file: at("socket", "file"),
        file_inode: at("file", "f_inode"),
        inode_ino: at("inode", "i_ino"),
        skc_net: offsets.skc_net,
        net_ns_inum: offsets.net_ns_inum,
        sender_pid: u32::from(cgroup_skb_knows_the_sender()),
        ..SkbConfig::default_config()
    }
}

/// Whether `cgroup_skb` programs may call `bpf_get_current_pid_tgid` on this kernel (5.10's and 6.1's may
/// not, and refused the per-packet programs whole when they did): libbpf loads a probe program.
fn cgroup_skb_knows_the_sender() -> bool {
    // SAFETY: a probe that loads and closes a program of its own; no pointer is passed (the
    // options may be NULL).
    let supported = unsafe {
        libbpf_sys::libbpf_probe_bpf_helper(
            libbpf_sys::BPF_PROG_TYPE_CGROUP_SKB,
            libbpf_sys::BPF_FUNC_get_current_pid_tgid,
            std::ptr::null(),
        )
    };
    supported == 1
}

/// The saved user registers that hold the syscall number and arguments 1 (the buffer or
/// message) and 4 (`sendto`'s destination), as paths into this architecture's `struct pt_regs`:
/// the syscall convention is the architecture's, the layout is read from the kernel's BTF.
/// x86-64: the number in `orig_ax`, arguments in di, si, dx, r10, r8. arm64: the number in
/// `syscallno` (an s32: the program reads 8 bytes and keeps the low 4, little-endian), arguments
/// in x0-x5 of the `user_pt_regs` at the head of its `pt_regs`.
#[cfg(target_arch = "x86_64")]
const SYSCALL_REGISTERS: Option<[&str; 3]> = Some(["orig_ax", "si", "r8"]);
#[cfg(target_arch = "aarch64")]
const SYSCALL_REGISTERS: Option<[&str; 3]> = Some(["syscallno", "user_regs.regs[1]", "user_regs.regs[4]"]);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYSCALL_REGISTERS: Option<[&str; 3]> = None;

/// The syscalls by [`udp_syscall`] index: numbers both architectures have (arm64 has no
/// `send`/`recv` of its own either; libc's go through `sendto`/`recvfrom`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn syscall_numbers() -> [u32; udp_syscall::COUNT] {
    let mut nr = [u32::MAX; udp_syscall::COUNT];
    nr[udp_syscall::WRITE] = libc::SYS_write as u32;
    nr[udp_syscall::SENDTO] = libc::SYS_sendto as u32;
    nr[udp_syscall::WRITEV] = libc::SYS_writev as u32;
    nr[udp_syscall::SENDMSG] = libc::SYS_sendmsg as u32;
    nr[udp_syscall::SENDMMSG] = libc::SYS_sendmmsg as u32;
    nr[udp_syscall::READ] = libc::SYS_read as u32;
    nr[udp_syscall::RECVFROM] = libc::SYS_recvfrom as u32;
    nr[udp_syscall::READV] = libc::SYS_readv as u32;
    nr[udp_syscall::RECVMSG] = libc::SYS_recvmsg as u32;
    nr[udp_syscall::RECVMMSG] = libc::SYS_recvmmsg as u32;
    nr
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn syscall_numbers() -> [u32; udp_syscall::COUNT] {
    [u32::MAX; udp_syscall::COUNT]
}

/// Where the per-syscall programs find the caller's buffer (`struct pt_regs` offsets and
/// syscall numbers of this architecture) and the socket-wide `UDP_SEGMENT` size; with the
/// reason when the buffer cannot be found (datagrams are then counted, their payload not
/// classified).
pub fn syscall_config(btf: &BtfResolver) -> (UdpSyscallConfig, Option<String>) {
    let at = |strukt: &str, path: &str| btf.field(strukt, path).map_or(tracer_common::ABSENT, |f| f.bit_offset / 8);
    let mut config = UdpSyscallConfig { udp_gso_size: at("udp_sock", "gso_size"), ..UdpSyscallConfig::unresolved() };
    let Some([nr, arg1, arg4]) = SYSCALL_REGISTERS else {
        return (config, Some(format!("no syscall register convention known for {}", std::env::consts::ARCH)));
    };
    let registers = [nr, arg1, arg4].map(|path| btf.field("pt_regs", path).map(|f| f.bit_offset / 8));
    match registers {
        [Ok(nr), Ok(arg1), Ok(arg4)] => {
            (config.regs_nr, config.regs_arg1, config.regs_arg4) = (nr, arg1, arg4);
            config.nr = syscall_numbers();
            (config, None)
        }
        [nr, arg1, arg4] => {
            let why = [nr, arg1, arg4].into_iter().find_map(Result::err).map(|e| e.to_string()).unwrap_or_default();
            (config, Some(format!("the kernel's saved syscall registers are not where cctrace looks: {why}")))
        }
    }
}

/// How the attached accounting counts: per syscall, or per packet and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UdpWay {
    PerSyscall,
    /// The per-syscall tracepoints could not be used (the reason); every packet pays instead.
    PerPacket(String),
}

/// The receive hook. The send hook (`cct_send_call` on `sock:sock_send_length`) is the TCP
/// owner hook, attached with the TCP hooks whether UDP is counted or not; counting UDP per call
/// adds this one beside it.
const RECV_PROGRAM: (&str, &str) = (udp_recv::PROGRAM, "sock_recv_length");
const PACKET_PROGRAMS: [&str; 2] = ["cct_udp_egress", "cct_udp_ingress"];

/// Attached UDP accounting: the maps it reads and the owners it found.
pub struct UdpAccounting {
    pub way: UdpWay,
    sockets: BpfHashMap<MapData, u64, UdpSocketState>,
    heavy: BpfHashMap<MapData, u64, u64>,
    counters: PerCpuArray<MapData, u64>,
    /// Owners by cookie: the kernel's pid hint they were looked up for, what was found, and
    /// when (a socket no process holds, such as the kernel's own, is looked up again only
    /// every [`OWNER_RETRY_NS`]).
    owners: HashMap<u64, (u32, Option<Process>, u64)>,
    /// Heavy sockets that left the index after going quiet, or whose state the LRU dropped.
    pub expired: u64,
    pub vanished: u64,
    /// The receive hook, attached while UDP is received in earnest (per socket call only).
    recv: Option<RecvHook>,
}

fn attach_one(
    ebpf: &mut Ebpf,
    name: &'static str,
    kind: CgroupSkbAttachType,
    root: &std::fs::File,
) -> Result<(), UdpError> {
    let prog: &mut CgroupSkb = ebpf
        .program_mut(name)
        .ok_or(UdpError::ProgramMissing(name))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| UdpError::Program(name, e.to_string()))?;
    prog.load().map_err(|e| {
        let whole = super::error_chain(&e);
        log::info!("loading {name} failed: {whole}");
        UdpError::Program(name, super::attach::short(&whole))
    })?;
    // Attached as a link (kernels since 5.7), which always runs beside the root's other programs
    // (systemd's, another cctrace's); a link takes no multi flag (the kernel refuses one).
    prog.attach(root, kind, CgroupAttachMode::Single).map_err(|e| {
        let whole = super::error_chain(&e);
        // A service with the unit's capabilities gets here on kernels before 6.3.
        let hint =
            if whole.contains("(os error 1)") { ": attaching at the cgroup root needs CAP_NET_ADMIN" } else { "" };
        UdpError::Program(name, format!("{whole}{hint}"))
    })?;
    Ok(())
}

/// Count UDP per socket call: the send hook is already attached (`send_hook`: whether it is);
/// load and attach the receive hook (start-up is its first discovery window, see `udp_recv`) and
/// tell the send hook to count UDP's sends too. The receive hook's link.
fn attach_per_syscall(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    send_hook: bool,
) -> Result<aya::programs::tp_btf::BtfTracePointLinkId, String> {
    let btf = btf.ok_or("the kernel has no BTF")?;
    if !send_hook {
        return Err("the socket-call hook sock:sock_send_length is not attached".into());
    }
    let (name, event) = RECV_PROGRAM;
    let prog: &mut BtfTracePoint =
        ebpf.program_mut(name).ok_or("missing from the object")?.try_into().map_err(|e| format!("{e}"))?;
    prog.load(event, btf).map_err(|e| format!("sock:{event}: {}", super::error_chain(&e)))?;
    let link = match prog.attach() {
        Ok(link) => link,
        Err(e) => {
            let _ = prog.unload();
            return Err(format!("sock:{event}: {}", super::error_chain(&e)));
        }
    };
    let switch = ebpf.map_mut(UDP_BY_CALL).ok_or("UDP_BY_CALL missing from the object")?;
    let mut switch: Array<&mut MapData, u32> = Array::try_from(switch).map_err(|e| format!("{UDP_BY_CALL}: {e}"))?;
    switch.set(0, 1, 0).map_err(|e| format!("{UDP_BY_CALL}: {}", super::error_chain(&e)))?;
    Ok(link)
}

/// The switch that turns the send hook's UDP counting on (see tracer-ebpf's `udp_syscall`).
const UDP_BY_CALL: &str = "UDP_BY_CALL";

/// A WireGuard device of the kernel's among `net_class` (`/sys/class/net`), if any.
fn kernel_wireguard_device(net_class: &std::path::Path) -> Option<String> {
    std::fs::read_dir(net_class).ok()?.flatten().find_map(|dev| {
        let uevent = std::fs::read_to_string(dev.path().join("uevent")).ok()?;
        uevent.lines().any(|l| l == "DEVTYPE=wireguard").then(|| dev.file_name().to_string_lossy().into_owned())
    })
}

impl UdpAccounting {
    /// Attach the per-syscall programs, or the per-packet ones at the cgroup v2 root where the
    /// kernel lacks their tracepoints or has a WireGuard device of its own (its datagrams pass
    /// no socket call: only the packet path sees them), and take their maps.
    /// `send_hook`: whether the socket-call hook on `sock:sock_send_length` attached with the TCP
    /// hooks (counting per call needs it).
    pub fn attach(
        ebpf: &mut Ebpf,
        btf: Option<&Btf>,
        send_hook: bool,
        config: &SkbConfig,
        now_ns: u64,
    ) -> Result<Self, UdpError> {
        let per_syscall = match kernel_wireguard_device(std::path::Path::new("/sys/class/net")) {
            Some(dev) => Err(format!("the kernel's WireGuard device {dev} sends and receives through no socket call")),
            None => attach_per_syscall(ebpf, btf, send_hook),
        };
        let (way, recv_link) = match per_syscall {
            Ok(link) => (UdpWay::PerSyscall, Some(link)),
            Err(why) => {
                let root = crate::cgroups::cgroup2_mount().ok_or(UdpError::NoCgroup2)?;
                let dir = std::fs::File::open(&root).map_err(|e| UdpError::OpenRoot(root.display().to_string(), e))?;
                attach_one(ebpf, PACKET_PROGRAMS[0], CgroupSkbAttachType::Egress, &dir)?;
                attach_one(ebpf, PACKET_PROGRAMS[1], CgroupSkbAttachType::Ingress, &dir)?;
                (UdpWay::PerPacket(why), None)
            }
        };
        let take = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name).ok_or(UdpError::Map(name, "missing from the object".into()))
        };
        let sockets = BpfHashMap::try_from(take(ebpf, "UDP_SOCKETS")?)
            .map_err(|e| UdpError::Map("UDP_SOCKETS", e.to_string()))?;
        let heavy =
            BpfHashMap::try_from(take(ebpf, "UDP_HEAVY")?).map_err(|e| UdpError::Map("UDP_HEAVY", e.to_string()))?;
        let counters = PerCpuArray::try_from(take(ebpf, "UDP_COUNTERS")?)
            .map_err(|e| UdpError::Map("UDP_COUNTERS", e.to_string()))?;
        let mut accounting =
            Self { way, sockets, heavy, counters, owners: HashMap::new(), expired: 0, vanished: 0, recv: None };
        let received = accounting.counter(udp_counter::RECEIVED_BYTES);
        accounting.recv = recv_link.map(|link| {
            RecvHook::new(link, RecvPlan::new(now_ns, received, config.heavy_bytes_per_window, config.window_ns))
        });
        Ok(accounting)
    }

    /// The programs attached for UDP alone (for their run statistics; the send hook is counted
    /// with the TCP hooks).
    pub fn program_names(&self) -> Vec<&'static str> {
        match self.way {
            UdpWay::PerSyscall => vec![RECV_PROGRAM.0],
            UdpWay::PerPacket(_) => PACKET_PROGRAMS.to_vec(),
        }
    }

    pub fn counter(&self, index: u32) -> u64 {
        self.counters.get(&index, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Totals for the summary.
    pub fn totals(&self) -> crate::analysis::schema::UdpCounters {
        crate::analysis::schema::UdpCounters {
            packets: self.counter(udp_counter::PACKETS),
            sockets_seen: self.counter(udp_counter::SOCKETS_NEW),
            heavy: self.counter(udp_counter::HEAVY),
            heavy_index_full: self.counter(udp_counter::HEAVY_FULL),
            evicted: self.vanished,
        }
    }

    /// Kernel-side counters by name.
    pub fn kernel_counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("udp_packets", self.counter(udp_counter::PACKETS)),
            ("udp_sockets_new", self.counter(udp_counter::SOCKETS_NEW)),
            ("udp_heavy", self.counter(udp_counter::HEAVY)),
            ("udp_heavy_full", self.counter(udp_counter::HEAVY_FULL)),
            ("udp_socket_insert_failed", self.counter(udp_counter::SOCKET_INSERT_FAILED)),
            ("udp_received_bytes", self.counter(udp_counter::RECEIVED_BYTES)),
            ("udp_recv_hook_attaches", self.recv.as_ref().map_or(0, |r| r.attaches)),
            ("udp_recv_hook_attach_failed", self.recv.as_ref().map_or(0, |r| r.attach_failures)),
            ("udp_recv_hook_attached", self.recv.as_ref().map_or(0, |r| u64::from(r.attached()))),
        ]
    }

    /// No receive hook attaches after this (the programs are being unloaded).
    pub fn stop(&mut self) {
        if let Some(recv) = &mut self.recv {
            recv.stop();
        }
    }

    /// Read every heavy UDP socket, at `now_ns` (CLOCK_MONOTONIC), and attach or detach the
    /// receive hook as what was read says.
    pub fn poll(&mut self, ebpf: &mut Ebpf, now_ns: u64) -> SocketReadings {
        let udp = self.poll_udp(now_ns);
        let received = self.counter(udp_counter::RECEIVED_BYTES);
        if let Some(recv) = &mut self.recv {
            recv.look(ebpf, now_ns, udp.len(), received);
        }
        SocketReadings { udp }
    }

    fn poll_udp(&mut self, now_ns: u64) -> Vec<UdpSample> {
        let cookies: Vec<u64> = self.heavy.keys().flatten().collect();
        let mut out = Vec::with_capacity(cookies.len());
        for cookie in cookies {
            let Ok(state) = self.sockets.get(&cookie, 0) else {
                // The LRU dropped it (the table was full of newer sockets): counted, forgotten.
                let _ = self.heavy.remove(&cookie);
                self.owners.remove(&cookie);
                self.vanished += 1;
                continue;
            };
            if now_ns.saturating_sub(state.last_ns) >= QUIET_NS {
                let _ = self.heavy.remove(&cookie);
                let _ = self.sockets.remove(&cookie);
                self.owners.remove(&cookie);
                self.expired += 1;
                continue;
            }
            let owner = match self.owners.get(&cookie) {
                // Found: kept for a few seconds (its connections change); not found: looked for
                // again less often.
                Some((hint, found, at))
                    if *hint == state.pid
                        && now_ns.saturating_sub(*at)
                            < if found.is_some() { OWNER_REFRESH_NS } else { OWNER_RETRY_NS } =>
                {
                    found.clone()
                }
                _ => {
                    let found = owner_of_socket(state.inode, state.pid);
                    self.owners.insert(cookie, (state.pid, found.clone(), now_ns));
                    found
                }
            };
            out.push(sample_of(cookie, &state, now_ns, owner));
        }
        out
    }
}

fn addr(family_: u16, raw: &[u8; 16], port: u16) -> SocketAddr {
    let ip = if family_ == family::AF_INET6 {
        IpAddr::V6(Ipv6Addr::from(*raw))
    } else {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    };
    SocketAddr::new(ip, port)
}

fn sample_of(cookie: u64, s: &UdpSocketState, now_ns: u64, owner: Option<Process>) -> UdpSample {
    let head = |bytes: [u8; 16], len: u16| Head { bytes, len };
    UdpSample {
        ts_ns: now_ns,
        cookie,
        netns: s.netns,
        cgroup_id: s.cgroup_id,
        inode: s.inode,
        local: addr(s.family, &s.local_addr, s.local_port),
        remote: addr(s.family, &s.remote_addr, s.remote_port),
        tx_bytes: s.tx_bytes,
        rx_bytes: s.rx_bytes,
        tx_packets: s.tx_packets,
        rx_packets: s.rx_packets,
        first_tx: head(s.first_tx_head, s.first_tx_len),
        first_rx: head(s.first_rx_head, s.first_rx_len),
        last_tx: head(s.last_tx_head, s.last_tx_len),
        last_rx: head(s.last_rx_head, s.last_rx_len),
        owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_architectures_syscall_registers_are_found_in_the_kernels_btf() {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            crate::test_support::skip("/sys/kernel/btf/vmlinux is absent (kernel without CONFIG_DEBUG_INFO_BTF)");
            return;
        }
        let btf = BtfResolver::from_sys_fs().expect("BTF parses");
        let (config, unclassified) = syscall_config(&btf);
        assert_eq!(unclassified, None);
        // What arch/*/include/asm/ptrace.h lays out: x86-64's orig_ax, si and r8 are its 16th,
        // 14th and 10th registers; arm64's x1 and x4 follow x0 at the head, and syscallno comes
        // after the 31 registers, sp, pc, pstate and orig_x0.
        let expected = if cfg!(target_arch = "x86_64") { (15 * 8, 13 * 8, 9 * 8) } else { (35 * 8, 8, 4 * 8) };
        assert_eq!((config.regs_nr, config.regs_arg1, config.regs_arg4), expected);
        assert_eq!(config.nr[udp_syscall::SENDTO], libc::SYS_sendto as u32);
    }

    #[test]
    fn a_wireguard_device_is_found_by_its_device_type() {
        let root = std::env::temp_dir().join(format!("cct-net-class-{}", std::process::id()));
        let dev = |name: &str, uevent: &str| {
            std::fs::create_dir_all(root.join(name)).expect("mkdir");
            std::fs::write(root.join(name).join("uevent"), uevent).expect("write");
        };
        dev("eth0", "INTERFACE=eth0\nIFINDEX=2\n");
        assert_eq!(kernel_wireguard_device(&root), None);
        dev("wg0", "DEVTYPE=wireguard\nINTERFACE=wg0\nIFINDEX=5\n");
        assert_eq!(kernel_wireguard_device(&root).as_deref(), Some("wg0"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
