//! The fix for a flagged flow, as commands a person can paste as root: switch the flow's network
//! namespace to BBR, make it persistent, roll it back. Pure: the host facts come in as
//! [`Environment`].
//!
//! What gets pasted into a root shell must do exactly what it says: every name that comes from
//! the host (a namespace name, the current algorithm) is shell-quoted, a namespace cctrace
//! cannot enter by a known path gets no command at all (a `sysctl` run elsewhere would change
//! some other namespace), and the roll-back removes only files the fix itself names.

mod persist;

use std::borrow::Cow;

use crate::analysis::container::{printable, Container, Runtime};
use crate::analysis::environment::{BufferLimits, Environment};
use crate::analysis::flow_table::Flow;
use persist::persist;

/// The algorithm the fix moves a namespace and its connections to.
pub const FIX_CC: &str = "bbr";

/// Files the persisted fix writes; cctrace's own names, so rolling back deletes nothing else.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/90-cctrace-bbr.conf";
pub const MODULES_FILE: &str = "/etc/modules-load.d/cctrace-bbr.conf";

const SET_BBR: &str = "sysctl -w net.ipv4.tcp_congestion_control=bbr";

/// `s` as one POSIX shell word: bare when made only of characters no shell treats specially,
/// otherwise in single quotes, with each `'` written as `'\''`.
pub fn shell_quote(s: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("'{}'", s.replace('\'', r"'\''")))
    }
}

/// How a root shell on the host reaches the flow's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reach {
    /// The host's own namespace: no prefix.
    Host,
    /// `ip netns exec NAME` (a namespace made with `ip netns add`).
    Named(String),
    /// `nsenter --net=/proc/PID/ns/net` (a process living in it, e.g. a container's).
    Process(u32),
    /// Nothing cctrace knows of leads into it.
    Unreachable,
}

fn reach(netns: u32, env: &Environment) -> Reach {
    // 0 is "not read" (an unknown namespace), never the host, even when the host's is unknown too.
    if netns == 0 {
        return Reach::Unreachable;
    }
    if env.host_netns != 0 && netns == env.host_netns {
        return Reach::Host;
    }
    // A name with a control character cannot be shown on one line: a newline, even quoted,
    // would end the comment lines that repeat it and start a command.
    if let Some(name) = env.netns_names.get(&netns).filter(|n| !n.chars().any(char::is_control)) {
        return Reach::Named(name.clone());
    }
    match env.netns_pids.get(&netns) {
        Some(&pid) => Reach::Process(pid),
        None => Reach::Unreachable,
    }
}

/// A network namespace as a verdict names it: `ip netns NAME`, the host's own, or its inode
/// with a process living in it.
pub fn netns_words(netns: u32, env: &Environment) -> String {
    match reach(netns, env) {
        Reach::Host => "the host's own network namespace".to_string(),
        Reach::Named(name) => format!("ip netns {}", printable(&shell_quote(&name))),
        Reach::Process(pid) => format!("network namespace {netns} (process {pid} lives in it)"),
        Reach::Unreachable => format!("network namespace {netns}"),
    }
}

/// How the fix gets into the sender's namespace and how it is made to last, by where the
/// sender lives (its cgroup's container).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place<'a> {
    /// Not in a container, or in one sharing the host's namespace (or an unknown one): as
    /// [`Reach`] says.
    Plain(Reach, Option<&'a Container>),
    /// A Docker/Podman/containerd container: nsenter from the host (inside it /proc/sys is
    /// read-only), persisted by the runtime's `--sysctl`.
    Engine(Reach, &'a Container),
    /// A Kubernetes pod's container: nsenter now, the pod spec's sysctls to persist.
    Pod(Reach, &'a Container),
    /// A Proxmox container: `pct exec VMID --`.
    Proxmox(&'a str),
    /// An LXC container: `lxc-attach [-P LXCPATH] -n NAME --`, the lxcpath when it is not
    /// LXC's default.
    Lxc { name: &'a str, lxc_path: Option<&'a str> },
}

fn place<'a>(netns: u32, container: Option<&'a Container>, env: &Environment) -> Place<'a> {
    let target = reach(netns, env);
    let Some(c) = container else { return Place::Plain(target, None) };
    // The host's namespace (`--network host`, hostNetwork pods) or an unknown one: the container
    // does not change where the sysctl goes.
    if matches!(target, Reach::Host) || netns == 0 {
        return Place::Plain(target, Some(c));
    }
    match c.runtime {
        Runtime::Proxmox if !c.id.is_empty() && c.id.bytes().all(|b| b.is_ascii_digit()) => Place::Proxmox(&c.id),
        // A name with a control character never reaches a command: then only nsenter leads in.
        Runtime::Lxc if !c.id.is_empty() && !c.id.chars().any(char::is_control) => Place::Lxc {
            name: &c.id,
            lxc_path: c.lxc_path.as_deref().filter(|p| p.starts_with('/') && !p.chars().any(char::is_control)),
        },
        Runtime::Docker | Runtime::Podman | Runtime::Containerd | Runtime::Crio
            if matches!(target, Reach::Named(_) | Reach::Process(_)) =>
        {
            if c.pod.is_some() || matches!(c.runtime, Runtime::Crio) {
                Place::Pod(target, c)
            } else {
                Place::Engine(target, c)
            }
        }
        _ => Place::Plain(target, Some(c)),
    }
}

/// The words that run a command in the place's network namespace.
fn enter(place: &Place<'_>) -> String {
    match place {
        Place::Plain(r, _) | Place::Engine(r, _) | Place::Pod(r, _) => match r {
            Reach::Named(name) => format!("ip netns exec {} ", shell_quote(name)),
            Reach::Process(pid) => format!("nsenter --net=/proc/{pid}/ns/net "),
            Reach::Host | Reach::Unreachable => String::new(),
        },
        Place::Proxmox(vmid) => format!("pct exec {} -- ", shell_quote(vmid)),
        Place::Lxc { name, lxc_path } => {
            let path = lxc_path.map_or(String::new(), |p| format!("-P {} ", shell_quote(p)));
            format!("lxc-attach {path}-n {} -- ", shell_quote(name))
        }
    }
}

/// A congestion control's name as the kernel writes them; anything else is not repeated.
fn cc_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// What the fix changes for a flow: its namespace's default congestion control (to BBR), its
/// namespace's `tcp_wmem` (the new triple), a receiving namespace's `tcp_rmem` (the
/// namespace and the new triple).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixNeeds {
    pub cc: bool,
    pub wmem: Option<BufferLimits>,
    pub rmem: Option<(u32, BufferLimits)>,
}

impl FixNeeds {
    pub fn is_empty(&self) -> bool {
        !self.cc && self.wmem.is_none() && self.rmem.is_none()
    }
}

/// Commands that apply what `needs` says to the flow's network namespace (and a receiving
/// namespace of this host), persist it and roll it back, for where the sender lives (the host,
/// a named namespace, a Docker/Podman container, a Kubernetes pod, a Proxmox or LXC
/// container), with what must come first when the kernel would refuse (bbr not loaded:
/// ENOENT; not allowed in a non-initial namespace: EPERM). For a namespace cctrace cannot
/// reach, one comment saying why and how to find it, and no command.
pub fn fix_commands(flow: &Flow, env: &Environment, needs: &FixNeeds) -> Vec<String> {
    let s = &flow.latest;
    let container = env.cgroups.get(&s.cgroup_id).and_then(|i| i.container.as_ref());
    let place = place(s.netns, container, env);
    let mut cmds = Vec::new();
    if needs.cc || needs.wmem.is_some() {
        if let Place::Plain(Reach::Unreachable, c) = &place {
            cmds.push(unreachable_note(s.netns, *c));
        } else {
            if needs.cc {
                cc_commands(&mut cmds, flow, env, &place, container);
            }
            if let Some(wmem) = needs.wmem {
                let current = env.netns_wmem.get(&s.netns).copied();
                sysctl_commands(&mut cmds, &place, "tcp_wmem", wmem, current);
            }
        }
    }
    if let Some((netns, rmem)) = needs.rmem {
        // The receiving namespace's own place: its name or a process in it (its container is
        // not known from the sender's flow).
        match place_of_netns(netns, env) {
            Place::Plain(Reach::Unreachable, _) => cmds.push(format!(
                "# no command for the receiver's network namespace {netns}: no ip netns name and no process cctrace can \
                 see; raise net.ipv4.tcp_rmem's max there to {}",
                rmem.max
            )),
            receiver => {
                cmds.push(format!("# the receiving end is on this host, in {}:", netns_words(netns, env)));
                sysctl_commands(&mut cmds, &receiver, "tcp_rmem", rmem, env.netns_rmem.get(&netns).copied());
            }
        }
    }
    cmds
}

/// How to reach a namespace known only by its inode.
fn place_of_netns(netns: u32, env: &Environment) -> Place<'static> {
    Place::Plain(reach(netns, env), None)
}

/// Switch the namespace's default to BBR, persist it, roll it back.
fn cc_commands(
    cmds: &mut Vec<String>,
    flow: &Flow,
    env: &Environment,
    place: &Place<'_>,
    container: Option<&Container>,
) {
    let s = &flow.latest;
    let host = matches!(place, Place::Plain(Reach::Host, _));
    let prefix = enter(place);
    if let Some(c) = container.filter(|_| host) {
        if c.runtime != Runtime::Systemd {
            cmds.push(format!(
                "# {} {} shares the host's network namespace: this switches the host's default",
                c.runtime.name(),
                c.label()
            ));
        }
    }
    // The namespace's default already bbr: the application chose its algorithm itself.
    let default = env.netns_cc.get(&s.netns).filter(|cc| cc_name(cc));
    if default.is_some_and(|cc| cc == "bbr") {
        cmds.push(
            "# this namespace's default is already bbr: the flow started before it was set, or the application \
             sets its own (setsockopt TCP_CONGESTION); restart it, or change it in the application"
                .to_string(),
        );
    }
    if !(env.bbr_available || env.available_cc.iter().any(|c| c == "bbr")) {
        cmds.push(
            "modprobe tcp_bbr   # on the host: bbr is not in net.ipv4.tcp_available_congestion_control, and \
             only the host can load it (from a container the sysctl fails with ENOENT)"
                .to_string(),
        );
    }
    if !host && !env.allowed_cc.is_empty() && !env.allowed_cc.iter().any(|c| c == "bbr") {
        let mut allowed: Vec<&str> = env.allowed_cc.iter().map(String::as_str).filter(|c| cc_name(c)).collect();
        allowed.push("bbr");
        let setting = format!("net.ipv4.tcp_allowed_congestion_control={}", allowed.join(" "));
        cmds.push(format!(
            "sysctl -w {}   # on the host: a namespace other than the host's may only choose from this list \
             (EPERM otherwise); persist it in the host's /etc/sysctl.d",
            shell_quote(&setting)
        ));
    }
    if matches!(place, Place::Engine(..) | Place::Pod(..)) {
        cmds.push(
            "# from the host, not with exec inside the container: its /proc/sys is read-only (EROFS); \
             nsenter --net keeps the host's mounts"
                .to_string(),
        );
    }
    cmds.push(format!("{prefix}{SET_BBR}"));
    let persisted = persist(place, "net.ipv4.tcp_congestion_control=bbr", SYSCTL_FILE, Some("tcp_bbr"));
    cmds.extend(persisted.lines);
    // What to restore: the namespace's default as read, else the flow's own algorithm, else
    // the kernel's default.
    let previous = match default {
        Some(cc) if cc != "bbr" => cc.as_str(),
        _ if !s.cc.is_empty() && !s.cc.chars().any(char::is_control) => s.cc.as_str(),
        _ => "cubic",
    };
    let restore = format!("net.ipv4.tcp_congestion_control={previous}");
    cmds.push(format!("# roll back: {prefix}sysctl -w {}{}", shell_quote(&restore), persisted.rollback_rm));
    cmds.extend(persisted.rollback_note);
    cmds.push("# the default applies to new connections: restart the stream to pick it up".to_string());
}

/// Set the namespace's `net.ipv4.KEY` (`tcp_wmem` or `tcp_rmem`) to `to`, persist it, and roll
/// it back to exactly `current` (the triple read from the namespace).
fn sysctl_commands(
    cmds: &mut Vec<String>,
    place: &Place<'_>,
    key: &str,
    to: BufferLimits,
    current: Option<BufferLimits>,
) {
    let prefix = enter(place);
    let setting = format!("net.ipv4.{key}={}", to.sysctl_value());
    let why = current.map_or(String::new(), |c| format!("   # the max from {} to {} bytes", c.max, to.max));
    cmds.push(format!("{prefix}sysctl -w {}{why}", shell_quote(&setting)));
    let persisted = persist(place, &setting, &buffer_sysctl_file(key), None);
    cmds.extend(persisted.lines);
    match current {
        Some(c) => {
            let restore = format!("net.ipv4.{key}={}", c.sysctl_value());
            cmds.push(format!("# roll back: {prefix}sysctl -w {}{}", shell_quote(&restore), persisted.rollback_rm));
        }
        None => cmds.push(format!("# roll back: set net.ipv4.{key} back to what it was{}", persisted.rollback_rm)),
    }
    cmds.extend(persisted.rollback_note);
    if key == "tcp_wmem" {
        cmds.push("# running connections grow into the new maximum: no restart needed".to_string());
    }
}

/// The file the persisted buffer fix writes on the host (one per sysctl, so either rolls back
/// alone).
pub fn buffer_sysctl_file(key: &str) -> String {
    format!("/etc/sysctl.d/90-cctrace-{key}.conf")
}

/// Why there is no command for a namespace cctrace cannot reach, as a comment (nothing in it
/// runs if pasted).
fn unreachable_note(netns: u32, container: Option<&Container>) -> String {
    let of = container.map_or(String::new(), |c| format!(" ({} {})", c.runtime.name(), c.label()));
    if netns == 0 {
        "# no command: the flow's network namespace is unknown (the kernel reported none), and a \
         sysctl run in another namespace would not change this flow"
            .to_string()
    } else {
        format!(
            "# no command: network namespace {netns}{of} has no ip netns name and no process cctrace can see, \
             so there is no path to enter it by; find a process in it with lsns -t net, then set \
             net.ipv4.tcp_congestion_control=bbr inside it with nsenter"
        )
    }
}

#[cfg(test)]
mod tests;
