//! Which flows to trace: `--cgroup`, `--container` and `--netns`, as the user wrote them, and
//! what they resolve to on this host (cgroup ids and namespace inodes the kernel programs check).
//!
//! Pure: resolution reads the host facts from [`Environment`]; the kernel side applies the result.

use crate::analysis::diagnosis::Environment;

/// The user's filter, as given on the command line or typed in the TUI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// cgroup v2 paths (below the mount or absolute); descendants are included.
    pub cgroups: Vec<String>,
    /// Container names or ids (a prefix of an id is enough).
    pub containers: Vec<String>,
    /// Network namespaces: an `ip netns` name, a path that opens one, or an inode number.
    pub netns: Vec<String>,
}

impl FilterSpec {
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.containers.is_empty() && self.netns.is_empty()
    }

    /// The filter as the header shows it: `container=jellyfin netns=cct-1`, empty for none.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.containers.iter().map(|c| format!("container={c}")));
        out.extend(self.cgroups.iter().map(|c| format!("cgroup={c}")));
        out.extend(self.netns.iter().map(|n| format!("netns={n}")));
        out
    }
}

/// Changes the kernel-side filter while cctrace runs (the TUI's filter prompt). A side effect
/// injected into the front end; tests use a fake.
pub trait FilterControl {
    /// Resolve `spec` against the current host facts and apply it in the kernel; on error the
    /// previous filter stays in force. Returns the filter as the header should show it.
    fn apply(&mut self, spec: &FilterSpec, env: &Environment) -> Result<Vec<String>, String>;
    /// The filter in force.
    fn current(&self) -> FilterSpec;
}
