//! `cctrace fix`: the plan it shows before changing anything, the state it keeps for `--undo`,
//! and what each kernel refusal means, in words. Pure: a host adapter above the core reads the
//! facts, asks for confirmation and acts, implementing [`FixControl`] for the front ends that
//! are handed one; the core never calls it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tracer_common::{SwitchRecord, CC_NAME_LEN, SWITCH_RECORD_SIZE};

use crate::analysis::diagnosis::{buffer_rate, buffer_size_for, is_loss_based, sizing_words, DiagnosisConfig, Side};
use crate::analysis::environment::{BufferLimits, Environment};
use crate::analysis::event::{Sample, TcpState};
use crate::analysis::fix::commands::{buffer_sysctl_file, netns_words, MODULES_FILE, SYSCTL_FILE};
use crate::analysis::schema::ActionRecord;
use crate::analysis::state_dir::STATE_DIR;
use crate::analysis::units::bytes;

/// The Linux errno values the kernel answers with (the pure core does not link libc).
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EIO: i32 = 5;
    pub const EBUSY: i32 = 16;
    pub const EINVAL: i32 = 22;
    pub const EROFS: i32 = 30;
    pub const EOPNOTSUPP: i32 = 95;
    /// The kernel-internal ENOTSUPP, which BPF helpers return as is.
    pub const ENOTSUPP: i32 = 524;
}

/// The state file of network namespace `netns` (inode), below [`STATE_DIR`].
pub fn state_file_name(netns: u32) -> String {
    format!("fix-netns-{netns}.json")
}

/// A congestion-control name as the kernel writes them (`tcp_` module suffixes): lower-case
/// letters, digits and `_`, at most 15 bytes. Anything else is refused before it reaches a
/// module name or the kernel.
pub fn valid_cc_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() < CC_NAME_LEN
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `name` NUL-padded to the kernel's `TCP_CA_NAME_MAX` (longer names are cut, never sent:
/// callers check [`valid_cc_name`] first).
pub fn cc_bytes(name: &str) -> [u8; CC_NAME_LEN] {
    let mut out = [0u8; CC_NAME_LEN];
    for (o, b) in out.iter_mut().zip(name.bytes().take(CC_NAME_LEN - 1)) {
        *o = b;
    }
    out
}

fn cc_str(bytes: &[u8; CC_NAME_LEN]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(CC_NAME_LEN);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// One socket the live switch tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switched {
    pub cookie: u64,
    pub old_cc: String,
    pub new_cc: String,
    /// 0, or the negative errno `bpf_setsockopt` (or `setsockopt`) returned.
    pub result: i32,
    pub sport: u16,
    pub dport: u16,
}

/// An established connection the live switch could not reach where it switches through the
/// processes holding the sockets (`iter/tcp` without `bpf_setsockopt`), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreached {
    pub sport: u16,
    pub dport: u16,
    pub why: String,
}

/// How many unreached connections the line names before counting the rest.
const LISTED_UNREACHED: usize = 4;

/// The one line a plan says where connections are switched through the processes holding them:
/// why (`iter/tcp` could not be used) and which connections that way cannot reach.
pub fn held_switch_line(why: &str, unreached: &[Unreached]) -> String {
    let way = format!("connections are switched through the processes holding them (pidfd_getfd), as {why}");
    if unreached.is_empty() {
        return way;
    }
    let mut named: Vec<String> =
        unreached.iter().take(LISTED_UNREACHED).map(|u| format!(":{} -> :{} {}", u.sport, u.dport, u.why)).collect();
    if unreached.len() > LISTED_UNREACHED {
        named.push(format!("{} more", unreached.len() - LISTED_UNREACHED));
    }
    format!(
        "{} established connection{} cannot be switched ({}): {way}",
        unreached.len(),
        if unreached.len() == 1 { "" } else { "s" },
        named.join(", ")
    )
}

/// The records `cct_iter_switch` wrote, back to back; a cut-off tail is ignored.
pub fn decode_switch_records(bytes: &[u8]) -> Vec<Switched> {
    bytes
        .chunks_exact(SWITCH_RECORD_SIZE)
        .map(|chunk| {
            let r: SwitchRecord = bytemuck::pod_read_unaligned(chunk);
            Switched {
                cookie: r.cookie,
                old_cc: cc_str(&r.old_cc),
                new_cc: cc_str(&r.new_cc),
                result: r.result,
                sport: r.sport,
                dport: r.dport,
            }
        })
        .collect()
}

/// The network namespace a fix is for, and how the user named it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Its inode.
    pub netns: u32,
    /// The path it is entered through (`/run/netns/NAME`, `/proc/PID/ns/net`).
    pub path: String,
    /// How it was reached, for people: `ip netns cct-1`, `container jellyfin (pid 4242)`,
    /// `the host's own namespace`.
    pub reached: String,
    /// The initial (host) namespace: its default is every host connection's.
    pub host: bool,
    /// Made by `ip netns add` (no process keeps it, it does not survive a reboot).
    pub ip_netns: bool,
    /// The runtime option that sets the sysctl when the container is created (`docker run
    /// --sysctl ...`), for a container's namespace.
    pub runtime_sysctl: Option<String>,
}

/// Whether a live fix to `target` switches an established connection on `cc` now: those
/// under a loss-based algorithm only (a delay- or model-based one was chosen for a reason).
pub fn switches_now(cc: &str, target: &str) -> bool {
    cc != target && is_loss_based(cc)
}

/// An established connection of the namespace, as the plan's listing found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    pub cookie: u64,
    pub sport: u16,
    pub dport: u16,
    pub cc: String,
}

/// What `cctrace fix` will do, built before anything changes and shown for confirmation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub target: Target,
    pub cc: String,
    /// The namespace's default now.
    pub current_default: String,
    /// The module to load first (`tcp_bbr`) when the algorithm is not available yet.
    pub load_module: Option<String>,
    /// Switch `to_switch` now (the confirmation panel's checkbox).
    pub live: bool,
    /// The established connections a live fix switches: exactly these, no others.
    pub to_switch: Vec<Connection>,
    /// Established connections left alone: already on `cc`, or on an algorithm that is not
    /// loss-based (their names, for the plan's line).
    pub left_alone: Vec<String>,
    /// How the live switch reaches connections when not from `iter/tcp`, and which it cannot
    /// ([`held_switch_line`]).
    pub switch_note: Option<String>,
    pub persist: Persist,
    /// Buffer maxima raised with it (see [`buffer_steps`]), and what is left alone and why.
    pub buffers: Vec<SysctlStep>,
    pub buffer_notes: Vec<String>,
}

/// One buffer maximum the fix raises.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysctlStep {
    /// Where: the fix's own namespace, or a receiving namespace of this host.
    pub target: Target,
    /// One of [`BUFFER_KEYS`].
    pub key: String,
    pub from: BufferLimits,
    pub to: BufferLimits,
    /// How the maximum was sized, and for which connections.
    pub why: String,
}

/// The sysctls (`net.ipv4.KEY`) the fix may raise: each namespace's own.
pub const BUFFER_KEYS: [&str; 2] = ["tcp_wmem", "tcp_rmem"];

impl SysctlStep {
    /// `net.ipv4.KEY=min default max`, as `sysctl -w` and the persisted file take it.
    pub fn setting(&self, limits: BufferLimits) -> String {
        format!("net.ipv4.{}={}", self.key, limits.sysctl_value())
    }

    /// The change from `from` to `to`, as an action record lists it.
    pub fn record(&self, from: BufferLimits, to: BufferLimits) -> String {
        format!("net.ipv4.{}: {} -> {} in {}", self.key, from.sysctl_value(), to.sysctl_value(), self.target.reached)
    }
}

/// A connection that moved this much is one the buffers are sized for.
const BULK_BYTES: u64 = 1 << 20;

/// What the fix of `target` raises, from one sample of every socket of the host (`samples`):
/// the namespace's `tcp_wmem` max for its senders whose send buffer reached it, and the
/// `tcp_rmem` max of the namespace of each receiving end on this host whose buffer reached it
/// while its sender was held by the window (a receiver in `target`, or the receiver of a
/// sender in `target`; `target_of` leads into another namespace). Sized as the verdicts size
/// them (see [`buffer_size_for`]). Applications that set their own buffer are named in the
/// notes, not changed.
pub fn buffer_steps(
    target: &Target,
    samples: &[Sample],
    env: &Environment,
    target_of: &dyn Fn(u32) -> Option<Target>,
) -> (Vec<SysctlStep>, Vec<String>) {
    let cfg = DiagnosisConfig::default();
    let bulk = |s: &&Sample| s.tcp_state == TcpState::Established && s.min_rtt_us > 0;
    let conn = |s: &Sample| format!(":{} -> :{} (cookie {})", s.local.port(), s.remote.port(), s.cookie);
    let rtt = |s: &Sample| f64::from(s.min_rtt_us) / 1e6;
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    // (size, sizing words, connections) per namespace and key.
    let mut want: HashMap<(u32, &str), (u32, String, Vec<String>)> = HashMap::new();
    let mut ask = |netns: u32, key: &'static str, size: u32, words: String, who: String| {
        let e = want.entry((netns, key)).or_insert((0, String::new(), Vec::new()));
        if size > e.0 {
            (e.0, e.1) = (size, words);
        }
        e.2.push(who);
    };
    let senders = samples.iter().filter(bulk).filter(|s| s.bytes_acked >= BULK_BYTES);
    for s in senders.clone().filter(|s| s.netns == target.netns) {
        let Some(wmem) = env.netns_wmem.get(&s.netns) else { continue };
        if s.sndbuf_locked {
            if s.writer_blocked {
                notes.push(format!(
                    "connection {} set its own send buffer ({}, SO_SNDBUF): left alone; the application must ask for \
                     more, or leave SO_SNDBUF unset so autotuning can grow it",
                    conn(s),
                    bytes(u64::from(s.sndbuf))
                ));
            }
            continue;
        }
        if s.sndbuf < wmem.max {
            continue;
        }
        let need = (s.delivery_rate_bps as f64).max(buffer_rate(Side::Send, wmem.max, rtt(s), &cfg));
        let size = buffer_size_for(Side::Send, need, rtt(s), &cfg, env);
        if size > wmem.max {
            ask(s.netns, "tcp_wmem", size, sizing_words(Side::Send, need, rtt(s), &cfg, env), conn(s));
        }
    }
    // Held by the window over most of its busy time.
    let windowed = |p: &&Sample| p.busy_us > 0 && p.rwnd_limited_us.saturating_mul(10) >= p.busy_us.saturating_mul(3);
    for p in senders.filter(windowed) {
        let receiver = samples.iter().find(|r| r.local == p.remote && r.remote == p.local && r.cookie != p.cookie);
        let Some(r) = receiver.filter(|r| r.netns == target.netns || p.netns == target.netns) else {
            if p.netns == target.netns {
                notes.push(format!(
                    "connection {} is held by its peer's receive window, and the receiver is not on this host: \
                     raise its receive buffer there",
                    conn(p)
                ));
            }
            continue;
        };
        if r.rcvbuf_locked {
            notes.push(format!(
                "the receiving end of connection {}, in {}, set its own receive buffer ({}, SO_RCVBUF): left alone; \
                 the application must ask for more, or leave SO_RCVBUF unset",
                conn(p),
                netns_words(r.netns, env),
                bytes(u64::from(r.rcvbuf))
            ));
            continue;
        }
        let Some(rmem) = env.netns_rmem.get(&r.netns).filter(|l| r.rcvbuf >= l.max) else { continue };
        let need = (p.delivery_rate_bps as f64).max(buffer_rate(Side::Receive, rmem.max, rtt(p), &cfg));
        let size = buffer_size_for(Side::Receive, need, rtt(p), &cfg, env);
        if size > rmem.max {
            ask(r.netns, "tcp_rmem", size, sizing_words(Side::Receive, need, rtt(p), &cfg, env), conn(p));
        }
    }
    let mut wanted: Vec<_> = want.into_iter().collect();
    wanted.sort_by_key(|((netns, key), _)| (*netns != target.netns, *netns, *key != "tcp_wmem"));
    for ((netns, key), (size, words, who)) in wanted {
        let limits = if key == "tcp_wmem" { env.netns_wmem.get(&netns) } else { env.netns_rmem.get(&netns) };
        let Some(from) = limits.copied() else { continue };
        let place = if netns == target.netns { Some(target.clone()) } else { target_of(netns) };
        let Some(place) = place else {
            notes.push(format!(
                "{} needs a larger net.ipv4.{key} max, but no path leads into it",
                netns_words(netns, env)
            ));
            continue;
        };
        let why = format!(
            "sized {words}; for {} connection{} ({})",
            who.len(),
            if who.len() == 1 { "" } else { "s" },
            who.join(", ")
        );
        steps.push(SysctlStep { target: place, key: key.to_string(), from, to: from.with_max(size), why });
    }
    (steps, notes)
}

/// How many connections the plan names one by one before summing up the rest.
const LISTED_CONNECTIONS: usize = 8;

/// What `--persist` does for the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persist {
    /// Not asked for.
    No,
    /// Nothing to write, and why.
    Nothing(String),
    /// The host: these files, only those that do not exist yet (path, contents).
    HostFiles(Vec<(String, String)>),
}

impl Plan {
    /// Build the plan. `available` is the host's `tcp_available_congestion_control`;
    /// `existing` says whether a path exists (persistence files are never overwritten).
    /// `established` is the namespace's connections as listed now (empty when not live).
    #[allow(clippy::too_many_arguments)] // each a different fact of the host
    pub fn new(
        target: Target,
        cc: &str,
        current_default: &str,
        available: &[String],
        live: bool,
        established: &[Switched],
        persist: bool,
        existing: &dyn Fn(&str) -> bool,
    ) -> Self {
        let (switch, keep): (Vec<&Switched>, Vec<&Switched>) =
            established.iter().partition(|c| switches_now(&c.old_cc, cc));
        let to_switch = switch
            .into_iter()
            .map(|c| Connection { cookie: c.cookie, sport: c.sport, dport: c.dport, cc: c.old_cc.clone() })
            .collect();
        let left_alone = keep.into_iter().map(|c| c.old_cc.clone()).collect();
        let load_module = (!available.iter().any(|a| a == cc)).then(|| format!("tcp_{cc}"));
        let persist = if !persist {
            Persist::No
        } else if target.host {
            let files = [
                (MODULES_FILE, format!("tcp_{cc}\n")),
                (SYSCTL_FILE, format!("net.ipv4.tcp_congestion_control={cc}\n")),
            ];
            Persist::HostFiles(
                files.into_iter().filter(|(p, _)| !existing(p)).map(|(p, c)| (p.to_string(), c)).collect(),
            )
        } else if let Some(option) = &target.runtime_sysctl {
            Persist::Nothing(format!(
                "the container gets a new network namespace each time it starts: recreate it with {option}"
            ))
        } else if target.ip_netns {
            Persist::Nothing(
                "a namespace made by ip netns add does not survive a reboot: set the sysctl where it is created".into(),
            )
        } else {
            Persist::Nothing("this namespace lives as long as its processes: set the sysctl where it is created".into())
        };
        Self {
            target,
            cc: cc.to_string(),
            current_default: current_default.to_string(),
            load_module,
            live,
            to_switch,
            left_alone,
            switch_note: None,
            persist,
            buffers: Vec::new(),
            buffer_notes: Vec::new(),
        }
    }

    /// The plan with `steps` raising buffer maxima too (persisted where the congestion control
    /// is: the host's own files, when asked), and `notes` on what is left alone.
    pub fn with_buffers(mut self, steps: Vec<SysctlStep>, notes: Vec<String>, existing: &dyn Fn(&str) -> bool) -> Self {
        match &mut self.persist {
            Persist::HostFiles(files) => {
                for step in steps.iter().filter(|s| s.target.host) {
                    let file = buffer_sysctl_file(&step.key);
                    if !existing(&file) {
                        files.push((file, format!("{}\n", step.setting(step.to))));
                    }
                }
            }
            Persist::Nothing(why) => {
                for step in steps.iter().filter(|s| s.target.netns == self.target.netns) {
                    why.push_str(&format!(" (and --sysctl '{}')", step.setting(step.to)));
                }
            }
            Persist::No => {}
        }
        self.buffers = steps;
        self.buffer_notes = notes;
        self
    }

    /// Exactly what will happen, one step a line, and how to undo it (the command line's plan).
    pub fn lines(&self) -> Vec<String> {
        let mut out = self.steps();
        if !self.live {
            out.push("  (add --live to switch established connections now)".into());
        }
        out.push(format!("  undo with: cctrace fix --undo (state kept in {STATE_DIR})"));
        out
    }

    /// Exactly what will happen, one step a line.
    pub fn steps(&self) -> Vec<String> {
        let t = &self.target;
        let mut out = vec![format!("cctrace fix: network namespace {} ({}, inode {})", t.reached, t.path, t.netns)];
        if let Some(m) = &self.load_module {
            out.push(format!("  load the kernel module {m} on the host ({} is not loaded)", self.cc));
        }
        if self.current_default == self.cc {
            out.push(format!("  its default congestion control is already {}: left as it is", self.cc));
        } else {
            out.push(format!(
                "  set its default congestion control (net.ipv4.tcp_congestion_control) from {} to {}: new connections use {}",
                self.current_default, self.cc, self.cc
            ));
        }
        if !self.live {
            out.push("  established connections keep their algorithm until they close".into());
        } else if self.to_switch.is_empty() {
            out.push("  no established connection uses a loss-based algorithm: none to switch now".into());
        } else {
            out.push(format!(
                "  switch {} established connection{} from a loss-based algorithm to {} now:",
                self.to_switch.len(),
                if self.to_switch.len() == 1 { "" } else { "s" },
                self.cc
            ));
            for c in self.to_switch.iter().take(LISTED_CONNECTIONS) {
                out.push(format!("    :{} -> :{} (cookie {}) on {}", c.sport, c.dport, c.cookie, c.cc));
            }
            if self.to_switch.len() > LISTED_CONNECTIONS {
                out.push(format!("    and {} more", self.to_switch.len() - LISTED_CONNECTIONS));
            }
        }
        if let Some(note) = self.switch_note.as_ref().filter(|_| self.live) {
            out.push(format!("  {note}"));
        }
        for b in &self.buffers {
            let r#where = if b.target.netns == t.netns {
                String::new()
            } else {
                format!(" in {} (the receiving end)", b.target.reached)
            };
            out.push(format!(
                "  raise net.ipv4.{}'s max{where} from {} to {} ({} -> {}): {}; running connections grow into it",
                b.key,
                bytes(u64::from(b.from.max)),
                bytes(u64::from(b.to.max)),
                b.from.sysctl_value(),
                b.to.sysctl_value(),
                b.why
            ));
        }
        for note in &self.buffer_notes {
            out.push(format!("  {note}"));
        }
        if self.live && !self.left_alone.is_empty() {
            let mut names = self.left_alone.clone();
            names.sort();
            names.dedup();
            out.push(format!(
                "  {} other connection{} ({}) left as {}",
                self.left_alone.len(),
                if self.left_alone.len() == 1 { "" } else { "s" },
                names.join(", "),
                if self.left_alone.len() == 1 { "it is" } else { "they are" }
            ));
        }
        match &self.persist {
            Persist::No => {}
            Persist::Nothing(why) => out.push(format!("  persist: nothing to write: {why}")),
            Persist::HostFiles(files) if files.is_empty() => {
                out.push(format!("  persist: {MODULES_FILE} and {SYSCTL_FILE} exist already: left as they are"));
            }
            Persist::HostFiles(files) => {
                for (path, contents) in files {
                    out.push(format!("  persist: write {path} ({})", contents.trim()));
                }
            }
        }
        if t.host {
            out.push("  this is the host's own namespace: every connection of the host is affected".into());
        }
        out
    }
}

/// The fix as a front end drives it (the terminal UI's `f` and `u`): the host adapter implements
/// it, tests a fake, and the caller injects one. Errors are the one line to show.
pub trait FixControl {
    /// What fixing network namespace `netns` to `cc` would do, live switch included (nothing
    /// changes). The host's facts come from `env`.
    fn plan(&mut self, env: &Environment, netns: u32, cc: &str) -> Result<Plan, String>;
    /// Carry out `plan` as confirmed (its `live` as the user left it); what was done.
    fn apply(&mut self, env: &Environment, plan: &Plan) -> Result<ActionRecord, String>;
    /// Undo what the fix of `netns` changed; what was done.
    fn undo(&mut self, env: &Environment, netns: u32) -> Result<ActionRecord, String>;
}

/// One socket switched, to be switched back by `--undo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchedCookie {
    pub cookie: u64,
    pub old_cc: String,
}

/// What a fix changed, kept in [`STATE_DIR`] until `--undo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub target: Target,
    pub cc: String,
    /// The namespace's default before the fix (what undo restores).
    pub previous_default: String,
    /// Whether the fix changed the default (it was not `cc` already).
    pub default_changed: bool,
    pub switched: Vec<SwitchedCookie>,
    /// Files `--persist` created (undo removes these and nothing else).
    pub files: Vec<String>,
    /// Buffer maxima raised, each with the exact triple undo puts back.
    #[serde(default)]
    pub sysctls: Vec<SysctlStep>,
}

pub const STATE_VERSION: u32 = 1;

impl State {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn from_json(s: &str) -> Result<Self, String> {
        let state: Self = serde_json::from_str(s).map_err(|e| e.to_string())?;
        if state.version != STATE_VERSION {
            return Err(format!("state version {} (this cctrace writes {STATE_VERSION})", state.version));
        }
        // Only files the fix itself writes are ever removed, whatever the file says.
        let own =
            |f: &str| f == SYSCTL_FILE || f == MODULES_FILE || BUFFER_KEYS.iter().any(|k| f == buffer_sysctl_file(k));
        if let Some(f) = state.files.iter().find(|f| !own(f)) {
            return Err(format!("names a file cctrace does not write: {f}"));
        }
        if let Some(s) = state.sysctls.iter().find(|s| !BUFFER_KEYS.contains(&s.key.as_str())) {
            return Err(format!("names a sysctl cctrace does not set: {}", s.key));
        }
        if !valid_cc_name(&state.previous_default) || state.switched.iter().any(|s| !valid_cc_name(&s.old_cc)) {
            return Err("names an invalid congestion control".into());
        }
        Ok(state)
    }
}

/// What failed, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Loading the algorithm's module on the host.
    LoadModule,
    /// Writing the namespace's default.
    SetDefault,
    /// Entering the namespace.
    Enter,
}

/// One line saying why the kernel refused `step` with errno `code`, and what to do about it.
pub fn refusal(step: Step, code: i32, cc: &str, target: &Target, allowed: &[String]) -> String {
    match (step, code) {
        (Step::LoadModule, _) | (Step::SetDefault, errno::ENOENT) => format!(
            "congestion control {cc} is not available and its module tcp_{cc} could not be loaded (ENOENT): see \
             /proc/sys/net/ipv4/tcp_available_congestion_control for the algorithms this kernel has"
        ),
        (Step::SetDefault, errno::EPERM) => {
            let mut list = allowed.to_vec();
            list.push(cc.to_string());
            format!(
                "{cc} is restricted for non-initial network namespaces (EPERM): allow it on the host with \
                 sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{}\"",
                list.join(" ")
            )
        }
        // cctrace writes the namespace's sysctl through its own /proc/sys after entering only
        // the network namespace: read-only means where cctrace runs (a container, systemd's
        // ProtectKernelTunables), not the target container's own read-only /proc/sys.
        (Step::SetDefault, errno::EROFS) => format!(
            "/proc/sys is read-only where cctrace runs (EROFS: inside a container, or a service with \
             ProtectKernelTunables): run cctrace fix on the host, or set it when the container is created ({})",
            target
                .runtime_sysctl
                .clone()
                .unwrap_or_else(|| format!("e.g. docker run --sysctl net.ipv4.tcp_congestion_control={cc}"))
        ),
        (Step::Enter, errno::ENOENT | errno::ESRCH) => {
            format!("network namespace {} is gone ({} no longer opens it)", target.reached, target.path)
        }
        (Step::Enter, errno::EPERM) => {
            format!("entering network namespace {} needs CAP_SYS_ADMIN (EPERM)", target.reached)
        }
        (step, code) => {
            let words = std::io::Error::from_raw_os_error(code).to_string();
            let what = match step {
                Step::LoadModule => "loading the module",
                Step::SetDefault => "setting the default congestion control",
                Step::Enter => "entering the namespace",
            };
            format!("{what} of network namespace {} failed: {words}", target.reached)
        }
    }
}

/// Why one socket could not be switched (`bpf_setsockopt`'s negative errno).
pub fn socket_refusal(result: i32) -> &'static str {
    match -result {
        errno::ENOENT => "algorithm not loaded",
        errno::EPERM => "not permitted",
        errno::EBUSY => "busy",
        errno::EOPNOTSUPP | errno::ENOTSUPP => "not supported for this socket",
        _ => "refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: bool) -> Target {
        Target {
            netns: 4026532000,
            path: "/run/netns/cct-1".into(),
            reached: "ip netns cct-1".into(),
            host,
            ip_netns: !host,
            runtime_sysctl: None,
        }
    }

    #[test]
    fn the_plan_says_each_step_and_only_loads_what_is_missing() {
        let available = vec!["reno".to_string(), "cubic".to_string()];
        let conn = |cookie, cc: &str| Switched {
            cookie,
            old_cc: cc.into(),
            new_cc: cc.into(),
            result: 0,
            sport: 40000,
            dport: 5201,
        };
        let established = [conn(1, "cubic"), conn(2, "bbr"), conn(3, "vegas"), conn(4, "reno")];
        let plan = Plan::new(target(false), "bbr", "cubic", &available, true, &established, false, &|_| false);
        let lines = plan.lines();
        assert_eq!(plan.load_module.as_deref(), Some("tcp_bbr"));
        assert!(lines[1].contains("load the kernel module tcp_bbr"), "{lines:#?}");
        assert!(lines[2].contains("from cubic to bbr"), "{lines:#?}");
        // Loss-based ones only, each named; the others are said to stay.
        assert_eq!(plan.to_switch.iter().map(|c| c.cookie).collect::<Vec<_>>(), [1, 4]);
        assert!(lines[3].contains("switch 2 established connections"), "{lines:#?}");
        assert!(lines[4].contains("(cookie 1) on cubic") && lines[5].contains("(cookie 4) on reno"), "{lines:#?}");
        assert!(lines[6].contains("2 other connections (bbr, vegas) left as they are"), "{lines:#?}");
        assert!(!lines.iter().any(|l| l.contains("persist")), "{lines:#?}");
        let many: Vec<Switched> = (0..20).map(|i| conn(i, "cubic")).collect();
        let plan = Plan::new(target(false), "bbr", "bbr", &available, true, &many, false, &|_| false);
        assert!(plan.lines().iter().any(|l| l == "    and 12 more"), "{:#?}", plan.lines());
        let plan = Plan::new(target(false), "bbr", "bbr", &available, true, &[conn(2, "bbr")], false, &|_| false);
        assert!(plan.lines().iter().any(|l| l.contains("none to switch now")));
        let loaded = vec!["bbr".to_string()];
        let plan = Plan::new(target(false), "bbr", "bbr", &loaded, false, &[], false, &|_| false);
        assert_eq!(plan.load_module, None);
        assert!(plan.lines().iter().any(|l| l.contains("already bbr")));
        assert!(plan.lines().iter().any(|l| l.contains("add --live")));
    }

    /// One sample of a connection, as the fix's snapshot reads it.
    fn socket(cookie: u64, netns: u32, local: &str, remote: &str, f: impl Fn(&mut Sample)) -> Sample {
        let mut s = crate::analysis::model::tests::sample(cookie, 1000);
        s.netns = netns;
        s.local = local.parse().expect("addr");
        s.remote = remote.parse().expect("addr");
        s.min_rtt_us = 200_000;
        s.bytes_acked = 0;
        s.bytes_received = 0;
        f(&mut s);
        s
    }

    #[test]
    fn the_plan_raises_the_maxima_that_bind_and_names_the_applications_it_leaves_alone() {
        let wmem = BufferLimits { min: 4096, default: 16384, max: 4_194_304 };
        let rmem = BufferLimits { min: 4096, default: 131_072, max: 1_048_576 };
        let (us, them) = (4026532000, 4026532111);
        let mut env = Environment::default();
        env.netns_wmem.insert(us, wmem);
        env.netns_rmem.insert(them, rmem);
        env.netns_names.insert(them, "rcv".into());
        let bulk = |s: &mut Sample| {
            s.bytes_acked = 50 << 20;
            s.busy_us = 10_000_000;
            s.delivery_rate_bps = 100_000_000;
        };
        let samples = vec![
            // Held by its send buffer at the namespace's max: raise it.
            socket(1, us, "198.18.0.1:40000", "198.19.0.2:5201", |s| {
                bulk(s);
                s.sndbuf = wmem.max;
            }),
            // Below the max: the max is not what holds it.
            socket(2, us, "198.18.0.1:40001", "198.19.0.2:5201", |s| {
                bulk(s);
                s.sndbuf = 1 << 20;
            }),
            // Its own SO_SNDBUF, waiting for room: named, left alone.
            socket(3, us, "198.18.0.1:40002", "198.19.0.2:5201", |s| {
                bulk(s);
                s.sndbuf = 425_984;
                s.sndbuf_locked = true;
                s.writer_blocked = true;
            }),
            // Held by the window of a receiver in another namespace of this host...
            socket(4, us, "198.18.0.1:40003", "198.18.0.2:5202", |s| {
                bulk(s);
                s.sndbuf = 1 << 20;
                s.rwnd_limited_us = 8_000_000;
                s.delivery_rate_bps = 40_000_000;
            }),
            // ...whose autotuned buffer reached its namespace's tcp_rmem max.
            socket(5, them, "198.18.0.2:5202", "198.18.0.1:40003", |s| {
                s.bytes_received = 50 << 20;
                s.rcvbuf = rmem.max;
            }),
        ];
        let other = |netns: u32| {
            (netns == them).then(|| Target {
                netns,
                path: "/run/netns/rcv".into(),
                reached: "ip netns rcv".into(),
                host: false,
                ip_netns: true,
                runtime_sysctl: None,
            })
        };
        let t = Target { netns: us, ..target(false) };
        let (steps, notes) = buffer_steps(&t, &samples, &env, &other);
        assert_eq!(steps.len(), 2, "{steps:#?}");
        assert_eq!((steps[0].key.as_str(), steps[0].target.netns), ("tcp_wmem", us));
        // It reached the max: sized for four times what the max allows at 200 ms, 16 MiB.
        assert_eq!((steps[0].from, steps[0].to), (wmem, wmem.with_max(16 << 20)), "{:#?}", steps[0]);
        assert!(steps[0].why.contains("for 1 connection (:40000 -> :5201 (cookie 1))"), "{}", steps[0].why);
        assert_eq!((steps[1].key.as_str(), steps[1].target.reached.as_str()), ("tcp_rmem", "ip netns rcv"));
        // 40 Mbit/s needed at 200 ms, half of a receive buffer offered: 4x -> 8 MiB.
        assert_eq!(steps[1].to, rmem.with_max(8 << 20), "{:#?}", steps[1]);
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert!(
            notes[0].contains("(cookie 3) set its own send buffer (416.0 KiB, SO_SNDBUF): left alone"),
            "{notes:#?}"
        );
        let plan =
            Plan::new(t, "bbr", "bbr", &[], false, &[], false, &|_| false).with_buffers(steps, notes, &|_| false);
        let lines = plan.lines();
        assert!(
            lines.iter().any(|l| l.starts_with("  raise net.ipv4.tcp_wmem's max from 4.0 MiB to 16.0 MiB (4096 16384 4194304 -> 4096 16384 16777216): sized 4x")),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("tcp_rmem's max in ip netns rcv (the receiving end) from 1.0 MiB to 8.0 MiB")),
            "{lines:#?}"
        );
        // Autotuning short of the max (a buffer that never needed more): nothing to raise.
        let roomy: Vec<Sample> = samples[..2]
            .iter()
            .cloned()
            .map(|mut s| {
                s.sndbuf = 1 << 20;
                s
            })
            .collect();
        assert!(buffer_steps(&Target { netns: us, ..target(false) }, &roomy, &env, &other).0.is_empty());
    }

    #[test]
    fn the_plan_says_in_one_line_how_connections_are_reached_and_which_cannot_be() {
        let why = "this kernel's iter/tcp cannot call bpf_setsockopt (Linux 5.15)";
        assert_eq!(
            held_switch_line(why, &[]),
            format!("connections are switched through the processes holding them (pidfd_getfd), as {why}")
        );
        let unreached = |sport| Unreached { sport, dport: 80, why: "held by no process".into() };
        let one = held_switch_line(why, &[unreached(5011)]);
        assert!(one.starts_with("1 established connection cannot be switched (:5011 -> :80 held by no process): "));
        let many: Vec<Unreached> = (1..=6).map(unreached).collect();
        let line = held_switch_line(why, &many);
        assert!(line.contains("6 established connections") && line.contains(":4 -> :80 held by no process, 2 more)"));
        assert!(!line.contains(":5 -> ") && !line.contains('\n'), "{line}");
        let mut plan = Plan::new(target(false), "bbr", "cubic", &[], true, &[], false, &|_| false);
        plan.switch_note = Some(one.clone());
        assert!(plan.lines().contains(&format!("  {one}")), "{:#?}", plan.lines());
        plan.live = false;
        assert!(!plan.lines().contains(&format!("  {one}")), "said only when switching live");
    }

    #[test]
    fn persisting_writes_only_absent_host_files_and_explains_the_rest() {
        let plan = Plan::new(target(true), "bbr", "cubic", &[], false, &[], true, &|p| p == SYSCTL_FILE);
        assert_eq!(plan.persist, Persist::HostFiles(vec![(MODULES_FILE.to_string(), "tcp_bbr\n".to_string())]));
        assert!(plan.lines().iter().any(|l| l.contains("host's own namespace")));
        let plan = Plan::new(target(false), "bbr", "cubic", &[], false, &[], true, &|_| false);
        assert!(matches!(&plan.persist, Persist::Nothing(why) if why.contains("ip netns add")), "{:?}", plan.persist);
        let mut container = target(false);
        container.runtime_sysctl = Some("docker run --sysctl net.ipv4.tcp_congestion_control=bbr".into());
        let plan = Plan::new(container, "bbr", "cubic", &[], false, &[], true, &|_| false);
        assert!(matches!(&plan.persist, Persist::Nothing(why) if why.contains("docker run --sysctl")));
    }

    #[test]
    fn state_round_trips_and_refuses_foreign_files() {
        let state = State {
            version: STATE_VERSION,
            target: target(false),
            cc: "bbr".into(),
            previous_default: "reno".into(),
            default_changed: true,
            switched: vec![SwitchedCookie { cookie: 42, old_cc: "cubic".into() }],
            files: vec![SYSCTL_FILE.into(), buffer_sysctl_file("tcp_wmem")],
            sysctls: vec![SysctlStep {
                target: target(false),
                key: "tcp_wmem".into(),
                from: BufferLimits { min: 4096, default: 16384, max: 4_194_304 },
                to: BufferLimits { min: 4096, default: 16384, max: 33_554_432 },
                why: String::new(),
            }],
        };
        assert_eq!(State::from_json(&state.to_json()), Ok(state.clone()));
        let mut bad = state.clone();
        bad.files = vec!["/etc/passwd".into()];
        assert!(State::from_json(&bad.to_json()).unwrap_err().contains("/etc/passwd"));
        let mut bad = state.clone();
        bad.sysctls[0].key = "../../kernel/core_pattern".into();
        assert!(State::from_json(&bad.to_json()).unwrap_err().contains("does not set"));
        let mut bad = state;
        bad.switched[0].old_cc = "x; rm".into();
        assert!(State::from_json(&bad.to_json()).is_err());
        // A state written before buffers were fixed reads back with none.
        let old = r#"{"version":1,"target":{"netns":1,"path":"/x","reached":"x","host":false,"ip_netns":true,"runtime_sysctl":null},"cc":"bbr","previous_default":"reno","default_changed":true,"switched":[],"files":[]}"#;
        assert!(State::from_json(old).expect("reads").sysctls.is_empty());
    }

    #[test]
    fn each_refusal_has_its_own_line() {
        let t = target(false);
        let allowed = vec!["reno".to_string()];
        let eperm = refusal(Step::SetDefault, errno::EPERM, "bbr", &t, &allowed);
        assert!(eperm.contains("restricted for non-initial") && eperm.contains("\"reno bbr\""), "{eperm}");
        assert!(refusal(Step::SetDefault, errno::ENOENT, "nosuchcc", &t, &allowed)
            .contains("tcp_nosuchcc could not be loaded"));
        assert!(refusal(Step::SetDefault, errno::EROFS, "bbr", &t, &allowed).contains("read-only"));
        assert!(refusal(Step::Enter, errno::ENOENT, "bbr", &t, &allowed).contains("is gone"));
        assert!(refusal(Step::SetDefault, errno::EINVAL, "bbr", &t, &allowed).contains("Invalid argument"));
        assert!(!refusal(Step::SetDefault, errno::EINVAL, "bbr", &t, &allowed).contains('\n'));
    }

    #[test]
    fn names_and_records() {
        assert!(valid_cc_name("bbr") && valid_cc_name("tcp_x1"));
        assert!(
            !valid_cc_name("") && !valid_cc_name("BBR") && !valid_cc_name("a b") && !valid_cc_name(&"a".repeat(16))
        );
        assert_eq!(&cc_bytes("bbr")[..4], b"bbr\0");
        let rec = SwitchRecord {
            cookie: 7,
            old_cc: cc_bytes("cubic"),
            new_cc: cc_bytes("bbr"),
            result: -errno::ENOENT,
            sport: 40000,
            dport: 5201,
        };
        let bytes = bytemuck::bytes_of(&rec);
        let mut two = bytes.to_vec();
        two.extend_from_slice(bytes);
        two.extend_from_slice(&bytes[..5]);
        let out = decode_switch_records(&two);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            Switched { cookie: 7, old_cc: "cubic".into(), new_cc: "bbr".into(), result: -2, sport: 40000, dport: 5201 }
        );
        assert_eq!(socket_refusal(out[0].result), "algorithm not loaded");
    }
}
