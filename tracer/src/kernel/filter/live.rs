//! The filter while cctrace runs: resolve the user's terms on this host, put them in the
//! kernel, follow containers that restart under the same name, and let the TUI change it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::analysis::environment::Environment;
use crate::analysis::filter::{resolve, FilterControl, FilterSpec, HostLookup, ResolvedFilter};
use crate::analysis::Analysis;
use crate::host::fs_kind::{cgroup2_dir_id, netns_file_inode};
use crate::kernel::filter::KernelFilter;
use crate::pipeline::Status;
use crate::side_job::SideJob;
use anyhow::Result;

/// Answers filter lookups from the host's file systems.
pub struct HostPaths {
    /// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
    pub cgroup_root: Option<PathBuf>,
}

impl HostLookup for HostPaths {
    /// The id of a cgroup given as a path below the v2 mount (`/system.slice/x.service`,
    /// `system.slice/x.service`) or as an absolute path on a cgroup2 file system.
    fn cgroup_id(&self, given: &str) -> Option<u64> {
        let given_path = Path::new(given);
        let candidates: Vec<PathBuf> = match &self.cgroup_root {
            Some(root) => {
                let below = root.join(given.trim_start_matches('/'));
                if given_path.is_absolute() && given_path.starts_with(root) {
                    vec![given_path.to_path_buf()]
                } else {
                    vec![below, given_path.to_path_buf()]
                }
            }
            None => vec![given_path.to_path_buf()],
        };
        candidates.into_iter().find_map(|p| cgroup2_dir_id(&p))
    }

    /// The namespace a path opens: `/proc/PID/ns/net`, `/run/netns/NAME`, a bind mount.
    fn netns_inode(&self, given: &str) -> Option<u32> {
        netns_file_inode(Path::new(given))
    }
}

struct Inner {
    kernel: KernelFilter,
    spec: FilterSpec,
    /// The host facts' generation the filter was last re-resolved against.
    followed: Option<u64>,
}

/// The filter in force, shared by the upkeep that follows the host and the TUI's prompt.
#[derive(Clone)]
pub struct LiveFilter {
    inner: Arc<Mutex<Inner>>,
    host: Arc<HostPaths>,
}

impl LiveFilter {
    /// `kernel` already has `spec`'s resolution applied.
    pub fn new(kernel: KernelFilter, spec: FilterSpec, host: HostPaths) -> Self {
        Self { inner: Arc::new(Mutex::new(Inner { kernel, spec, followed: None })), host: Arc::new(host) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it leaves maps that are still consistent.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn applied(&self) -> ResolvedFilter {
        self.lock().kernel.applied().clone()
    }

    /// Re-resolve the filter in force against newer host facts: a container that was
    /// recreated under the same name has a new cgroup. A term that no longer resolves (its
    /// container stopped) keeps what it resolved to last.
    pub fn refresh(&self, env: &Environment) -> Result<bool> {
        let mut inner = self.lock();
        if inner.spec.is_empty() {
            return Ok(false);
        }
        let Ok(resolved) = resolve(&inner.spec, env, self.host.as_ref()) else { return Ok(false) };
        if &resolved == inner.kernel.applied() {
            return Ok(false);
        }
        inner.kernel.apply(&resolved)?;
        log::info!("filter {:?} now resolves to {:?}", inner.spec.describe(), resolved);
        Ok(true)
    }
}

impl FilterControl for LiveFilter {
    fn apply(&mut self, spec: &FilterSpec, env: &Environment) -> Result<Vec<String>, String> {
        let resolved = resolve(spec, env, self.host.as_ref()).map_err(|e| e.to_string())?;
        let mut inner = self.lock();
        inner.kernel.apply(&resolved).map_err(|e| format!("{e:#}"))?;
        inner.spec = spec.clone();
        log::info!("filter set to {:?}: {:?}", spec.describe(), resolved);
        Ok(spec.describe())
    }

    fn current(&self) -> FilterSpec {
        self.lock().spec.clone()
    }
}

/// Keeps the kernel filter following the host on every tick, beside any front end (the TUI's
/// prompt changes the same [`LiveFilter`]).
pub struct FilterUpkeep(pub LiveFilter);

impl LiveFilter {
    /// Re-resolve the filter in force against the host facts (a container recreated under its
    /// name has a new cgroup), once per generation of the facts
    /// ([`crate::analysis::Analysis::env_generation`]): on every tick, the work is done only
    /// when they changed.
    fn follow_host(&self, env: &Environment, generation: u64) {
        {
            let mut inner = self.lock();
            if inner.followed == Some(generation) {
                return;
            }
            inner.followed = Some(generation);
        }
        if let Err(e) = self.refresh(env) {
            log::warn!("re-applying the filter failed: {e:#}");
        }
    }
}

impl SideJob for FilterUpkeep {
    fn on_tick(&mut self, analysis: &Analysis, _status: &Status) -> anyhow::Result<()> {
        self.0.follow_host(&analysis.env, analysis.env_generation());
        Ok(())
    }
}
