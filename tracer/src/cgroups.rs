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
use std::io::Read as _;
use std::os::unix::fs::{DirEntryExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::analysis::container::{classify, CgroupInfo, Container, Pod, Runtime};

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
    cgroup2_mount_in(&std::fs::read_to_string("/proc/self/mountinfo").ok()?)
}

/// The first `cgroup2` mount of its root (`/`) in mountinfo text (see proc(5)): a bind mount of
/// a subtree would give paths relative to that subtree.
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        if fields.get(3) != Some(&"/") {
            return None;
        }
        Some(PathBuf::from(unescape_mountinfo(fields.get(4)?)))
    })
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

/// Where the container runtimes keep what names their containers. `Default` reads the real
/// locations; tests and the demo point the fields at fixtures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerFiles {
    /// Docker's data root: `<root>/containers/<id>/config.v2.json` has `.Name`.
    pub docker_root: PathBuf,
    /// Podman storage roots: `<store>/overlay-containers/containers.json` lists `id` and `names`.
    pub podman_stores: Vec<PathBuf>,
    /// The kubelet's pod log directories, `<dir>/<namespace>_<pod>_<uid>/`.
    pub kubelet_pod_logs: PathBuf,
    /// The kubelet's container log links, `<dir>/<pod>_<namespace>_<container>-<id>.log`.
    pub kubelet_container_logs: PathBuf,
    /// Proxmox container configs, `<dir>/<vmid>.conf` with `hostname: NAME`.
    pub pve_lxc: PathBuf,
    /// Where the running runtimes are looked for when a name is not under the roots above
    /// (`/proc`; `None`: never, for fixtures): a `dockerd` started with `--data-root` keeps its
    /// containers there, and Podman's `--root` store shows in its `conmon`s' `--bundle`.
    pub proc_root: Option<PathBuf>,
}

impl Default for ContainerFiles {
    fn default() -> Self {
        let mut podman_stores = vec![PathBuf::from("/var/lib/containers/storage")];
        // Rootless Podman keeps a store per user.
        if let Ok(homes) = std::fs::read_dir("/home") {
            let mut users: Vec<PathBuf> = homes
                .flatten()
                .map(|h| h.path().join(".local/share/containers/storage"))
                .filter(|p| p.is_dir())
                .collect();
            users.sort();
            podman_stores.extend(users);
        }
        Self {
            docker_root: docker_data_root(Path::new("/etc/docker/daemon.json")),
            podman_stores,
            kubelet_pod_logs: PathBuf::from("/var/log/pods"),
            kubelet_container_logs: PathBuf::from("/var/log/containers"),
            pve_lxc: PathBuf::from("/etc/pve/lxc"),
            proc_root: Some(PathBuf::from("/proc")),
        }
    }
}

/// Docker's `data-root` from its daemon.json, else `/var/lib/docker`.
pub fn docker_data_root(daemon_json: &Path) -> PathBuf {
    read_json(daemon_json)
        .and_then(|v| v.get("data-root")?.as_str().filter(|s| s.starts_with('/')).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/docker"))
}

/// A file's text, when it exists, is no larger than [`MAX_FILE`] and is UTF-8.
fn read_small(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_FILE {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&read_small(path)?).ok()
}

/// A name fit to show and to quote into a command: non-empty, bounded, no control characters.
fn usable_name(s: &str) -> Option<String> {
    (!s.is_empty() && s.len() <= MAX_NAME && !s.chars().any(char::is_control)).then(|| s.to_string())
}

/// What the runtimes' files say about a batch of containers; each index is read at most once.
#[derive(Default)]
struct NameIndex {
    /// The stores and data roots of the runtimes running now, read from their command lines.
    running: Option<RunningRoots>,
    podman: Option<HashMap<String, String>>,
    /// Pod uid → (namespace, name).
    pods: Option<HashMap<String, (String, String)>>,
    /// Container id → (pod name, pod namespace, container name).
    k8s_containers: Option<HashMap<String, (String, String, String)>>,
}

impl ContainerFiles {
    /// The name of `c` (and its pod's namespace and name) from the runtime's files; what is not
    /// found stays `None` / empty.
    pub fn describe(&self, c: &Container) -> Container {
        self.describe_with(c, &mut NameIndex::default())
    }

    fn describe_with(&self, c: &Container, index: &mut NameIndex) -> Container {
        let mut out = c.clone();
        match c.runtime {
            Runtime::Docker => {
                out.name = docker_name(&self.docker_root, &c.id).or_else(|| {
                    let running = index.running.get_or_insert_with(|| self.running_roots());
                    running.docker.iter().filter(|r| **r != self.docker_root).find_map(|r| docker_name(r, &c.id))
                });
            }
            Runtime::Podman => {
                out.name = index.podman.get_or_insert_with(|| self.podman_names(&[])).get(&c.id).cloned();
                if out.name.is_none() {
                    let running = index.running.get_or_insert_with(|| self.running_roots());
                    let extra: Vec<PathBuf> =
                        running.podman.iter().filter(|s| !self.podman_stores.contains(s)).cloned().collect();
                    if !extra.is_empty() {
                        let names = self.podman_names(&extra);
                        out.name = names.get(&c.id).cloned();
                        index.podman = Some(names);
                    }
                }
            }
            Runtime::Proxmox => out.name = self.pve_hostname(&c.id),
            Runtime::Lxc => {
                out.name = c.name.clone().or_else(|| Some(c.id.clone()));
                let running = index.running.get_or_insert_with(|| self.running_roots());
                out.lxc_path = running
                    .lxc
                    .iter()
                    .find(|(name, _)| *name == c.id)
                    .map(|(_, path)| path.to_string_lossy().into_owned())
                    .filter(|p| p != crate::analysis::container::LXC_DEFAULT_PATH);
            }
            Runtime::Systemd => out.name = c.name.clone().or_else(|| Some(c.id.clone())),
            Runtime::Containerd | Runtime::Crio => {}
        }
        // Kubernetes names, whatever the runtime: the kubelet's logs are keyed by pod uid and
        // container id.
        if let Some(pod) = out.pod.as_mut() {
            if let Some((ns, name)) = index.pods.get_or_insert_with(|| self.kubelet_pods()).get(&pod.uid) {
                pod.namespace.clone_from(ns);
                pod.name.clone_from(name);
            }
        }
        if out.name.is_none() && matches!(c.runtime, Runtime::Containerd | Runtime::Crio | Runtime::Docker) {
            let k8s = index.k8s_containers.get_or_insert_with(|| self.kubelet_containers());
            if let Some((pod_name, ns, name)) = k8s.get(&c.id) {
                out.name = Some(name.clone());
                // No pod in the path (a layout classify does not know): the log link names it.
                if out.pod.is_none() {
                    out.pod = Some(Pod { namespace: ns.clone(), name: pod_name.clone(), uid: String::new() });
                }
            }
        }
        out
    }

    /// Every Podman store's containers (the configured ones, then `extra`), id → first name.
    fn podman_names(&self, extra: &[PathBuf]) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for store in self.podman_stores.iter().chain(extra) {
            let Some(serde_json::Value::Array(list)) = read_json(&store.join("overlay-containers/containers.json"))
            else {
                continue;
            };
            for c in &list {
                let id = c.get("id").and_then(serde_json::Value::as_str);
                let name = c.get("names").and_then(|n| n.get(0)).and_then(serde_json::Value::as_str);
                if let (Some(id), Some(name)) = (id, name.and_then(usable_name)) {
                    out.entry(id.to_string()).or_insert(name);
                }
            }
        }
        out
    }

    /// The data roots of the running `dockerd`s and the stores of the running Podman
    /// containers, from their command lines under [`ContainerFiles::proc_root`].
    fn running_roots(&self) -> RunningRoots {
        let mut roots = RunningRoots::default();
        let Some(proc_root) = &self.proc_root else { return roots };
        let Ok(dir) = std::fs::read_dir(proc_root) else { return roots };
        for entry in dir.flatten() {
            if !entry.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
                continue;
            }
            // Command lines are small; a process gone meanwhile reads as nothing.
            let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let argv: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            roots.add_process(&argv);
        }
        roots.docker.sort();
        roots.docker.dedup();
        roots.podman.sort();
        roots.podman.dedup();
        roots
    }

    /// `hostname:` of a Proxmox container's config, before its first snapshot section.
    fn pve_hostname(&self, vmid: &str) -> Option<String> {
        if !vmid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let text = read_small(&self.pve_lxc.join(format!("{vmid}.conf")))?;
        text.lines()
            .take_while(|l| !l.starts_with('['))
            .find_map(|l| l.strip_prefix("hostname:"))
            .and_then(|n| usable_name(n.trim()))
    }

    /// `/var/log/pods/<namespace>_<pod>_<uid>`: uid → (namespace, pod). Kubernetes names and
    /// uids never contain `_`, so three parts or it is not a pod's directory.
    fn kubelet_pods(&self) -> HashMap<String, (String, String)> {
        let mut out = HashMap::new();
        let Ok(dir) = std::fs::read_dir(&self.kubelet_pod_logs) else { return out };
        for entry in dir.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let parts: Vec<&str> = name.split('_').collect();
            if let [ns, pod, uid] = parts[..] {
                if let (Some(ns), Some(pod)) = (usable_name(ns), usable_name(pod)) {
                    out.insert(uid.to_string(), (ns, pod));
                }
            }
        }
        out
    }

    /// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`: id → (pod, namespace, container).
    fn kubelet_containers(&self) -> HashMap<String, (String, String, String)> {
        let mut out = HashMap::new();
        let Ok(dir) = std::fs::read_dir(&self.kubelet_container_logs) else { return out };
        for entry in dir.flatten() {
            let Some(file) = entry.file_name().to_str().map(str::to_string) else { continue };
            let Some(stem) = file.strip_suffix(".log") else { continue };
            let Some((rest, id)) = stem.rsplit_once('-') else { continue };
            if !crate::analysis::container::is_hex64(id) {
                continue;
            }
            let parts: Vec<&str> = rest.split('_').collect();
            if let [pod, ns, container] = parts[..] {
                if let (Some(pod), Some(ns), Some(c)) = (usable_name(pod), usable_name(ns), usable_name(container)) {
                    out.insert(id.to_string(), (pod, ns, c));
                }
            }
        }
        out
    }
}

/// `.Name` of Docker container `id`'s `config.v2.json` under data root `root`.
fn docker_name(root: &Path, id: &str) -> Option<String> {
    let config = root.join("containers").join(id).join("config.v2.json");
    read_json(&config)
        .and_then(|v| v.get("Name")?.as_str().map(|n| n.trim_start_matches('/').to_string()))
        .and_then(|n| usable_name(&n))
}

/// Where the runtimes that run now keep their containers, when that is not where they
/// usually do: `dockerd --data-root DIR`, and the store a Podman container's `conmon` is given
/// its bundle in (`--bundle <store>/overlay-containers/<id>/userdata`, `podman --root`).
#[derive(Debug, Default, PartialEq, Eq)]
struct RunningRoots {
    docker: Vec<PathBuf>,
    podman: Vec<PathBuf>,
    /// (container name, lxcpath) of each running LXC container's monitor.
    lxc: Vec<(String, PathBuf)>,
}

impl RunningRoots {
    /// What one process's argv says, if it is a `dockerd`, a `conmon` or an LXC monitor.
    fn add_process(&mut self, argv: &[String]) {
        // An LXC monitor retitles itself `[lxc monitor] <lxcpath> <name>` in one argument.
        if let Some(rest) = argv.first().and_then(|a| a.strip_prefix("[lxc monitor] ")) {
            if let Some((path, name)) = rest.trim_end().rsplit_once(' ') {
                if path.starts_with('/') && !name.is_empty() {
                    self.lxc.push((name.to_string(), PathBuf::from(path)));
                }
            }
            return;
        }
        let Some(program) = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a)) else { return };
        let (flags, found): (&[&str], &mut Vec<PathBuf>) = match program {
            "dockerd" => (&["--data-root", "-g", "--graph"], &mut self.docker),
            "conmon" => (&["--bundle", "-b"], &mut self.podman),
            _ => return,
        };
        let Some(value) = flag_value(&argv[1..], flags) else { return };
        if !value.starts_with('/') {
            return;
        }
        let root = if program == "conmon" {
            // `<store>/overlay-containers/<id>/userdata`: the store is what holds containers.json.
            let Some((store, rest)) = value.rsplit_once("/overlay-containers/") else { return };
            if !rest.split('/').next().is_some_and(crate::analysis::container::is_hex64) {
                return;
            }
            store.to_string()
        } else {
            value
        };
        found.push(PathBuf::from(root));
    }
}

/// The value of the first of `flags` in `args`, as `--flag VALUE` or `--flag=VALUE`.
fn flag_value(args: &[String], flags: &[&str]) -> Option<String> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        for flag in flags {
            if arg == flag {
                return it.next().cloned();
            }
            if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v.to_string());
            }
        }
    }
    None
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
