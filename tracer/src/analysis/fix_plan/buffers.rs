//! The buffer maxima a fix raises with the congestion control: which bind, sized as the
//! verdicts size them, and which applications are left alone because they set their own.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::target::Target;
use crate::analysis::diagnosis::{buffer_rate, buffer_size_for, sizing_words, DiagnosisConfig, Side};
use crate::analysis::environment::{BufferLimits, Environment};
use crate::analysis::fix_plan::commands::netns_words;
use crate::analysis::sample::{Sample, TcpState};
use crate::analysis::units::bytes;

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
    let mut asks = Asks { env, cfg: DiagnosisConfig::default(), wanted: HashMap::new(), notes: Vec::new() };
    let senders: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.tcp_state == TcpState::Established && s.min_rtt_us > 0 && s.bytes_acked >= BULK_BYTES)
        .collect();
    for s in senders.iter().filter(|s| s.netns == target.netns) {
        asks.send_buffer(s);
    }
    // Held by the window over most of its busy time.
    let windowed = |p: &&&Sample| p.busy_us > 0 && p.rwnd_limited_us.saturating_mul(10) >= p.busy_us.saturating_mul(3);
    for p in senders.iter().filter(windowed) {
        let receiver = samples.iter().find(|r| r.local == p.remote && r.remote == p.local && r.cookie != p.cookie);
        asks.receive_buffer(target, p, receiver);
    }
    asks.into_steps(target, target_of)
}

/// The buffer maxima asked for so far, and what is left alone and why.
struct Asks<'a> {
    env: &'a Environment,
    cfg: DiagnosisConfig,
    /// (size, sizing words, connections) per namespace and key.
    wanted: HashMap<(u32, &'static str), (u32, String, Vec<String>)>,
    notes: Vec<String>,
}

/// A connection as the plan names it.
fn conn(s: &Sample) -> String {
    format!(":{} -> :{} (cookie {})", s.local.port(), s.remote.port(), s.cookie)
}

/// A connection's smallest round trip, in seconds.
fn rtt(s: &Sample) -> f64 {
    f64::from(s.min_rtt_us) / 1e6
}

impl Asks<'_> {
    /// `key`'s max in `netns` for connection `who`: the largest size asked wins, every asker is named.
    fn ask(&mut self, netns: u32, key: &'static str, size: u32, words: String, who: String) {
        let e = self.wanted.entry((netns, key)).or_insert((0, String::new(), Vec::new()));
        if size > e.0 {
            (e.0, e.1) = (size, words);
        }
        e.2.push(who);
    }

    /// A sender of the fix's namespace whose send buffer reached `tcp_wmem`'s max.
    fn send_buffer(&mut self, s: &Sample) {
        let Some(wmem) = self.env.netns_wmem.get(&s.netns) else { return };
        if s.sndbuf_locked {
            if s.writer_blocked {
                self.notes.push(format!(
                    "connection {} set its own send buffer ({}, SO_SNDBUF): left alone; the application must ask for \
                     more, or leave SO_SNDBUF unset so autotuning can grow it",
                    conn(s),
                    bytes(u64::from(s.sndbuf))
                ));
            }
            return;
        }
        if s.sndbuf < wmem.max {
            return;
        }
        let (env, cfg) = (self.env, &self.cfg);
        let need = (s.delivery_rate_bps as f64).max(buffer_rate(Side::Send, wmem.max, rtt(s), cfg));
        let size = buffer_size_for(Side::Send, need, rtt(s), cfg, env);
        if size > wmem.max {
            let words = sizing_words(Side::Send, need, rtt(s), cfg, env);
            self.ask(s.netns, "tcp_wmem", size, words, conn(s));
        }
    }

    /// A sender `p` held by its peer's window, whose receiving end (if on this host) `receiver`
    /// is: that end's `tcp_rmem` max, when it or `p` is in the fix's namespace.
    fn receive_buffer(&mut self, target: &Target, p: &Sample, receiver: Option<&Sample>) {
        let Some(r) = receiver.filter(|r| r.netns == target.netns || p.netns == target.netns) else {
            if p.netns == target.netns {
                self.notes.push(format!(
                    "connection {} is held by its peer's receive window, and the receiver is not on this host: \
                     raise its receive buffer there",
                    conn(p)
                ));
            }
            return;
        };
        if r.rcvbuf_locked {
            self.notes.push(format!(
                "the receiving end of connection {}, in {}, set its own receive buffer ({}, SO_RCVBUF): left alone; \
                 the application must ask for more, or leave SO_RCVBUF unset",
                conn(p),
                netns_words(r.netns, self.env),
                bytes(u64::from(r.rcvbuf))
            ));
            return;
        }
        let (env, cfg) = (self.env, &self.cfg);
        let Some(rmem) = env.netns_rmem.get(&r.netns).filter(|l| r.rcvbuf >= l.max) else { return };
        let need = (p.delivery_rate_bps as f64).max(buffer_rate(Side::Receive, rmem.max, rtt(p), cfg));
        let size = buffer_size_for(Side::Receive, need, rtt(p), cfg, env);
        if size > rmem.max {
            let words = sizing_words(Side::Receive, need, rtt(p), cfg, env);
            self.ask(r.netns, "tcp_rmem", size, words, conn(p));
        }
    }

    /// One step per namespace and key asked for, the fix's own namespace first and `tcp_wmem`
    /// before `tcp_rmem`; a namespace no path leads into gets a note instead.
    fn into_steps(self, target: &Target, target_of: &dyn Fn(u32) -> Option<Target>) -> (Vec<SysctlStep>, Vec<String>) {
        let Asks { env, wanted, mut notes, .. } = self;
        let mut wanted: Vec<_> = wanted.into_iter().collect();
        wanted.sort_by_key(|((netns, key), _)| (*netns != target.netns, *netns, *key != "tcp_wmem"));
        let mut steps = Vec::new();
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
}
