//! What a fix changed, kept on the host until `--undo`, and the checks a state file passes
//! before undo trusts it.

use serde::{Deserialize, Serialize};

use super::buffers::{SysctlStep, BUFFER_KEYS};
use super::commands::{buffer_sysctl_file, MODULES_FILE, SYSCTL_FILE};
use super::switch::valid_cc_name;
use super::target::Target;

/// The state file of network namespace `netns` (inode), below [`STATE_DIR`](crate::analysis::state_dir::STATE_DIR).
pub fn state_file_name(netns: u32) -> String {
    format!("fix-netns-{netns}.json")
}

/// One socket switched, to be switched back by `--undo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchedCookie {
    pub cookie: u64,
    pub old_cc: String,
}

/// What a fix changed, kept in [`STATE_DIR`](crate::analysis::state_dir::STATE_DIR) until `--undo`.
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
