//! `cctrace fix`'s plan: what it will do, built before anything changes and shown for
//! confirmation, and [`FixControl`], the fix as a front end drives it. Pure: a host adapter
//! above the core reads the facts, asks for confirmation and acts, implementing [`FixControl`]
//! for the front ends that are handed one; the core never calls it.

use super::buffers::SysctlStep;
use super::switch::{switches_now, Switched};
use super::target::Target;
use crate::analysis::environment::Environment;
use crate::analysis::fix_plan::commands::{buffer_sysctl_file, MODULES_FILE, SYSCTL_FILE};
use crate::analysis::schema::ActionRecord;
use crate::analysis::state_dir::STATE_DIR;
use crate::analysis::units::bytes;

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
        out.extend(self.default_lines());
        out.extend(self.switch_lines());
        out.extend(self.buffer_lines());
        out.extend(self.left_alone_line());
        out.extend(self.persist_lines());
        if t.host {
            out.push("  this is the host's own namespace: every connection of the host is affected".into());
        }
        out
    }

    /// The module to load, if any, and the namespace's default from what to what.
    fn default_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
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
        out
    }

    /// The established connections switched now, each named up to [`LISTED_CONNECTIONS`], and
    /// how the switch reaches them.
    fn switch_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
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
        out
    }

    /// Each buffer maximum raised, and the notes on what is left alone.
    fn buffer_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for b in &self.buffers {
            let r#where = if b.target.netns == self.target.netns {
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
        out.extend(self.buffer_notes.iter().map(|note| format!("  {note}")));
        out
    }

    /// With `--live`, the connections not switched and their algorithms.
    fn left_alone_line(&self) -> Option<String> {
        if !self.live || self.left_alone.is_empty() {
            return None;
        }
        let mut names = self.left_alone.clone();
        names.sort();
        names.dedup();
        Some(format!(
            "  {} other connection{} ({}) left as {}",
            self.left_alone.len(),
            if self.left_alone.len() == 1 { "" } else { "s" },
            names.join(", "),
            if self.left_alone.len() == 1 { "it is" } else { "they are" }
        ))
    }

    /// What `--persist` writes, or why nothing.
    fn persist_lines(&self) -> Vec<String> {
        match &self.persist {
            Persist::No => Vec::new(),
            Persist::Nothing(why) => vec![format!("  persist: nothing to write: {why}")],
            Persist::HostFiles(files) if files.is_empty() => {
                vec![format!("  persist: {MODULES_FILE} and {SYSCTL_FILE} exist already: left as they are")]
            }
            Persist::HostFiles(files) => {
                files.iter().map(|(path, contents)| format!("  persist: write {path} ({})", contents.trim())).collect()
            }
        }
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
