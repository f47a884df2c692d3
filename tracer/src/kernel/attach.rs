//! Attaching the hooks: the table of the TCP tracepoints cctrace hooks, each as a BTF
//! tracepoint program and a classic tracefs one, and trying them in turn, BTF first; also the
//! field offsets the classic programs read from tracefs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use aya::programs::tp_btf::BtfTracePointLinkId;
use aya::programs::trace_point::TracePointLinkId;
use aya::programs::{BtfTracePoint, TracePoint};
use aya::{Btf, Ebpf};
use tracer_common::{ClassicTracepointOffsets, HookId, ABSENT};

use super::tracefs;
use super::{AttachError, HookDisabled, HookMode, HookReport, HookStatus};

pub(super) struct Hook {
    pub(super) id: HookId,
    pub(super) group: &'static str,
    pub(super) event: &'static str,
    pub(super) btf_prog: &'static str,
    pub(super) classic_prog: &'static str,
    /// The classic tracepoint program of the mode without BTF, which hands its record over
    /// whole and reads no socket ("" where it has none).
    pub(super) record_prog: &'static str,
    /// What is lost when this hook is unavailable.
    pub(super) without: &'static str,
}

/// One entry per [`HookId`], at its index (checked below).
pub(super) const HOOKS: [Hook; HookId::COUNT] = [
    Hook {
        id: HookId::TcpProbe,
        group: "tcp",
        event: "tcp_probe",
        btf_prog: "cct_probe",
        classic_prog: "cct_tp_probe",
        record_prog: "cct_nb_probe",
        without: "no periodic samples; flows update only on retransmissions and state changes",
    },
    Hook {
        id: HookId::Retransmit,
        group: "tcp",
        event: "tcp_retransmit_skb",
        btf_prog: "cct_retrans",
        classic_prog: "cct_tp_retrans",
        record_prog: "cct_nb_retrans",
        without: "retransmissions show only in the counters of later samples",
    },
    Hook {
        id: HookId::CongState,
        group: "tcp",
        event: "tcp_cong_state_set",
        btf_prog: "cct_cong_state",
        classic_prog: "cct_tp_cong",
        record_prog: "cct_nb_cong",
        without: "CA state changes show only in periodic samples",
    },
    Hook {
        id: HookId::SetState,
        group: "sock",
        event: "inet_sock_set_state",
        btf_prog: "cct_set_state",
        classic_prog: "cct_tp_setstate",
        record_prog: "cct_nb_setstate",
        without: "opens are seen at the first ACK and closes only at destroy",
    },
    Hook {
        id: HookId::Destroy,
        group: "tcp",
        event: "tcp_destroy_sock",
        btf_prog: "cct_destroy",
        classic_prog: "cct_tp_destroy",
        record_prog: "cct_nb_destroy",
        without: "closes are seen only through state changes",
    },
    Hook {
        id: HookId::SendCall,
        group: "sock",
        event: "sock_send_length",
        btf_prog: "cct_send_call",
        classic_prog: "",
        record_prog: "",
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

/// A link of one hook's program, to detach it and attach it again (`probe_window`).
#[derive(Debug)]
pub(super) enum HookLink {
    Btf(BtfTracePointLinkId),
    Classic(TracePointLinkId),
}

/// What [`attach_hooks`] attached: one report per hook, in [`HOOKS`] order, and the link of
/// `tcp:tcp_probe`'s program if it attached.
pub(super) struct Attached {
    pub(super) reports: Vec<HookReport>,
    pub(super) probe_link: Option<HookLink>,
}

/// Attach every hook in the flavour `mode` allows, BTF first. Fails only when no hook attached
/// at all.
pub(super) fn attach_hooks(ebpf: &mut Ebpf, mode: HookMode, btf: Option<&Btf>, classic: &Classic) -> Result<Attached> {
    let mut reports = Vec::new();
    let mut probe_link = None;
    for h in &HOOKS {
        let name = format!("{}:{}", h.group, h.event);
        let mut disabled = HookDisabled { btf: None, classic: None, without: h.without };
        let mut status = None;
        if mode != HookMode::Classic {
            let attached = btf.ok_or(AttachError::NoKernelBtf).and_then(|b| attach_btf(ebpf, h, b));
            match attached {
                Ok(link) => {
                    status = Some(HookStatus::Btf);
                    if h.id == HookId::TcpProbe {
                        probe_link = Some(HookLink::Btf(link));
                    }
                }
                Err(e) => disabled.btf = Some(e),
            }
        }
        if status.is_none() && mode != HookMode::Btf {
            match attach_classic(ebpf, h, classic) {
                Ok(link) => {
                    status = Some(HookStatus::Classic);
                    if h.id == HookId::TcpProbe {
                        probe_link = Some(HookLink::Classic(link));
                    }
                }
                Err(e) => disabled.classic = Some(e),
            }
        }
        let status = status.unwrap_or(HookStatus::Disabled(disabled));
        reports.push(HookReport { name, status });
    }
    some_attached(&reports)?;
    Ok(Attached { reports, probe_link })
}

/// An error when no hook attached: in one line when one setting refused every classic
/// tracepoint (`perf_event_paranoid`: the one thing to change), else each hook's reason.
fn some_attached(reports: &[HookReport]) -> Result<()> {
    if !reports.iter().all(|r| matches!(r.status, HookStatus::Disabled(_))) {
        return Ok(());
    }
    let perf = reports.iter().find_map(|r| match &r.status {
        HookStatus::Disabled(HookDisabled { classic: Some(e @ AttachError::PerfRefused(_)), .. }) => Some(e),
        _ => None,
    });
    if let Some(e) = perf {
        bail!("no TCP tracepoint could be attached: classic tracepoints: {e}");
    }
    let why: Vec<String> = reports.iter().map(HookReport::line).collect();
    bail!("no TCP tracepoint could be attached:\n  {}", why.join("\n  "))
}

/// What the classic programs need from tracefs: the offsets of the fields they read (absent
/// where unreadable), and where tracefs is, or why it could not be found.
pub(super) struct Classic {
    pub(super) offsets: ClassicTracepointOffsets,
    pub(super) root: Result<PathBuf, String>,
}

/// Read the classic programs' field offsets from tracefs; absent where unreadable.
pub(super) fn classic_offsets() -> Classic {
    let mut offsets = ClassicTracepointOffsets::unresolved();
    let root = match tracefs::tracefs_root() {
        Ok(r) => r,
        Err(e) => {
            log::info!("classic tracepoints unavailable: {e:#}");
            return Classic { offsets, root: Err(e.to_string()) };
        }
    };
    for h in &HOOKS {
        let Ok(fields) = tracefs::event_format(&root, h.group, h.event) else { continue };
        let at = |name: &str| fields.get(name).map_or(ABSENT, |f| f.offset);
        offsets.skaddr[h.id.index()] = at("skaddr");
        if h.id == HookId::SetState {
            offsets.set_state_oldstate = at("oldstate");
            offsets.set_state_newstate = at("newstate");
            offsets.set_state_protocol = at("protocol");
        }
        if h.id == HookId::CongState {
            offsets.cong_state = at("cong_state");
        }
    }
    Classic { offsets, root: Ok(root) }
}

pub(super) fn short(e: &dyn std::fmt::Display) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or("").chars().take(160).collect()
}

fn attach_btf(ebpf: &mut Ebpf, h: &Hook, btf: &Btf) -> Result<BtfTracePointLinkId, AttachError> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(h.btf_prog)
        .ok_or(AttachError::ProgramMissing(h.btf_prog))?
        .try_into()
        .map_err(|e| AttachError::Load(short(&e)))?;
    prog.load(h.event, btf).map_err(|e| load_error(h.btf_prog, &e))?;
    prog.attach().map_err(|e| {
        let _ = prog.unload();
        AttachError::Attach(short(&error_chain(&e)))
    })
}

fn attach_classic(ebpf: &mut Ebpf, h: &Hook, classic: &Classic) -> Result<TracePointLinkId, AttachError> {
    if let Some(why) = no_classic_twin(h, classic) {
        return Err(why);
    }
    attach_tracepoint(ebpf, h, h.classic_prog)
}

/// Attach the programs of the mode without BTF, which need only the event (its record is read in
/// user space). Fails only when none attached.
pub(super) fn attach_record_hooks(ebpf: &mut Ebpf, classic: &Classic) -> Result<Attached> {
    let mut reports = Vec::new();
    let mut probe_link = None;
    for h in &HOOKS {
        let name = format!("{}:{}", h.group, h.event);
        let attached = match no_record_program(h, classic) {
            Some(why) => Err(why),
            None => attach_tracepoint(ebpf, h, h.record_prog),
        };
        let status = match attached {
            Ok(link) => {
                if h.id == HookId::TcpProbe {
                    probe_link = Some(HookLink::Classic(link));
                }
                HookStatus::Record
            }
            Err(e) => HookStatus::Disabled(HookDisabled { btf: None, classic: Some(e), without: h.without }),
        };
        reports.push(HookReport { name, status });
    }
    some_attached(&reports)?;
    Ok(Attached { reports, probe_link })
}

/// Why `h` has no program of the mode without BTF to attach, if it has none.
fn no_record_program(h: &Hook, classic: &Classic) -> Option<AttachError> {
    let name = format!("{}:{}", h.group, h.event);
    let root = match &classic.root {
        Ok(root) => root,
        Err(why) => return Some(AttachError::NoTracefs(why.clone())),
    };
    if tracefs::event_format(root, h.group, h.event).is_err() {
        return Some(AttachError::NoEvent(name));
    }
    h.record_prog.is_empty().then_some(AttachError::BtfOnly(name))
}

fn attach_tracepoint(ebpf: &mut Ebpf, h: &Hook, program: &'static str) -> Result<TracePointLinkId, AttachError> {
    let prog: &mut TracePoint = ebpf
        .program_mut(program)
        .ok_or(AttachError::ProgramMissing(program))?
        .try_into()
        .map_err(|e| AttachError::Load(short(&e)))?;
    prog.load().map_err(|e| load_error(program, &e))?;
    prog.attach(h.group, h.event).map_err(|e| {
        let _ = prog.unload();
        perf_refusal(&e, perf_event_paranoid())
            .map_or_else(|| AttachError::Attach(short(&error_chain(&e))), AttachError::PerfRefused)
    })
}

/// Why `h` has no classic program to attach, if it has none: tracefs could not be found, the
/// kernel has no such event, the hook is BTF only, or its record lacks the socket's address.
fn no_classic_twin(h: &Hook, classic: &Classic) -> Option<AttachError> {
    if !h.classic_prog.is_empty() && classic.offsets.skaddr[h.id.index()] != ABSENT {
        return None;
    }
    let name = format!("{}:{}", h.group, h.event);
    let root = match &classic.root {
        Ok(root) => root,
        Err(why) => return Some(AttachError::NoTracefs(why.clone())),
    };
    let exists = tracefs::event_format(root, h.group, h.event).is_ok();
    Some(match (exists, h.classic_prog.is_empty()) {
        (false, _) => AttachError::NoEvent(name),
        (true, true) => AttachError::BtfOnly(name),
        (true, false) => AttachError::NoSkaddr(name),
    })
}

fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?.trim().parse().ok()
}

/// A classic tracepoint's `perf_event_open` the kernel refused for want of privilege: which
/// setting refused it and what to change. Debian's kernels take `kernel.perf_event_paranoid=3`
/// (their default, and Proxmox VE's) to refuse it to anything without CAP_SYS_ADMIN, CAP_PERFMON
/// or not; BTF tracepoints attach without a perf event.
fn perf_refusal(e: &aya::programs::ProgramError, paranoid: Option<i32>) -> Option<String> {
    let aya::programs::ProgramError::SyscallError(aya::sys::SyscallError { call, io_error }) = e else { return None };
    let errno = io_error.raw_os_error()?;
    if !call.starts_with("perf_event_open") || !matches!(errno, libc::EACCES | libc::EPERM) {
        return None;
    }
    let errno = super::listing::Errno(errno);
    Some(match paranoid {
        Some(level) if level >= 3 => format!(
            "{errno}: kernel.perf_event_paranoid={level} lets only CAP_SYS_ADMIN open perf events (set it to 2, or give cctrace CAP_SYS_ADMIN)"
        ),
        _ => format!("{errno}: opening a tracepoint's perf event needs CAP_PERFMON"),
    })
}

/// A program the kernel refused: its first line for the start-up note, the whole of it (the
/// verifier's log, where the reason is) for the log.
pub(super) fn load_error(program: &str, e: &dyn std::error::Error) -> AttachError {
    let whole = error_chain(e);
    log::info!("loading {program} failed: {whole}");
    AttachError::Load(short(&whole))
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(call: &'static str, errno: i32) -> aya::programs::ProgramError {
        aya::programs::ProgramError::SyscallError(aya::sys::SyscallError {
            call,
            io_error: std::io::Error::from_raw_os_error(errno),
        })
    }

    #[test]
    fn classic_hooks_without_tracefs_say_why_tracefs_is_missing() {
        let why = "tracefs is not mounted and could not be mounted at /sys/kernel/tracing";
        let classic = Classic { offsets: ClassicTracepointOffsets::unresolved(), root: Err(why.into()) };
        for h in &HOOKS {
            let e = no_classic_twin(h, &classic).expect("no classic program without tracefs");
            assert_eq!(e.to_string(), format!("tracefs unavailable: {why}"));
        }
    }

    #[test]
    fn a_refused_perf_event_names_the_setting_and_what_to_change() {
        let locked = perf_refusal(&refused("perf_event_open_trace_point", libc::EACCES), Some(3)).unwrap();
        assert_eq!(
            locked,
            "Permission denied: kernel.perf_event_paranoid=3 lets only CAP_SYS_ADMIN open perf events (set it to 2, or give cctrace CAP_SYS_ADMIN)"
        );
        let plain = perf_refusal(&refused("perf_event_open_trace_point", libc::EPERM), Some(2)).unwrap();
        assert!(plain.ends_with("needs CAP_PERFMON"), "{plain}");
        assert_eq!(perf_refusal(&refused("perf_event_open_trace_point", libc::ENOENT), Some(3)), None);
        assert_eq!(perf_refusal(&refused("bpf_link_create", libc::EPERM), Some(3)), None);
    }
}
