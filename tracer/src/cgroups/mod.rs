//! The host side of naming containers: which cgroup v2 path each cgroup id is, and the names
//! the container runtimes gave them, read from their own files (no runtime API, no socket).
//!
//! The kernel reports a socket's cgroup as the kernfs id of its cgroup v2 directory; on 64-bit
//! kernels that is the directory's inode number, so walking the v2 mount and noting each
//! directory's inode maps ids to paths. [`crate::analysis::container::classify`] turns a path
//! into a runtime and id; [`ContainerFiles`] finds the names.
//!
//! Every root this reads is a field of [`ContainerFiles`] or an argument, so tests (and the
//! demo) point it at fixtures. Nothing here panics on what it reads: an unreadable or malformed
//! file means the name stays unknown.

use std::collections::HashMap;
use std::os::unix::fs::{DirEntryExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::analysis::container::{classify, CgroupInfo, Container, Runtime};

mod names;

use names::NameIndex;
pub use names::{docker_data_root, ContainerFiles};

/// Deeper cgroup trees than this are not walked (systemd nests a handful of levels, a container
/// running systemd inside Kubernetes a dozen).
pub const MAX_DEPTH: usize = 32;
/// At most this many cgroups are mapped, so a host with a runaway hierarchy costs bounded time.
pub const MAX_CGROUPS: usize = 200_000;
/// An unknown id starts a new walk at most this often.
pub const MIN_REWALK: Duration = Duration::from_secs(1);
/// A name not found is looked for again at most this often (a runtime may write its files a
/// moment after the cgroup appears).
const NAME_RETRY: Duration = Duration::from_secs(10);
/// Files larger than this are not read (Podman's containers.json on a busy host is a few MB).
const MAX_FILE: u64 = 32 << 20;
/// Longer names are no names (they would not fit a line anyway).
const MAX_NAME: usize = 253;

/// Where the cgroup v2 hierarchy is mounted, from `/proc/self/mountinfo`: `/sys/fs/cgroup` on
/// unified hosts, `/sys/fs/cgroup/unified` on hybrid ones; `None` without a v2 mount.
pub fn cgroup2_mount() -> Option<PathBuf> {
    cgroup2_mount_of(&procfs::process::Process::myself().ok()?.mountinfo().ok()?)
}

/// [`cgroup2_mount`] in mountinfo text (see proc(5)).
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    use procfs::FromBufRead as _;
    cgroup2_mount_of(&procfs::process::MountInfos::from_buf_read(mountinfo.as_bytes()).ok()?)
}

/// The first `cgroup2` mount of its root (`/`): a bind mount of a subtree would give paths
/// relative to that subtree.
fn cgroup2_mount_of(mounts: &procfs::process::MountInfos) -> Option<PathBuf> {
    let mount = mounts.into_iter().find(|m| m.fs_type == "cgroup2" && m.root == "/")?;
    Some(PathBuf::from(unescape_mountinfo(&mount.mount_point.to_string_lossy())))
}

/// mountinfo writes space, tab, newline and backslash in paths as `\040`-style octal escapes.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|d| (b'0'..=b'7').contains(d)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every directory below `root` (itself included, as `/`), by inode number, as a path below
/// `root` starting with `/`. Symlinks are not followed; at most [`MAX_DEPTH`] levels and
/// [`MAX_CGROUPS`] directories. Directories whose name is not UTF-8 are skipped with their subtree.
pub fn walk(root: &Path) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let Ok(meta) = std::fs::metadata(root) else { return out };
    out.insert(meta.ino(), "/".to_string());
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root.to_path_buf(), String::new(), 0)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if out.len() >= MAX_CGROUPS {
                return out;
            }
            // The entry's own type: a symlink is a symlink here, never its target.
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let path = format!("{rel}/{name}");
            out.insert(entry.ino(), path.clone());
            if depth + 1 < MAX_DEPTH {
                stack.push((entry.path(), path, depth + 1));
            }
        }
    }
    out
}

/// A user's cgroup as a path below the mount: `/sys/fs/cgroup/unified/system.slice/x` (absolute,
/// under `mount`), `/system.slice/x` or `system.slice/x` all give `/system.slice/x`. Trailing
/// and repeated slashes are dropped; `.` and `..` components are refused (`None`).
pub fn normalize_cgroup_path(user: &str, mount: Option<&Path>) -> Option<String> {
    let mut rest = user;
    if let Some(m) = mount.and_then(Path::to_str).map(|m| m.trim_end_matches('/')).filter(|m| !m.is_empty()) {
        if let Some(below) = user.strip_prefix(m).filter(|r| r.is_empty() || r.starts_with('/')) {
            rest = below;
        }
    }
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return None;
    }
    Some(format!("/{}", parts.join("/")))
}

/// A container found on the host, with the cgroup ids that belong to it (its own and those of
/// the cgroups below it, e.g. Podman's `container` child or a systemd inside it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostContainer {
    pub container: Container,
    pub cgroup_ids: Vec<u64>,
}

struct Named {
    container: Container,
    read: Instant,
}

/// Cgroup ids → paths and containers, kept current by re-walking the hierarchy when an unknown
/// id shows up (at most once per [`MIN_REWALK`]). Time is an argument, so tests drive it.
pub struct CgroupResolver {
    root: Option<PathBuf>,
    files: ContainerFiles,
    info: HashMap<u64, CgroupInfo>,
    last_walk: Option<Instant>,
    /// Names read, per (runtime, id) and pod uid: a container's name does not change.
    names: HashMap<(Runtime, String, Option<String>), Named>,
}

impl std::fmt::Debug for CgroupResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CgroupResolver").field("root", &self.root).field("cgroups", &self.info.len()).finish()
    }
}

impl CgroupResolver {
    /// A resolver over the hierarchy mounted at `root` (`None`: no cgroup v2 on this host, every
    /// lookup fails), naming containers from `files`. Nothing is read until the first lookup.
    pub fn new(root: Option<PathBuf>, files: ContainerFiles) -> Self {
        Self { root, files, info: HashMap::new(), last_walk: None, names: HashMap::new() }
    }

    /// The host's own: the v2 mount from mountinfo and the runtimes' default files.
    pub fn system() -> Self {
        Self::new(cgroup2_mount(), ContainerFiles::default())
    }

    /// Where the hierarchy is mounted.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Walk again if the last walk is at least [`MIN_REWALK`] old (or there was none): cgroups
    /// that disappeared are dropped, new ones classified and named. Returns whether it walked.
    pub fn refresh(&mut self, now: Instant) -> bool {
        let Some(root) = &self.root else { return false };
        if self.last_walk.is_some_and(|t| now.saturating_duration_since(t) < MIN_REWALK) {
            return false;
        }
        self.last_walk = Some(now);
        let paths = walk(root);
        let mut index = NameIndex::default();
        let mut info = HashMap::with_capacity(paths.len());
        let mut seen = std::collections::HashSet::new();
        for (id, path) in paths {
            let container = classify(&path).map(|c| {
                let key = (c.runtime, c.id.clone(), c.pod.as_ref().map(|p| p.uid.clone()));
                seen.insert(key.clone());
                let fresh = self
                    .names
                    .get(&key)
                    .is_some_and(|n| n.container.name.is_some() || now.saturating_duration_since(n.read) < NAME_RETRY);
                if !fresh {
                    let named = self.files.describe_with(&c, &mut index);
                    self.names.insert(key.clone(), Named { container: named, read: now });
                }
                self.names[&key].container.clone()
            });
            info.insert(id, CgroupInfo { path, container });
        }
        // Containers that are gone are forgotten (a new one may reuse an LXC name or a vmid).
        self.names.retain(|k, _| seen.contains(k));
        self.info = info;
        true
    }

    /// What is known of `id`, walking again first when it is unknown (rate-limited).
    pub fn lookup(&mut self, id: u64, now: Instant) -> Option<&CgroupInfo> {
        if !self.info.contains_key(&id) {
            self.refresh(now);
        }
        self.info.get(&id)
    }

    /// What is known of each of `ids` (one walk at most for all the unknown ones).
    pub fn resolve(&mut self, ids: impl IntoIterator<Item = u64>, now: Instant) -> HashMap<u64, CgroupInfo> {
        let ids: Vec<u64> = ids.into_iter().collect();
        if ids.iter().any(|id| !self.info.contains_key(id)) {
            self.refresh(now);
        }
        ids.into_iter().filter_map(|id| Some((id, self.info.get(&id)?.clone()))).collect()
    }

    /// Every cgroup of the last walk.
    pub fn all(&self) -> &HashMap<u64, CgroupInfo> {
        &self.info
    }

    pub fn path_of(&self, id: u64) -> Option<&str> {
        self.info.get(&id).map(|i| i.path.as_str())
    }

    /// The id of a user's `--cgroup PATH` (absolute under the mount, or relative to it, with or
    /// without the leading `/`), from the last walk.
    pub fn id_of(&self, user_path: &str) -> Option<u64> {
        let want = normalize_cgroup_path(user_path, self.root.as_deref())?;
        self.info.iter().find(|(_, i)| i.path == want).map(|(id, _)| *id)
    }

    /// The ids of the cgroup at `user_path` and of every cgroup below it, sorted; empty when
    /// there is no such cgroup.
    pub fn ids_under(&self, user_path: &str) -> Vec<u64> {
        let Some(want) = normalize_cgroup_path(user_path, self.root.as_deref()) else { return Vec::new() };
        let prefix = if want == "/" { "/".to_string() } else { format!("{want}/") };
        let mut ids: Vec<u64> = self
            .info
            .iter()
            .filter(|(_, i)| i.path == want || i.path.starts_with(&prefix))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Every container (systemd units included) of the last walk with its cgroup ids, sorted by
    /// label.
    pub fn containers(&self) -> Vec<HostContainer> {
        let mut by: HashMap<&Container, Vec<u64>> = HashMap::new();
        for (id, info) in &self.info {
            if let Some(c) = &info.container {
                by.entry(c).or_default().push(*id);
            }
        }
        let mut out: Vec<HostContainer> = by
            .into_iter()
            .map(|(c, mut ids)| {
                ids.sort_unstable();
                HostContainer { container: c.clone(), cgroup_ids: ids }
            })
            .collect();
        out.sort_by(|a, b| (a.container.label(), &a.container.id).cmp(&(b.container.label(), &b.container.id)));
        out
    }

    /// The containers a user's `--container QUERY` means: an exact name (or `pod/container`
    /// label, or unit name) first; failing that, every container whose id starts with `query`.
    pub fn find_containers(&self, query: &str) -> Vec<HostContainer> {
        let all = self.containers();
        if query.is_empty() {
            return Vec::new();
        }
        let named: Vec<HostContainer> = all
            .iter()
            .filter(|h| {
                let c = &h.container;
                c.name.as_deref() == Some(query)
                    || c.label() == query
                    || (c.runtime == Runtime::Systemd && c.id == query)
            })
            .cloned()
            .collect();
        if !named.is_empty() {
            return named;
        }
        all.into_iter().filter(|h| h.container.id.starts_with(query)).collect()
    }
}

/// The process-wide resolver `host::environment()` fills [`crate::analysis::environment::Environment`]
/// from, shared with the filter so both see one walk. A `static` because the analysis re-reads
/// host facts through a plain `fn() -> Environment` (it holds no state of the caller's), while
/// the resolver's cache (names read, the last walk's time) must outlive each call.
static SYSTEM: Mutex<Option<CgroupResolver>> = Mutex::new(None);

/// Run `f` on the process-wide resolver (made with [`CgroupResolver::system`] on first use, or
/// set by [`set_system_resolver`]).
pub fn with_system_resolver<R>(f: impl FnOnce(&mut CgroupResolver) -> R) -> R {
    // A panic while holding it leaves a cache, not a broken invariant: keep using it.
    let mut guard = SYSTEM.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(CgroupResolver::system))
}

/// Replace the process-wide resolver (e.g. one with [`ContainerFiles`] roots from the command
/// line).
pub fn set_system_resolver(resolver: CgroupResolver) {
    *SYSTEM.lock().unwrap_or_else(PoisonError::into_inner) = Some(resolver);
}

#[cfg(test)]
mod tests;
