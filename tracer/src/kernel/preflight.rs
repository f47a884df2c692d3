//! `cctrace check`: what works on this host and what does not, read without tracing anything
//! (nothing is attached; the ring buffer is probed by creating one map and closing it).
//! Each line is a [`Check`] with its verdict; the worst verdict is the exit status.

use std::path::Path;

use super::attach::HOOKS;
use super::btf_file::{self, Found, KernelBtf};
use super::{caps, tracefs, HookMode, KERNEL_BTF};
use crate::host::CcAvailability;

/// How one line of the report went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Ok,
    /// cctrace runs, with less than everything.
    Less,
    /// cctrace cannot trace here.
    Fails,
}

impl Verdict {
    fn mark(self) -> &'static str {
        match self {
            Self::Ok => "ok  ",
            Self::Less => "less",
            Self::Fails => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub verdict: Verdict,
    pub item: &'static str,
    pub detail: String,
}

impl Check {
    fn new(verdict: Verdict, item: &'static str, detail: impl Into<String>) -> Self {
        Self { verdict, item, detail: detail.into() }
    }

    pub fn line(&self) -> String {
        format!("{} {:<10} {}", self.verdict.mark(), self.item, self.detail)
    }
}

/// The report, in order; `btf_given` is `--btf`, `mode` `--hooks`.
pub fn checks(btf_given: Option<&Path>, mode: HookMode) -> Vec<Check> {
    let release = crate::host::kernel_release();
    let mut out = vec![Check::new(Verdict::Ok, "kernel", format!("{release} ({})", std::env::consts::ARCH))];
    let found = btf_file::find(btf_given);
    let btf = match &found {
        Ok(Found::Btf(b)) => Some(b.clone()),
        _ => None,
    };
    out.push(btf_check(&found));
    out.push(mode_check(btf.as_ref(), mode));
    out.push(hooks_check(btf.as_ref(), mode));
    out.push(ring_check());
    out.push(cgroup_check());
    out.push(caps_check());
    out.push(paranoid_check());
    out.push(cc_check());
    out.push(qdisc_check());
    out
}

/// What the report's exit status is: 0 everything works, 3 cctrace runs with less, 1 it
/// cannot trace (2 is a bad command line).
pub fn exit_status(checks: &[Check]) -> u8 {
    match checks.iter().map(|c| c.verdict).max() {
        Some(Verdict::Fails) => 1,
        Some(Verdict::Less) => 3,
        _ => 0,
    }
}

fn btf_check(found: &anyhow::Result<Found>) -> Check {
    match found {
        Ok(Found::Btf(KernelBtf::Kernel)) => Check::new(Verdict::Ok, "BTF", format!("the kernel's own, {KERNEL_BTF}")),
        Ok(Found::Btf(b @ KernelBtf::File { .. })) => {
            Check::new(Verdict::Ok, "BTF", format!("from {} ({KERNEL_BTF} is absent or was passed over)", b.origin()))
        }
        Ok(Found::None(tried)) => {
            let looked = if tried.is_empty() {
                "none of libbpf's places (/boot/vmlinux-RELEASE, ...) has a file".to_string()
            } else {
                tried.iter().map(|(p, why)| format!("{} {why}", p.display())).collect::<Vec<_>>().join(", ")
            };
            Check::new(Verdict::Less, "BTF", format!("none: {KERNEL_BTF} is absent; {looked}"))
        }
        Err(e) => Check::new(Verdict::Fails, "BTF", format!("{e:#}")),
    }
}

fn mode_check(btf: Option<&KernelBtf>, mode: HookMode) -> Check {
    match (btf, mode) {
        (_, HookMode::NoBtf) | (None, HookMode::Auto) => Check::new(
            Verdict::Less,
            "mode",
            format!("without BTF (classic tracepoints' records and sock_diag): {}", super::nobtf::LOSES),
        ),
        (None, _) => Check::new(Verdict::Fails, "mode", "--hooks btf and classic read sockets at BTF's offsets: none here"),
        (Some(KernelBtf::Kernel), _) => Check::new(Verdict::Ok, "mode", "BTF tracepoints, classic ones where they fail"),
        (Some(KernelBtf::File { .. }), _) => Check::new(
            Verdict::Less,
            "mode",
            "classic tracepoints reading sockets at the file's offsets (BTF-typed programs need the kernel's own BTF): no start-up listing, fix --live through the sockets' holders",
        ),
    }
}

/// Each hook: its BTF tracepoint (the kernel's BTF names `btf_trace_EVENT`), else its classic
/// one (tracefs has its format), else absent.
fn hooks_check(btf: Option<&KernelBtf>, mode: HookMode) -> Check {
    let kernel_btf = (matches!(btf, Some(KernelBtf::Kernel)) && mode != HookMode::NoBtf)
        .then(super::offsets::BtfResolver::from_sys_fs);
    let root = tracefs::tracefs_root();
    let mut parts = Vec::new();
    let mut missing = 0;
    for h in &HOOKS {
        let typed = kernel_btf
            .as_ref()
            .and_then(|b| b.as_ref().ok())
            .is_some_and(|b| b.has_typedef(&format!("btf_trace_{}", h.event)));
        let classic = root.as_ref().is_ok_and(|r| tracefs::event_format(r, h.group, h.event).is_ok());
        let how = match (typed, classic) {
            (true, _) => "BTF",
            (false, true) if mode == HookMode::NoBtf || btf.is_none() => {
                if h.record_prog.is_empty() {
                    missing += 1;
                    "absent (BTF only)"
                } else {
                    "record"
                }
            }
            (false, true) if h.classic_prog.is_empty() => {
                missing += 1;
                "absent (BTF only)"
            }
            (false, true) => "classic",
            (false, false) => {
                missing += 1;
                "absent"
            }
        };
        parts.push(format!("{} {how}", h.event));
    }
    let tracefs_note = match &root {
        Ok(_) => String::new(),
        Err(e) => format!(" ({e})"),
    };
    let verdict = if missing == HOOKS.len() {
        Verdict::Fails
    } else if missing > 0 {
        Verdict::Less
    } else {
        Verdict::Ok
    };
    Check::new(verdict, "hooks", format!("{}{tracefs_note}", parts.join(", ")))
}

fn ring_check() -> Check {
    match aya::sys::is_map_supported(aya::maps::MapType::RingBuf) {
        Ok(true) => Check::new(Verdict::Ok, "ring", "BPF ring buffer (Linux 5.8)"),
        Ok(false) => Check::new(Verdict::Fails, "ring", "no BPF ring buffer (Linux 5.8): cctrace cannot run"),
        Err(e) => Check::new(Verdict::Fails, "ring", format!("probing the BPF ring buffer failed: {e}")),
    }
}

fn cgroup_check() -> Check {
    match crate::cgroups::cgroup2_mount() {
        Some(at) => {
            Check::new(Verdict::Ok, "cgroup v2", format!("at {}: container names and --container", at.display()))
        }
        None => Check::new(Verdict::Less, "cgroup v2", "not mounted: no container names, no --container or --cgroup"),
    }
}

fn caps_check() -> Check {
    match caps::check() {
        Ok(()) => Check::new(Verdict::Ok, "privilege", "root, or CAP_BPF and CAP_PERFMON"),
        Err(e) => Check::new(Verdict::Fails, "privilege", format!("{e:#}")),
    }
}

fn paranoid_check() -> Check {
    let level: Option<i32> =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse().ok());
    match level {
        Some(l) if l >= 3 => Check::new(
            Verdict::Less,
            "perf",
            format!(
                "kernel.perf_event_paranoid={l}: classic tracepoints (and the mode without BTF) need CAP_SYS_ADMIN"
            ),
        ),
        Some(l) => Check::new(Verdict::Ok, "perf", format!("kernel.perf_event_paranoid={l}")),
        None => Check::new(Verdict::Less, "perf", "kernel.perf_event_paranoid unreadable"),
    }
}

fn cc_check() -> Check {
    let mut parts = Vec::new();
    let mut verdict = Verdict::Ok;
    for name in ["cubic", "reno", "bbr"] {
        match crate::host::congestion_control(name) {
            CcAvailability::Available => parts.push(name.to_string()),
            CcAvailability::Module(path) => {
                parts.push(format!("{name} (module {}, loaded on first use)", path.display()));
            }
            CcAvailability::Absent => {
                if name == "bbr" {
                    verdict = Verdict::Less;
                }
                parts.push(format!("{name} absent"));
            }
        }
    }
    let allowed = crate::host::allowed_congestion_controls().join(" ");
    Check::new(verdict, "cc", format!("{}; allowed in containers: {allowed}", parts.join(", ")))
}

fn qdisc_check() -> Check {
    match crate::host::root_qdiscs_here() {
        Ok(q) => {
            let parts: Vec<String> = q.iter().map(|(dev, qdisc)| format!("{dev} {qdisc}")).collect();
            Check::new(Verdict::Ok, "qdiscs", format!("root qdiscs of this namespace: {}", parts.join(", ")))
        }
        Err(e) => Check::new(Verdict::Less, "qdiscs", format!("unreadable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_line_is_the_exit_status() {
        let line = |verdict| Check::new(verdict, "x", "");
        assert_eq!(exit_status(&[line(Verdict::Ok), line(Verdict::Ok)]), 0);
        assert_eq!(exit_status(&[line(Verdict::Ok), line(Verdict::Less)]), 3);
        assert_eq!(exit_status(&[line(Verdict::Fails), line(Verdict::Less)]), 1);
    }
}
